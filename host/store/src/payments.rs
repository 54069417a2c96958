//! External payments (x402): their rows and history, closing and reconciling them, and the DAB.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

/// The columns of a declaration `d`'s payments that [`decode_settling`]
/// reads, for a declaration paid externally (none for others: no lookup is
/// made). A row per payment: the reader keeps [`PaymentStore::payment_for`]'s
/// choice, the first by payment_id (not ordered here: a plan made while the
/// table is small would walk the whole primary key for the order).
pub(crate) const SETTLING_COLUMNS: &str = "s.payment_id as s_payment_id, s.network as s_network, s.asset as s_asset, \
     s.payer as s_payer, s.status as s_status, s.payload as s_payload";
pub(crate) const SETTLING_JOIN: &str = "left join lateral (select x.payment_id, x.network, x.asset, x.payer, x.status, x.payload \
     from x402_payment x where x.dd_id = d.dd_id and (d.base_fee_source = 'external' or d.premium_source = 'external')) s on true";

/// [`SETTLING_JOIN`] where there are no lateral joins (SQLite): the same rows.
pub(crate) const SETTLING_JOIN_PLAIN: &str = "left join x402_payment s on s.dd_id = d.dd_id \
     and (d.base_fee_source = 'external' or d.premium_source = 'external')";

pub(crate) fn decode_settling(row: &impl Row) -> Result<Option<Settling>> {
    let Some(payment_id) = row.get::<Option<Uuid>>("s_payment_id")? else { return Ok(None) };
    Ok(Some(Settling {
        payment_id,
        network: row.get("s_network")?,
        asset: row.get("s_asset")?,
        payer: row.get("s_payer")?,
        status: row.named("s_status")?,
        payload: row.get("s_payload")?,
    }))
}

/// Rows of records beside their payments' settling facts (one row per
/// payment), folded into one per key: a record with several payments keeps
/// the first by payment_id, as `payment_for` reads it.
pub(crate) fn first_payments<R: Row, K: Eq + std::hash::Hash, T>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<(K, T)>,
) -> Result<HashMap<K, (T, Option<Settling>)>> {
    let mut found: HashMap<K, (T, Option<Settling>)> = HashMap::with_capacity(rows.len());
    for row in rows {
        let settling = decode_settling(row)?;
        let (key, record) = decode(row)?;
        match found.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert((record, settling));
            }
            Entry::Occupied(mut entry) => {
                let kept = &mut entry.get_mut().1;
                if let Some(settling) = settling
                    && kept.as_ref().is_none_or(|first| settling.payment_id < first.payment_id)
                {
                    *kept = Some(settling);
                }
            }
        }
    }
    Ok(found)
}

/// The generation a row names (`pricing_version`, `pricing_sha256`), if it names one.
fn read_priced_by(row: &impl Row) -> Result<Option<PricedBy>> {
    let version: Option<String> = row.get("pricing_version")?;
    let sha256: Option<String> = row.get("pricing_sha256")?;
    Ok(version.zip(sha256).map(|(version, sha256)| PricedBy { version, sha256 }))
}

/// What counts against the DAB: the external spending of the agent `agent`
/// in the period `period` and after (each a parameter or a column; a
/// period is named by [`period_key`]), its payments reserved and settled, as
/// a scalar query. The trigger of migration 0033 keeps the total per agent
/// and month as payments move, so this reads a row, not every payment.
pub(crate) fn dab_spent(agent: &str, period: &str) -> String {
    format!(
        "select cast(coalesce(sum(spent.spent_units), 0) as bigint) from dab_spent spent \
         where spent.agent_id = {agent} and spent.period >= {period}"
    )
}

/// The name of the DAB period (a calendar month, UTC) starting at `start`,
/// as `dab_spent` rows are kept under it: `YYYY-MM`.
pub(crate) fn period_key(start: DateTime<Utc>) -> String {
    start.format("%Y-%m").to_string()
}

/// The agent `a`'s DAB status as two columns of a statement over it
/// (`b_own`, `b_spent`), which [`decode_dab`] reads: its external spending
/// in the period `$2` ([`period_key`]).
pub(crate) fn dab_columns() -> String {
    dab_columns_since("$2")
}

