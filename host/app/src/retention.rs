//! Indefinite retention: subscribe, status, cancel, and the jobs that bill
//! each month and carry out ended grace periods (demoting the agent's
//! indefinite records to short, for good).
//!
//! The month (the generation's `retention_monthly`, 50 DAC in the bundled
//! one) is debited from Earned DAC: it is a resolution surcharge, which
//! Earned pays, Trial never and x402 has no route for. A debit that cannot be
//! made answers a plain 402 `INSUFFICIENT_DAC`; one that fails in the monthly
//! job starts the grace period.

use chrono::Duration;

use anchor_domain::MilliDac;
use anchor_domain::records::{AgentRecord, Billed, RetentionTerms};
use anchor_domain::retention::{RetentionStatus, Subscription};
use anchor_ports::{Billing, Subscribed};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};

use crate::{AppError, AppResult, Services};

/// Subscriptions per job run.
const JOB_BATCH: i64 = 100;

pub fn enabled(services: &Services) -> AppResult<()> {
    if services.features().retention {
        return Ok(());
    }
    Err(AppError::Unavailable { code: "FEATURE_NOT_AVAILABLE", message: "indefinite retention is switched off on this service".into() })
}

pub fn terms(services: &Services) -> AppResult<RetentionTerms> {
    let prices = services.pricing.services()?.ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price indefinite retention".into(),
    })?;
    Ok(RetentionTerms {
        monthly: prices.retention_monthly,
        grace: Duration::days(i64::from(prices.retention_grace_days)),
        threshold: crate::earned::terms(services)?.threshold,
        priced_by: services.priced_by(),
    })
}

/// An agent's subscription as the status route shows it.
#[derive(Clone, Debug)]
pub struct View {
    pub status: RetentionStatus,
    pub subscription: Option<Subscription>,
    pub terms: RetentionTerms,
    /// Records kept indefinitely now.
    pub indefinite_records: i64,
}

/// GET /v1/retention/indefinite/status.
pub async fn status(services: &Services, agent: &AgentRecord) -> AppResult<View> {
    enabled(services)?;
    view(services, agent.agent_id).await
}

pub(crate) async fn view(services: &Services, agent_id: uuid::Uuid) -> AppResult<View> {
    let terms = terms(services)?;
    let subscription = services.store.retention_subscription(agent_id).await?;
    let status = anchor_domain::retention::status_of(subscription.as_ref(), services.clock.now());
    let indefinite_records = services.store.indefinite_declarations(agent_id).await?;
    Ok(View { status, subscription, terms, indefinite_records })
}

/// POST /v1/retention/indefinite/subscribe: the subscription, whether it was
/// reactivated within its grace, and what was charged now.
pub async fn subscribe(services: &Services, agent: &AgentRecord) -> AppResult<(Subscription, bool, MilliDac, RetentionTerms)> {
    enabled(services)?;
    let terms = terms(services)?;
    let commit = Subscribe { services, agent_id: agent.agent_id, terms: &terms };
    let (subscription, reactivated, charged) = charge::charge(services, month(agent.agent_id, &terms, SUBSCRIBE), &commit).await?;
    Ok((subscription, reactivated, charged, terms))
}

/// POST /v1/retention/indefinite/subscribe: paid from Earned DAC only, so no
/// x402 route (the discovery documents do not list it).
pub const SUBSCRIBE: Route = Route { method: "POST", path: "/v1/retention/indefinite/subscribe" };
/// The monthly job's charges, named as their usage entries are.
pub const MONTHLY: Route = Route { method: "JOB", path: "retention monthly charge" };

/// One month, paid from Earned DAC whole.
fn month(agent_id: uuid::Uuid, terms: &RetentionTerms, route: Route) -> Order {
    Order {
        agent_id,
        route,
        path: None,
        total: terms.monthly,
        description: format!("indefinite retention, one month ({} DAC)", terms.monthly),
        trial: TrialUse::None,
        earned: terms.monthly,
        offered: Offered::Unavailable,
        settle: Settle::AtConfirm,
        pending: None,
    }
}

/// Subscribes (or reactivates) in the transaction that takes the month.
struct Subscribe<'a> {
    services: &'a Services,
    agent_id: uuid::Uuid,
    terms: &'a RetentionTerms,
}

