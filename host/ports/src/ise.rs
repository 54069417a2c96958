//! ISE stays: one open per agent (a partial unique index), closed once
//! (`where exited_at is null`), and paid in the transaction that closes them
//! (a Trial or Earned debit and its usage entry), or by an inline x402
//! payment settled just before.

use anchor_domain::MilliDac;
use anchor_domain::ise::IseMode;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::IseRecord;

/// How a stay's closing is paid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IseFunding {
    /// Nothing to pay, or nothing could (`unpaid`).
    Nothing {
        unpaid: bool,
    },
    Trial,
    /// Earned DAC, if the unexpired balance reaches the threshold.
    Earned {
        threshold: MilliDac,
    },
    /// An inline payment that has settled (its usage is recorded).
    External {
        payment_id: Uuid,
    },
}

/// A stay to close.
#[derive(Clone, Debug)]
pub struct IseClose {
    pub session_id: Uuid,
    pub agent_id: Uuid,
    pub exited_at: DateTime<Utc>,
    pub charged: MilliDac,
    pub funding: IseFunding,
    /// `agent` or `service`.
    pub closed_by: &'static str,
    pub now: DateTime<Utc>,
    /// The generation that set the fee.
    pub priced_by: PricedBy,
}

/// A stay closed without a charge.
#[derive(Clone, Debug)]
pub struct IseUnpaid {
    pub session_id: Uuid,
    pub agent_id: Uuid,
    pub exited_at: DateTime<Utc>,
    /// Its price was due and nothing could pay it (else it cost nothing).
    pub unpaid: bool,
    /// `agent` or `service`.
    pub closed_by: &'static str,
    pub now: DateTime<Utc>,
    pub priced_by: PricedBy,
}

/// What closing concluded; nothing was written unless `Closed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IseClosed {
    Closed(IseRecord),
    /// It was closed already.
    NotOpen,
    TrialShort {
        balance: MilliDac,
        expired: bool,
    },
    EarnedShort {
        balance: MilliDac,
    },
}

#[async_trait]
pub trait IseStore {
    /// Opens a stay; `false` when the agent has one open already.
    async fn enter_ise(&self, session_id: Uuid, agent_id: Uuid, mode: IseMode, now: DateTime<Utc>) -> Result<bool>;
    async fn open_ise(&self, agent_id: Uuid) -> Result<Option<IseRecord>>;
    /// Closes a stay paid as `close.funding` says (the charge pipeline's commit).
    async fn close_ise(&self, close: &IseClose) -> Result<IseClosed>;
    /// Closes a stay charging nothing: one whose price is zero, or one that
    /// nothing could pay (`unpaid`). It carries no funding: no DAC moves.
    async fn close_ise_unpaid(&self, stay: &IseUnpaid) -> Result<IseClosed>;
    /// Open stays that entered at or before `before_free` (free ones) or `before_paid` (the others), oldest first.
    async fn due_ise(&self, before_free: DateTime<Utc>, before_paid: DateTime<Utc>, limit: i64) -> Result<Vec<IseRecord>>;
}