/// [`dab_columns`] with the period `period` (a parameter or a column).
pub(crate) fn dab_columns_since(period: &str) -> String {
    format!("a.dab_limit_milli as b_own, ({}) as b_spent", dab_spent("a.agent_id", period))
}

pub(crate) fn decode_dab(row: &impl Row) -> Result<DabStatus> {
    Ok(DabStatus { own_limit: row.get::<Option<i64>>("b_own")?.map(MilliDac), spent: MilliDac(row.get("b_spent")?) })
}

#[async_trait]
impl<E: Engine> PaymentStore for SqlStore<E> {
    async fn declaration_payment_statuses(&self, dd_ids: &[Uuid]) -> Result<Vec<(Uuid, PaymentStatus)>> {
        let mut out = Vec::new();
        for chunk in dd_ids.chunks(500) {
            let mut query = sql("select subject_id, status from x402_payment where subject_domain = 'declaration' and ");
            query.push_in("subject_id", chunk);
            query.push(" order by created_at");
            for row in self.db().fetch_all(query).await? {
                out.push((row.get("subject_id")?, row.named("status")?));
            }
        }
        Ok(out)
    }

    async fn reserve_payment(
        &self,
        payment: &NewPayment,
        agent_id: Uuid,
        subject: Subject,
        earned: Option<EarnedPart>,
        pending: Option<&Pending>,
        now: DateTime<Utc>,
    ) -> Result<Reservation> {
        let mut tx = self.begin_write().await?;
        let reserved = reserve(&mut tx, self.db.for_update(), payment, agent_id, subject, now).await?;
        if reserved != Reservation::Reserved {
            return Ok(reserved);
        }
        match pending {
            Some(Pending::Purchase(purchase)) if !tsl::insert_pending(&mut tx, purchase, payment.payment_id, now).await? => {
                return Ok(Reservation::Duplicate);
            }
            Some(Pending::Asa(purchase)) if !asa::insert_pending(&mut tx, purchase, payment.payment_id, now).await? => {
                return Ok(Reservation::Duplicate);
            }
            _ => {}
        }
        if let Some(part) = earned {
            let reason = format!("{} surcharge", subject.domain.as_str());
            let spend =
                earned::debit(&mut tx, self.db.for_update(), agent_id, part.amount, part.threshold, &reason, Some(subject), now).await?;
            if let Some(balance) = spend.shortfall() {
                return Ok(Reservation::EarnedShort { balance });
            }
        }
        tx.commit().await?;
        Ok(reserved)
    }

