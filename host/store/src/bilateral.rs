//! Bilateral agreements: written with the proposer's record (in
//! `create_declaration`), answered once by the counterparty (accepting writes
//! its own record in the same transaction), expired by the job.

use anchor_domain::MilliDac;
use anchor_domain::bilateral::{Agreement, AgreementStatus};
use anchor_domain::declarations::Declaration;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::rows::DeclarationRow;
use crate::*;

pub(crate) async fn insert<X: Exec>(tx: &mut X, agreement: &NewAgreement, proposal: &Declaration, now: DateTime<Utc>) -> Result<()> {
    tx.execute(
        sql("insert into bilateral_agreement (agreement_id, proposer_agent_id, counterparty_agent_id, proposer_dd_id, status, \
               proposed_at, expires_at) values ($1, $2, $3, $4, 'proposed', $5, $6)")
        .bind(agreement.agreement_id)
        .bind(proposal.agent_id)
        .bind(agreement.counterparty_agent_id)
        .bind(proposal.dd_id)
        .bind(now)
        .bind(agreement.expires_at),
    )
    .await?;
    Ok(())
}

#[async_trait]
impl<E: Engine> BilateralStore for SqlStore<E> {
    async fn agreement(&self, agreement_id: Uuid) -> Result<Option<Agreement>> {
        let row = self.db().fetch_optional(sql("select * from bilateral_agreement where agreement_id = $1").bind(agreement_id)).await?;
        row.as_ref().map(agreement_of).transpose()
    }

    async fn respond_agreement(
        &self,
        agreement_id: Uuid,
        responder: Uuid,
        mirror: Option<&NewDeclaration>,
        now: DateTime<Utc>,
    ) -> Result<Responded> {
        let mut tx = self.begin_write().await?;
        let for_update = self.db.for_update();
        let row = tx
            .fetch_optional(sql(format!("select * from bilateral_agreement where agreement_id = $1{for_update}")).bind(agreement_id))
            .await?;
        let Some(current) = row.as_ref().map(agreement_of).transpose()? else { return Ok(Responded::NotFound) };
        if current.counterparty_agent_id != responder {
            return Ok(Responded::NotCounterparty);
        }
        if current.status_at(now) != AgreementStatus::Proposed {
            let mut seen = current.clone();
            seen.status = current.status_at(now);
            return Ok(Responded::NotPending(seen));
        }
        let (status, counterparty_dd) = match mirror {
            Some(new) => {
                let row = DeclarationRow {
                    new,
                    lineage_group_id: new.declaration.dd_id,
                    trial_remaining: None,
                    base_source: PaymentSource::Trial,
                    premium_source: PaymentSource::Trial,
                    settlement: SettlementStatus::Unreserved,
                    agreement_id: Some(agreement_id),
                };
                tx.execute(row.query()).await?;
                (AgreementStatus::Accepted, Some(new.declaration.dd_id))
            }
            None => (AgreementStatus::Rejected, None),
        };
        let row = tx
            .fetch_optional(
                sql("update bilateral_agreement set status = $1, counterparty_dd_id = $2, responded_at = $3 \
                     where agreement_id = $4 and status = 'proposed' returning *")
                .bind(status.as_str())
                .bind(counterparty_dd)
                .bind(now)
                .bind(agreement_id),
            )
            .await?;
        let Some(done) = row.as_ref().map(agreement_of).transpose()? else { return Ok(Responded::NotPending(current)) };
        tx.commit().await?;
        Ok(Responded::Done(done))
    }

    async fn expire_agreements(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<Agreement>> {
        let due: Vec<Uuid> = self
            .db()
            .scalar_all(
                sql("select agreement_id from bilateral_agreement where status = 'proposed' and expires_at <= $1 order by expires_at limit $2")
                    .bind(now)
                    .bind(limit),
            )
            .await?;
        let mut expired = Vec::new();
        for agreement_id in due {
            let row = self
                .db()
                .fetch_optional(
                    sql("update bilateral_agreement set status = 'expired' where agreement_id = $1 and status = 'proposed' returning *")
                        .bind(agreement_id),
                )
                .await?;
            if let Some(row) = row {
                expired.push(agreement_of(&row)?);
            }
        }
        Ok(expired)
    }

    async fn agreements(
        &self,
        agent_id: Uuid,
        sent: bool,
        pending_only: bool,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<AgreementListing>> {
        let side = if sent { "a.proposer_agent_id" } else { "a.counterparty_agent_id" };
        let pending = if pending_only { " and a.status = 'proposed' and a.expires_at > $2" } else { " and $2 = $2" };
        let rows = self
            .db()
            .fetch_all(
                sql(format!(
                    "select a.*, d.decision_type, d.decision_action_type, d.ee_retention_period, d.dac_amount_milli \
                     from bilateral_agreement a join declaration d on d.dd_id = a.proposer_dd_id \
                     where {side} = $1{pending} order by a.proposed_at desc, a.agreement_id limit $3"
                ))
                .bind(agent_id)
                .bind(now)
                .bind(limit),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(AgreementListing {
                    agreement: agreement_of(row)?,
                    decision_type: row.get("decision_type")?,
                    decision_action_type: row.get("decision_action_type")?,
                    ee_retention_period: row.get("ee_retention_period")?,
                    dac_amount: MilliDac(row.get("dac_amount_milli")?),
                })
            })
            .collect()
    }
}

fn agreement_of(row: &impl Row) -> Result<Agreement> {
    Ok(Agreement {
        agreement_id: row.get("agreement_id")?,
        proposer_agent_id: row.get("proposer_agent_id")?,
        counterparty_agent_id: row.get("counterparty_agent_id")?,
        proposer_dd_id: row.get("proposer_dd_id")?,
        counterparty_dd_id: row.get("counterparty_dd_id")?,
        status: row.named("status")?,
        proposed_at: row.get("proposed_at")?,
        expires_at: row.get("expires_at")?,
        responded_at: row.get("responded_at")?,
    })
}
