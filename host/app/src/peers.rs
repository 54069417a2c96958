//! Shared group commit (decision 0075): hosts on one PostgreSQL that share a
//! peer key elect, through the database, the one that commits the hot path's
//! batches for all of them; the others send it theirs. So N hosts commit as
//! few times per DD as one host, instead of each committing its own smaller
//! batches.
//!
//! Every such host renews or reads the commit lease once a second. Its
//! holder commits what the others send; each other host sends its batches
//! to the holder when the holder speaks its batch encoding (same build), and
//! commits them itself otherwise, or when the holder does not answer. Who
//! holds the lease decides nothing but where batches commit: two hosts each
//! believing itself the holder, for a moment, only commit apart.

use std::sync::Arc;
use std::time::Duration;

use anchor_ports::Forwarder;
use uuid::Uuid;

use crate::Services;

/// How often a host renews or reads the lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long a lease runs unrenewed: a holder that stops is replaced within it.
pub const LEASE: chrono::TimeDelta = chrono::TimeDelta::seconds(3);

/// Opens the way to the host at an address (the transport's client).
pub type Connect = Arc<dyn Fn(&str) -> Arc<dyn Forwarder> + Send + Sync>;

/// This host's part in shared group commit.
#[derive(Clone)]
pub struct Peering {
    /// Where the other hosts reach this one's batch endpoint.
    pub address: String,
    pub connect: Connect,
}

/// Renews or reads the lease until `stop`, pointing this host's committer
/// at the holder (or at itself); then gives the lease up, so that the others
/// commit on their own at their next reading instead of when it runs out.
pub async fn run(services: Services, host_id: Uuid, peering: Peering, mut stop: tokio::sync::watch::Receiver<bool>) {
    let store = services.store.clone();
    let (mut sending_to, mut failing): (Option<String>, bool) = (None, false);
    loop {
        let lease = store.commit_lease(host_id, &peering.address, services.clock.now(), LEASE).await;
        let failed = lease.is_err();
        let to = match lease {
            Ok(Some(leader)) if leader.holder != host_id && leader.protocol == store.commit_protocol() => Some(leader.address),
            Ok(_) => None,
            Err(error) => {
                // Said once, not every second (a database failing over, or
                // a schema that does not have the lease yet).
                if !failing {
                    tracing::warn!(error = %error, "the commit lease could not be read; this host commits its own batches");
                }
                None
            }
        };
        failing = failed;
        if to != sending_to {
            match &to {
                Some(address) => tracing::info!(to = %address, "this host's batches are committed by the lease holder"),
                None => tracing::info!("this host commits its own batches"),
            }
            store.forward_commits(to.as_deref().map(|address| (peering.connect)(address)));
            sending_to = to;
        }
        tokio::select! {
            () = tokio::time::sleep(RENEW_EVERY) => {}
            Ok(_) = stop.wait_for(|stop| *stop) => break,
        }
    }
    store.forward_commits(None);
    match store.release_commit_lease(host_id).await {
        Ok(true) => tracing::info!("released the commit lease"),
        Ok(false) => {}
        Err(error) => tracing::warn!(error = %error, "releasing the commit lease failed; it runs out on its own"),
    }
}

/// Why a batch another host sent was not committed.
#[derive(Debug)]
pub enum Refused {
    /// It does not decode, or is too large: nothing of it was written.
    Malformed(String),
    /// The database is unavailable here.
    Unavailable(String),
}

/// Commits a batch another host sent, with this host's own, and answers it.
pub async fn accept(services: &Services, batch: &[u8]) -> Result<Vec<u8>, Refused> {
    services.store.commit_forwarded(batch).await.map_err(|error| match error {
        anchor_ports::StoreError::Unsupported(why) => Refused::Malformed(why),
        other => Refused::Unavailable(other.to_string()),
    })
}