    async fn settle_payment(&self, payment_id: Uuid, reference: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_payment(&mut tx, Key::Payment(payment_id), PaymentStatus::Settled, None, Some(reference), now).await?;
        let Some(moved) = moved else { return Ok(false) };
        let subject = moved.subject.ok_or_else(|| StoreError::Corrupt(format!("payment {payment_id} has no subject")))?;
        // Dropping the transaction undoes the move.
        let component = subject
            .domain
            .cost_component()
            .ok_or_else(|| StoreError::Corrupt(format!("payment {payment_id} is a declaration's, which settles with its confirmation")))?;
        let entry = UsageEntry {
            cost_component: component,
            source: PaymentSource::External,
            amount: MilliDac(moved.amount_units),
            priced_by: moved.priced_by.clone(),
        };
        insert_usage(&mut tx, moved.agent_id, subject, Some(payment_id), &entry, now).await?;
        // The part Earned DAC paid, debited with the reservation, is usage now too.
        if let Some((_, amount)) = earned::debit_for(&mut tx, subject).await? {
            let entry = UsageEntry { cost_component: component, source: PaymentSource::Earned, amount, priced_by: moved.priced_by };
            insert_usage(&mut tx, moved.agent_id, subject, Some(payment_id), &entry, now).await?;
        }
        // What the payment bought is completed with it.
        if subject.domain == SubjectDomain::TslPurchase {
            tsl::complete(&mut tx, self.db.for_update(), subject.id, now).await?;
        }
        if subject.domain == SubjectDomain::AsaSubscription {
            asa::complete(&mut tx, subject.id, now).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn end_payment(&self, payment_id: Uuid, status: PaymentStatus, reason: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_payment(&mut tx, Key::Payment(payment_id), status, Some(reason), None, now).await?;
        // A payment that ends unsettled gives back what Earned DAC paid with it.
        let ended = matches!(status, PaymentStatus::SettleFailed | PaymentStatus::Released);
        if let Some(subject) = moved.as_ref().and_then(|m| m.subject).filter(|_| ended)
            && let Some((debit_id, _)) = earned::debit_for(&mut tx, subject).await?
        {
            earned::refund(&mut tx, self.db.for_update(), debit_id, "payment not settled", now).await?;
        }
        if let Some(subject) = moved.as_ref().and_then(|m| m.subject).filter(|s| ended && s.domain == SubjectDomain::TslPurchase) {
            tsl::fail(&mut tx, subject.id).await?;
        }
        if let Some(subject) = moved.as_ref().and_then(|m| m.subject).filter(|s| ended && s.domain == SubjectDomain::AsaSubscription) {
            asa::fail(&mut tx, subject.id).await?;
        }
        tx.commit().await?;
        Ok(moved.is_some())
    }

    async fn payment(&self, payment_id: Uuid) -> Result<Option<PaymentRecord>> {
        read_payment(&mut self.db(), Key::Payment(payment_id)).await
    }

    async fn payment_with_nonce(&self, network: &str, asset: &str, payer: &str, nonce: &str) -> Result<Option<PaymentRecord>> {
        let query = sql(format!(
            "select {PAYMENT_COLUMNS} from x402_payment p {PAYMENT_EVENTS} \
             where p.network = $1 and p.asset = $2 and p.payer = $3 and p.nonce = $4 order by p.payment_id, {PAYMENT_EVENT_ORDER}"
        ))
        .bind(network)
        .bind(asset)
        .bind(payer)
        .bind(nonce);
        first_payment(&self.db().fetch_all(query).await?)
    }

    async fn close_payment(
        &self,
        dd_id: Uuid,
        declaration_status: SettlementStatus,
        payment_status: PaymentStatus,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let released = tx
            .execute(
                sql("update declaration set settlement_status = $1 \
                     where dd_id = $2 and settlement_status = 'pending' and confirmed_at is null")
                .bind(declaration_status.as_str())
                .bind(dd_id),
            )
            .await?;
        if released == 0 {
            return Ok(false);
        }
        move_payment(&mut tx, Key::Declaration(dd_id), payment_status, Some(reason), None, now).await?;
        give_back_unanchored(&mut tx, self.db.for_update(), dd_id, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn payment_deadlines(&self, after: DueKey, before: DateTime<Utc>, limit: i64) -> Result<Vec<PaymentDue>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select dd_id, payment_deadline, settlement_status, confirmed_at from declaration \
                     where payment_deadline is not null and payment_deadline < $1 \
                     and (payment_deadline > $2 or (payment_deadline = $2 and dd_id > $3)) \
                     order by payment_deadline, dd_id limit $4")
                .bind(before)
                .bind(after.deadline)
                .bind(after.dd_id)
                .bind(limit),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let status: Option<String> = row.get("settlement_status")?;
                let confirmed: Option<DateTime<Utc>> = row.get("confirmed_at")?;
                Ok(PaymentDue {
                    key: DueKey { deadline: row.get("payment_deadline")?, dd_id: row.get("dd_id")? },
                    pending: confirmed.is_none() && status.as_deref() == Some(SettlementStatus::Pending.as_str()),
                })
            })
            .collect()
    }

    async fn inline_payments_by_validity(&self, after: ValidityKey, before: i64, limit: i64) -> Result<Vec<InlineDue>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select payment_id, valid_before, status from x402_payment \
                     where subject_domain <> 'declaration' and valid_before < $1 \
                     and (valid_before > $2 or (valid_before = $2 and payment_id > $3)) \
                     order by valid_before, payment_id limit $4")
                .bind(before)
                .bind(after.valid_before)
                .bind(after.payment_id)
                .bind(limit),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(InlineDue {
                    key: ValidityKey { valid_before: row.get("valid_before")?, payment_id: row.get("payment_id")? },
                    status: row.named("status")?,
                })
            })
            .collect()
    }

    async fn release_lapsed_payment(
        &self,
        dd_id: Uuid,
        deadline_before: DateTime<Utc>,
        authorized_before: i64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // Only a record none of whose payments settled, is settling (its
        // outcome unknown) or could still settle.
        let released = tx
            .execute(
                sql("update declaration set settlement_status = 'released' \
                     where dd_id = $1 and settlement_status = 'pending' and confirmed_at is null and payment_deadline < $2 \
                     and not exists (select 1 from x402_payment p where p.dd_id = $1 \
                                     and (p.status in ('settled', 'settle_unknown') or p.valid_before >= $3))")
                .bind(dd_id)
                .bind(deadline_before)
                .bind(authorized_before),
            )
            .await?;
        if released == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        // Reserved, not unknown: a confirmation that began settling it meanwhile keeps it.
        let moved = move_payment_from(&mut tx, Key::Declaration(dd_id), RESERVED, PaymentStatus::Released, Some(reason), None, now).await?;
        if moved.is_none() {
            tx.rollback().await?;
            return Ok(false);
        }
        give_back_unanchored(&mut tx, self.db.for_update(), dd_id, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn unknown_settlements(&self, limit: i64) -> Result<Vec<UnknownSettlement>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select payment_id, subject_domain, subject_id from x402_payment \
                     where status = 'settle_unknown' and subject_id is not null order by updated_at limit $1")
                .bind(limit),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let subject = subject(row)?.ok_or_else(|| StoreError::Corrupt("x402_payment.subject_domain is NULL".into()))?;
                Ok(UnknownSettlement { payment_id: row.get("payment_id")?, subject })
            })
            .collect()
    }

    async fn close_settled_subjects(&self, settled_before: DateTime<Utc>, now: DateTime<Utc>, limit: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        // Driven by the open subjects (few), each joined to its payments by
        // x402_payment_by_subject.
        let rows = tx
            .fetch_all(
                sql("select x.payment_id, x.subject_domain, x.subject_id, x.amount_units, x.created_at from ise_session s \
                     join x402_payment x on x.subject_domain = 'ise_session' and x.subject_id = s.session_id \
                     where s.exited_at is null and x.status = 'settled' and x.updated_at <= $1 \
                     union all \
                     select x.payment_id, x.subject_domain, x.subject_id, x.amount_units, x.created_at from sdac_session s \
                     join x402_payment x on x.subject_domain = 'sdac_session' and x.subject_id = s.session_id \
                     where s.ended_at is null and x.status = 'settled' and x.updated_at <= $1 limit $2")
                .bind(settled_before)
                .bind(limit),
            )
            .await?;
        let mut closed = 0;
        for row in &rows {
            let domain: String = row.get("subject_domain")?;
            let reserved_at: DateTime<Utc> = row.get("created_at")?;
            let close = if domain == SubjectDomain::IseSession.as_str() {
                sql("update ise_session set exited_at = $1, charged_milli = $2, payment_source = 'external', payment_id = $3, \
                     closed_by = 'service', unpaid = false where session_id = $4 and exited_at is null")
                .bind(reserved_at)
            } else {
                sql("update sdac_session set ended_at = $1, charged_milli = $2, payment_source = 'external', payment_id = $3 \
                     where session_id = $4 and ended_at is null")
                .bind(now)
            };
            let amount: i64 = row.get("amount_units")?;
            let (payment_id, subject_id): (Uuid, Uuid) = (row.get("payment_id")?, row.get("subject_id")?);
            closed += tx.execute(close.bind(amount).bind(payment_id).bind(subject_id)).await?;
        }
        tx.commit().await?;
        Ok(closed)
    }

    async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_payment(&mut tx, Key::Declaration(dd_id), PaymentStatus::SettleUnknown, Some(detail), None, now).await?;
        tx.commit().await?;
        Ok(moved.is_some())
    }

    async fn mark_settled_unrecorded(&self, payment_id: Uuid, reference: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let reason = Some(SETTLED_UNRECORDED);
        let moved = move_payment(&mut tx, Key::Payment(payment_id), PaymentStatus::SettleUnknown, reason, Some(reference), now).await?;
        tx.commit().await?;
        Ok(moved.is_some())
    }

    async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.payment(dd_id).await
        {
            return found;
        }
        // On SQLite, on a direct reader (as the declaration it pays was
        // read), not through the pool's worker thread.
        let key = Key::Declaration(dd_id);
        if let Some(found) = self.read_direct_rows(payment_query(key), first_payment) {
            return Ok(found);
        }
        read_payment(&mut self.db(), key).await
    }

    async fn usage_for(&self, subject: Subject) -> Result<Vec<UsageEntry>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select cost_component, payment_source, amount_milli, pricing_version, pricing_sha256 from usage_entry \
                     where subject_domain = $1 and subject_id = $2 order by cost_component")
                .bind(subject.domain.as_str())
                .bind(subject.id),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UsageEntry {
                    cost_component: row.named("cost_component")?,
                    source: row.named("payment_source")?,
                    amount: MilliDac(row.get("amount_milli")?),
                    priced_by: read_priced_by(row)?,
                })
            })
            .collect()
    }

    async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus> {
        // One statement: the agent's own limit and its spending, side by side.
        let query =
            || sql(format!("select {} from agent a where a.agent_id = $1", dab_columns())).bind(agent_id).bind(period_key(period_start));
        let found = match self.read_direct(query(), decode_dab) {
            Some(found) => found,
            None => self.db().fetch_optional(query()).await?.as_ref().map(decode_dab).transpose()?,
        };
        found.ok_or_else(|| StoreError::Corrupt(format!("no agent {agent_id} for its DAB")))
    }
}

