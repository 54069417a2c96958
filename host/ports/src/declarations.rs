//! Declarations: create (with its Trial debit or payment reservation), confirm, read, list, direct reads of the original, usage.

use anchor_domain::MilliDac;
use anchor_domain::declarations::Declaration;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{ListFilter, StoredDeclaration};

/// A declaration to record, priced, paid from Trial or by a reserved payment.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct NewDeclaration {
    pub declaration: Declaration,
    pub request_id: Uuid,
    pub subtotal: MilliDac,
    pub base_fee: MilliDac,
    pub multiplier_permille: u32,
    pub monthly: MilliDac,
    pub direct_access_expires_at: DateTime<Utc>,
    /// `Some`: paid externally; `None`: paid from Trial.
    pub external: Option<NewPayment>,
    /// With `external`: the base fee is still debited from Trial and the
    /// payment covers the premium alone (`premium_payment_source: external`).
    pub base_from_trial: bool,
    /// The premium paid from Earned DAC (`premium_payment_source: earned`),
    /// debited with the record; Trial or the payment covers the rest.
    pub earned_premium: Option<EarnedPart>,
    /// A bilateral proposal: the agreement written with the record.
    pub agreement: Option<NewAgreement>,
    /// The hash of the token the agent was found by, when it was found in
    /// this host's memory rather than read: the write takes the record only
    /// if that is still the agent's token, and answers
    /// [`Created::Unchecked`] for anything else it would have answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_check: Option<[u8; 32]>,
}

/// The agreement a bilateral proposal writes with its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewAgreement {
    pub agreement_id: Uuid,
    pub counterparty_agent_id: Uuid,
    pub expires_at: DateTime<Utc>,
}

#[derive(Clone, Debug)]
pub enum Created {
    /// Recorded now: the Trial balance after the debit, and the record as
    /// stored (returned by the insert itself: no read-back).
    New { trial_remaining: MilliDac, record: Box<StoredDeclaration> },
    /// The agent already used this request_id: the earlier record.
    Replayed(Box<StoredDeclaration>),
    /// Trial cannot pay: too little left, or expired.
    TrialCannotPay { balance: MilliDac, expired: bool },
    /// `parent_dd_id` names no declaration (or one de-identified).
    ParentNotFound,
    /// `parent_dd_id` names another agent's declaration.
    ParentForeign,
    /// The payment authorization was already used (its nonce is reserved).
    PaymentReplayed,
    /// The payment would take the agent past its DAB for the period.
    DabReached { limit: MilliDac, spent: MilliDac },
    /// Earned DAC cannot pay the premium (below the threshold, or short).
    EarnedShort { balance: MilliDac },
    /// With a `token_check`: not recorded, for whatever reason (the token
    /// no longer the agent's, Trial short, the request_id used before):
    /// nothing was written, and the create is to run again with the agent
    /// read afresh.
    Unchecked,
}

/// What confirming a record writes beside its update: its integrity hash,
/// its usage entries and its log leaf, at `now`; for one paid over x402,
/// its settlement's reference.
#[derive(Clone, Copy)]
pub struct Anchoring<'a> {
    pub integrity_hash: &'a str,
    pub now: DateTime<Utc>,
    pub usage: &'a [UsageEntry],
    pub leaf_data: &'a [u8],
    pub settlement_ref: Option<&'a str>,
}

/// The outcome of a read of a declaration's original through direct access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectRead {
    /// Counted; this many reads are left.
    Granted { remaining: i64 },
    /// Every read of the quota is spent.
    Exhausted,
    /// The access period is over.
    Expired,
}

#[async_trait]
pub trait DeclarationStore: Send + Sync {
    /// Records a declaration and debits Trial by its total, atomically; or
    /// returns the earlier record for a reused request_id.
    async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created>;
    async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>>;
    /// The declaration, and for one paid externally what settling its
    /// payment needs ([`PaymentStore::payment_for`]'s payment): what a
    /// confirmation reads, in one statement where reads are gathered.
    async fn declaration_to_confirm(&self, dd_id: Uuid) -> Result<Option<(StoredDeclaration, Option<Settling>)>>;
    /// The same, with the agent that holds `token_hash`, when that agent
    /// recorded it (`None` otherwise: no such token, or another agent's
    /// declaration, or none): a confirmation's authentication and its record
    /// in one read. The caller compares the hash it gets back.
    async fn declaration_to_confirm_as(
        &self,
        token_hash: &[u8; 32],
        dd_id: Uuid,
    ) -> Result<Option<(AgentRecord, StoredDeclaration, Option<Settling>)>>;
    /// The record `dd_id` as a create of this host stored it within the
    /// last second through a write that checked `token_hash` (with its
    /// payment as reserved, for one paid over x402), beside the agent this
    /// host found by that token in that time (decision 0088); `None`
    /// otherwise, and for a record with a payment unless `paid`. Taken
    /// once: a second call reads.
    fn recent_declaration_to_confirm_as(
        &self,
        token_hash: &[u8; 32],
        dd_id: Uuid,
        paid: bool,
    ) -> Option<(AgentRecord, StoredDeclaration, Option<Settling>)> {
        let _ = (token_hash, dd_id, paid);
        None
    }
    /// The agent's declaration recorded under `request_id`, if any.
    async fn declaration_by_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>>;
    /// The same, beside the agent's DAB and its external spending since
    /// `period_start` (what a create that must be paid externally reads
    /// before its challenge), in one statement.
    async fn declaration_by_request_and_dab(
        &self,
        agent_id: Uuid,
        request_id: Uuid,
        period_start: DateTime<Utc>,
    ) -> Result<(Option<StoredDeclaration>, DabStatus)>;
    /// Settles a declaration once and queues its log leaf, in one transaction:
    /// false if it was already confirmed or released. `settlement_ref`, for an
    /// externally paid declaration, marks its payment settled in the same
    /// transaction.
    async fn confirm_declaration(
        &self,
        dd_id: Uuid,
        integrity_hash: &str,
        now: DateTime<Utc>,
        usage: &[UsageEntry],
        leaf_data: &[u8],
        settlement_ref: Option<&str>,
    ) -> Result<bool>;
    /// [`confirm_declaration`](Self::confirm_declaration) of a record whose
    /// agent must still hold `token_hash`: `false` when it was not done, for
    /// any reason (the token replaced, the record confirmed already, its
    /// payment no longer reserved, not taken by the committer), nothing
    /// written; the confirmation is then to run again from a fresh read.
    async fn confirm_declaration_as(&self, token_hash: &[u8; 32], dd_id: Uuid, anchoring: Anchoring<'_>) -> Result<bool>;
    /// Counts one read of the original against the EE's quota and period.
    async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead>;
    /// The agent's declarations, newest first, and how many match in all.
    async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)>;
    /// The agent's declarations in one lineage group, oldest first.
    async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>>;
}
