//! Indefinite-retention subscriptions: subscribe, cancel, the monthly
//! charge and the expiry that demotes an agent's indefinite records. Each is
//! one transaction holding the agent's row lock (as Earned debits do), so a
//! subscribe racing a cancel, the billing job or another subscribe sees the
//! other's result; the charge is an Earned debit with its usage entry.

use anchor_domain::MilliDac;
use anchor_domain::retention::Subscription;
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{Billed, RetentionTerms};

/// What subscribing concluded; nothing was written unless `Active`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subscribed {
    Active {
        subscription: Subscription,
        /// It was in its grace period.
        reactivated: bool,
        charged: MilliDac,
    },
    AlreadyActive(Subscription),
    EarnedShort {
        balance: MilliDac,
    },
}

/// What billing one subscription's month concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Billing {
    /// The month was charged from Earned DAC.
    Charged,
    /// Earned DAC could not pay it: the subscription entered its grace period.
    ToGrace,
    /// Nothing was due any more (another host, a cancel or a reactivation got there first).
    NotDue,
}

#[async_trait]
pub trait RetentionStore {
    async fn retention_subscription(&self, agent_id: Uuid) -> Result<Option<Subscription>>;
    async fn subscribe_retention(&self, agent_id: Uuid, terms: RetentionTerms, now: DateTime<Utc>) -> Result<Subscribed>;
    /// Active -> grace; `None` unless the subscription was active.
    async fn cancel_retention(&self, agent_id: Uuid, grace: Duration, now: DateTime<Utc>) -> Result<Option<Subscription>>;
    /// Up to `limit` active subscriptions whose month is due, oldest due first.
    async fn due_retention(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<Uuid>>;
    /// Charges one subscription's due month from Earned DAC (`terms.monthly`,
    /// from a balance of at least `terms.threshold`); one that cannot pay
    /// enters its grace period. One transaction under the agent's lock.
    async fn bill_retention(&self, agent_id: Uuid, terms: &RetentionTerms, now: DateTime<Utc>) -> Result<Billing>;
    /// Expires up to `limit` subscriptions whose grace has ended and demotes
    /// their agents' indefinite records; returns how many expired.
    async fn expire_due_retention(&self, now: DateTime<Utc>, limit: i64) -> Result<usize>;
    /// How many of the agent's records are kept indefinitely now.
    async fn indefinite_declarations(&self, agent_id: Uuid) -> Result<i64>;
    /// How many of the agent's records were demoted, and the last demotion.
    async fn demotions(&self, agent_id: Uuid) -> Result<(i64, Option<DateTime<Utc>>)>;
    /// When each of the agent's demoted records anchored in `[from, to)` was anchored.
    async fn demoted_anchorings(&self, agent_id: Uuid, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>>;
}
