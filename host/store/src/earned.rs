//! Earned DAC: lots, the draws debits make on them, and the ledger.
//!
//! Every write locks the agent's row first (`for update` on PostgreSQL; SQLite
//! has one writer), expires the agent's lots that are due, and then reads and
//! changes its lots, so two spenders of one agent run one after the other and
//! a balance never goes below zero (the lot's `check (remaining_milli >= 0)`
//! backs that up). A debit remembers what it drew from each lot; its refund
//! puts the same amounts back into the same lots, or expires at once what
//! belonged to a lot that expired in between.

use anchor_domain::MilliDac;
use anchor_domain::earned::EntryKind;
use anchor_domain::payments::{Subject, SubjectDomain};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> EarnedStore for SqlStore<E> {
    async fn credit_earned(
        &self,
        agent_id: Uuid,
        amount: MilliDac,
        reason: &str,
        reference: Option<Subject>,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<EarnedEntry> {
        let mut tx = self.begin_write().await?;
        let entry = credit(&mut tx, self.db.for_update(), agent_id, amount, reason, reference, expires_at, now).await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn debit_earned(
        &self,
        agent_id: Uuid,
        amount: MilliDac,
        threshold: MilliDac,
        reason: &str,
        reference: Option<Subject>,
        now: DateTime<Utc>,
    ) -> Result<Spend> {
        let mut tx = self.begin_write().await?;
        let spend = debit(&mut tx, self.db.for_update(), agent_id, amount, threshold, reason, reference, now).await?;
        if matches!(spend, Spend::Debited(_)) {
            tx.commit().await?;
        }
        Ok(spend)
    }

    async fn refund_earned(&self, debit_id: Uuid, reason: &str, now: DateTime<Utc>) -> Result<Option<EarnedEntry>> {
        let mut tx = self.begin_write().await?;
        let refunded = refund(&mut tx, self.db.for_update(), debit_id, reason, now).await?;
        if refunded.is_some() {
            tx.commit().await?;
        }
        Ok(refunded)
    }

    async fn expire_earned(&self, now: DateTime<Utc>, max_agents: i64) -> Result<u64> {
        let agents: Vec<Uuid> = self
            .db()
            .scalar_all(
                sql("select distinct agent_id from earned_lot where not expired and expires_at <= $1 limit $2").bind(now).bind(max_agents),
            )
            .await?;
        let mut ended = 0;
        for agent_id in agents {
            let mut tx = self.begin_write().await?;
            lock_agent(&mut tx, self.db.for_update(), agent_id).await?;
            ended += expire_due(&mut tx, agent_id, now).await?;
            tx.commit().await?;
        }
        Ok(ended)
    }

    async fn earned_balance(&self, agent_id: Uuid, now: DateTime<Utc>) -> Result<EarnedBalance> {
        let lots = self
            .db()
            .fetch_optional(
                sql("select \
                       cast(coalesce(sum(case when not expired and expires_at > $2 then remaining_milli else 0 end), 0) as bigint) as balance, \
                       cast(coalesce(sum(case when not expired and expires_at <= $2 then remaining_milli else 0 end), 0) as bigint) as due, \
                       cast(coalesce(sum(amount_milli), 0) as bigint) as received \
                     from earned_lot where agent_id = $1")
                .bind(agent_id)
                .bind(now),
            )
            .await?;
        let entries = self
            .db()
            .fetch_optional(
                sql("select \
                       cast(coalesce(sum(case when kind = 'debit' then amount_milli else 0 end), 0) as bigint) as debited, \
                       cast(coalesce(sum(case when kind = 'refund' then amount_milli else 0 end), 0) as bigint) as refunded, \
                       cast(coalesce(sum(case when kind = 'expiry' then amount_milli else 0 end), 0) as bigint) as expired \
                     from earned_entry where agent_id = $1")
                .bind(agent_id),
            )
            .await?;
        let next = self
            .db()
            .fetch_optional(
                sql("select remaining_milli, expires_at from earned_lot \
                     where agent_id = $1 and not expired and expires_at > $2 and remaining_milli > 0 \
                     order by expires_at, earned_at, lot_id limit 1")
                .bind(agent_id)
                .bind(now),
            )
            .await?;
        let (Some(lots), Some(entries)) = (lots, entries) else { return Ok(EarnedBalance::default()) };
        let refunded: i64 = entries.get("refunded")?;
        Ok(EarnedBalance {
            balance: MilliDac(lots.get("balance")?),
            next_expiry: next
                .map(|row| Ok::<_, StoreError>((MilliDac(row.get("remaining_milli")?), row.get("expires_at")?)))
                .transpose()?,
            received: MilliDac(lots.get("received")?),
            spent: MilliDac(entries.get::<i64>("debited")? - refunded),
            expired: MilliDac(entries.get::<i64>("expired")? + lots.get::<i64>("due")?),
        })
    }

    async fn earned_ledger(&self, agent_id: Uuid, limit: i64, offset: i64) -> Result<Vec<EarnedEntry>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select e.entry_id, e.seq, e.kind, e.reason, e.amount_milli, e.balance_after_milli, e.lot_id, \
                       e.reference_kind, e.reference_id, e.at, l.expires_at \
                     from earned_entry e left join earned_lot l on l.lot_id = e.lot_id \
                     where e.agent_id = $1 order by e.seq desc limit $2 offset $3")
                .bind(agent_id)
                .bind(limit)
                .bind(offset),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(EarnedEntry {
                    entry_id: row.get("entry_id")?,
                    seq: row.get("seq")?,
                    kind: row.named("kind")?,
                    reason: row.get("reason")?,
                    amount: MilliDac(row.get("amount_milli")?),
                    balance_after: MilliDac(row.get("balance_after_milli")?),
                    lot_id: row.get("lot_id")?,
                    expires_at: row.get("expires_at")?,
                    reference: reference_of(row)?,
                    at: row.get("at")?,
                })
            })
            .collect()
    }
}

