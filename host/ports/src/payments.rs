//! External payments (x402): their rows and history, closing and reconciling them, and the DAB.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{DabStatus, PaymentRecord, PricedBy, Settling, UsageEntry};

pub use anchor_domain::payments::{CostComponent, PaymentSource, PaymentStatus, SettlementStatus, Subject, SubjectDomain};

/// A verified x402 authorization to reserve.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
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
    /// Settled at confirmation: the record must be confirmed before this.
    pub deadline: DateTime<Utc>,
    /// The DAB in force when the agent has none of its own, and the start of
    /// the current budget period.
    pub dab_default: MilliDac,
    pub period_start: DateTime<Utc>,
    /// The generation that set `amount_units`: the usage its settlement records names it.
    pub priced_by: PricedBy,
    /// On a route that only reads (an observation), a digest of what was
    /// asked: the same payment sent again by its agent with the same
    /// request is answered again, charged once. `None` elsewhere.
    pub request: Option<[u8; 32]>,
}

/// What reserving an authorization concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    Reserved,
    /// The authorization's nonce is already reserved: nothing was written.
    NonceUsed,
    /// The payment would take the agent past its DAB for the period: nothing was written.
    DabReached {
        limit: MilliDac,
        spent: MilliDac,
    },
    /// Earned DAC could not pay its part (below the threshold, or short): nothing was written.
    EarnedShort {
        balance: MilliDac,
    },
    /// The record to write with the reservation exists already (a purchase
    /// of the same tool, or with the same request id): nothing was written.
    Duplicate,
    /// The stay or sDAC session to pay for was closed meanwhile (paid from
    /// Trial or Earned, or by the service): nothing was written.
    SubjectClosed,
}

/// The part of an inline payment's price that Earned DAC pays, debited in
/// the reservation's transaction, recorded as usage with the settlement and
/// refunded into the same lots when the payment ends unsettled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EarnedPart {
    pub amount: MilliDac,
    /// The unexpired balance below which Earned cannot pay.
    pub threshold: MilliDac,
}

/// Where an externally paid declaration stands in the order of payment
/// deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DueKey {
    pub deadline: DateTime<Utc>,
    pub dd_id: Uuid,
}

/// Where an inline payment stands in the order of its authorization's
/// `validBefore` (Unix seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ValidityKey {
    pub valid_before: i64,
    pub payment_id: Uuid,
}

/// An inline payment, by its authorization's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineDue {
    pub key: ValidityKey,
    pub status: PaymentStatus,
}

/// An externally paid declaration, by its payment deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaymentDue {
    pub key: DueKey,
    /// Neither confirmed nor closed.
    pub pending: bool,
}

/// A payment whose settlement outcome is not known yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownSettlement {
    pub payment_id: Uuid,
    pub subject: Subject,
}

#[async_trait]
pub trait PaymentStore: Send + Sync {
    /// The status of each declaration's x402 payment row, for those of
    /// `dd_ids` that have one (the latest, when a released one was followed
    /// by another).
    async fn declaration_payment_statuses(&self, dd_ids: &[Uuid]) -> Result<Vec<(Uuid, PaymentStatus)>>;
    /// Reserves a verified authorization for `subject`, in one transaction:
    /// the DAB is checked under the agent's lock and the nonce's unique
    /// constraint refuses a replay, on every host. `pending` is written with
    /// it (a purchase, completed when the payment settles).
    async fn reserve_payment(
        &self,
        payment: &NewPayment,
        agent_id: Uuid,
        subject: Subject,
        earned: Option<EarnedPart>,
        pending: Option<&Pending>,
        now: DateTime<Utc>,
    ) -> Result<Reservation>;
    /// Marks a reserved (or unknown) inline payment settled and records its
    /// usage (one external entry for the whole amount, under its subject's
    /// cost component), in one transaction. False if it was not reserved or
    /// unknown any more. A declaration's payment settles with its confirmation
    /// instead (`confirm_declaration`).
    async fn settle_payment(&self, payment_id: Uuid, reference: &str, now: DateTime<Utc>) -> Result<bool>;
    /// Ends a reserved (or unknown) payment without settling it (`released`,
    /// `settle_failed`), or marks its outcome unknown (`settle_unknown`).
    /// False if it was not reserved or unknown any more.
    async fn end_payment(&self, payment_id: Uuid, status: PaymentStatus, reason: &str, now: DateTime<Utc>) -> Result<bool>;
    /// One payment row, with its history.
    async fn payment(&self, payment_id: Uuid) -> Result<Option<PaymentRecord>>;
    /// The payment that reserved an authorization (its network, asset, payer
    /// and nonce, which one payment holds at most), with its history.
    async fn payment_with_nonce(&self, network: &str, asset: &str, payer: &str, nonce: &str) -> Result<Option<PaymentRecord>>;
    /// Ends an unconfirmed, externally paid declaration's payment without
    /// settling it: the declaration becomes `declaration_status` (`released`,
    /// `failed`) and can never be confirmed; the payment becomes
    /// `payment_status`. False if the declaration was not pending.
    async fn close_payment(
        &self,
        dd_id: Uuid,
        declaration_status: SettlementStatus,
        payment_status: PaymentStatus,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// A page of the externally paid declarations whose payment deadline is
    /// before `before`, after `after` in the order of (deadline, dd_id):
    /// what the release of lapsed reservations walks.
    async fn payment_deadlines(&self, after: DueKey, before: DateTime<Utc>, limit: i64) -> Result<Vec<PaymentDue>>;
    /// Releases the reservation of an externally paid declaration nobody
    /// confirmed, as [`PaymentStore::close_payment`] does, but only while its
    /// deadline is before `deadline_before`, every one of its payments is
    /// reserved or ended, none was authorized until `authorized_before` (Unix
    /// seconds) or later, and its reservation is still reserved as the
    /// payment is moved: a confirmation settling it meanwhile keeps it.
    /// False when it did nothing.
    async fn release_lapsed_payment(
        &self,
        dd_id: Uuid,
        deadline_before: DateTime<Utc>,
        authorized_before: i64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// A page of the inline payments (every subject but a declaration's)
    /// whose authorization ended before `before` (Unix seconds), after
    /// `after` in the order of (valid_before, payment_id), with their status.
    async fn inline_payments_by_validity(&self, after: ValidityKey, before: i64, limit: i64) -> Result<Vec<InlineDue>>;
    /// Payments whose settlement outcome is unknown, oldest first.
    async fn unknown_settlements(&self, limit: i64) -> Result<Vec<UnknownSettlement>>;
    /// Closes the ISE stays and sDAC sessions still open whose inline payment
    /// settled before `settled_before` (reconciled by the job after an
    /// unknown outcome, or settled by a host that stopped before it closed
    /// the subject), as paid by that payment; returns how many. A stay ends
    /// when its payment was reserved, a session at `now`.
    async fn close_settled_subjects(&self, settled_before: DateTime<Utc>, now: DateTime<Utc>, limit: i64) -> Result<u64>;
    /// Marks a declaration's payment whose settlement outcome is unknown.
    async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool>;
    /// Marks a payment that settled but whose record could not be written:
    /// `settle_unknown` with the settlement's reference kept, which the
    /// reconciliation records without settling again.
    async fn mark_settled_unrecorded(&self, payment_id: Uuid, reference: &str, now: DateTime<Utc>) -> Result<bool>;
    /// The payment row of a declaration, with its history.
    async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>>;
    /// The usage entries recorded for a subject, by cost component.
    async fn usage_for(&self, subject: Subject) -> Result<Vec<UsageEntry>>;
    /// The agent's DAB and its external spending since `period_start`.
    async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus>;
}
