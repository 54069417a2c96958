//! sDAC sessions: one open per agent, trials counted with the session's
//! simulated total in one statement, and the end paid in the transaction
//! that closes the session (a Trial debit and its usage) or by an inline
//! x402 payment settled just before.

use anchor_domain::MilliDac;
use anchor_domain::declarations::ee::Scope;
use anchor_domain::payments::{CostComponent, PaymentSource, Subject, SubjectDomain};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> SdacStore for SqlStore<E> {
    async fn start_sdac(&self, session_id: Uuid, agent_id: Uuid, now: DateTime<Utc>) -> Result<bool> {
        let inserted = self
            .db()
            .execute(
                sql("insert into sdac_session (session_id, agent_id, started_at) values ($1, $2, $3) on conflict do nothing")
                    .bind(session_id)
                    .bind(agent_id)
                    .bind(now),
            )
            .await?;
        Ok(inserted == 1)
    }

    async fn sdac_session(&self, session_id: Uuid) -> Result<Option<SdacRecord>> {
        let row = self.db().fetch_optional(sql("select * from sdac_session where session_id = $1").bind(session_id)).await?;
        row.as_ref().map(record_of).transpose()
    }

    async fn sdac_trials(&self, session_id: Uuid) -> Result<Vec<SdacTrial>> {
        let rows = self.db().fetch_all(sql("select * from sdac_trial where session_id = $1 order by position").bind(session_id)).await?;
        rows.iter()
            .map(|r| {
                let axis = |name: &str, column: &str| -> Result<(String, String)> { Ok((name.to_string(), r.get(column)?)) };
                Ok(SdacTrial {
                    position: r.get("position")?,
                    axes: [
                        axis("ee_retention_period", "retention")?,
                        axis("ee_integrity_verification_level", "integrity")?,
                        axis("ee_disclosure_format_policy", "disclosure")?,
                        axis("ee_responsibility_scope", "responsibility")?,
                        axis("content_disclosure_scope", "content_scope")?,
                        axis("delegation_state", "delegation")?,
                    ],
                    total: MilliDac(r.get("total_milli")?),
                    at: r.get("at")?,
                })
            })
            .collect()
    }

    async fn add_sdac_trial(
        &self,
        session_id: Uuid,
        agent_id: Uuid,
        scope: Scope,
        total: MilliDac,
        max_trials: i32,
        now: DateTime<Utc>,
    ) -> Result<Option<SdacRecord>> {
        let mut tx = self.begin_write().await?;
        let row = tx
            .fetch_optional(
                // Not while a payment for its end is live: the session is
                // being paid for as priced, and ends once it settles.
                sql(format!(
                    "update sdac_session set trials = trials + 1, simulated_milli = simulated_milli + $1 \
                     where session_id = $2 and agent_id = $3 and ended_at is null and trials < $5 and {} returning *",
                    payments::no_live_payment("sdac_session", "sdac_session.session_id", "$4")
                ))
                .bind(total.milli())
                .bind(session_id)
                .bind(agent_id)
                .bind(payments::stale_before(now))
                .bind(max_trials),
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let record = record_of(&row)?;
        tx.execute(Query::insert(
            "sdac_trial",
            vec![
                ("trial_id", Uuid::new_v4().value()),
                ("session_id", session_id.value()),
                ("position", record.trials.value()),
                ("retention", scope.retention.as_str().value()),
                ("integrity", scope.integrity.as_str().value()),
                ("disclosure", scope.disclosure.as_str().value()),
                ("responsibility", scope.responsibility.as_str().value()),
                ("content_scope", scope.content_scope.as_str().value()),
                ("delegation", scope.delegation.as_str().value()),
                ("total_milli", total.milli().value()),
                ("at", now.value()),
            ],
        ))
        .await?;
        tx.commit().await?;
        Ok(Some(record))
    }

    async fn end_sdac_free(&self, priced: &SdacRecord, priced_by: &PricedBy, now: DateTime<Utc>) -> Result<SdacEnded> {
        self.end_sdac(priced, MilliDac::ZERO, SdacFunding::Nothing, priced_by, now).await
    }

    async fn end_sdac(
        &self,
        priced: &SdacRecord,
        charged: MilliDac,
        funding: SdacFunding,
        priced_by: &PricedBy,
        now: DateTime<Utc>,
    ) -> Result<SdacEnded> {
        let (session_id, agent_id) = (priced.session_id, priced.agent_id);
        let mut tx = self.begin_write().await?;
        let external = matches!(funding, SdacFunding::External { .. });
        if !external {
            // The agent's lock orders this end with a reservation for the
            // session (payments::reserve): one of the two sees the other.
            earned::lock_agent(&mut tx, self.db.for_update(), agent_id).await?;
        }
        let source = match funding {
            SdacFunding::Nothing => None,
            SdacFunding::Trial => {
                if agents::debit_trial(&mut tx, agent_id, charged, now).await?.is_none() {
                    let (balance, expired) = agents::trial_shortfall(&mut tx, agent_id, now).await?;
                    return Ok(SdacEnded::TrialShort { balance, expired });
                }
                Some(PaymentSource::Trial)
            }
            SdacFunding::External { .. } => Some(PaymentSource::External),
        };
        let payment_id = match funding {
            SdacFunding::External { payment_id } => Some(payment_id),
            _ => None,
        };
        // Paid otherwise, it leaves a session alone while a payment for it is live.
        let live_guard = if external {
            String::new()
        } else {
            format!(" and {}", payments::no_live_payment("sdac_session", "sdac_session.session_id", "$7"))
        };
        let mut end = sql(format!(
            "update sdac_session set ended_at = $1, charged_milli = $2, payment_source = $3, payment_id = $4 \
             where session_id = $5 and agent_id = $6 and ended_at is null{live_guard} returning *"
        ))
        .bind(now)
        .bind(charged.milli())
        .bind(source.map(|s| s.as_str()))
        .bind(payment_id)
        .bind(session_id)
        .bind(agent_id);
        if !external {
            end = end.bind(payments::stale_before(now));
        }
        let row = tx.fetch_optional(end).await?;
        let Some(row) = row else { return Ok(SdacEnded::NotOpen) };
        let record = record_of(&row)?;
        if record.trials != priced.trials && !external {
            // Rolled back with the transaction (the Trial debit too).
            return Ok(SdacEnded::Changed);
        }
        if source == Some(PaymentSource::Trial) {
            let subject = Subject { domain: SubjectDomain::SdacSession, id: session_id };
            let entry = UsageEntry {
                cost_component: CostComponent::SdacSession,
                source: PaymentSource::Trial,
                amount: charged,
                priced_by: Some(priced_by.clone()),
            };
            payments::insert_usage(&mut tx, agent_id, subject, None, &entry, now).await?;
        }
        tx.commit().await?;
        Ok(SdacEnded::Ended(record))
    }
}

fn record_of(row: &impl Row) -> Result<SdacRecord> {
    Ok(SdacRecord {
        session_id: row.get("session_id")?,
        agent_id: row.get("agent_id")?,
        started_at: row.get("started_at")?,
        ended_at: row.get("ended_at")?,
        trials: row.get("trials")?,
        simulated: MilliDac(row.get("simulated_milli")?),
        charged: MilliDac(row.get("charged_milli")?),
        source: row.opt_named("payment_source")?,
        payment_id: row.get("payment_id")?,
    })
}
