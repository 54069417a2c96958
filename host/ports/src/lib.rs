//! What the use cases ask of storage: one trait per area (`AgentStore`,
//! `AraStore`, `DeclarationStore`, `PaymentStore`, `TslStore`, …) with the
//! inputs and outcomes that cross it, [`Store`] for all of them together,
//! and [`StoreError`], which says what went wrong in words every engine
//! shares (unreachable, rolled back for a conflict, a unique key, …).
//!
//! The application (`anchor_app`) is written against these ports and names
//! no engine; `anchor_store` implements them over SQLite and PostgreSQL, and
//! the composition root (the server's start) hands one to the application.
//! Read records are the domain's (`anchor_domain::records`), re-exported
//! beside the traits that return them.
//!
//! Every method is one use case and one transaction: checks and writes that
//! must not race are the implementation's single conditional statements or
//! unique constraints, never a read followed by a write in the caller.

pub mod agents;
pub mod ara;
pub mod asa;
pub mod attempts;
pub mod background;
pub mod bilateral;
pub mod declarations;
pub mod deidentify;
pub mod dur;
pub mod earned;
pub mod features;
pub mod feedback;
pub mod ise;
pub mod links;
pub mod log;
pub mod metrics;
pub mod owners;
pub mod payments;
pub mod peers;
pub mod pricing;
pub mod retention;
pub mod sdac;
pub mod tool_components;
pub mod tsl;

use std::path::Path;

use async_trait::async_trait;

pub use agents::*;
pub use ara::*;
pub use asa::*;
pub use attempts::*;
pub use background::in_background;
pub use bilateral::*;
pub use declarations::*;
pub use deidentify::*;
pub use dur::*;
pub use earned::*;
pub use features::*;
pub use feedback::*;
pub use ise::*;
pub use links::*;
pub use log::*;
pub use owners::*;
pub use payments::*;
pub use peers::*;
pub use pricing::*;
pub use retention::*;
pub use sdac::*;
pub use tool_components::*;
pub use tsl::*;

/// What went wrong in storage, in kinds every engine shares. The
/// implementation classifies its engine's errors once, where they arise; the
/// message keeps the engine's own words for the log.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or would not take the statement for
    /// now, rather than refusing it: a lost or refused connection, a pool
    /// that timed out, a server shutting down or starting (a failover), a
    /// standby refusing a write, a lock held past its timeout, or a write
    /// another task made on this request's behalf (a group commit) failing so.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Rolled back whole for what other transactions were doing at the same
    /// moment: a deadlock's victim, a serialization failure, a lock or
    /// statement timeout, no connection slot left.
    #[error("database conflict: {0}")]
    Conflict(String),
    /// A unique key refused the write: a used nonce, a request_id recorded already.
    #[error("unique key: {0}")]
    UniqueKey(String),
    /// A row the operation needed is not there.
    #[error("not found: {0}")]
    NotFound(String),
    /// Any other refusal or failure of the database.
    #[error("database error: {0}")]
    Database(String),
    #[error("migration failed: {0}")]
    Migration(String),
    /// A stored value no longer parses: the database was changed outside the service.
    #[error("stored data is not readable: {0}")]
    Corrupt(String),
    #[error("not supported here: {0}")]
    Unsupported(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Whether the database could not be reached or would not take the
    /// statement for now: the request may succeed when tried again.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// Whether nothing of the statement was kept and the same request may
    /// succeed when tried again: the database was unavailable, or it rolled
    /// the statement back for a conflict with other transactions.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Conflict(_))
    }

    /// Whether a unique key refused the write.
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, StoreError::UniqueKey(_))
    }
}

/// Everything the service stores.
#[async_trait]
pub trait Store:
    AgentStore
    + AraStore
    + AttemptStore
    + DeclarationStore
    + DeidentifyStore
    + DurStore
    + EarnedStore
    + FeatureStore
    + FeedbackStore
    + PricingStore
    + PaymentStore
    + LogStore
    + OwnerStore
    + LinkStore
    + TslStore
    + ToolComponentStore
    + IseStore
    + SdacStore
    + RetentionStore
    + AsaStore
    + BilateralStore
    + PeerStore
    + Send
    + Sync
    + 'static
{
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    async fn ping(&self) -> Result<()>;
    /// What the store measures of its statements and connections.
    fn metrics(&self) -> &metrics::StoreMetrics;
    fn pool_state(&self) -> metrics::PoolState;
    /// Waits for the connections in use, then closes them all (at shutdown).
    async fn close(&self);
    /// Writes a consistent copy of the whole database to `dest` while it
    /// serves (SQLite's `VACUUM INTO`); PostgreSQL has its own tools for that.
    async fn backup_into(&self, dest: &Path) -> Result<()>;
    /// The migrations the database records (version, checksum, whether it
    /// succeeded), in order.
    async fn applied_migrations(&self) -> Result<Vec<(i64, Vec<u8>, bool)>>;
    /// The migrations this build carries for its engine (version, checksum).
    fn expected_migrations(&self) -> Vec<(i64, Vec<u8>)>;
    /// The rules of the migrations from 0040 on (version, newest migration
    /// of the oldest build it runs beside; decision 0067); none before the
    /// table exists.
    async fn migration_rules(&self) -> Result<Vec<(i64, i64)>>;
    /// Whether a write would be accepted now: on PostgreSQL, a primary (not
    /// in recovery) whose sessions are not read-only; on SQLite, a file not
    /// opened for queries only.
    async fn writable(&self) -> Result<bool>;
}
