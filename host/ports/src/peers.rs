//! Shared group commit: hosts on one database that hold the same peer key
//! elect one of them, through the database, to commit the hot path's batches
//! for all of them (decision 0075). The others send it their batches, so N
//! hosts commit as few times per DD as one.
//!
//! What crosses between hosts is the store's own encoding of a batch, opaque
//! to the transport: a [`Forwarder`] carries it to the committing host,
//! whose store answers it with [`PeerStore::commit_forwarded`].

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::Result;

/// The host that commits for the others, as its lease records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitLeader {
    pub holder: Uuid,
    /// Where the others send their batches.
    pub address: String,
    /// The batch encoding it speaks; a host sends only to a holder of its own.
    pub protocol: String,
}

/// Carries an encoded batch to the committing host and brings back its
/// encoded answer. An error means the batch may or may not have been
/// committed there: the sending store then runs each write again on its own,
/// where a write committed already is found (its request_id, its
/// confirmation) and answered as the ordinary path answers it.
#[async_trait]
pub trait Forwarder: Send + Sync {
    async fn forward(&self, batch: Vec<u8>) -> Result<Vec<u8>>;
}

#[async_trait]
pub trait PeerStore: Send + Sync {
    /// The version of the batch encoding this build speaks.
    fn commit_protocol(&self) -> &'static str;
    /// Takes or renews the commit lease for `holder` (reached at `address`)
    /// until `now + ttl`, unless another holder's lease runs; either way,
    /// who holds it now.
    async fn commit_lease(&self, holder: Uuid, address: &str, now: DateTime<Utc>, ttl: Duration) -> Result<Option<CommitLeader>>;
    /// Gives the lease up if `holder` has it; whether it held it.
    async fn release_commit_lease(&self, holder: Uuid) -> Result<bool>;
    /// Where this host's batches go from now on: `None` commits them here.
    fn forward_commits(&self, to: Option<Arc<dyn Forwarder>>);
    /// Commits a batch another host sent (in this store's encoding) with this
    /// host's own batches, and answers it in that encoding. A batch that does
    /// not decode is refused (`Unsupported`) with nothing written.
    async fn commit_forwarded(&self, batch: &[u8]) -> Result<Vec<u8>>;
}
