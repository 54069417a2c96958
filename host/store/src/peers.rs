//! Shared group commit (decision 0075): the commit lease, and the encoding of
//! the batches one host sends another.
//!
//! A host whose committer has somewhere to send ([`crate::batch::ForwardTo`])
//! sends each batch of its own writes to the host holding the commit lease,
//! which hands every write to its own committer, where it joins that host's
//! batches, and answers each as its committer did. What the batch did not
//! answer (the holder unreachable, a lease moving, an answer that does not
//! decode) is committed here, as if nothing had been sent: a write the holder
//! did commit is then found by its request_id or its confirmation, as a
//! retried request is. A host's token and confirmation reads go the same
//! way, on their own (shared reads, decision 0076, `lookup.rs`).
//!
//! The encoding is JSON of the batch's own inputs. A host sends only to a
//! holder of the same [`PROTOCOL`], so two builds never read each other's
//! batches during a rolling upgrade: each commits its own until the lease is
//! held by a host of its build.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::batch::{Answers, BatchIn, ConfirmJob, CreateJob, Job, MAX_BATCH, Taken, answer_of, batchable};
use crate::engine::{Engine, Exec, Row, sql};
use crate::{CommitLeader, Forwarder, PeerStore, Result, SqlStore, StoreError};

/// The batch encoding of this build.
pub(crate) const PROTOCOL: &str = concat!("anchor-batch/3 ", env!("CARGO_PKG_VERSION"));

/// The most writes one forwarded batch may carry (a committer sends at most
/// one batch of [`MAX_BATCH`]).
const MOST_WRITES: usize = MAX_BATCH;

#[async_trait]
impl<E: Engine> PeerStore for SqlStore<E> {
    fn commit_protocol(&self) -> &'static str {
        PROTOCOL
    }

    async fn commit_lease(&self, holder: Uuid, address: &str, now: DateTime<Utc>, ttl: Duration) -> Result<Option<CommitLeader>> {
        self.db()
            .execute(
                sql("update commit_lease set holder = $1, address = $2, protocol = $3, expires_at = $4 \
                     where commit_lease_id = 0 and (holder = $1 or holder is null or expires_at < $5)")
                .bind(holder)
                .bind(address)
                .bind(PROTOCOL)
                .bind(now + ttl)
                .bind(now),
            )
            .await?;
        let row = self
            .db()
            .fetch_optional(sql("select holder, address, protocol, expires_at from commit_lease where commit_lease_id = 0"))
            .await?;
        let Some(row) = row else { return Ok(None) };
        let (holder, address, protocol, expires_at): (Option<Uuid>, Option<String>, Option<String>, DateTime<Utc>) =
            (row.get("holder")?, row.get("address")?, row.get("protocol")?, row.get("expires_at")?);
        Ok(match (holder, address, protocol) {
            (Some(holder), Some(address), Some(protocol)) if expires_at >= now => Some(CommitLeader { holder, address, protocol }),
            _ => None,
        })
    }

    async fn release_commit_lease(&self, holder: Uuid) -> Result<bool> {
        let done =
            self.db().execute(sql("update commit_lease set holder = null where commit_lease_id = 0 and holder = $1").bind(holder)).await?;
        Ok(done == 1)
    }

    fn forward_commits(&self, to: Option<Arc<dyn Forwarder>>) {
        if let Ok(mut target) = self.forward.write() {
            *target = to;
        }
    }

    async fn commit_forwarded(&self, batch: &[u8]) -> Result<Vec<u8>> {
        let mut batch: BatchIn = serde_json::from_slice(batch)
            .map_err(|error| StoreError::Unsupported(format!("a forwarded batch that does not decode: {error}")))?;
        // Shared reads (`lookup.rs`) come on their own, without writes.
        let (agents, confirming) = (std::mem::take(&mut batch.agents), std::mem::take(&mut batch.confirming));
        if !agents.is_empty() || !confirming.is_empty() {
            let reads = (agents.len() + confirming.len()) as u64;
            let (agents, confirming) = crate::lookup::read_for_peer(self.reader(), agents, confirming).await?;
            self.db.metrics().peer_reads.inc_by(reads);
            let answers = crate::lookup::ReadAnswers { agents, confirming };
            return serde_json::to_vec(&answers).map_err(|error| StoreError::Unsupported(format!("answers that do not encode: {error}")));
        }
        if batch.creates.len() + batch.confirms.len() > MOST_WRITES {
            return Err(StoreError::Unsupported(format!("a forwarded batch of more than {MOST_WRITES} writes")));
        }
        let mut leaves = Vec::with_capacity(batch.confirms.len());
        for job in &batch.confirms {
            leaves.push(
                hex::decode(&job.leaf).map_err(|_| StoreError::Unsupported("a forwarded confirmation whose leaf is not hex".into()))?,
            );
        }
        let writes = (batch.creates.len() + batch.confirms.len()) as u64;
        // A write the committer did not take drops its reply unanswered,
        // which `answer_of` reads as "not taken".
        let batcher = self.batcher();
        let mut creates = Vec::with_capacity(batch.creates.len());
        for job in batch.creates {
            let (reply, answer) = oneshot::channel();
            if let Some(batcher) = batcher.filter(|_| batchable(&job.new)) {
                batcher.submit(Job::Create(Box::new(CreateJob { new: job.new, now: job.now, from_peer: true, reply }))).await;
            }
            creates.push(answer);
        }
        let mut confirms = Vec::with_capacity(batch.confirms.len());
        for (job, leaf_data) in batch.confirms.into_iter().zip(leaves) {
            let (reply, answer) = oneshot::channel();
            if let Some(batcher) = batcher {
                let job = ConfirmJob {
                    dd_id: job.dd_id,
                    integrity_hash: job.integrity_hash,
                    now: job.now,
                    usage: job.usage,
                    leaf_data,
                    settlement_ref: job.settlement_ref,
                    token_check: job.token_check,
                    from_peer: true,
                    reply,
                };
                batcher.submit(Job::Confirm(Box::new(job))).await;
            }
            confirms.push(answer);
        }
        self.db.metrics().peer_writes.inc_by(writes);
        let mut answers = Answers { creates: Vec::with_capacity(creates.len()), confirms: Vec::with_capacity(confirms.len()) };
        for answer in creates {
            answers.creates.push(answer_of(answer.await, Taken::Not));
        }
        for answer in confirms {
            answers.confirms.push(answer_of(answer.await, None));
        }
        serde_json::to_vec(&answers).map_err(|error| StoreError::Unsupported(format!("answers that do not encode: {error}")))
    }
}
