//! sDAC sessions: one open per agent, trials counted with the session's
//! simulated total in one statement, and the end paid in the transaction
//! that closes the session (a Trial debit and its usage) or by an inline
//! x402 payment settled just before.

use anchor_domain::MilliDac;
use anchor_domain::declarations::ee::Scope;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{SdacRecord, SdacTrial};

/// How a session's end is paid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdacFunding {
    Nothing,
    Trial,
    /// An inline payment that has settled (its usage is recorded).
    External {
        payment_id: Uuid,
    },
}

/// What ending concluded; nothing was written unless `Ended`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SdacEnded {
    Ended(SdacRecord),
    NotOpen,
    /// A trial was counted after the session was priced: priced again, it
    /// costs more (only for an end that was not paid before it ran).
    Changed,
    TrialShort {
        balance: MilliDac,
        expired: bool,
    },
}

#[async_trait]
pub trait SdacStore {
    /// Opens a session; `false` when the agent has one open already.
    async fn start_sdac(&self, session_id: Uuid, agent_id: Uuid, now: DateTime<Utc>) -> Result<bool>;
    async fn sdac_session(&self, session_id: Uuid) -> Result<Option<SdacRecord>>;
    async fn sdac_trials(&self, session_id: Uuid) -> Result<Vec<SdacTrial>>;
    /// Counts a trial in the agent's open session `session_id`; the session
    /// after it, or `None` if it is not open (or a payment for its end is
    /// live, or it has `max_trials` already).
    async fn add_sdac_trial(
        &self,
        session_id: Uuid,
        agent_id: Uuid,
        scope: Scope,
        total: MilliDac,
        max_trials: i32,
        now: DateTime<Utc>,
    ) -> Result<Option<SdacRecord>>;
    /// Ends a session paid as `funding` says (the charge pipeline's commit),
    /// priced as `priced` (the session as read). Paid from Trial (or free), it
    /// ends only if no trial was counted since ([`SdacEnded::Changed`]
    /// otherwise, nothing written); paid externally, the payment has settled
    /// already and it ends as it stands.
    async fn end_sdac(
        &self,
        priced: &SdacRecord,
        charged: MilliDac,
        funding: SdacFunding,
        priced_by: &PricedBy,
        now: DateTime<Utc>,
    ) -> Result<SdacEnded>;
    /// Ends a session that costs nothing (no trial was run): no DAC moves;
    /// [`SdacEnded::Changed`] if a trial was counted meanwhile.
    async fn end_sdac_free(&self, priced: &SdacRecord, priced_by: &PricedBy, now: DateTime<Utc>) -> Result<SdacEnded>;
}
