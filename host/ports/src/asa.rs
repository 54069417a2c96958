//! ASA: subscriptions, their purchases and snapshots. A purchase is applied
//! in one transaction holding the agent's row lock: from Earned DAC with its
//! debit, or, paid externally, written as pending with the payment's
//! reservation (which checks the subscription's state there, so a purchase
//! the state no longer allows is never settled) and completed with the
//! settlement.

use anchor_domain::MilliDac;
use anchor_domain::asa::{AsaPurchaseKind, AsaSnapshot, AsaSource, AsaSubscription};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

/// One purchase of periods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAsaPurchase {
    pub purchase_id: Uuid,
    pub agent_id: Uuid,
    pub kind: AsaPurchaseKind,
    pub periods: i64,
    pub period_days: i64,
    pub grace_days: i64,
    pub amount: MilliDac,
    pub source: AsaSource,
    pub priced_by: PricedBy,
}

/// Why the subscription's state refuses a purchase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsaRefusal {
    /// Subscribe while active or in grace.
    Live,
    /// Extend without an active or grace subscription.
    NoneLive,
    /// Another purchase of the agent is being paid.
    InFlight,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsaBought {
    Done(AsaSubscription),
    Refused(AsaRefusal),
    EarnedShort { balance: MilliDac },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsaCancelled {
    Cancelled(AsaSubscription),
    /// No active or grace subscription.
    NoneLive,
    /// An owner may not cancel a period the agent paid from Earned DAC.
    EarnedPaid,
    /// A purchase is being paid: cancelling now could be undone by its settlement.
    PurchasePending,
}

#[async_trait]
pub trait AsaStore {
    /// The agent's latest subscription, live or ended.
    async fn asa_subscription(&self, agent_id: Uuid) -> Result<Option<AsaSubscription>>;
    /// The subscription a purchase (completed) went to.
    async fn asa_purchase_subscription(&self, purchase_id: Uuid) -> Result<Option<AsaSubscription>>;
    async fn buy_asa_with_earned(&self, purchase: &NewAsaPurchase, threshold: MilliDac, now: DateTime<Utc>) -> Result<AsaBought>;
    async fn cancel_asa(&self, agent_id: Uuid, by_owner: bool, now: DateTime<Utc>) -> Result<AsaCancelled>;
    /// Stores the informational next payment source; `None` unless active.
    async fn set_asa_next_source(&self, agent_id: Uuid, source: Option<AsaSource>, now: DateTime<Utc>) -> Result<Option<AsaSubscription>>;
    /// Registers a snapshot under the active subscription; `None` if there is none.
    async fn register_asa_snapshot(&self, snapshot: &AsaSnapshot, now: DateTime<Utc>) -> Result<Option<AsaSnapshot>>;
    async fn latest_asa_snapshot(&self, agent_id: Uuid) -> Result<Option<AsaSnapshot>>;
    /// The latest of the agent's snapshots with this hash.
    async fn asa_snapshot_by_hash(&self, agent_id: Uuid, blob_hash: &str) -> Result<Option<AsaSnapshot>>;
}
