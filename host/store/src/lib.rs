//! The `Store` interface and its two implementations: SQLite (the embedded
//! default, a file under the data directory) and PostgreSQL (production, and
//! shared by several hosts).
//!
//! Every method is one use case and one transaction. Checks and writes that must
//! not race are single conditional statements (`update … where balance >= $1`)
//! or unique constraints, never a read followed by a write, so the same code is
//! correct on both engines. SQLite write transactions start with
//! `BEGIN IMMEDIATE`, which takes the write lock up front instead of failing
//! when a reader later wants to write.
//!
//! Both implementations are generated from one body by the `store_impl!` macro
//! in `imp.rs`: the SQL is written once (both engines accept `$1` parameters)
//! and type-checked once per engine. Only connection set-up, transaction start
//! and migrations differ.

pub mod dap;
mod imp;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use anchor_domain::MilliDac;
use anchor_domain::agents::DisclosureLevel;
use anchor_domain::declarations::Declaration;
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

pub use dap::{DapStore, Link, LinkedAgent, NewOwner, OwnerClassification, OwnerRecord, Totals};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// A stored value no longer parses: the database was changed outside the service.
    #[error("stored data is not readable: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A new agent, with its secrets already hashed.
#[derive(Clone, Debug)]
pub struct NewAgent {
    pub agent_id: Uuid,
    pub token_hash: [u8; 32],
    pub recovery_hash: [u8; 32],
    pub region_code: Option<String>,
    pub registered_at: DateTime<Utc>,
    pub trial_granted: MilliDac,
    pub trial_expires_at: DateTime<Utc>,
}

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
}

/// What an attempt limit said about one more attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Counted; the secret may be checked.
    Reserved,
    /// Every attempt of the window is used; the next window opens at this time.
    Spent { retry_at: DateTime<Utc> },
}

/// A limited kind of attempt, and the subject it is counted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLimit {
    /// `owner_password` or `agent_recovery`.
    pub scope: &'static str,
    pub window: Duration,
    pub max: i64,
}

/// The outcome of a recovery attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    Recovered,
    /// Wrong agent_id or wrong key: the caller cannot tell which.
    Refused,
    /// Too many attempts for this agent_id in the window.
    RateLimited,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    pub classification_id: Uuid,
    pub owner_id: Option<Uuid>,
    pub key: String,
    pub label: String,
    pub description: Option<String>,
}

/// Who paid a component of a declaration's price.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaymentSource {
    Trial,
    External,
    Earned,
}

impl PaymentSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentSource::Trial => "trial",
            PaymentSource::External => "external",
            PaymentSource::Earned => "earned",
        }
    }

    pub fn parse(text: &str) -> Option<PaymentSource> {
        match text {
            "trial" => Some(PaymentSource::Trial),
            "external" => Some(PaymentSource::External),
            "earned" => Some(PaymentSource::Earned),
            _ => None,
        }
    }
}

/// A verified x402 authorization to reserve with a declaration.
#[derive(Clone, Debug)]
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
    /// The declaration must be confirmed before this.
    pub deadline: DateTime<Utc>,
    /// The DAB in force when the agent has none of its own, and the start of
    /// the current budget period.
    pub dab_default: MilliDac,
    pub period_start: DateTime<Utc>,
}

/// An agent's budget and what it spent externally in the current period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DabStatus {
    /// The agent's own cap, if an owner set one.
    pub own_limit: Option<MilliDac>,
    /// External spending (reserved or settled payments) since the period start.
    pub spent: MilliDac,
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
    pub status: String,
    pub error_reason: Option<String>,
    pub settlement_ref: Option<String>,
    /// The PaymentPayload as received (its `accepted` is the requirement).
    pub payload: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// (status, reason, at), oldest first.
    pub history: Vec<(String, Option<String>, DateTime<Utc>)>,
}

/// A declaration to record, priced, paid from Trial or by a reserved payment.
#[derive(Clone, Debug)]
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
    /// unreserved, pending, settled or released.
    pub settlement_status: String,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub integrity_hash: Option<String>,
    pub direct_reads_used: i64,
    pub direct_access_expires_at: DateTime<Utc>,
    /// Externally paid: confirm before this, or the reservation is released.
    pub payment_deadline: Option<DateTime<Utc>>,
}

impl StoredDeclaration {
    pub fn premium(&self) -> MilliDac {
        self.declaration.dac_amount - self.base_fee
    }
}

#[derive(Clone, Debug)]
pub enum Created {
    /// Recorded now; the Trial balance after the debit.
    New { trial_remaining: MilliDac },
    /// The agent already used this request_id: the earlier record.
    Replayed(Box<StoredDeclaration>),
    /// Trial cannot pay: too little left, or expired.
    TrialCannotPay { balance: MilliDac, expired: bool },
    /// `parent_dd_id` names no declaration.
    ParentNotFound,
    /// `parent_dd_id` names another agent's declaration.
    ParentForeign,
    /// The payment authorization was already used (its nonce is reserved).
    PaymentReplayed,
    /// The payment would take the agent past its DAB for the period.
    DabReached { limit: MilliDac, spent: MilliDac },
}

/// One row of the usage record written at confirmation.
#[derive(Clone, Debug)]
pub struct UsageEntry {
    pub cost_component: &'static str,
    pub source: PaymentSource,
    pub amount: MilliDac,
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

/// The log's tree head and the right edge it grows from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogState {
    pub size: i64,
    pub root: [u8; 32],
    /// The roots of the complete subtrees that make up `size`, largest first.
    pub edge: Vec<[u8; 32]>,
}