/// How a payment row is found.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Key {
    Payment(Uuid),
    /// The payment of a declaration.
    Declaration(Uuid),
}

impl Key {
    fn column(self) -> &'static str {
        match self {
            Key::Payment(_) => "payment_id",
            Key::Declaration(_) => "dd_id",
        }
    }

    fn id(self) -> Uuid {
        match self {
            Key::Payment(id) | Key::Declaration(id) => id,
        }
    }
}

/// The subject domains with at most one live payment each (a unique index
/// says so in the schema).
const ONE_PAYMENT_SUBJECTS: &[&str] = &["ise_session", "sdac_session", "asa_subscription"];

/// SQL true when no payment for the subject (`domain`, the id in
/// `id_column`) is live: a close paid otherwise leaves a stay or session
/// alone while a payment for it is on its way. An inline reservation is
/// settled within its request; one older than `stale_param` (a timestamp
/// parameter, [`stale_before`]) was left by a host that stopped, and no
/// longer holds the subject.
pub(crate) fn no_live_payment(domain: &str, id_column: &str, stale_param: &str) -> String {
    format!(
        "not exists (select 1 from x402_payment x where x.subject_domain = '{domain}' and x.subject_id = {id_column} \
         and (x.status in ('settled', 'settle_unknown') or (x.status = 'reserved' and x.created_at > {stale_param})))"
    )
}

