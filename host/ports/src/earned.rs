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
use anchor_domain::payments::Subject;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{EarnedBalance, EarnedEntry};

/// What a debit did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spend {
    Debited(EarnedEntry),
    /// The unexpired balance is below the threshold that makes it spendable.
    BelowThreshold {
        balance: MilliDac,
    },
    /// The balance is spendable but smaller than the amount.
    Insufficient {
        balance: MilliDac,
    },
}

impl Spend {
    /// The balance, when Earned DAC could not pay (below the threshold, or short).
    pub fn shortfall(&self) -> Option<MilliDac> {
        match self {
            Spend::Debited(_) => None,
            Spend::BelowThreshold { balance } | Spend::Insufficient { balance } => Some(*balance),
        }
    }
}

#[async_trait]
pub trait EarnedStore {
    /// Credits a new lot of `amount`, expiring at `expires_at`.
    async fn credit_earned(
        &self,
        agent_id: Uuid,
        amount: MilliDac,
        reason: &str,
        reference: Option<Subject>,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<EarnedEntry>;
    /// Debits `amount` from the lots that expire first, if the unexpired
    /// balance is at least `threshold` and at least `amount`.
    async fn debit_earned(
        &self,
        agent_id: Uuid,
        amount: MilliDac,
        threshold: MilliDac,
        reason: &str,
        reference: Option<Subject>,
        now: DateTime<Utc>,
    ) -> Result<Spend>;
    /// Undoes a debit into the lots it drew on; `None` if `debit_id` is not a
    /// debit or was refunded already.
    async fn refund_earned(&self, debit_id: Uuid, reason: &str, now: DateTime<Utc>) -> Result<Option<EarnedEntry>>;
    /// Expires the lots due at `now` of up to `max_agents` agents; returns how many lots it ended.
    async fn expire_earned(&self, now: DateTime<Utc>, max_agents: i64) -> Result<u64>;
    async fn earned_balance(&self, agent_id: Uuid, now: DateTime<Utc>) -> Result<EarnedBalance>;
    /// The agent's ledger, newest first.
    async fn earned_ledger(&self, agent_id: Uuid, limit: i64, offset: i64) -> Result<Vec<EarnedEntry>>;
}
