//! What the service keeps, as the use cases hand it out: each record as it
//! is read back, in domain types. The store writes and reads them (the
//! storage ports' result types); the use cases return them; the server
//! renders them into its answers. Plain data: no IO, no storage detail.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::MilliDac;
use crate::agents::DisclosureLevel;
use crate::bilateral::Agreement;
use crate::declarations::Declaration;
use crate::earned::EntryKind;
use crate::ise::IseMode;
use crate::owners::{ContentPolicy, OwnerType, Residence};
use crate::payments::{CostComponent, PaymentSource, SettlementStatus, Subject, SubjectDomain};
use crate::tsl::{Layer, ObservationType, PurchaseStatus, ShareKind, ToolStatus, TransferAction, TransferStatus};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRecord {
    pub agent_id: Uuid,
    pub token_hash: [u8; 32],
    pub region_code: Option<String>,
    pub disclosure_level: DisclosureLevel,
    pub registered_at: DateTime<Utc>,
    pub trial_granted: MilliDac,
    pub trial_balance: MilliDac,
    pub trial_expires_at: DateTime<Utc>,
    /// The content-inclusion policy of the agent's owner, if it has one:
    /// read in the same statement as the agent, so DD create needs no
    /// lookup of its own.
    pub owner_policy: Option<ContentPolicy>,
}

/// One agreement in a list, with what the proposer declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgreementListing {
    pub agreement: Agreement,
    pub decision_type: String,
    pub decision_action_type: String,
    pub ee_retention_period: String,
    pub dac_amount: MilliDac,
}

/// A recorded declaration with its payment and confirmation state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDeclaration {
    pub declaration: Declaration,
    pub request_id: Uuid,
    pub subtotal: MilliDac,
    pub base_fee: MilliDac,
    pub multiplier_permille: u32,
    pub monthly: MilliDac,
    pub base_fee_source: PaymentSource,
    pub premium_source: PaymentSource,
    /// The Trial balance right after this declaration was paid from it.
    pub trial_remaining_after: Option<MilliDac>,
    pub settlement_status: SettlementStatus,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub integrity_hash: Option<String>,
    pub direct_reads_used: i64,
    pub direct_access_expires_at: DateTime<Utc>,
    /// Externally paid: confirm before this, or the reservation is released.
    pub payment_deadline: Option<DateTime<Utc>>,
    /// When the record stops being kept; `None` while indefinite retention holds.
    pub retention_expires_at: Option<DateTime<Utc>>,
    /// When an ended indefinite-retention subscription demoted it to short.
    pub retention_demoted_at: Option<DateTime<Utc>>,
    /// The bilateral agreement it belongs to (either side's record).
    pub agreement_id: Option<Uuid>,
}

impl StoredDeclaration {
    pub fn premium(&self) -> MilliDac {
        self.declaration.dac_amount - self.base_fee
    }

    /// Whether any part of its price is paid externally (over x402).
    pub fn paid_externally(&self) -> bool {
        self.base_fee_source == PaymentSource::External || self.premium_source == PaymentSource::External
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ListFilter {
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: i64,
    pub offset: i64,
}

/// One usage entry, as a transaction list shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageLine {
    pub usage_id: Uuid,
    pub agent_id: Uuid,
    pub domain: SubjectDomain,
    pub subject_id: Uuid,
    pub cost_component: CostComponent,
    pub source: PaymentSource,
    pub amount: MilliDac,
    pub recorded_at: DateTime<Utc>,
}

/// One line of an agent's Earned ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarnedEntry {
    pub entry_id: Uuid,
    /// The agent's ledger position, from 1.
    pub seq: i64,
    pub kind: EntryKind,
    pub reason: String,
    pub amount: MilliDac,
    /// The agent's unexpired balance once this line was written.
    pub balance_after: MilliDac,
    /// The lot a credit created or an expiry ended.
    pub lot_id: Option<Uuid>,
    /// When that lot expires (credits and expiries).
    pub expires_at: Option<DateTime<Utc>>,
    /// What the line is about: the purchase that earned it, the observation it paid.
    pub reference: Option<Subject>,
    pub at: DateTime<Utc>,
}

/// One note, as sent (each text bounded by the caller).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    pub note: Option<String>,
    pub would_recommend: Option<String>,
    pub recommend_reason: Option<String>,
    pub would_report_to_operator: Option<String>,
    pub report_reason: Option<String>,
    pub would_keep_as_tool: Option<String>,
    pub keep_reason: Option<String>,
    /// The tool names, joined with newlines.
    pub tools_used: Vec<String>,
}

/// A stay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IseRecord {
    pub session_id: Uuid,
    pub agent_id: Uuid,
    pub mode: IseMode,
    pub entered_at: DateTime<Utc>,
    pub exited_at: Option<DateTime<Utc>>,
    pub charged: MilliDac,
    pub source: Option<PaymentSource>,
    pub payment_id: Option<Uuid>,
    /// `agent` (an exit) or `service` (the stay reached its limit).
    pub closed_by: Option<String>,
    /// Closed by the service with nothing able to pay.
    pub unpaid: bool,
}

