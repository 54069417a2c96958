//! What the service keeps, as the use cases hand it out: each record as it
//! is read back, in domain types. The store writes and reads them (the
//! storage ports' result types); the use cases return them; the server
//! renders them into its answers. Plain data: no IO, no storage detail.

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::MilliDac;
use crate::agents::DisclosureLevel;
use crate::bilateral::Agreement;
use crate::declarations::Declaration;
use crate::earned::EntryKind;
use crate::ise::IseMode;
use crate::owners::{ContentPolicy, OwnerType, Residence};
use crate::payments::{CostComponent, PaymentSource, PaymentStatus, SettlementStatus, Subject, SubjectDomain};
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
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// A published, signed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub size: i64,
    pub root: [u8; 32],
    pub note: String,
    pub published_at: DateTime<Utc>,
}

/// An agent as its owner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedAgent {
    pub agent: AgentRecord,
    pub linked_at: Option<DateTime<Utc>>,
    /// The owner-set DAB, if any.
    pub dab_limit: Option<MilliDac>,
}

/// A payment row and its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentRecord {
    pub payment_id: Uuid,
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub amount_units: i64,
    pub pay_to: String,
    pub agent_id: Uuid,
    /// What it paid for (absent only on rows reserved before subjects existed and never linked).
    pub subject: Option<Subject>,
    pub status: PaymentStatus,
    pub error_reason: Option<String>,
    pub settlement_ref: Option<String>,
    /// The PaymentPayload as received (its `accepted` is the requirement).
    pub payload: String,
    /// The digest of the request it paid for, on a route that only reads.
    pub request: Option<Vec<u8>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// (status, reason, at), oldest first.
    pub history: Vec<(PaymentStatus, Option<String>, DateTime<Utc>)>,
}

/// The terms the loaded generation sets.
#[derive(Clone, Debug)]
pub struct RetentionTerms {
    pub monthly: MilliDac,
    pub grace: Duration,
    /// Earned DAC pays from this unexpired balance up.
    pub threshold: MilliDac,
    /// The generation that set them.
    pub priced_by: PricedBy,
}

/// An agent's Earned DAC at a moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarnedBalance {
    /// Unexpired and unspent.
    pub balance: MilliDac,
    /// The lot that expires next, with what is left of it.
    pub next_expiry: Option<(MilliDac, DateTime<Utc>)>,
    /// Everything ever credited.
    pub received: MilliDac,
    /// Debited, less what was refunded.
    pub spent: MilliDac,
    /// Expired unspent (including lots due and not yet processed by the job).
    pub expired: MilliDac,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    pub classification_id: Uuid,
    pub owner_id: Option<Uuid>,
    pub key: String,
    pub label: String,
    pub description: Option<String>,
}

/// A witness's checked cosignature of one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CosignatureRecord {
    pub size: i64,
    /// The witness's verifier key.
    pub witness: String,
    /// The signature line, as the witness sent it (newline included).
    pub line: String,
    /// The cosignature's own time (POSIX seconds).
    pub signed_at: i64,
}

/// An agent's standing in the market.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Revenue {
    pub tools: i64,
    pub sales: i64,
    /// Tool prices of completed sales.
    pub gross: MilliDac,
    /// Service fees the buyers of those sales paid on top.
    pub fees: MilliDac,
    /// Earned as the seller.
    pub earned_as_seller: MilliDac,
    /// Earned as the beneficiary of other tools' revenue shares.
    pub earned_from_shares: MilliDac,
    /// Given from its sales to revenue-share beneficiaries.
    pub shared_out: MilliDac,
    /// Accrued from its sales to its owner's human share.
    pub human_accrued: MilliDac,
    pub purchases: i64,
    /// Prices and fees of its own completed purchases.
    pub spent: MilliDac,
}

/// What one tool sold, for its seller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolSales {
    pub tool_id: Uuid,
    pub sales: i64,
    /// Tool prices of the completed sales.
    pub gross: MilliDac,
    /// What the seller earned from them.
    pub earned: MilliDac,
}

/// An agent's budget and what it spent externally in the current period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DabStatus {
    /// The agent's own cap, if an owner set one.
    pub own_limit: Option<MilliDac>,
    /// External spending (reserved or settled payments) since the period start.
    pub spent: MilliDac,
}

/// The log's tree head and the right edge it grows from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogState {
    pub size: i64,
    pub root: [u8; 32],
    /// The roots of the complete subtrees that make up `size`, largest first.
    pub edge: Vec<[u8; 32]>,
}