/// Reservations of inline payments made before this are stale (see [`no_live_payment`]).
pub(crate) fn stale_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - chrono::Duration::minutes(10)
}

/// Checks the DAB under the agent's row lock, then reserves the
/// authorization for `subject`, with its first event. Nothing is written
/// unless it returns `Reserved`.
pub(crate) async fn reserve<X: Exec>(
    tx: &mut X,
    for_update: &str,
    payment: &NewPayment,
    agent_id: Uuid,
    subject: Subject,
    now: DateTime<Utc>,
) -> Result<Reservation> {
    // On PostgreSQL the agent row's lock makes concurrent payments of one
    // agent count one after another; SQLite has a single writer. The lock is
    // `for no key update`, as the batched paid creates' is: it excludes the
    // other writes of the agent's spending but not another transaction's
    // foreign keys to the agent (a settlement's usage rows), which only share
    // the row. With `for update`, a settlement waiting for it while this
    // reservation waited for the settlement's payment row (the same nonce,
    // sent again at once) was a deadlock, answered 503.
    let lock = crate::engine::for_no_key_update(for_update);
    let own: Option<i64> = tx.scalar(sql(format!("select dab_limit_milli from agent where agent_id = $1{lock}")).bind(agent_id)).await?;
    // A stay or an sDAC session closed since it was priced takes no payment.
    // Its closes lock the agent's row too, so one committed before the lock
    // above is seen here, and one after it finds this payment live.
    let open = match subject.domain {
        SubjectDomain::IseSession => Some("select cast(1 as bigint) from ise_session where session_id = $1 and exited_at is null"),
        SubjectDomain::SdacSession => Some("select cast(1 as bigint) from sdac_session where session_id = $1 and ended_at is null"),
        _ => None,
    };
    if let Some(open) = open
        && tx.scalar_optional::<i64>(sql(open).bind(subject.id)).await?.is_none()
    {
        return Ok(Reservation::SubjectClosed);
    }
    let limit = own.unwrap_or(payment.dab_default.milli());
    let spent: i64 = tx.scalar(sql(dab_spent("$1", "$2")).bind(agent_id).bind(period_key(payment.period_start))).await?;
    if spent + payment.amount_units > limit {
        return Ok(Reservation::DabReached { limit: MilliDac(limit), spent: MilliDac(spent) });
    }
    // A subject paid once at most (a stay, an sDAC session, an ASA
    // purchase) with a live payment already: the same purchase made twice,
    // not a nonce used twice. Under the agent's row lock (one writer on
    // SQLite), so a parallel one sees this one's row; the unique index
    // behind it stays the guard between agents.
    if ONE_PAYMENT_SUBJECTS.contains(&subject.domain.as_str()) {
        let live: Option<i64> = tx
            .scalar_optional(
                sql("select cast(1 as bigint) from x402_payment where subject_domain = $1 and subject_id = $2 \
                     and status in ('reserved', 'settled', 'settle_unknown') limit 1")
                .bind(subject.domain.as_str())
                .bind(subject.id),
            )
            .await?;
        if live.is_some() {
            return Ok(Reservation::Duplicate);
        }
    }
    // The nonce's unique constraint is the replay guard, on every host.
    let inserted = tx.execute(Query::insert("x402_payment", payment_columns(payment, agent_id, subject, now))).await;
    match inserted {
        Ok(_) => {}
        Err(error) if error.is_unique_violation() => return Ok(Reservation::NonceUsed),
        Err(error) => return Err(error),
    }
    insert_event(tx, payment.payment_id, PaymentStatus::Reserved, None, now).await?;
    Ok(Reservation::Reserved)
}

