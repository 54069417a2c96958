//! Owner reports: the dashboard, a per-agent report, the weekly comparison, a
//! CSV export's rows, the evidence report for one decision, and daily usage
//! for the portal's chart. Metadata only: nothing here carries a decision's
//! content.
//!
//! What counts: a declaration is "on record" unless its external payment was
//! released or failed (it was then never anchored). Amounts are the DAC the
//! declaration was priced at, whoever paid.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::declarations::ee::{Disclosure, Integrity, Responsibility, Retention};
use anchor_domain::payments::{PaymentSource, PaymentStatus, SettlementStatus};
use anchor_domain::records::{LinkedAgent, ListFilter, OwnerRecord, StoredDeclaration, Totals};

use super::managed;
use crate::declarations::Evidence;
use crate::payment_status::Dab;
use crate::{AppError, AppResult, Services};

/// How many declarations the per-agent report lists.
pub const RECENT: i64 = 20;
/// The longest range the usage chart covers.
pub const USAGE_MAX_DAYS: i64 = 366;

/// Whether a declaration is on record: its external payment was not released and did not fail.
pub fn on_record(s: &StoredDeclaration) -> bool {
    !matches!(s.settlement_status, SettlementStatus::Released | SettlementStatus::Failed)
}

/// Every declaration of the agent anchored in `[from, to)`, newest first.
async fn all_declarations(
    services: &Services,
    agent_id: Uuid,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> AppResult<Vec<StoredDeclaration>> {
    const PAGE: i64 = 500;
    let mut out = Vec::new();
    loop {
        let filter = ListFilter { from, to, limit: PAGE, offset: out.len() as i64 };
        let (page, _) = services.store.list_declarations(agent_id, filter).await?;
        let done = (page.len() as i64) < PAGE;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

fn day_start(t: DateTime<Utc>) -> DateTime<Utc> {
    Utc.from_utc_datetime(&t.date_naive().and_hms_opt(0, 0, 0).expect("midnight"))
}

/// Every managed agent with its declarations on record.
pub async fn dashboard(services: &Services, owner: &OwnerRecord) -> AppResult<Vec<DashboardRow>> {
    let mut out = Vec::new();
    for agent in super::agents::overview(services, owner).await? {
        let totals = services.store.declaration_totals(agent.linked.agent.agent_id, None, None).await?;
        out.push(DashboardRow { agent, totals });
    }
    Ok(out)
}

/// One agent of the dashboard: the agent as the owner's list shows it, and its totals.
#[derive(Clone, Debug)]
pub struct DashboardRow {
    pub agent: super::agents::ManagedAgent,
    pub totals: Totals,
}

/// One agent: totals (all time, today, this month), DAB, latest declarations.
#[derive(Clone, Debug)]
pub struct AgentReport {
    pub linked: LinkedAgent,
    pub totals: Totals,
    pub today: Totals,
    pub month: Totals,
    pub dab: Dab,
    /// The latest [`RECENT`], newest first, each with its payment rows' statuses.
    pub recent: Vec<(StoredDeclaration, Vec<SettlementStatus>)>,
    /// Where each recent record's proof stands (records not in the log yet are absent).
    pub proofs: std::collections::HashMap<Uuid, crate::transparency::Standing>,
}

/// Where a payment row stands, said as a settlement.
fn as_settlement(status: PaymentStatus) -> SettlementStatus {
    match status {
        PaymentStatus::Reserved | PaymentStatus::SettleUnknown => SettlementStatus::Pending,
        PaymentStatus::Settled => SettlementStatus::Settled,
        PaymentStatus::Released => SettlementStatus::Released,
        PaymentStatus::SettleFailed => SettlementStatus::Failed,
    }
}

/// The status of each of a declaration's payment rows, the base fee's and,
/// when there is one, the premium's: for a part paid over x402, its
/// payment's status; for a part Trial or Earned DAC paid, the record's own.
pub fn settlement_statuses(stored: &StoredDeclaration, payment: Option<PaymentStatus>) -> Vec<SettlementStatus> {
    let status_of = |source: PaymentSource| match (source, payment) {
        (PaymentSource::External, Some(payment)) => as_settlement(payment),
        _ => stored.settlement_status,
    };
    let mut statuses = vec![status_of(stored.base_fee_source)];
    if stored.premium() > MilliDac::ZERO {
        statuses.push(status_of(stored.premium_source));
    }
    statuses
}

/// Each declaration with its payment rows' statuses, read from its payment.
async fn with_statuses(services: &Services, rows: Vec<StoredDeclaration>) -> AppResult<Vec<(StoredDeclaration, Vec<SettlementStatus>)>> {
    let ids: Vec<Uuid> = rows.iter().map(|s| s.declaration.dd_id).collect();
    let payments: std::collections::HashMap<Uuid, PaymentStatus> =
        services.store.declaration_payment_statuses(&ids).await?.into_iter().collect();
    Ok(rows
        .into_iter()
        .map(|s| {
            let statuses = settlement_statuses(&s, payments.get(&s.declaration.dd_id).copied());
            (s, statuses)
        })
        .collect())
}

pub async fn agent_report(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<AgentReport> {
    let linked = managed(services, owner, agent_id).await?;
    let now = services.clock.now();
    let store = &services.store;
    let (month_start, _) = anchor_domain::dab::period(now);
    let recent =
        with_statuses(services, store.list_declarations(agent_id, ListFilter { limit: RECENT, ..Default::default() }).await?.0).await?;
    let ids: Vec<Uuid> = recent.iter().map(|(s, _)| s.declaration.dd_id).collect();
    Ok(AgentReport {
        linked,
        totals: store.declaration_totals(agent_id, None, None).await?,
        today: store.declaration_totals(agent_id, Some(day_start(now)), None).await?,
        month: store.declaration_totals(agent_id, Some(month_start), None).await?,
        dab: crate::payment_status::dab(services, agent_id).await?,
        proofs: crate::transparency::standings(services, &ids).await?,
        recent,
    })
}

/// The four EE axes of a scope.
pub type Axes = (Retention, Integrity, Disclosure, Responsibility);

/// The last seven days (up to now) against the seven before.
#[derive(Clone, Debug)]
pub struct Weekly {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub this_week: Totals,
    pub prev_week: Totals,
    /// Declarations on record this week by their four EE axes.
    pub distribution: Vec<(Axes, i64)>,
}

/// How one week compares with the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub dd_count: i64,
    /// Per mille of the previous week's count, truncated; `None` when it had none.
    pub dd_per_mille: Option<i64>,
    pub dac: MilliDac,
    pub dac_per_mille: Option<i64>,
}

/// `(this - prev) / prev` in per mille, truncated toward zero; `None` when `prev` is zero.
pub fn per_mille(this: i64, prev: i64) -> Option<i64> {
    (prev != 0).then(|| ((i128::from(this) - i128::from(prev)) * 1000 / i128::from(prev)) as i64)
}

impl Weekly {
    pub fn change(&self) -> Change {
        Change {
            dd_count: self.this_week.count - self.prev_week.count,
            dd_per_mille: per_mille(self.this_week.count, self.prev_week.count),
            dac: self.this_week.dac - self.prev_week.dac,
            dac_per_mille: per_mille(self.this_week.dac.milli(), self.prev_week.dac.milli()),
        }
    }
}

/// The owner's DAC usage summary (DUR) of one managed agent, or of all of
/// them, over the range the query names.
pub async fn usage_summary(
    services: &Services,
    owner: &OwnerRecord,
    agent_id: Option<Uuid>,
    from: Option<&str>,
    to: Option<&str>,
) -> AppResult<crate::dur::Summary> {
    let agents: Vec<Uuid> = match agent_id {
        Some(agent_id) => vec![managed(services, owner, agent_id).await?.agent.agent_id],
        None => super::agents::list(services, owner).await?.iter().map(|a| a.agent.agent_id).collect(),
    };
    let range = crate::dur::range(services, from, to)?;
    crate::dur::summary(services, &agents, range).await
}

pub async fn weekly(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<Weekly> {
    managed(services, owner, agent_id).await?;
    let now = services.clock.now();
    let start = now - Duration::days(7);
    let prev_start = start - Duration::days(7);
    let this_week = services.store.declaration_totals(agent_id, Some(start), None).await?;
    let prev_week = services.store.declaration_totals(agent_id, Some(prev_start), Some(start)).await?;
    let mut distribution: BTreeMap<[&'static str; 4], (Axes, i64)> = BTreeMap::new();
    for s in all_declarations(services, agent_id, Some(start), None).await?.iter().filter(|s| on_record(s)) {
        let scope = &s.declaration.ee.scope;
        let key = [scope.retention.as_str(), scope.integrity.as_str(), scope.disclosure.as_str(), scope.responsibility.as_str()];
        distribution.entry(key).or_insert(((scope.retention, scope.integrity, scope.disclosure, scope.responsibility), 0)).1 += 1;
    }
    Ok(Weekly { start, end: now, this_week, prev_week, distribution: distribution.into_values().collect() })
}

/// The agent's declarations anchored in `[from, to)`, oldest first (the CSV export).
pub async fn export(
    services: &Services,
    owner: &OwnerRecord,
    agent_id: Uuid,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> AppResult<Vec<(StoredDeclaration, Vec<SettlementStatus>)>> {
    managed(services, owner, agent_id).await?;
    let mut all = all_declarations(services, agent_id, from, to).await?;
    all.reverse();
    with_statuses(services, all).await
}

/// The evidence report of a managed agent's decision (free for its owner).
pub async fn evidence(services: &Services, owner: &OwnerRecord, dd_id: Uuid) -> AppResult<Evidence> {
    let stored = crate::declarations::stored(services, dd_id).await?;
    managed(services, owner, stored.declaration.agent_id).await?;
    crate::declarations::evidence(services, stored).await
}

/// The receipt of a managed agent's confirmed decision (free for its
/// owner, who may hand it to an auditor: `anchor verify` checks it).
pub async fn receipt(services: &Services, owner: &OwnerRecord, dd_id: Uuid) -> AppResult<anchor_verify::Receipt> {
    let stored = crate::declarations::stored(services, dd_id).await?;
    managed(services, owner, stored.declaration.agent_id).await?;
    crate::transparency::receipt(services, stored.declaration.agent_id, dd_id).await
}

/// Declarations on record and their DAC per UTC day, days without any included.
#[derive(Clone, Debug)]
pub struct Usage {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub days: Vec<(NaiveDate, i64, MilliDac)>,
    pub total: MilliDac,
}

/// The last `days` UTC days (today included) of one managed agent, or of all of them.
pub async fn usage_daily(services: &Services, owner: &OwnerRecord, days: Option<i64>, agent_id: Option<Uuid>) -> AppResult<Usage> {
    // The last 30 days unless asked.
    let days = days.unwrap_or(30);
    if !(1..=USAGE_MAX_DAYS).contains(&days) {
        return Err(AppError::invalid("INVALID_VALUE", format!("days must be an integer from 1 to {USAGE_MAX_DAYS}")));
    }
    let agents: Vec<Uuid> = match agent_id {
        Some(id) => {
            managed(services, owner, id).await?;
            vec![id]
        }
        None => services.store.owner_agents(owner.owner_id).await?.iter().map(|a| a.agent.agent_id).collect(),
    };
    let now = services.clock.now();
    let first: NaiveDate = now.date_naive() - Duration::days(days - 1);
    let from = Utc.from_utc_datetime(&first.and_hms_opt(0, 0, 0).expect("midnight"));
    let mut buckets: BTreeMap<NaiveDate, (i64, MilliDac)> = (0..days).map(|i| (first + Duration::days(i), (0, MilliDac::ZERO))).collect();
    let mut total = MilliDac::ZERO;
    for agent_id in agents {
        for s in all_declarations(services, agent_id, Some(from), None).await?.iter().filter(|s| on_record(s)) {
            if let Some(bucket) = buckets.get_mut(&s.declaration.anchored_at.date_naive()) {
                bucket.0 += 1;
                bucket.1 = bucket.1 + s.declaration.dac_amount;
                total = total + s.declaration.dac_amount;
            }
        }
    }
    Ok(Usage { from, to: now, days: buckets.into_iter().map(|(day, (n, dac))| (day, n, dac)).collect(), total })
}

#[cfg(test)]
mod tests {
    use super::per_mille;

    #[test]
    fn week_over_week_is_per_mille_truncated_and_absent_from_nothing() {
        assert_eq!(per_mille(110, 100), Some(100));
        assert_eq!(per_mille(90, 100), Some(-100));
        assert_eq!(per_mille(1, 3), Some(-666));
        assert_eq!(per_mille(5, 0), None);
        assert_eq!(per_mille(0, 7), Some(-1000));
    }
}
