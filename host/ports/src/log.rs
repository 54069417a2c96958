//! The transparency log: the integrator lease, integration of pending leaves, hashes, entries and checkpoints.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{CheckpointRecord, CosignatureRecord, IntegrationPlan, LeafOwner, LogState, PendingLeaf, TimestampRecord};

/// A registered signed statement: who signed it, about what, and where it
/// is in the log (never its payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementEntry {
    pub entry_id: [u8; 32],
    pub issuer: String,
    pub subject: String,
    pub kid: Vec<u8>,
    pub content_type: Option<String>,
    pub payload_bytes: i64,
    pub leaf_data: Vec<u8>,
    pub registered_at: DateTime<Utc>,
    /// Its index once integrated.
    pub leaf_index: Option<i64>,
}

/// Computes an integration from the current head and a batch of pending leaves.
pub type Planner<'a> = &'a (dyn Fn(&LogState, &[PendingLeaf]) -> Result<IntegrationPlan, String> + Send + Sync);

#[async_trait]
pub trait LogStore: Send + Sync {
    /// Takes or renews the integrator lease for `holder` until `now + ttl`;
    /// false while another holder's lease runs.
    async fn acquire_log_lease(&self, holder: Uuid, now: DateTime<Utc>, ttl: Duration) -> Result<bool>;
    /// Gives the lease up if `holder` has it, so another host takes it at its
    /// next round; whether it held it.
    async fn release_log_lease(&self, holder: Uuid) -> Result<bool>;
    /// Integrates up to `max` pending leaves in one transaction under the head's
    /// lock: `planner` sees the head as stored and the batch, and what it
    /// returns is written. `None` when nothing was pending.
    async fn integrate_log(&self, max: i64, now: DateTime<Utc>, planner: Planner<'_>) -> Result<Option<LogState>>;
    async fn log_state(&self) -> Result<LogState>;
    /// Stored hashes by index; missing indices are left out.
    async fn log_hashes(&self, indexes: &[i64]) -> Result<Vec<(i64, [u8; 32])>>;
    /// A declaration's leaf index and leaf data, once integrated.
    async fn log_entry_for(&self, dd_id: Uuid) -> Result<Option<(i64, Vec<u8>)>>;
    /// The leaf indexes of those of `dd_ids` that are integrated.
    async fn log_indexes(&self, dd_ids: &[Uuid]) -> Result<Vec<(Uuid, i64)>>;
    /// Leaf data of entries `from..from + count`, in index order.
    async fn log_entries(&self, from: i64, count: i64) -> Result<Vec<Vec<u8>>>;
    async fn log_pending_count(&self) -> Result<i64>;
    /// Registers a signed statement (its leaf pending): true when it is
    /// new, false when the same statement was registered before (nothing
    /// changes then).
    async fn register_statement(&self, entry: &StatementEntry) -> Result<bool>;
    /// A registered statement, by its entry id.
    async fn statement_entry(&self, entry_id: &[u8; 32]) -> Result<Option<StatementEntry>>;
    async fn insert_checkpoint(&self, checkpoint: &CheckpointRecord) -> Result<()>;
    async fn latest_checkpoint(&self) -> Result<Option<CheckpointRecord>>;
    async fn checkpoint(&self, size: i64) -> Result<Option<CheckpointRecord>>;
    /// Publishes a COSE receipt key (its kid and public COSE_Key); a key
    /// published before keeps its first time.
    async fn publish_receipt_key(&self, kid: &[u8; 32], cose_key: &[u8], now: DateTime<Utc>) -> Result<()>;
    /// Every published receipt key's COSE_Key, oldest first.
    async fn receipt_keys(&self) -> Result<Vec<Vec<u8>>>;
    /// Up to `limit` checkpoints of size over `after`, smallest first.
    async fn checkpoints_after(&self, after: i64, limit: i64) -> Result<Vec<CheckpointRecord>>;
    /// The size of the latest checkpoint `witness` (its verifier key) holds
    /// for this log, as far as the log knows: 0 before any.
    async fn witness_size(&self, witness: &str) -> Result<i64>;
    /// What a witness said it holds (a 409 answer), with no cosignature.
    async fn set_witness_size(&self, witness: &str, size: i64, now: DateTime<Utc>) -> Result<()>;
    /// Keeps checked cosignatures and records each one's size as its
    /// witness's, all in one transaction (one commit per witnessing round).
    async fn record_cosignatures(&self, cosignatures: &[CosignatureRecord], now: DateTime<Utc>) -> Result<()>;
    /// The cosignatures of the checkpoint of `size` by the given witnesses.
    async fn cosignatures(&self, size: i64, witnesses: &[String]) -> Result<Vec<CosignatureRecord>>;
    /// The newest checkpoint that at least `quorum` of `witnesses` cosigned.
    async fn newest_witnessed_checkpoint(&self, witnesses: &[String], quorum: i64) -> Result<Option<CheckpointRecord>>;
    /// Keeps a checked RFC 3161 token of a checkpoint (the first one stays).
    async fn record_timestamp(&self, timestamp: &TimestampRecord, now: DateTime<Utc>) -> Result<()>;
    /// The token of the checkpoint of `size`.
    async fn timestamp(&self, size: i64) -> Result<Option<TimestampRecord>>;
    /// The newest checkpoint that has a token.
    async fn newest_timestamped_checkpoint(&self) -> Result<Option<CheckpointRecord>>;
    /// How many records at leaf index `from` or above declared `level` (an
    /// `ee_integrity_verification_level`).
    async fn declared_level_count(&self, level: &str, from: i64) -> Result<i64>;
}