/// Credits a new lot inside `tx` (see [`EarnedStore::credit_earned`]); the caller commits.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn credit<X: Exec>(
    tx: &mut X,
    for_update: &str,
    agent_id: Uuid,
    amount: MilliDac,
    reason: &str,
    reference: Option<Subject>,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<EarnedEntry> {
    lock_agent(tx, for_update, agent_id).await?;
    expire_due(tx, agent_id, now).await?;
    let lot_id = Uuid::new_v4();
    tx.execute(Query::insert(
        "earned_lot",
        vec![
            ("lot_id", lot_id.value()),
            ("agent_id", agent_id.value()),
            ("amount_milli", amount.milli().value()),
            ("remaining_milli", amount.milli().value()),
            ("earned_at", now.value()),
            ("expires_at", expires_at.value()),
        ],
    ))
    .await?;
    let balance = unexpired(tx, agent_id).await?;
    let entry = Line { kind: EntryKind::Credit, reason, amount, balance_after: balance, lot: Some((lot_id, expires_at)), reference };
    write_line(tx, agent_id, entry, now).await
}

/// Debits `amount` inside `tx` (see [`EarnedStore::debit_earned`]); the
/// caller commits, and dropping `tx` undoes it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn debit<X: Exec>(
    tx: &mut X,
    for_update: &str,
    agent_id: Uuid,
    amount: MilliDac,
    threshold: MilliDac,
    reason: &str,
    reference: Option<Subject>,
    now: DateTime<Utc>,
) -> Result<Spend> {
    lock_agent(tx, for_update, agent_id).await?;
    expire_due(tx, agent_id, now).await?;
    let lots = tx
        .fetch_all(
            sql("select lot_id, remaining_milli from earned_lot \
                 where agent_id = $1 and not expired and remaining_milli > 0 order by expires_at, earned_at, lot_id")
            .bind(agent_id),
        )
        .await?;
    let mut available = Vec::with_capacity(lots.len());
    for lot in &lots {
        available.push((lot.get::<Uuid>("lot_id")?, lot.get::<i64>("remaining_milli")?));
    }
    let balance = MilliDac(available.iter().map(|(_, remaining)| remaining).sum());
    if balance < threshold {
        return Ok(Spend::BelowThreshold { balance });
    }
    if balance < amount {
        return Ok(Spend::Insufficient { balance });
    }
    let entry_id = Uuid::new_v4();
    let line =
        Line { kind: EntryKind::Debit, reason, amount, balance_after: MilliDac(balance.milli() - amount.milli()), lot: None, reference };
    let entry = write_line_as(tx, entry_id, agent_id, line, now).await?;
    let mut left = amount.milli();
    for (lot_id, remaining) in available {
        if left == 0 {
            break;
        }
        let part = remaining.min(left);
        let drawn = tx
            .execute(
                sql("update earned_lot set remaining_milli = remaining_milli - $1 where lot_id = $2 and remaining_milli >= $1")
                    .bind(part)
                    .bind(lot_id),
            )
            .await?;
        if drawn != 1 {
            return Err(StoreError::Corrupt(format!("earned lot {lot_id} changed under the agent's lock")));
        }
        tx.execute(Query::insert(
            "earned_draw",
            vec![("entry_id", entry_id.value()), ("lot_id", lot_id.value()), ("amount_milli", part.value())],
        ))
        .await?;
        left -= part;
    }
    Ok(Spend::Debited(entry))
}

