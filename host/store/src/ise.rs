//! ISE stays: one open per agent (a partial unique index), closed once
//! (`where exited_at is null`), and paid in the transaction that closes them
//! (a Trial or Earned debit and its usage entry), or by an inline x402
//! payment settled just before.

use anchor_domain::MilliDac;
use anchor_domain::ise::IseMode;
use anchor_domain::payments::{CostComponent, PaymentSource, Subject, SubjectDomain};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> IseStore for SqlStore<E> {
    async fn enter_ise(&self, session_id: Uuid, agent_id: Uuid, mode: IseMode, now: DateTime<Utc>) -> Result<bool> {
        let inserted = self
            .db()
            .execute(
                sql("insert into ise_session (session_id, agent_id, payment_mode, entered_at) values ($1, $2, $3, $4) on conflict do nothing")
                    .bind(session_id)
                    .bind(agent_id)
                    .bind(mode.as_str())
                    .bind(now),
            )
            .await?;
        Ok(inserted == 1)
    }

    async fn open_ise(&self, agent_id: Uuid) -> Result<Option<IseRecord>> {
        let row =
            self.db().fetch_optional(sql("select * from ise_session where agent_id = $1 and exited_at is null").bind(agent_id)).await?;
        row.as_ref().map(record_of).transpose()
    }

    async fn close_ise_unpaid(&self, stay: &IseUnpaid) -> Result<IseClosed> {
        let close = IseClose {
            session_id: stay.session_id,
            agent_id: stay.agent_id,
            exited_at: stay.exited_at,
            charged: MilliDac::ZERO,
            funding: IseFunding::Nothing { unpaid: stay.unpaid },
            closed_by: stay.closed_by,
            now: stay.now,
            priced_by: stay.priced_by.clone(),
        };
        self.close_ise(&close).await
    }

    async fn close_ise(&self, close: &IseClose) -> Result<IseClosed> {
        let mut tx = self.begin_write().await?;
        let subject = Subject { domain: SubjectDomain::IseSession, id: close.session_id };
        let external = matches!(close.funding, IseFunding::External { .. });
        if !external {
            // The agent's lock orders this close with a reservation for the
            // stay (payments::reserve): one of the two sees the other.
            earned::lock_agent(&mut tx, self.db.for_update(), close.agent_id).await?;
        }
        let source = match close.funding {
            IseFunding::Nothing { .. } => None,
            IseFunding::Trial => {
                if agents::debit_trial(&mut tx, close.agent_id, close.charged, close.now).await?.is_none() {
                    let (balance, expired) = agents::trial_shortfall(&mut tx, close.agent_id, close.now).await?;
                    return Ok(IseClosed::TrialShort { balance, expired });
                }
                Some(PaymentSource::Trial)
            }
            IseFunding::Earned { threshold } => {
                let spend = earned::debit(
                    &mut tx,
                    self.db.for_update(),
                    close.agent_id,
                    close.charged,
                    threshold,
                    "ISE stay",
                    Some(subject),
                    close.now,
                )
                .await?;
                if let Some(balance) = spend.shortfall() {
                    return Ok(IseClosed::EarnedShort { balance });
                }
                Some(PaymentSource::Earned)
            }
            IseFunding::External { .. } => Some(PaymentSource::External),
        };
        let payment_id = match close.funding {
            IseFunding::External { payment_id } => Some(payment_id),
            _ => None,
        };
        let unpaid = matches!(close.funding, IseFunding::Nothing { unpaid: true });
        // Paid otherwise, it leaves a stay alone while a payment for it is live.
        let live_guard = if external {
            String::new()
        } else {
            format!(" and {}", payments::no_live_payment("ise_session", "ise_session.session_id", "$8"))
        };
        let mut update = sql(format!(
            "update ise_session set exited_at = $1, charged_milli = $2, payment_source = $3, payment_id = $4, closed_by = $5, unpaid = $6 \
             where session_id = $7 and exited_at is null{live_guard} returning *"
        ))
        .bind(close.exited_at)
        .bind(close.charged.milli())
        .bind(source.map(|s| s.as_str()))
        .bind(payment_id)
        .bind(close.closed_by)
        .bind(unpaid)
        .bind(close.session_id);
        if !external {
            update = update.bind(payments::stale_before(close.now));
        }
        let row = tx.fetch_optional(update).await?;
        let Some(row) = row else { return Ok(IseClosed::NotOpen) };
        // Trial and Earned are usage now; an external payment recorded its own with its settlement.
        if let Some(source @ (PaymentSource::Trial | PaymentSource::Earned)) = source {
            let entry = UsageEntry {
                cost_component: CostComponent::IseSession,
                source,
                amount: close.charged,
                priced_by: Some(close.priced_by.clone()),
            };
            payments::insert_usage(&mut tx, close.agent_id, subject, None, &entry, close.now).await?;
        }
        let record = record_of(&row)?;
        tx.commit().await?;
        Ok(IseClosed::Closed(record))
    }

    async fn due_ise(&self, before_free: DateTime<Utc>, before_paid: DateTime<Utc>, limit: i64) -> Result<Vec<IseRecord>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select * from ise_session where exited_at is null and \
                       ((payment_mode = 'free' and entered_at <= $1) or (payment_mode <> 'free' and entered_at <= $2)) \
                     order by entered_at limit $3")
                .bind(before_free)
                .bind(before_paid)
                .bind(limit),
            )
            .await?;
        rows.iter().map(record_of).collect()
    }
}

fn record_of(row: &impl Row) -> Result<IseRecord> {
    Ok(IseRecord {
        session_id: row.get("session_id")?,
        agent_id: row.get("agent_id")?,
        mode: row.named("payment_mode")?,
        entered_at: row.get("entered_at")?,
        exited_at: row.get("exited_at")?,
        charged: MilliDac(row.get("charged_milli")?),
        source: row.opt_named("payment_source")?,
        payment_id: row.get("payment_id")?,
        closed_by: row.get("closed_by")?,
        unpaid: row.get("unpaid")?,
    })
}
