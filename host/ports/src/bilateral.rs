//! Bilateral agreements: written with the proposer's record (in
//! `create_declaration`), answered once by the counterparty (accepting writes
//! its own record in the same transaction), expired by the job.

use anchor_domain::bilateral::Agreement;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::AgreementListing;

/// What answering a proposal concluded; nothing was written unless `Done`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Responded {
    Done(Agreement),
    NotFound,
    /// The responder is not the counterparty.
    NotCounterparty,
    /// Answered already, or its window ended (the agreement as it stands).
    NotPending(Agreement),
}

#[async_trait]
pub trait BilateralStore {
    async fn agreement(&self, agreement_id: Uuid) -> Result<Option<Agreement>>;
    /// Accepts (writing `mirror`, the counterparty's record) or rejects.
    async fn respond_agreement(
        &self,
        agreement_id: Uuid,
        responder: Uuid,
        mirror: Option<&NewDeclaration>,
        now: DateTime<Utc>,
    ) -> Result<Responded>;
    /// Proposals past their window become expired; returns them.
    async fn expire_agreements(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<Agreement>>;
    /// Agreements the agent received (`sent` false) or sent, newest first.
    async fn agreements(
        &self,
        agent_id: Uuid,
        sent: bool,
        pending_only: bool,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<AgreementListing>>;
}