/// Refunds a debit inside `tx` (see [`EarnedStore::refund_earned`]); the caller commits.
pub(crate) async fn refund<X: Exec>(
    tx: &mut X,
    for_update: &str,
    debit_id: Uuid,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Option<EarnedEntry>> {
    let Some(row) = tx
        .fetch_optional(
            sql("select agent_id, amount_milli, reference_kind, reference_id from earned_entry \
                 where entry_id = $1 and kind = 'debit' and not refunded")
            .bind(debit_id),
        )
        .await?
    else {
        return Ok(None);
    };
    let agent_id: Uuid = row.get("agent_id")?;
    let amount = MilliDac(row.get("amount_milli")?);
    let reference = reference_of(&row)?;
    lock_agent(tx, for_update, agent_id).await?;
    // The lock makes this the only refund of the debit.
    if tx.execute(sql("update earned_entry set refunded = true where entry_id = $1 and not refunded").bind(debit_id)).await? != 1 {
        return Ok(None);
    }
    expire_due(tx, agent_id, now).await?;
    let draws = tx
        .fetch_all(
            sql("select d.lot_id, d.amount_milli, l.expired, l.expires_at from earned_draw d \
                 join earned_lot l on l.lot_id = d.lot_id where d.entry_id = $1 order by l.expires_at, l.lot_id")
            .bind(debit_id),
        )
        .await?;
    let mut lapsed = Vec::new();
    for draw in &draws {
        let lot_id: Uuid = draw.get("lot_id")?;
        let part: i64 = draw.get("amount_milli")?;
        if draw.get::<bool>("expired")? {
            lapsed.push((lot_id, MilliDac(part), draw.get::<DateTime<Utc>>("expires_at")?));
        } else {
            tx.execute(sql("update earned_lot set remaining_milli = remaining_milli + $1 where lot_id = $2").bind(part).bind(lot_id))
                .await?;
        }
    }
    let lapsed_total: i64 = lapsed.iter().map(|(_, part, _)| part.milli()).sum();
    let balance = unexpired(tx, agent_id).await?;
    let refund =
        Line { kind: EntryKind::Refund, reason, amount, balance_after: MilliDac(balance.milli() + lapsed_total), lot: None, reference };
    let entry = write_line(tx, agent_id, refund, now).await?;
    // What belonged to a lot that expired since the debit expires now.
    let mut left = balance.milli() + lapsed_total;
    for (lot_id, part, expires_at) in lapsed {
        left -= part.milli();
        let expiry = Line {
            kind: EntryKind::Expiry,
            reason: "lot expired before the refund",
            amount: part,
            balance_after: MilliDac(left),
            lot: Some((lot_id, expires_at)),
            reference: None,
        };
        write_line(tx, agent_id, expiry, now).await?;
    }
    Ok(Some(entry))
}

/// The Earned debit that paid part of `subject`, not refunded: its id and amount.
pub(crate) async fn debit_for<X: Exec>(tx: &mut X, subject: Subject) -> Result<Option<(Uuid, MilliDac)>> {
    let row = tx
        .fetch_optional(
            sql("select entry_id, amount_milli from earned_entry \
                 where reference_kind = $1 and reference_id = $2 and kind = 'debit' and not refunded")
            .bind(subject.domain.as_str())
            .bind(subject.id),
        )
        .await?;
    row.map(|row| Ok((row.get("entry_id")?, MilliDac(row.get("amount_milli")?)))).transpose()
}

pub(crate) async fn lock_agent<X: Exec>(tx: &mut X, for_update: &str, agent_id: Uuid) -> Result<()> {
    let found: Option<Uuid> =
        tx.scalar_optional(sql(format!("select agent_id from agent where agent_id = $1{for_update}")).bind(agent_id)).await?;
    found.map(|_| ()).ok_or_else(|| StoreError::NotFound("no row returned".into()))
}

/// Ends the agent's lots due at `now`, with an expiry line for what was left
/// of each; returns how many lots it ended.
async fn expire_due<X: Exec>(tx: &mut X, agent_id: Uuid, now: DateTime<Utc>) -> Result<u64> {
    let due = tx
        .fetch_all(
            sql("select lot_id, remaining_milli, expires_at from earned_lot \
                 where agent_id = $1 and not expired and expires_at <= $2 order by expires_at, earned_at, lot_id")
            .bind(agent_id)
            .bind(now),
        )
        .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let mut balance = unexpired(tx, agent_id).await?.milli();
    for lot in &due {
        let lot_id: Uuid = lot.get("lot_id")?;
        let remaining: i64 = lot.get("remaining_milli")?;
        tx.execute(sql("update earned_lot set expired = true, remaining_milli = 0 where lot_id = $1").bind(lot_id)).await?;
        if remaining > 0 {
            balance -= remaining;
            let line = Line {
                kind: EntryKind::Expiry,
                reason: "lot expired",
                amount: MilliDac(remaining),
                balance_after: MilliDac(balance),
                lot: Some((lot_id, lot.get("expires_at")?)),
                reference: None,
            };
            write_line(tx, agent_id, line, now).await?;
        }
    }
    Ok(due.len() as u64)
}

/// The remaining amount of the agent's lots not marked expired.
async fn unexpired<X: Exec>(tx: &mut X, agent_id: Uuid) -> Result<MilliDac> {
    let sum: i64 = tx
        .scalar(
            sql("select cast(coalesce(sum(remaining_milli), 0) as bigint) from earned_lot where agent_id = $1 and not expired")
                .bind(agent_id),
        )
        .await?;
    Ok(MilliDac(sum))
}

/// A ledger line before it is written.
struct Line<'a> {
    kind: EntryKind,
    reason: &'a str,
    amount: MilliDac,
    balance_after: MilliDac,
    lot: Option<(Uuid, DateTime<Utc>)>,
    reference: Option<Subject>,
}