/// The columns of a payment reserved for `subject`, as first inserted.
pub(crate) fn payment_columns<'q>(
    payment: &'q NewPayment,
    agent_id: Uuid,
    subject: Subject,
    now: DateTime<Utc>,
) -> Vec<(&'static str, crate::engine::Value<'q>)> {
    vec![
        ("payment_id", payment.payment_id.value()),
        ("network", payment.network.as_str().value()),
        ("asset", payment.asset.as_str().value()),
        ("payer", payment.payer.as_str().value()),
        ("nonce", payment.nonce.as_str().value()),
        ("amount_units", payment.amount_units.value()),
        ("pay_to", payment.pay_to.as_str().value()),
        ("valid_after", payment.valid_after.value()),
        ("valid_before", payment.valid_before.value()),
        ("route", payment.route.as_str().value()),
        ("pricing_version", payment.priced_by.version.as_str().value()),
        ("pricing_sha256", payment.priced_by.sha256.as_str().value()),
        ("agent_id", agent_id.value()),
        ("subject_domain", subject.domain.as_str().value()),
        ("subject_id", subject.id.value()),
        ("payload", payment.payload.as_str().value()),
        ("request_digest", payment.request.as_ref().value()),
        ("status", PaymentStatus::Reserved.as_str().value()),
        ("created_at", now.value()),
        ("updated_at", now.value()),
    ]
}

/// What a moved payment row was.
pub(crate) struct Moved {
    pub payment_id: Uuid,
    pub agent_id: Uuid,
    pub amount_units: i64,
    pub subject: Option<Subject>,
    pub priced_by: Option<PricedBy>,
}

/// Moves a reserved (or unknown) payment to `status`, with its event: the
/// row, if it moved.
/// The reason a payment marked by [`PaymentStore::mark_settled_unrecorded`] shows.
pub const SETTLED_UNRECORDED: &str = "settled; its record could not be written at once and is written by reconciliation";