#[async_trait::async_trait]
impl Commit for Subscribe<'_> {
    type Output = (Subscription, bool, MilliDac);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let Funding::Earned(_) = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("indefinite retention is paid from Earned DAC only")));
        };
        match self.services.store.subscribe_retention(self.agent_id, self.terms.clone(), self.services.clock.now()).await? {
            Subscribed::Active { subscription, reactivated, charged } => Ok(Committed::Done((subscription, reactivated, charged))),
            Subscribed::AlreadyActive(_) => Err(AppError::Conflict {
                code: "ALREADY_SUBSCRIBED",
                message: "this agent's indefinite-retention subscription is active already".into(),
            }),
            Subscribed::EarnedShort { balance } => Ok(Committed::EarnedShort { balance }),
        }
    }

    /// A reactivation within the month already paid takes nothing.
    fn debited(output: &Self::Output) -> bool {
        output.2 > MilliDac::ZERO
    }
}

/// Bills one due month; a subscription that cannot pay enters its grace in
/// the same transaction (that is the job's outcome, not a refusal).
struct BillMonth<'a> {
    services: &'a Services,
    agent_id: uuid::Uuid,
    terms: &'a RetentionTerms,
}

#[async_trait::async_trait]
impl Commit for BillMonth<'_> {
    type Output = Billing;

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Billing>> {
        let Funding::Earned(_) = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("indefinite retention is paid from Earned DAC only")));
        };
        Ok(Committed::Done(self.services.store.bill_retention(self.agent_id, self.terms, self.services.clock.now()).await?))
    }

    fn debited(output: &Billing) -> bool {
        *output == Billing::Charged
    }
}

/// POST /v1/retention/indefinite/cancel: active -> grace.
pub async fn cancel(services: &Services, agent: &AgentRecord) -> AppResult<Subscription> {
    enabled(services)?;
    let terms = terms(services)?;
    services.store.cancel_retention(agent.agent_id, terms.grace, services.clock.now()).await?.ok_or_else(|| {
        AppError::not_found("NO_ACTIVE_SUBSCRIPTION", "this agent has no active indefinite-retention subscription to cancel")
    })
}

/// DD create (and a bilateral proposal) with indefinite retention needs an
/// active subscription: a grace period does not count.
pub async fn require_active(services: &Services, agent_id: uuid::Uuid) -> AppResult<()> {
    let refused = |why: &str| {
        Err(AppError::forbidden(
            "INDEFINITE_SUBSCRIPTION_REQUIRED",
            format!("ee_retention_period indefinite needs an active indefinite-retention subscription; {why}"),
        ))
    };
    if !services.features().retention {
        return refused("indefinite retention is switched off on this service");
    }
    let subscription = services.store.retention_subscription(agent_id).await?;
    match anchor_domain::retention::status_of(subscription.as_ref(), services.clock.now()) {
        RetentionStatus::Active => Ok(()),
        RetentionStatus::None => refused("this agent has none (POST /v1/retention/indefinite/subscribe)"),
        RetentionStatus::Grace => refused("this agent's is in its grace period (subscribe again to reactivate it)"),
        RetentionStatus::Expired => refused("this agent's has expired (subscribe again)"),
    }
}

/// The jobs: the months due are charged (or the subscription enters its
/// grace), then ended grace periods are carried out. Each subscription is
/// one transaction; a run takes bounded batches.
pub async fn run_due(services: &Services) -> anyhow::Result<(Billed, usize)> {
    let terms = terms(services).map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = services.clock.now();
    let mut billed = Billed::default();
    for agent_id in services.store.due_retention(now, JOB_BATCH).await? {
        let commit = BillMonth { services, agent_id, terms: &terms };
        match charge::charge(services, month(agent_id, &terms, MONTHLY), &commit).await.map_err(|e| anyhow::anyhow!("{e}"))? {
            Billing::Charged => billed.charged += 1,
            Billing::ToGrace => billed.to_grace += 1,
            Billing::NotDue => {}
        }
    }
    let expired = services.store.expire_due_retention(now, JOB_BATCH).await?;
    Ok((billed, expired))
}

/// Records de-identified per transaction.
pub const DEIDENTIFY_BATCH: i64 = 500;

/// De-identifies the records whose retention ended, in up to `max_batches`
/// transactions of [`DEIDENTIFY_BATCH`]; returns how many, and whether more
/// may be due (the last batch was full).
pub async fn deidentify_due(services: &Services, max_batches: usize) -> anyhow::Result<(usize, bool)> {
    let mut records = 0;
    for _ in 0..max_batches {
        let batch = services.store.deidentify_due(services.clock.now(), DEIDENTIFY_BATCH).await?;
        records += batch.records;
        if (batch.records as i64) < DEIDENTIFY_BATCH {
            return Ok((records, false));
        }
    }
    Ok((records, true))
}