/// A confirmed declaration's leaf, waiting for an index.
#[derive(Clone, Debug)]
pub struct PendingLeaf {
    pub dd_id: Uuid,
    pub leaf_data: Vec<u8>,
}

/// What one integration writes: new entries, new stored hashes, the new head.
#[derive(Clone, Debug)]
pub struct IntegrationPlan {
    pub entries: Vec<(i64, Uuid, Vec<u8>)>,
    pub hashes: Vec<(i64, [u8; 32])>,
    pub state: LogState,
}

/// Computes an integration from the current head and a batch of pending leaves.
pub type Planner<'a> = &'a (dyn Fn(&LogState, &[PendingLeaf]) -> Result<IntegrationPlan, String> + Send + Sync);

/// A published, signed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub size: i64,
    pub root: [u8; 32],
    pub note: String,
    pub published_at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ListFilter {
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: i64,
    pub offset: i64,
}

#[async_trait]
pub trait Store: DapStore + Send + Sync + 'static {
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    async fn ping(&self) -> Result<()>;

    async fn insert_agent(&self, agent: &NewAgent) -> Result<()>;
    async fn agent(&self, agent_id: Uuid) -> Result<Option<AgentRecord>>;
    async fn agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>>;
    /// Replaces both secrets if the agent still holds `current_token_hash`.
    async fn rotate_credentials(
        &self,
        agent_id: Uuid,
        current_token_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
    ) -> Result<bool>;
    /// Replaces both secrets if `recovery_hash` matches. A wrong key (or an
    /// unknown agent_id) takes one attempt of `limit` for that agent_id; once
    /// they are spent, wrong keys are refused as `RateLimited`. The right key
    /// always recovers: guessing cannot lock its holder out.
    async fn recover_credentials(
        &self,
        agent_id: Uuid,
        recovery_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
        now: DateTime<Utc>,
        limit: AttemptLimit,
    ) -> Result<Recovery>;

    /// Takes one attempt of `limit` for `subject` in one conditional
    /// statement, before the secret is checked: concurrent attempts cannot
    /// pass the limit. Windows are fixed and start with their first attempt.
    async fn reserve_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<Attempt>;
    /// Gives a reserved attempt back (the secret was right).
    async fn release_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<()>;
    async fn set_disclosure_level(&self, agent_id: Uuid, level: DisclosureLevel) -> Result<()>;

    /// Operator base categories plus the agent's owner's active ones.
    async fn classifications_for_agent(&self, agent_id: Uuid) -> Result<Vec<Classification>>;

    /// Records a declaration and debits Trial by its total, atomically; or
    /// returns the earlier record for a reused request_id.
    async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created>;
    async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>>;
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
    /// Ends an unconfirmed, externally paid declaration's payment without
    /// settling it: the declaration becomes `declaration_status` (`released`,
    /// `failed`) and can never be confirmed; the payment becomes
    /// `payment_status`. False if the declaration was not pending.
    async fn close_payment(
        &self,
        dd_id: Uuid,
        declaration_status: &str,
        payment_status: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Declarations whose payment's settlement outcome is unknown, oldest first.
    async fn unknown_settlements(&self, limit: i64) -> Result<Vec<Uuid>>;
    /// Marks a payment whose settlement outcome is unknown.
    async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool>;
    /// The payment row of a declaration, with its history.
    async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>>;
    /// The agent's DAB and its external spending since `period_start`.
    async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus>;
    /// Counts one read of the original against the EE's quota and period.
    async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead>;
    /// The agent's declarations, newest first, and how many match in all.
    async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)>;
    /// The agent's declarations in one lineage group, oldest first.
    async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>>;
    /// The usage entries of one declaration.
    async fn usage_for_declaration(&self, dd_id: Uuid) -> Result<Vec<UsageEntry>>;

    /// Takes or renews the integrator lease for `holder` until `now + ttl`;
    /// false while another holder's lease runs.
    async fn acquire_log_lease(&self, holder: Uuid, now: DateTime<Utc>, ttl: Duration) -> Result<bool>;
    /// Integrates up to `max` pending leaves in one transaction under the head's
    /// lock: `planner` sees the head as stored and the batch, and what it
    /// returns is written. `None` when nothing was pending.
    async fn integrate_log(&self, max: i64, now: DateTime<Utc>, planner: Planner<'_>) -> Result<Option<LogState>>;
    async fn log_state(&self) -> Result<LogState>;
    /// Stored hashes by index; missing indices are left out.
    async fn log_hashes(&self, indexes: &[i64]) -> Result<Vec<(i64, [u8; 32])>>;
    /// A declaration's leaf index and leaf data, once integrated.
    async fn log_entry_for(&self, dd_id: Uuid) -> Result<Option<(i64, Vec<u8>)>>;
    /// Leaf data of entries `from..from + count`, in index order.
    async fn log_entries(&self, from: i64, count: i64) -> Result<Vec<Vec<u8>>>;
    async fn log_pending_count(&self) -> Result<i64>;
    async fn insert_checkpoint(&self, checkpoint: &CheckpointRecord) -> Result<()>;
    async fn latest_checkpoint(&self) -> Result<Option<CheckpointRecord>>;
    async fn checkpoint(&self, size: i64) -> Result<Option<CheckpointRecord>>;
}

/// Opens the store a URL names: `postgres://…` (or `postgresql://…`) for
/// PostgreSQL, anything else is a SQLite file path (or `sqlite://…`).
/// Migrations run before this returns.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url, None).await?))
    } else {
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        Ok(Arc::new(SqliteStore::open(std::path::Path::new(path)).await?))
    }
}