/// A leaf waiting for an index.
#[derive(Clone, Debug)]
pub struct PendingLeaf {
    pub owner: LeafOwner,
    pub leaf_data: Vec<u8>,
}

/// What one integration writes: new entries, new stored hashes, the new head.
#[derive(Clone, Debug)]
pub struct IntegrationPlan {
    pub entries: Vec<(i64, LeafOwner, Vec<u8>)>,
    pub hashes: Vec<(i64, [u8; 32])>,
    pub state: LogState,
}

/// What one run of the monthly job did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Billed {
    pub charged: usize,
    /// Could not pay: now in grace.
    pub to_grace: usize,
}

/// Usage entries of one kind and source: how many, how much.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendLine {
    pub domain: SubjectDomain,
    pub source: PaymentSource,
    pub entries: i64,
    pub amount: MilliDac,
}

/// Observations made: how many, and what they cost by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservationSpend {
    pub count: i64,
    pub base: MilliDac,
    pub premium_external: MilliDac,
    pub premium_earned: MilliDac,
}

/// A checked RFC 3161 time-stamp token over one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampRecord {
    pub size: i64,
    /// The TSA's URL.
    pub tsa: String,
    /// The token: DER of a CMS ContentInfo.
    pub token: Vec<u8>,
    /// The time the TSA put in it.
    pub gen_time: DateTime<Utc>,
}

/// One trial: the combination (by wire names) and what it would cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdacTrial {
    pub position: i32,
    pub axes: [(String, String); 6],
    pub total: MilliDac,
    pub at: DateTime<Utc>,
}

/// What settling a declaration's payment needs of it, read beside the
/// declaration by a confirmation (the store's `declaration_to_confirm`).
#[derive(Clone, Debug)]
pub struct Settling {
    pub payment_id: Uuid,
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub status: PaymentStatus,
    /// The PaymentPayload as received (its `accepted` is the requirement).
    pub payload: String,
}

/// One row of the usage record: what was paid for, by whom, how much, and
/// which pricing generation set the price.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsageEntry {
    pub cost_component: CostComponent,
    pub source: PaymentSource,
    pub amount: MilliDac,
    /// `None` only on rows recorded before charges named their generation.
    pub priced_by: Option<PricedBy>,
}

/// A branch-1 declaration as an anomaly comparison sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRow {
    pub dd_id: Uuid,
    /// The decision scale's JSON text and unit.
    pub scale_value: Option<String>,
    pub scale_unit: Option<String>,
    pub decision_class: Option<String>,
    pub target_class: Option<String>,
    pub decision_at: Option<DateTime<Utc>>,
    pub anchored_at: DateTime<Utc>,
    /// The price above the base fee.
    pub premium: MilliDac,
}

/// The pricing generation that priced a charge: its version and its
/// component's SHA-256 (hex).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PricedBy {
    pub version: String,
    pub sha256: String,
}

/// Whose leaf a log entry is: the log holds two kinds in one tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafOwner {
    /// A confirmed declaration.
    Declaration(Uuid),
    /// A signed statement registered through SCRAPI, by its entry id.
    Statement([u8; 32]),
}

impl From<PaymentRecord> for Settling {
    fn from(payment: PaymentRecord) -> Settling {
        let PaymentRecord { payment_id, network, asset, payer, status, payload, .. } = payment;
        Settling { payment_id, network, asset, payer, status, payload }
    }
}

/// What moved through the agents' Earned DAC in a span, from its ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarnedFlow {
    /// Credits received (sales, revenue shares).
    pub received: MilliDac,
    /// Ledger lines that moved money: credits, debits and refunds (expiries are not transactions).
    pub transactions: i64,
}

/// One publication: which component, from when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PricingActivation {
    pub sha256: String,
    pub version: String,
    pub interface: String,
    pub activate_at: DateTime<Utc>,
    pub published_at: DateTime<Utc>,
}

/// A limited kind of attempt, and the subject it is counted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLimit {
    /// `owner_password` or `agent_recovery`.
    pub scope: &'static str,
    pub window: Duration,
    pub max: i64,
}

/// What an attempt limit said about one more attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Counted; the secret may be checked.
    Reserved,
    /// Every attempt of the window is used; the next window opens at this time.
    Spent { retry_at: DateTime<Utc> },
}

/// A line of an agent's tool-market money.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TslLine {
    /// The usage entry or the Earned ledger line.
    pub line_id: Uuid,
    /// `paid` (a purchase) or `received` (a sale's or a revenue share's credit).
    pub direction: String,
    pub amount: MilliDac,
    /// The purchase.
    pub purchase_id: Uuid,
    pub at: DateTime<Utc>,
}