pub(crate) async fn move_payment<X: Exec>(
    tx: &mut X,
    key: Key,
    status: PaymentStatus,
    reason: Option<&str>,
    reference: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<Moved>> {
    move_payment_from(tx, key, LIVE, status, reason, reference, now).await
}

/// The statuses a payment is moved from: every live one (its outcome known
/// or not), or only a reservation.
const LIVE: &str = "('reserved', 'settle_unknown')";
const RESERVED: &str = "('reserved')";

/// [`move_payment`], from the statuses `from` lists.
async fn move_payment_from<X: Exec>(
    tx: &mut X,
    key: Key,
    from: &'static str,
    status: PaymentStatus,
    reason: Option<&str>,
    reference: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<Moved>> {
    let row = tx
        .fetch_optional(
            sql(format!(
                "update x402_payment set status = $1, error_reason = coalesce($2, error_reason), \
                 settlement_ref = coalesce($3, settlement_ref), updated_at = $4 \
                 where {} = $5 and status in {from} \
                 returning payment_id, agent_id, amount_units, subject_domain, subject_id, pricing_version, pricing_sha256",
                key.column()
            ))
            .bind(status.as_str())
            .bind(reason)
            .bind(reference)
            .bind(now)
            .bind(key.id()),
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let moved = Moved {
        payment_id: row.get("payment_id")?,
        agent_id: row.get("agent_id")?,
        amount_units: row.get("amount_units")?,
        subject: subject(&row)?,
        priced_by: read_priced_by(&row)?,
    };
    insert_event(tx, moved.payment_id, status, reason, now).await?;
    Ok(Some(moved))
}

/// What an externally paid declaration that will never be anchored took
/// from the agent's other balances goes back: a base fee Trial paid beside
/// the external premium (decision 0062), a premium Earned DAC paid.
async fn give_back_unanchored<X: Exec>(tx: &mut X, for_update: &str, dd_id: Uuid, now: DateTime<Utc>) -> Result<()> {
    tx.execute(
        sql("update agent set trial_balance_milli = trial_balance_milli + \
               (select base_fee_milli from declaration where dd_id = $1 and base_fee_source = 'trial') \
             where agent_id = (select agent_id from declaration where dd_id = $1 and base_fee_source = 'trial')")
        .bind(dd_id),
    )
    .await?;
    if let Some((debit_id, _)) = earned::debit_for(tx, Subject::declaration(dd_id)).await? {
        earned::refund(tx, for_update, debit_id, "declaration not anchored", now).await?;
    }
    Ok(())
}

pub(crate) async fn insert_event<X: Exec>(
    tx: &mut X,
    payment_id: Uuid,
    status: PaymentStatus,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<()> {
    tx.execute(
        sql("insert into x402_payment_event (payment_id, status, reason, at) values ($1, $2, $3, $4)")
            .bind(payment_id)
            .bind(status.as_str())
            .bind(reason)
            .bind(now),
    )
    .await?;
    Ok(())
}

/// Records one usage entry for `subject`.
pub(crate) async fn insert_usage<X: Exec>(
    tx: &mut X,
    agent_id: Uuid,
    subject: Subject,
    payment_id: Option<Uuid>,
    entry: &UsageEntry,
    now: DateTime<Utc>,
) -> Result<()> {
    let mut columns = usage_columns(subject, payment_id, entry, now);
    columns.insert(1, ("agent_id", agent_id.value()));
    tx.execute(Query::insert("usage_entry", columns)).await?;
    Ok(())
}

/// A usage row's columns but its agent's (which a caller may take from the
/// statement itself).
pub(crate) fn usage_columns<'q>(
    subject: Subject,
    payment_id: Option<Uuid>,
    entry: &'q UsageEntry,
    now: DateTime<Utc>,
) -> Vec<(&'static str, crate::engine::Value<'q>)> {
    let dd_id = (subject.domain == SubjectDomain::Declaration).then_some(subject.id);
    vec![
        ("usage_id", anchor_domain::record_id().value()),
        ("dd_id", dd_id.value()),
        ("subject_domain", subject.domain.as_str().value()),
        ("subject_id", subject.id.value()),
        ("payment_id", payment_id.value()),
        ("cost_component", entry.cost_component.as_str().value()),
        ("payment_source", entry.source.as_str().value()),
        ("amount_milli", entry.amount.milli().value()),
        ("pricing_version", entry.priced_by.as_ref().map(|p| p.version.as_str()).value()),
        ("pricing_sha256", entry.priced_by.as_ref().map(|p| p.sha256.as_str()).value()),
        ("recorded_at", now.value()),
    ]
}

fn subject(row: &impl Row) -> Result<Option<Subject>> {
    let Some(domain) = row.opt_named("subject_domain")? else { return Ok(None) };
    Ok(Some(Subject { domain, id: row.get("subject_id")? }))
}

/// What [`read_payment`] and the gathered read of payments select from a
/// payment `p` joined with its history `e`: each payment once per event
/// of its history (rows grouped by payment, its events in
/// [`PAYMENT_EVENT_ORDER`]), which [`decode_payments`] reads.
pub(crate) const PAYMENT_COLUMNS: &str = "p.*, e.status as e_status, e.reason as e_reason, e.at as e_at";

/// The history `e` of the payment `p`, on both engines.
const PAYMENT_EVENTS: &str = "left join x402_payment_event e on e.payment_id = p.payment_id";

/// [`PAYMENT_EVENTS`] looked up by the payment's id for each payment
/// (PostgreSQL). `offset 0` keeps the subquery a lookup per payment: pulled
/// up into a plain join, the plan made once for any number of payments
/// (`force_generic_plan`) was a hash join over every event of the table
/// (3,757 buffers for 2 payments among 2,000, against 27).
pub(crate) const PAYMENT_EVENTS_EACH: &str =
    "left join lateral (select status, reason, at from x402_payment_event where payment_id = p.payment_id offset 0) e on true";

/// The order of [`PAYMENT_COLUMNS`]' rows after their payment's.
pub(crate) const PAYMENT_EVENT_ORDER: &str = "e.at, case e.status when 'reserved' then 0 when 'settle_unknown' then 1 else 2 end";

async fn read_payment<X: Exec>(x: &mut X, key: Key) -> Result<Option<PaymentRecord>> {
    let rows = x.fetch_all(payment_query(key)).await?;
    first_payment(&rows)
}

/// One statement: the payment `key` names, its row once per event of its
/// history, in order.
fn payment_query(key: Key) -> Query<'static> {
    sql(format!(
        "select {PAYMENT_COLUMNS} from x402_payment p {PAYMENT_EVENTS} where p.{} = $1 order by p.payment_id, {PAYMENT_EVENT_ORDER}",
        key.column()
    ))
    .bind(key.id())
}

/// The payment of [`payment_query`]'s rows, if any.
fn first_payment<R: Row>(rows: &[R]) -> Result<Option<PaymentRecord>> {
    Ok(decode_payments(rows)?.into_iter().next().map(|(_, payment)| payment))
}

/// The payments of [`PAYMENT_COLUMNS`]' rows, each with its history and
/// the declaration it pays (if any), in the rows' order.
pub(crate) fn decode_payments<R: Row>(rows: &[R]) -> Result<Vec<(Option<Uuid>, PaymentRecord)>> {
    let mut payments: Vec<(Option<Uuid>, PaymentRecord)> = Vec::new();
    for row in rows {
        let payment_id: Uuid = row.get("payment_id")?;
        if payments.last().is_none_or(|(_, last)| last.payment_id != payment_id) {
            payments.push((row.get("dd_id")?, decode_payment(row, payment_id)?));
        }
        if let (Some(at), Some((_, payment))) = (row.get::<Option<DateTime<Utc>>>("e_at")?, payments.last_mut()) {
            payment.history.push((row.named("e_status")?, row.get("e_reason")?, at));
        }
    }
    Ok(payments)
}

fn decode_payment(row: &impl Row, payment_id: Uuid) -> Result<PaymentRecord> {
    Ok(PaymentRecord {
        payment_id,
        network: row.get("network")?,
        asset: row.get("asset")?,
        payer: row.get("payer")?,
        amount_units: row.get("amount_units")?,
        pay_to: row.get("pay_to")?,
        agent_id: row.get("agent_id")?,
        subject: subject(row)?,
        status: row.named("status")?,
        error_reason: row.get("error_reason")?,
        settlement_ref: row.get("settlement_ref")?,
        payload: row.get("payload")?,
        request: row.get("request_digest")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        history: Vec::new(),
    })
}
