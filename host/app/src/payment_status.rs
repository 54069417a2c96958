//! What an agent (or its owner) may read about payments: the DAB of the
//! current period, and the payment state of a declaration.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::records::{AgentRecord, PaymentRecord, StoredDeclaration};

use crate::{AppResult, Services, declarations};

/// An agent's DAB in the current calendar month (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dab {
    pub limit: MilliDac,
    /// The owner set the limit (otherwise it is the operator's default).
    pub owner_set: bool,
    pub period_start: DateTime<Utc>,
    pub resets_at: DateTime<Utc>,
    /// External spending (reserved or settled payments) this period.
    pub spent: MilliDac,
    pub remaining: MilliDac,
}

/// The agent's DAB now.
pub async fn dab(services: &Services, agent_id: Uuid) -> AppResult<Dab> {
    let (period_start, resets_at) = anchor_domain::dab::period(services.clock.now());
    let status = services.store.dab_status(agent_id, period_start).await?;
    let limit = status.own_limit.unwrap_or(services.config.dab_default);
    let remaining = if status.spent > limit { MilliDac::ZERO } else { limit - status.spent };
    Ok(Dab { limit, owner_set: status.own_limit.is_some(), period_start, resets_at, spent: status.spent, remaining })
}

/// A declaration of the agent, with its external payment row if it has one.
pub async fn status(services: &Services, agent: &AgentRecord, dd_id: Uuid) -> AppResult<(StoredDeclaration, Option<PaymentRecord>)> {
    let stored = declarations::owned(services, agent.agent_id, dd_id).await?;
    let payment = services.store.payment_for(dd_id).await?;
    Ok((stored, payment))
}
