//! External payments (x402): their rows and history, closing and reconciling them, and the DAB.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

/// Who paid a component of a declaration's price.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaymentSource {
    Trial,
    External,
    Earned,
}

impl PaymentSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentSource::Trial => "trial",
            PaymentSource::External => "external",
            PaymentSource::Earned => "earned",
        }
    }

    pub fn parse(text: &str) -> Option<PaymentSource> {
        match text {
            "trial" => Some(PaymentSource::Trial),
            "external" => Some(PaymentSource::External),
            "earned" => Some(PaymentSource::Earned),
            _ => None,
        }
    }
}

/// A verified x402 authorization to reserve with a declaration.
#[derive(Clone, Debug)]
pub struct NewPayment {
    pub payment_id: Uuid,
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub nonce: String,
    pub amount_units: i64,
    pub pay_to: String,
    pub valid_after: i64,
    pub valid_before: i64,
    pub route: String,
    pub payload: String,
    /// The declaration must be confirmed before this.
    pub deadline: DateTime<Utc>,
    /// The DAB in force when the agent has none of its own, and the start of
    /// the current budget period.
    pub dab_default: MilliDac,
    pub period_start: DateTime<Utc>,
}

/// An agent's budget and what it spent externally in the current period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DabStatus {
    /// The agent's own cap, if an owner set one.
    pub own_limit: Option<MilliDac>,
    /// External spending (reserved or settled payments) since the period start.
    pub spent: MilliDac,
}

/// A payment row and its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentRecord {
    pub payment_id: Uuid,
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub amount_units: i64,
    pub pay_to: String,
    pub status: String,
    pub error_reason: Option<String>,
    pub settlement_ref: Option<String>,
    /// The PaymentPayload as received (its `accepted` is the requirement).
    pub payload: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// (status, reason, at), oldest first.
    pub history: Vec<(String, Option<String>, DateTime<Utc>)>,
}

/// An agent's external spending since a time: reserved and settled payments count.
pub(crate) const DAB_SPENT: &str = "select cast(coalesce(sum(amount_units), 0) as bigint) from x402_payment \
     where agent_id = $1 and status in ('reserved', 'settled') and created_at >= $2";

#[async_trait]
pub trait PaymentStore: Send + Sync {
    /// Ends an unconfirmed, externally paid declaration's payment without
    /// settling it: the declaration becomes `declaration_status` (`released`,
    /// `failed`) and can never be confirmed; the payment becomes
    /// `payment_status`. False if the declaration was not pending.
    async fn close_payment(
        &self,
        dd_id: Uuid,
        declaration_status: &str,
        payment_status: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Declarations whose payment's settlement outcome is unknown, oldest first.
    async fn unknown_settlements(&self, limit: i64) -> Result<Vec<Uuid>>;
    /// Marks a payment whose settlement outcome is unknown.
    async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool>;
    /// The payment row of a declaration, with its history.
    async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>>;
    /// The agent's DAB and its external spending since `period_start`.
    async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus>;
}

#[async_trait]
impl<E: Engine> PaymentStore for SqlStore<E> {
    async fn close_payment(
        &self,
        dd_id: Uuid,
        declaration_status: &str,
        payment_status: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let released = tx.execute(sql(
            "update declaration set settlement_status = $1 where dd_id = $2 and settlement_status = 'pending' and confirmed_at is null",
        )
        .bind(declaration_status)
        .bind(dd_id)
        )
        .await?;
        if released == 0 {
            return Ok(false);
        }
        let payment: Option<Uuid> = tx
            .scalar_optional(
                sql("update x402_payment set status = $1, error_reason = $2, updated_at = $3 \
             where dd_id = $4 and status in ('reserved', 'settle_unknown') returning payment_id")
                .bind(payment_status)
                .bind(reason)
                .bind(now)
                .bind(dd_id),
            )
            .await?;
        if let Some(payment) = payment {
            tx.execute(
                sql("insert into x402_payment_event (payment_id, status, reason, at) values ($1, $2, $3, $4)")
                    .bind(payment)
                    .bind(payment_status)
                    .bind(reason)
                    .bind(now),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn unknown_settlements(&self, limit: i64) -> Result<Vec<Uuid>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select dd_id from x402_payment where status = 'settle_unknown' and dd_id is not null order by updated_at limit $1")
                    .bind(limit),
            )
            .await?;
        rows.iter().map(|r| Ok(r.get("dd_id")?)).collect()
    }

    async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let payment: Option<Uuid> = tx
            .scalar_optional(
                sql("update x402_payment set status = 'settle_unknown', error_reason = $1, updated_at = $2 \
             where dd_id = $3 and status in ('reserved', 'settle_unknown') returning payment_id")
                .bind(detail)
                .bind(now)
                .bind(dd_id),
            )
            .await?;
        let Some(payment) = payment else { return Ok(false) };
        tx.execute(
            sql("insert into x402_payment_event (payment_id, status, reason, at) values ($1, 'settle_unknown', $2, $3)")
                .bind(payment)
                .bind(detail)
                .bind(now),
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select payment_id, network, asset, payer, amount_units, pay_to, status, error_reason, settlement_ref, \
             payload, created_at, updated_at from x402_payment where dd_id = $1")
                .bind(dd_id),
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let payment_id: Uuid = row.get("payment_id")?;
        let events = self
            .db()
            .fetch_all(
                sql("select status, reason, at from x402_payment_event where payment_id = $1 \
             order by at, case status when 'reserved' then 0 when 'settle_unknown' then 1 else 2 end")
                .bind(payment_id),
            )
            .await?;
        Ok(Some(PaymentRecord {
            payment_id,
            network: row.get("network")?,
            asset: row.get("asset")?,
            payer: row.get("payer")?,
            amount_units: row.get("amount_units")?,
            pay_to: row.get("pay_to")?,
            status: row.get("status")?,
            error_reason: row.get("error_reason")?,
            settlement_ref: row.get("settlement_ref")?,
            payload: row.get("payload")?,
            created_at: row.get("created_at")?,
            updated_at: row.get("updated_at")?,
            history: events.iter().map(|e| Ok((e.get("status")?, e.get("reason")?, e.get("at")?))).collect::<Result<_>>()?,
        }))
    }

    async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus> {
        let own: Option<i64> = self.db().scalar(sql("select dab_limit_milli from agent where agent_id = $1").bind(agent_id)).await?;
        let spent: i64 = self.db().scalar(sql(DAB_SPENT).bind(agent_id).bind(period_start)).await?;
        Ok(DabStatus { own_limit: own.map(MilliDac), spent: MilliDac(spent) })
    }
}
