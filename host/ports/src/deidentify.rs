//! De-identification: records past their retention end become statistics.
//!
//! A batch is one transaction. It takes the records whose retention ended
//! (oldest end first; a confirmed one only once the log integrated it and
//! ARA folded it, so its counts are known), moves their shared ARA counts
//! from their agents' rows into id-free monthly buckets (their own-only
//! counts are dropped: nobody may see them any more), and rewrites each row
//! so that nothing in it names the agent, the request, the EE, the lineage,
//! the parent, the salt, the template or the decision time. Usage, payment
//! and Earned ledger rows keep their amounts and lose the record's id (the
//! nil UUID stands in). A bilateral agreement one of whose records goes is
//! deleted: it pairs two agents. The row itself stays, for the record's log
//! leaf points at it, but under a key derived from its id by a one-way hash
//! (`deidentified_key`), and every link to it (the leaf, the parent and
//! lineage group of a record still kept) is moved to that key: the id is
//! found nowhere, and whoever presents it is told 410.
//!
//! Interrupted anywhere, a batch leaves nothing behind (one transaction);
//! run by two hosts at once, a record is taken by one only (the rewrite is
//! conditional on the row not being de-identified yet, and a batch that
//! finds fewer rows to rewrite than it read rolls back).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

/// What a batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deidentified {
    /// Records de-identified.
    pub records: usize,
    /// Of them, confirmed ones whose ARA counts moved to the id-free buckets.
    pub folded: usize,
    /// Bilateral agreements deleted with one of their records.
    pub agreements: usize,
}

#[async_trait]
pub trait DeidentifyStore: Send + Sync {
    /// De-identifies up to `limit` records whose retention ended by `now`, in
    /// one transaction. Zero records: none is due (or another host took them).
    async fn deidentify_due(&self, now: DateTime<Utc>, limit: i64) -> Result<Deidentified>;
    /// Whether `dd_id` names a record that was de-identified.
    async fn is_deidentified(&self, dd_id: Uuid) -> Result<bool>;
    /// How many records are past their retention end and not de-identified yet.
    async fn deidentify_backlog(&self, now: DateTime<Utc>) -> Result<i64>;
}