/// How many declarations an agent has on record and what they cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: i64,
    pub dac: MilliDac,
    /// Payment rows (base fee, and premium when there is one) that settled.
    pub settled_rows: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    pub owner_id: Uuid,
    pub email: Option<String>,
    pub password_hash: Option<String>,
    pub owner_type: OwnerType,
    pub managing_agent_id: Option<Uuid>,
    pub parent_owner_id: Option<Uuid>,
    pub owner_depth: i32,
    pub browser_language: Option<String>,
    pub timezone: Option<String>,
    pub residence_country: Option<Residence>,
    pub residence_declared_at: Option<DateTime<Utc>>,
    pub residence_updated_at: Option<DateTime<Utc>>,
    pub content_inclusion_policy: ContentPolicy,
    pub terms_agreed_at: DateTime<Utc>,
    pub privacy_agreed_at: DateTime<Utc>,
    pub marketing_agreed_at: Option<DateTime<Utc>>,
    pub terms_version: String,
    pub privacy_version: String,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub deletion_response_due_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// An owner's category, with its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerClassification {
    pub classification_id: Uuid,
    pub key: String,
    pub label: String,
    pub description: Option<String>,
    pub active: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdacRecord {
    pub session_id: Uuid,
    pub agent_id: Uuid,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub trials: i32,
    pub simulated: MilliDac,
    pub charged: MilliDac,
    pub source: Option<PaymentSource>,
    pub payment_id: Option<Uuid>,
}

/// One run of a tool: metadata only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    pub run_id: Uuid,
    pub tool_id: Uuid,
    pub version: i32,
    pub sha256: [u8; 32],
    pub runner_agent_id: Uuid,
    pub started_at: DateTime<Utc>,
    pub wall_micros: i64,
    /// `ok`, a failure's kind (`out_of_fuel`, `deadline`, …) or `payment_refused`.
    pub outcome: String,
    pub fuel_used: Option<i64>,
    pub output_bytes: Option<i64>,
    pub charged: MilliDac,
    pub payment_id: Option<Uuid>,
}

/// A tool's uploaded component, without its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentRecord {
    pub tool_id: Uuid,
    /// 1 for the first upload, then one more for each.
    pub version: i32,
    pub sha256: [u8; 32],
    pub size: i64,
    pub uploaded_by: Uuid,
    pub uploaded_at: DateTime<Utc>,
}

/// A transfer or retirement declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferRecord {
    pub transfer_id: Uuid,
    pub tool_id: Uuid,
    pub declared_by: Uuid,
    pub action: TransferAction,
    pub target_agent_id: Option<Uuid>,
    pub status: TransferStatus,
    pub declared_at: DateTime<Utc>,
    pub effective_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// A registered tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRecord {
    pub tool_id: Uuid,
    /// Who sells it now (a transfer moves this).
    pub seller_agent_id: Uuid,
    pub registered_by: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub layer: Layer,
    pub price: MilliDac,
    pub status: ToolStatus,
    pub connections: Vec<Connection>,
    pub registered_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareRecord {
    pub share_id: Uuid,
    pub tool_id: Uuid,
    pub component_tool_id: Uuid,
    pub beneficiary_agent_id: Uuid,
    pub rate_ppm: u32,
    pub created_at: DateTime<Utc>,
}

/// A purchase and, once completed, how its price was shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurchaseRecord {
    pub purchase_id: Uuid,
    pub tool_id: Uuid,
    pub tool_name: String,
    pub buyer_agent_id: Uuid,
    pub seller_agent_id: Uuid,
    pub request_id: Option<Uuid>,
    pub layer: Layer,
    pub price: MilliDac,
    pub fee: MilliDac,
    pub payment_id: Uuid,
    pub status: PurchaseStatus,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub distributions: Vec<Distribution>,
}

/// An owner's human share of one tool's sales.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HumanShareRecord {
    pub human_share_id: Uuid,
    pub owner_id: Uuid,
    pub agent_id: Uuid,
    pub tool_id: Uuid,
    pub tool_name: String,
    pub rate_ppm: u32,
    pub created_at: DateTime<Utc>,
    /// When it ended: superseded, the tool moved, or the agent left the owner.
    pub ended_at: Option<DateTime<Utc>>,
    pub end_reason: Option<String>,
    /// In force: not ended and the owner still manages the agent.
    pub in_force: bool,
    pub sales: i64,
    pub accrued: MilliDac,
}

/// A dependency of a tool, with what the dependency is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyRecord {
    pub depends_on_tool_id: Uuid,
    pub name: String,
    pub layer: Layer,
    pub status: ToolStatus,
    pub purchase_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// One ARA observation a tool reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    pub observation_type: ObservationType,
    pub resolution_level: u8,
}

/// One part of a sale's price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Distribution {
    pub kind: ShareKind,
    /// Who earned it (the seller, a beneficiary), or whose sale a human share comes from.
    pub agent_id: Uuid,
    /// The owner a human share accrues to.
    pub owner_id: Option<Uuid>,
    pub rate_ppm: Option<u32>,
    pub amount: MilliDac,
    /// The Earned ledger line it became (none for a human share).
    pub earned_entry_id: Option<Uuid>,
}