async fn write_line<X: Exec>(tx: &mut X, agent_id: Uuid, line: Line<'_>, now: DateTime<Utc>) -> Result<EarnedEntry> {
    write_line_as(tx, Uuid::new_v4(), agent_id, line, now).await
}

/// Appends the line at the agent's next position (the caller holds the agent's lock).
async fn write_line_as<X: Exec>(tx: &mut X, entry_id: Uuid, agent_id: Uuid, line: Line<'_>, now: DateTime<Utc>) -> Result<EarnedEntry> {
    let seq: i64 =
        tx.scalar(sql("select cast(coalesce(max(seq), 0) + 1 as bigint) from earned_entry where agent_id = $1").bind(agent_id)).await?;
    tx.execute(Query::insert(
        "earned_entry",
        vec![
            ("entry_id", entry_id.value()),
            ("agent_id", agent_id.value()),
            ("seq", seq.value()),
            ("kind", line.kind.as_str().value()),
            ("reason", line.reason.value()),
            ("amount_milli", line.amount.milli().value()),
            ("balance_after_milli", line.balance_after.milli().value()),
            ("lot_id", line.lot.map(|(id, _)| id).value()),
            ("reference_kind", line.reference.map(|r| r.domain.as_str()).value()),
            ("reference_id", line.reference.map(|r| r.id).value()),
            ("at", now.value()),
        ],
    ))
    .await?;
    Ok(EarnedEntry {
        entry_id,
        seq,
        kind: line.kind,
        reason: line.reason.to_string(),
        amount: line.amount,
        balance_after: line.balance_after,
        lot_id: line.lot.map(|(id, _)| id),
        expires_at: line.lot.map(|(_, at)| at),
        reference: line.reference,
        at: now,
    })
}

fn reference_of(row: &impl Row) -> Result<Option<Subject>> {
    let domain: Option<SubjectDomain> = row.opt_named("reference_kind")?;
    let id: Option<Uuid> = row.get("reference_id")?;
    Ok(domain.zip(id).map(|(domain, id)| Subject { domain, id }))
}
