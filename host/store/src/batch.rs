//! Group commit of the hot path: creates with no parent paid from Trial or
//! over x402, and confirmations (settling their payment, if any).
//!
//! A request hands its write to a committer and waits for the answer, which
//! comes only once the transaction holding the write has committed. A
//! committer takes whatever is queued when it is free (up to
//! [`MAX_BATCH`]): alone, a request waits for no one; under load, the
//! writes that queued while the previous batch ran share one commit. On
//! PostgreSQL a batch smaller than the last one waits for the rest, at most
//! as long as the last one took ([`gather_more`], decision 0091).
//!
//! - PostgreSQL: the batch's creates are one statement and its confirmations
//!   another (each its own transaction), whatever their number. Each column
//!   of the batch is one array parameter (`unnest`), so a statement's text
//!   does not depend on its number of rows: each connection prepares it
//!   once, and PostgreSQL keeps one plan for it.
//!   Creates that pay over x402 (each reserving its authorization) are a
//!   third statement, which locks the paying agents' rows itself (decision
//!   0090); confirmations that settle a payment are a fourth. The four run
//!   at once, each on its own connection.
//! - SQLite: the batch is one transaction on the committer thread's own
//!   writer connection, each write its own statements, run back to back on
//!   that thread ([`crate::direct`]). Its commit is synced, and its writes
//!   answered, by a thread of its own ([`Syncer`]) while the next batch runs.
//!
//! On SQLite (and on PostgreSQL for a create whose base fee Trial pays), a
//! write that pays over x402 runs the ordinary path's own steps
//! ([`rows::record_steps`], [`rows::confirm_steps`]) in a savepoint: a used nonce,
//! a DAB reached, a payment no longer reserved rolls back that write alone,
//! and is answered as the ordinary path answers it.
//!
//! A create whose request_id is recorded already (before the batch, or by
//! another job of it) is answered with that record, its token checked
//! (decision 0087); a confirmation of a record its host remembered carries
//! its token, and the update confirms it only while the agent holds that
//! token (decision 0088). Any other write the batch did not take (a Trial that
//! cannot pay, a record confirmed twice in one batch, or a batch that failed
//! as a whole: a race with another host, a lost connection) is answered "not
//! taken", and its request then runs alone on the ordinary path, which finds
//! the reason and answers it. So a failing write never fails or loses the
//! others, and nothing is decided here that the ordinary path does not
//! decide again.

use anchor_domain::MilliDac;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use crate::direct::{DirectTx, run_now};
use crate::engine::{Bind, Engine, Exec, KEPT_IDLE, Kept, Query, Row, sql};
use crate::metrics::StoreMetrics;
use crate::payments;
use crate::rows::{self, DeclarationRow, decode_declaration};
use crate::{Created, Forwarder, NewDeclaration, NewPayment, PaymentStatus, Result, StoreError, StoredDeclaration, Subject, UsageEntry};

/// The most writes one batch carries.
pub(crate) const MAX_BATCH: usize = 64;
/// The longest a PostgreSQL batch waits for writes to join it ([`gather_more`]).
const MAX_GATHER_WAIT: Duration = Duration::from_millis(5);

/// A create the batch may take.
pub(crate) struct CreateJob {
    pub new: NewDeclaration,
    pub now: DateTime<Utc>,
    /// Sent by another host (`peers.rs`): committed here, never sent on.
    pub from_peer: bool,
    /// What became of it; an error when the database is unavailable (the
    /// write alone would fail the same way).
    pub reply: oneshot::Sender<Result<Taken>>,
}

/// A create's outcome in a batch.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) enum Taken {
    /// Stored, its Trial debited or its payment reserved.
    Stored(Box<StoredDeclaration>),
    /// A create whose request_id the agent used before: the earlier record
    /// (looked up in the batch, nothing written), found with the token to
    /// check still the agent's.
    Replayed(Box<StoredDeclaration>),
    /// A payment's authorization already used (its nonce is reserved).
    NonceUsed,
    /// A payment that would pass the agent's DAB.
    DabReached { limit: MilliDac, spent: MilliDac },
    /// Trial could not pay it when the batch ran (SQLite, where the batch
    /// reads the balance its debits left): refused with no write of its own.
    TrialShort { balance: MilliDac, expired: bool },
    /// Not taken, for any other reason (a token to check no longer the
    /// agent's, the batch failing as a whole, a concurrent debit): the write
    /// runs alone.
    Not,
}

/// A confirmation the batch may take.
pub(crate) struct ConfirmJob {
    pub dd_id: Uuid,
    pub integrity_hash: String,
    pub now: DateTime<Utc>,
    pub usage: Vec<UsageEntry>,
    pub leaf_data: Vec<u8>,
    /// An externally paid record's settlement reference: its payment is
    /// marked settled with the confirmation.
    pub settlement_ref: Option<String>,
    /// A token's hash the record's agent must still hold (a record this
    /// host remembered, decision 0088): confirmed only if it does.
    pub token_check: Option<[u8; 32]>,
    /// Sent by another host: committed here, never sent on.
    pub from_peer: bool,
    /// Whether the record was confirmed by this write, or `None`: not taken;
    /// an error when the database is unavailable.
    pub reply: oneshot::Sender<Result<Option<bool>>>,
}

pub(crate) enum Job {
    Create(Box<CreateJob>),
    Confirm(Box<ConfirmJob>),
    /// Stop the committer (answered once it has).
    Stop(oneshot::Sender<()>),
}

/// The queue the committer takes from.
pub(crate) struct Batcher {
    queue: mpsc::Sender<Job>,
}

/// Where the committer sends this host's writes instead of committing them
/// (PostgreSQL, shared group commit): set and cleared as the commit lease
/// moves (`peers.rs`).
pub(crate) type ForwardTo = Arc<std::sync::RwLock<Option<Arc<dyn Forwarder>>>>;

impl Batcher {
    /// Starts the committer: on SQLite, a thread with a writer connection of
    /// its own (one writer at a time anyway); on PostgreSQL, a task on the
    /// current runtime. One committer, not several: the writes that queue
    /// while a batch runs make the next batch larger, and most of a batch
    /// statement's cost is paid once per statement (two committers halved
    /// the batches and cost 7 % of the throughput, BENCHMARKS.md).
    pub(crate) fn start<E: Engine>(db: &E, forward: ForwardTo) -> Batcher {
        let (queue, jobs) = mpsc::channel(4 * MAX_BATCH);
        if let Some(file) = db.sqlite_file() {
            let (db, file) = (db.clone(), file.to_path_buf());
            let started = std::thread::Builder::new().name("sqlite-committer".into()).spawn(move || sqlite_thread(db, &file, jobs));
            if let Err(error) = started {
                tracing::warn!(%error, "the SQLite committer did not start; every write runs alone");
            }
            return Batcher { queue };
        }
        tokio::spawn(pg_loop(db.clone(), jobs, forward));
        Batcher { queue }
    }

    /// Hands a job over; `false` if no committer is running any more.
    pub(crate) async fn submit(&self, job: Job) -> bool {
        self.queue.send(job).await.is_ok()
    }

    /// Stops the SQLite committer once the jobs before this call are done,
    /// closing its connection (writes after it run alone).
    pub(crate) async fn stop(&self) {
        let (reply, done) = oneshot::channel();
        if self.queue.send(Job::Stop(reply)).await.is_ok() {
            let _ = done.await;
        }
    }
}

/// Takes what is queued now (the first waited for), up to `max`: the
/// committers' batches and the readers' alike.
pub(crate) fn gather<T>(first: T, queue: &mut mpsc::Receiver<T>, max: usize) -> Vec<T> {
    let mut batch = vec![first];
    take_queued(&mut batch, queue, max);
    batch
}

/// Adds to `batch` what is queued now, until it holds `max`.
fn take_queued<T>(batch: &mut Vec<T>, queue: &mut mpsc::Receiver<T>, max: usize) {
    while batch.len() < max {
        match queue.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

/// A batch split by kind; the stop request, if it holds one.
fn split<E: Engine>(db: &E, batch: Vec<Job>) -> (Vec<CreateJob>, Vec<ConfirmJob>, Option<oneshot::Sender<()>>) {
    let writes = batch.iter().filter(|job| !matches!(job, Job::Stop(_))).count();
    db.metrics().batch_size.observe(writes as f64);
    if writes > 1 {
        db.metrics().shared_batches.inc();
    }
    let (mut creates, mut confirms, mut stop) = (Vec::new(), Vec::new(), None);
    for job in batch {
        match job {
            Job::Create(job) => creates.push(*job),
            Job::Confirm(job) => confirms.push(*job),
            Job::Stop(reply) => stop = Some(reply),
        }
    }
    (creates, confirms, stop)
}

async fn pg_loop<E: Engine>(db: E, mut jobs: mpsc::Receiver<Job>, forward_to: ForwardTo) {
    let mut kept = [Kept::new(&db), Kept::new(&db), Kept::new(&db), Kept::new(&db)];
    let mut last = Last { writes: 0, took: Duration::ZERO, ended: Instant::now() };
    while let Some(first) = next(&mut jobs, kept.each_mut()).await {
        let mut batch = gather(first, &mut jobs, MAX_BATCH);
        gather_more(&mut batch, &mut jobs, last).await;
        let started = Instant::now();
        let writes = batch.len();
        let (creates, confirms, stop) = split(&db, batch);
        let to = forward_to.read().map(|to| to.clone()).unwrap_or(None);
        match to {
            // This host's own writes go to the committing host; those another
            // host sent here (during a move of the lease) are committed here.
            // What comes back unanswered is committed here after all.
            Some(to) => {
                let (own_creates, creates): (Vec<_>, Vec<_>) = creates.into_iter().partition(|job| !job.from_peer);
                let (own_confirms, confirms): (Vec<_>, Vec<_>) = confirms.into_iter().partition(|job| !job.from_peer);
                let (left, ()) =
                    tokio::join!(forward(&db, to.as_ref(), own_creates, own_confirms), pg_batch(&db, &mut kept, creates, confirms));
                if let Some((creates, confirms)) = left {
                    pg_batch(&db, &mut kept, creates, confirms).await;
                }
            }
            _ => pg_batch(&db, &mut kept, creates, confirms).await,
        }
        last = Last { writes, took: started.elapsed(), ended: Instant::now() };
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
    }
}

/// The last batch a PostgreSQL committer ran, as the next one reads it
/// ([`gather_more`]): how many writes it held, how long they took, and
/// when it ended.
#[derive(Clone, Copy)]
struct Last {
    writes: usize,
    took: Duration,
    ended: Instant,
}

/// Lets a batch smaller than the last one wait for the rest, for at most as
/// long as the last one's writes took (decision 0091). The clients the last
/// batch answered are on their way back with their next writes; committed
/// at once, the few that are queued would make a commit of their own and
/// the rest another, each a flush the standby acknowledges. Alone, a write
/// waits for nothing (the last batch held one); nor does a batch as large
/// as the last, nor one whose first write came later after the last batch
/// than that batch took (its clients do not come back within a commit).
async fn gather_more(batch: &mut Vec<Job>, jobs: &mut mpsc::Receiver<Job>, last: Last) {
    if last.ended.elapsed() > last.took {
        return;
    }
    let deadline = Instant::now() + last.took.min(MAX_GATHER_WAIT);
    while batch.len() < last.writes.min(MAX_BATCH) && !batch.iter().any(|job| matches!(job, Job::Stop(_))) {
        match tokio::time::timeout_at(deadline, jobs.recv()).await {
            Ok(Some(job)) => {
                batch.push(job);
                take_queued(batch, jobs, MAX_BATCH);
            }
            _ => return,
        }
    }
}

/// A batch's writes on PostgreSQL: each kind its own statement (the paid
/// creates their own transaction), on its own connection, so that a
/// confirmation's commit does not wait for the creates'.
async fn pg_batch<E: Engine>(db: &E, kept: &mut [Kept<E>; 4], creates: Vec<CreateJob>, confirms: Vec<ConfirmJob>) {
    if creates.is_empty() && confirms.is_empty() {
        return;
    }
    let [for_creates, for_confirms, for_settles, for_paid] = kept;
    let (paid, creates): (Vec<_>, Vec<_>) = creates.into_iter().partition(|job| job.new.external.is_some());
    let (settling, confirms): (Vec<_>, Vec<_>) = confirms.into_iter().partition(|job| job.settlement_ref.is_some());
    tokio::join!(
        pg_creates(db, for_creates, creates),
        pg_confirms(db, for_confirms, confirms, pg_confirm_statement),
        pg_confirms(db, for_settles, settling, pg_settle_statement),
        pg_paid(db, for_paid, paid)
    );
}

/// The next item of `queue`: taken at once if one is queued; otherwise the
/// kept connections are kept for [`KEPT_IDLE`] while waiting for one (under
/// load the next comes within it: lent and taken back each time, a kept
/// connection would cost two checks, each a round trip), then let go before
/// waiting on (`None`: closed).
pub(crate) async fn next<T, E: Engine, const N: usize>(queue: &mut mpsc::Receiver<T>, kept: [&mut Kept<E>; N]) -> Option<T> {
    if let Ok(item) = queue.try_recv() {
        return Some(item);
    }
    if let Ok(item) = tokio::time::timeout(KEPT_IDLE, queue.recv()).await {
        return item;
    }
    for kept in kept {
        kept.release();
    }
    queue.recv().await
}

fn sqlite_thread<E: Engine>(db: E, file: &std::path::Path, mut jobs: mpsc::Receiver<Job>) {
    let mut conn = match crate::direct::open_writer(file) {
        Ok(conn) => conn,
        Err(error) => {
            tracing::warn!(%error, "the SQLite committer could not open its connection; every write runs alone");
            return;
        }
    };
    // The syncer, and the committer's commits left unsynced for it; without
    // it, each commit syncs (and answers) itself.
    let timed = db.clone();
    let mut syncer = Syncer::start(move |seconds| timed.metrics().observe_step("sync", seconds), file);
    if syncer.is_some()
        && let Err(error) = conn.pragma_update(None, "synchronous", "normal")
    {
        tracing::warn!(%error, "the SQLite committer could not leave its syncs to the syncer; each commit syncs");
        syncer = None;
    }
    while let Some(first) = jobs.blocking_recv() {
        let mut batch = gather(first, &mut jobs, MAX_BATCH);
        if let Some(syncer) = &syncer {
            syncer.gather_while_syncing(&mut batch, &mut jobs);
        }
        let (creates, confirms, stop) = split(&db, batch);
        if !creates.is_empty() || !confirms.is_empty() {
            sqlite_batch(&mut conn, db.metrics(), syncer.as_ref(), creates, confirms);
        }
        if let Some(stop) = stop {
            // Every answer the syncer holds is given before the stop's.
            drop(syncer);
            drop(conn);
            let _ = stop.send(());
            return;
        }
    }
}

/// The longest the committer waits for a sync's end before it looks again.
const SYNC_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// A batch's answers, given once its commit is on disk (or refused, with
/// the error, if the sync failed).
type Deferred = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// SQLite's commits synced off the committer's thread (decision 0077).
///
/// With `synchronous = full` each commit writes its frames to the
/// write-ahead log and syncs it before the next batch can begin: the
/// committer's thread waited about 1 ms a batch on the disk (half its time
/// under a paid load) with the write lock held. Its connection commits with
/// `synchronous = normal` instead (the frames written, not synced), and
/// hands the batch's answers here: this thread syncs the log's file
/// (`fdatasync`, which flushes every frame written before it, whichever
/// connection wrote it) and only then answers, so that no write is
/// acknowledged before it is on disk, while the committer already runs the
/// next batch. The answers of every batch committed while a sync ran share
/// the next one. A crash loses only unanswered writes, and the log's frames
/// are recovered in order, so a later batch is never kept without an
/// earlier one.
///
/// A batch committed while a sync runs is answered only after the sync
/// that follows it, so the committer does not commit it at once: it
/// gathers the writes that come meanwhile until the sync under way has
/// answered (or the batch is full), then commits them as one batch. Under
/// load that makes fewer, larger commits (each commit writes every page
/// it changed to the log, and makes every reader connection read its
/// pages again) for the same wait; alone, a write still waits for no one.
struct Syncer {
    queue: Option<std::sync::mpsc::Sender<Deferred>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Answers handed to the syncer and not given yet.
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

impl Syncer {
    /// Starts the thread syncing `file`'s write-ahead log, each sync's
    /// seconds told to `timed`.
    fn start(timed: impl Fn(f64) + Send + 'static, file: &std::path::Path) -> Option<Syncer> {
        let mut wal = file.as_os_str().to_owned();
        wal.push("-wal");
        let wal = std::path::PathBuf::from(wal);
        let (queue, answers) = std::sync::mpsc::channel::<Deferred>();
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // The committer (the thread starting this one), woken after each sync.
        let committer = std::thread::current();
        let given = pending.clone();
        let started = std::thread::Builder::new().name("sqlite-syncer".into()).spawn(move || {
            let mut log: Option<std::fs::File> = None;
            while let Ok(first) = answers.recv() {
                let mut due = vec![first];
                due.extend(answers.try_iter());
                let started = std::time::Instant::now();
                let synced = sync_log(&mut log, &wal);
                timed(started.elapsed().as_secs_f64());
                if let Err(error) = &synced {
                    tracing::error!(%error, "syncing SQLite's write-ahead log failed; the writes waiting for it are refused");
                }
                let count = due.len();
                for answer in due {
                    answer(synced.as_ref().err());
                }
                given.fetch_sub(count, std::sync::atomic::Ordering::SeqCst);
                committer.unpark();
            }
        });
        match started {
            Ok(thread) => Some(Syncer { queue: Some(queue), thread: Some(thread), pending }),
            Err(error) => {
                tracing::warn!(%error, "the SQLite syncer did not start; each commit syncs");
                None
            }
        }
    }

    /// Adds to `batch` what is queued in `jobs` until no sync is under way
    /// or waiting to start, or the batch is full (a stop request ends it).
    /// The syncer wakes this thread after each sync; the wait is also
    /// bounded, so a wake-up missed costs at most [`SYNC_WAIT`].
    fn gather_while_syncing(&self, batch: &mut Vec<Job>, jobs: &mut mpsc::Receiver<Job>) {
        while self.pending.load(std::sync::atomic::Ordering::SeqCst) > 0
            && batch.len() < MAX_BATCH
            && !batch.iter().any(|job| matches!(job, Job::Stop(_)))
        {
            std::thread::park_timeout(SYNC_WAIT);
            take_queued(batch, jobs, MAX_BATCH);
        }
    }

    /// Gives `answer` once what is committed now is on disk.
    fn after_sync(&self, answer: Deferred) {
        self.pending.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(queue) = &self.queue
            && let Err(std::sync::mpsc::SendError(answer)) = queue.send(answer)
        {
            self.pending.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            // The syncer is gone (it cannot be while the committer runs): the
            // answer is given as a failed sync's.
            answer(Some(&StoreError::Unavailable("the SQLite syncer stopped".into())));
        }
    }
}

impl Drop for Syncer {
    /// Waits for the answers queued before.
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Syncs the write-ahead log's file (opened on first use, and again after
/// a failure).
fn sync_log(log: &mut Option<std::fs::File>, wal: &std::path::Path) -> Result<()> {
    let synced = match log {
        Some(file) => file.sync_data(),
        None => std::fs::File::open(wal).and_then(|file| {
            file.sync_data()?;
            *log = Some(file);
            Ok(())
        }),
    };
    synced.map_err(|error| {
        *log = None;
        StoreError::Unavailable(format!("sqlite: syncing {}: {error}", wal.display()))
    })
}

/// A record a batch stored, and the token its write checked (if any).
type StoredCopy = (Box<StoredDeclaration>, Option<[u8; 32]>);

/// Answers every job of `creates` with what became of it: the record
/// stored under its dd_id, or its refusal; "not taken" if neither. A copy
/// of a request the batch stored for another job (one request_id sent
/// twice at once) is answered with that record, where it was sent with the
/// same token to check (or none): the write alone would find the same.
fn answer_creates(creates: Vec<CreateJob>, mut taken: HashMap<Uuid, Taken>) {
    let untaken = |job: &CreateJob| !matches!(taken.get(&job.new.declaration.dd_id), Some(answer) if !matches!(answer, Taken::Not));
    // (agent, request_id) of each job not taken: the record another job
    // stored under it, with the token that job's write checked.
    let mut copies: HashMap<(Uuid, Uuid), Option<StoredCopy>> =
        creates.iter().filter(|job| untaken(job)).map(|job| ((job.new.declaration.agent_id, job.new.request_id), None)).collect();
    if !copies.is_empty() {
        for job in &creates {
            if let (Some(slot), Some(Taken::Stored(record))) =
                (copies.get_mut(&(job.new.declaration.agent_id, job.new.request_id)), taken.get(&job.new.declaration.dd_id))
            {
                *slot = Some((record.clone(), job.new.token_check));
            }
        }
    }
    for job in creates {
        let answer = match taken.remove(&job.new.declaration.dd_id) {
            Some(Taken::Not) | None => match copies.get(&(job.new.declaration.agent_id, job.new.request_id)) {
                Some(Some((record, checked))) if job.new.token_check.is_none() || job.new.token_check == *checked => {
                    Taken::Replayed(record.clone())
                }
                _ => Taken::Not,
            },
            Some(answer) => answer,
        };
        let _ = job.reply.send(Ok(answer));
    }
}

/// Answers every write of a batch that failed because the database is
/// unavailable: running each alone would only wait for it again.
fn refuse_all(creates: Vec<CreateJob>, confirms: Vec<ConfirmJob>, error: &StoreError) {
    for job in creates {
        let _ = job.reply.send(Err(error.clone()));
    }
    for job in confirms {
        let _ = job.reply.send(Err(error.clone()));
    }
}

/// PostgreSQL: the batch's creates as one statement. Duplicated request_ids
/// and those already recorded are left out (the latter answered with their
/// record, the former with the one the batch stored); each agent's Trial is debited
/// once, by the sum of its records that fit in order (a record that does
/// not fit, and every later one of that agent, is left out); the debit
/// checks the balance again under the row lock, so a concurrent debit
/// elsewhere leaves the agent's records out rather than overspend.
async fn pg_creates<E: Engine>(db: &E, conn: &mut Kept<E>, mut creates: Vec<CreateJob>) {
    if creates.is_empty() {
        return;
    }
    // Rows in agent order: concurrent batches lock agents in one order.
    creates.sort_by_key(|job| job.new.declaration.agent_id);
    let rows: Vec<_> = creates.iter().map(|job| DeclarationRow::trial_paid(&job.new)).collect();
    let statement = pg_create_statement(&rows, &creates).ok_or_else(|| StoreError::Unsupported("creates as arrays".into()));
    let outcome = async { Ok(conn.fetch_all(statement?).await?.iter().filter_map(|row| taken_of(row, &creates).ok().flatten()).collect()) };
    let outcome = outcome.await;
    drop(rows);
    answer_batch(db, "creates", creates, outcome);
}

/// How both create statements end, after their CTE `stored`: what they
/// stored, and beside it the earlier record of each request_id recorded
/// before the batch (a retry, or a copy sent at once), its token checked,
/// marked `b_replay` with the job it answers ([`taken_of`]). The check is a
/// scalar subquery on the agent's key, not `or exists (…)`: PostgreSQL may
/// run an `exists` under `or` as a hashed subplan, which reads the whole
/// table once per statement.
const REPLAYED: &str = " select cast(null as bigint) as b_replay, stored.* from stored union all \
     select input.b_i, d.* from input join declaration d on d.agent_id = input.agent_id and d.request_id = input.request_id \
     where input.b_token is null \
     or input.b_token = (select a.token_hash from agent a where a.agent_id = input.agent_id)";

/// A row of a create statement ([`REPLAYED`]): the record it stored, under
/// its own dd_id, or the earlier record found for the job `b_replay` names
/// (an index into `jobs`), under that job's dd_id; `None` for an index out
/// of `jobs`.
fn taken_of(row: &impl Row, jobs: &[CreateJob]) -> Result<Option<(Uuid, Taken)>> {
    let record = Box::new(decode_declaration(row)?);
    Ok(match row.get::<Option<i64>>("b_replay")? {
        None => Some((record.declaration.dd_id, Taken::Stored(record))),
        Some(i) => usize::try_from(i).ok().and_then(|i| jobs.get(i)).map(|job| (job.new.declaration.dd_id, Taken::Replayed(record))),
    })
}

/// The batch's creates as one statement of one text whatever their number:
/// each column one array parameter (`None` if the rows cannot be so put).
fn pg_create_statement<'q>(rows: &[DeclarationRow<'q>], jobs: &'q [CreateJob]) -> Option<Query<'q>> {
    let traced = jobs.iter().any(|job| job.new.declaration.trace_key.is_some());
    let input: Vec<_> = rows
        .iter()
        .zip(jobs)
        .enumerate()
        .map(|(n, (row, job))| {
            let mut columns = vec![
                ("b_i", (n as i64).value()),
                ("b_amount", job.new.declaration.dac_amount.milli().value()),
                ("b_now", job.now.value()),
                ("b_token", job.new.token_check.as_ref().value()),
            ];
            columns.extend(row.batch_columns_but_trial_left(traced));
            columns
        })
        .collect();
    let names: Vec<&str> = input.first()?.iter().skip(4).map(|(name, _)| *name).collect();
    let mut q = sql("with input as (select * from ");
    q.push_unnest("input", input)?;
    q.push(
        "), fresh as (select distinct on (input.agent_id, input.request_id) input.* from input \
         where not exists (select 1 from declaration d where d.agent_id = input.agent_id and d.request_id = input.request_id) \
         order by input.agent_id, input.request_id, input.b_i), \
         running as (select fresh.*, sum(fresh.b_amount) over (partition by fresh.agent_id order by fresh.b_i) as b_spent from fresh), \
         fits as (select running.* from running join agent a on a.agent_id = running.agent_id \
         where a.trial_balance_milli >= running.b_spent and a.trial_expires_at > running.b_now \
         and (running.b_token is null or a.token_hash = running.b_token)), \
         debit as (select agent_id, sum(b_amount) as total, max(b_now) as latest from fits group by agent_id), \
         t as (update agent a set trial_balance_milli = a.trial_balance_milli - debit.total from debit \
         where a.agent_id = debit.agent_id and a.trial_balance_milli >= debit.total and a.trial_expires_at > debit.latest \
         returning a.agent_id, a.trial_balance_milli + debit.total as before), \
         stored as (insert into declaration (",
    );
    q.push(&names.join(", ")).push(", trial_remaining_after_milli) select ");
    for name in &names {
        q.push("fits.").push(name).push(", ");
    }
    q.push("t.before - fits.b_spent from fits join t on t.agent_id = fits.agent_id returning *)").push(REPLAYED);
    Some(q.labelled("insert", "declaration"))
}

/// PostgreSQL: the batch's confirmations as one statement (`statement`:
/// [`pg_confirm_statement`], or [`pg_settle_statement`] for those settling a
/// payment): the records' updates, their usage rows and their log leaves,
/// each written only for a record the update matched. A record named twice
/// is confirmed by its first job; the other is not taken (and, alone, finds
/// it confirmed).
async fn pg_confirms<E: Engine>(db: &E, conn: &mut Kept<E>, confirms: Vec<ConfirmJob>, statement: fn(&[ConfirmJob]) -> Option<Query<'_>>) {
    if confirms.is_empty() {
        return;
    }
    let statement = statement(&confirms).ok_or_else(|| StoreError::Unsupported("confirmations as arrays".into()));
    let confirmed: HashSet<i64> = match async { conn.scalar_all::<i64>(statement?).await }.await {
        Ok(taken) => taken.into_iter().collect(),
        Err(error) => {
            db.metrics().failed_batches.inc();
            if error.is_unavailable() {
                return refuse_all(Vec::new(), confirms, &error);
            }
            tracing::debug!(%error, "a batch of confirmations failed as a whole; each runs alone");
            for job in confirms {
                let _ = job.reply.send(Ok(None));
            }
            return;
        }
    };
    let answers = confirm_answers(&confirms, &confirmed);
    for (job, answer) in confirms.into_iter().zip(answers) {
        let _ = job.reply.send(Ok(answer));
    }
}

/// What became of each confirmation of a batch statement, given the jobs
/// (by index) it confirmed: a record named twice is confirmed by its first
/// job, the other is not taken (`None`; alone, it finds it confirmed); one
/// that matched nothing was confirmed already, released, not there, or
/// (settling) its payment was no longer reserved.
fn confirm_answers(confirms: &[ConfirmJob], confirmed: &HashSet<i64>) -> Vec<Option<bool>> {
    let mut first = HashSet::new();
    confirms
        .iter()
        .enumerate()
        .map(|(i, job)| {
            let answer = if confirmed.contains(&(i as i64)) {
                Some(true)
            } else if first.contains(&job.dd_id) {
                None
            } else {
                Some(false)
            };
            first.insert(job.dd_id);
            answer
        })
        .collect()
}

/// A batch's confirmations as array rows: the columns both confirmation
/// statements read (the settlement reference is null for a record paid
/// from Trial or Earned DAC).
fn confirm_input(confirms: &[ConfirmJob]) -> Vec<Vec<(&'static str, crate::engine::Value<'_>)>> {
    confirms
        .iter()
        .enumerate()
        .map(|(n, job)| {
            vec![
                ("b_i", (n as i64).value()),
                ("b_dd_id", job.dd_id.value()),
                ("b_hash", job.integrity_hash.as_str().value()),
                ("b_now", job.now.value()),
                ("b_leaf", job.leaf_data.as_slice().value()),
                ("b_ref", job.settlement_ref.as_deref().value()),
                ("b_token", job.token_check.as_ref().value()),
            ]
        })
        .collect()
}

/// Appends the usage rows of the confirmed records `d` (a CTE with `b_i`,
/// `agent_id`, and `payment` as the SQL of the payment an external entry
/// names): one `usage_entry` row per entry of each confirmed job.
fn push_usage<'q>(q: &mut Query<'q>, confirms: &'q [ConfirmJob], payment: &str) -> Option<()> {
    let usage: Vec<_> = confirms
        .iter()
        .enumerate()
        .flat_map(|(n, job)| {
            job.usage.iter().map(move |entry| {
                let mut columns =
                    vec![("b_i", (n as i64).value()), ("b_external", (entry.source == crate::PaymentSource::External).value())];
                columns.extend(
                    payments::usage_columns(Subject::declaration(job.dd_id), None, entry, job.now)
                        .into_iter()
                        .filter(|(name, _)| *name != "payment_id"),
                );
                columns
            })
        })
        .collect();
    let Some(first) = usage.first() else { return Some(()) };
    let names: Vec<&str> = first.iter().skip(2).map(|(name, _)| *name).collect();
    q.push(", usage_input as (select * from ");
    q.push_unnest("usage_input", usage)?;
    q.push("), u as (insert into usage_entry (agent_id, payment_id, ");
    q.push(&names.join(", ")).push(") select d.agent_id, case when usage_input.b_external then ").push(payment).push(" end");
    for name in &names {
        q.push(", usage_input.").push(name);
    }
    q.push(" from usage_input join d on d.b_i = usage_input.b_i)");
    Some(())
}

/// How both confirmation statements begin: the batch's rows (`input`), and
/// each record once, its first confirmation in the batch (`once`). Each
/// statement also names the rows it updates by `= any(array(select b_dd_id
/// from once))`, an index condition: its plan is made once per connection,
/// while the tables may be small, and a join left to reach them by a hash
/// of the whole index (seen: every batch reading all of `declaration_pkey`)
/// would grow with the table.
fn confirm_head(confirms: &[ConfirmJob]) -> Option<Query<'_>> {
    let mut q = sql("with input as (select * from ");
    q.push_unnest("input", confirm_input(confirms))?;
    q.push("), once as (select distinct on (b_dd_id) * from input order by b_dd_id, b_i)");
    Some(q)
}

/// How both confirmation statements end: a log leaf queued for each record
/// the CTE `d` confirmed.
const QUEUE_LEAVES: &str = ", l as (insert into log_pending (dd_id, leaf_data, enqueued_at) select dd_id, b_leaf, b_now from d)";

/// The batch's confirmations as one statement of one text whatever their
/// number (two texts: with usage rows and without); `None` if the rows
/// cannot be put as array parameters.
fn pg_confirm_statement(confirms: &[ConfirmJob]) -> Option<Query<'_>> {
    let mut q = confirm_head(confirms)?;
    q.push(
        ", d as (update declaration set confirmed_at = once.b_now, integrity_hash = once.b_hash, settlement_status = 'settled' \
         from once where declaration.dd_id = once.b_dd_id and declaration.dd_id = any(array(select b_dd_id from once)) \
         and declaration.confirmed_at is null \
         and declaration.settlement_status <> 'released' \
         and (once.b_token is null or once.b_token = (select a.token_hash from agent a where a.agent_id = declaration.agent_id)) \
         returning declaration.dd_id, declaration.agent_id, once.b_i, once.b_now, once.b_leaf)",
    );
    push_usage(&mut q, confirms, "cast(null as uuid)")?;
    q.push(QUEUE_LEAVES).push(" select b_i from d");
    Some(q)
}

/// PostgreSQL: the batch's creates that pay over x402. Those whose whole
/// base fee is paid externally are one statement on the kept connection
/// `kept` (their agents locked in it, by `paying_agents`); those whose base
/// fee Trial pays share a transaction: every paying agent's row locked
/// first (in agent order, so that the DAB read after it counts every
/// payment committed before), then each runs the ordinary steps in a
/// savepoint. The lock is `for no key update`: it excludes the other writes
/// of the agent's spending (which take it or `for update`) but not a
/// confirmation's usage rows, whose foreign key only shares the row.
async fn pg_paid<E: Engine>(db: &E, kept: &mut Kept<E>, creates: Vec<CreateJob>) {
    if creates.is_empty() {
        return;
    }
    let (whole, parted): (Vec<_>, Vec<_>) = creates.into_iter().partition(|job| !job.new.base_from_trial);
    if !whole.is_empty() {
        let run = async {
            let statement = pg_paid_create_statement(&whole).ok_or_else(|| StoreError::Unsupported("paid creates as arrays".into()))?;
            let mut taken = HashMap::with_capacity(whole.len());
            for row in kept.fetch_all(statement).await? {
                taken.extend(taken_of(&row, &whole)?);
            }
            Ok::<_, StoreError>(taken)
        };
        let outcome = run.await;
        answer_batch(db, "paid creates", whole, outcome);
    }
    if !parted.is_empty() {
        let run = async {
            // On the hot pool: its statements are arrays, planned once per connection.
            let mut tx = db.begin_hot().await?;
            let mut agents: Vec<Uuid> = parted.iter().map(|job| job.new.declaration.agent_id).collect();
            agents.sort();
            agents.dedup();
            let mut lock = sql("select a.agent_id from agent a join (select * from ");
            lock.push_unnest("paying", agents.iter().map(|id| vec![("agent_id", id.value())]).collect())
                .ok_or_else(|| StoreError::Unsupported("agents as an array".into()))?;
            lock.push(") paying on paying.agent_id = a.agent_id order by a.agent_id for no key update of a");
            tx.fetch_all(lock).await?;
            let mut taken = HashMap::with_capacity(parted.len());
            for job in &parted {
                taken.insert(job.new.declaration.dd_id, paid_create(&mut tx, db.for_update(), job).await?);
            }
            crate::engine::Transaction::commit(tx).await?;
            Ok::<_, StoreError>(taken)
        };
        let outcome = run.await;
        answer_batch(db, "paid creates", parted, outcome);
    }
}

/// Answers a batch of creates (`what`, for the log): each with what its
/// statement or transaction took, or, if that failed as a whole, refused
/// (the database unavailable) or left to run alone.
fn answer_batch<E: Engine>(db: &E, what: &str, creates: Vec<CreateJob>, outcome: Result<HashMap<Uuid, Taken>>) {
    match outcome {
        Ok(taken) => answer_creates(creates, taken),
        Err(error) => {
            db.metrics().failed_batches.inc();
            if error.is_unavailable() {
                return refuse_all(creates, Vec::new(), &error);
            }
            tracing::debug!(%error, "a batch of {what} failed as a whole; each runs alone");
            answer_creates(creates, HashMap::new());
        }
    }
}

/// The batch's paid creates as one statement, which locks their agents
/// (`paying_agents`, migration 0046: locked in agent order, then read again
/// with their DAB spending as committed meanwhile): each reserves its
/// authorization and records its declaration, or is left out: a request_id
/// recorded already (answered with its record, its token checked, as the
/// Trial statement does) or repeated in the batch, a nonce used already or
/// repeated, a payment that would take its agent past its DAB (counting
/// every earlier create of the batch for that agent, taken or not, so it
/// never overspends; the spending is counted from the batch's earliest
/// period, which can only count more). Left out is "not taken": the write
/// then runs alone and answers why.
fn pg_paid_create_statement(jobs: &[CreateJob]) -> Option<Query<'_>> {
    let rows: Vec<DeclarationRow<'_>> = jobs.iter().map(|job| DeclarationRow::paid_externally(&job.new)).collect();
    let traced = jobs.iter().any(|job| job.new.declaration.trace_key.is_some());
    let mut input = Vec::with_capacity(jobs.len());
    for (n, (row, job)) in rows.iter().zip(jobs).enumerate() {
        let payment = job.new.external.as_ref()?;
        let mut columns = vec![
            ("b_i", (n as i64).value()),
            ("b_now", job.now.value()),
            ("b_period", payments::period_key(payment.period_start).value()),
            ("b_dab_default", payment.dab_default.milli().value()),
            ("p_payment_id", payment.payment_id.value()),
            ("p_network", payment.network.as_str().value()),
            ("p_asset", payment.asset.as_str().value()),
            ("p_payer", payment.payer.as_str().value()),
            ("p_nonce", payment.nonce.as_str().value()),
            ("p_amount_units", payment.amount_units.value()),
            ("p_pay_to", payment.pay_to.as_str().value()),
            ("p_valid_after", payment.valid_after.value()),
            ("p_valid_before", payment.valid_before.value()),
            ("p_route", payment.route.as_str().value()),
            ("p_pricing_version", payment.priced_by.version.as_str().value()),
            ("p_pricing_sha256", payment.priced_by.sha256.as_str().value()),
            ("p_payload", payment.payload.as_str().value()),
            ("b_token", job.new.token_check.as_ref().value()),
            ("b_base_fee", job.new.base_fee.milli().value()),
        ];
        columns.extend(row.columns_with_trace_key(traced));
        input.push(columns);
    }
    let names: Vec<&str> =
        input.first()?.iter().map(|(name, _)| *name).filter(|name| !name.starts_with("b_") && !name.starts_with("p_")).collect();
    let mut q = sql("with input as (select * from ");
    q.push_unnest("input", input)?;
    q.push(
        "), payer as materialized (select * from paying_agents(\
         array(select distinct input.agent_id from input order by 1), (select min(input.b_period) from input))), \
         fresh as (select distinct on (input.agent_id, input.request_id) input.* from input \
         where not exists (select 1 from declaration d where d.agent_id = input.agent_id and d.request_id = input.request_id) \
         and not exists (select 1 from x402_payment x where x.network = input.p_network and x.asset = input.p_asset \
         and x.payer = input.p_payer and x.nonce = input.p_nonce) \
         order by input.agent_id, input.request_id, input.b_i), \
         once as (select distinct on (p_network, p_asset, p_payer, p_nonce) * from fresh \
         order by p_network, p_asset, p_payer, p_nonce, b_i), \
         running as (select input.b_i, sum(input.p_amount_units) over (partition by input.agent_id order by input.b_i) as b_running \
         from input), \
         fits as (select once.* from once join running on running.b_i = once.b_i join payer a on a.agent_id = once.agent_id \
         where running.b_running + a.spent_units <= coalesce(a.dab_limit_milli, once.b_dab_default) \
         and (once.b_token is null or (a.token_hash = once.b_token \
         and (a.trial_expires_at <= once.b_now or a.trial_balance_milli < once.b_base_fee)))), \
         p as (insert into x402_payment (payment_id, network, asset, payer, nonce, amount_units, pay_to, valid_after, \
         valid_before, route, pricing_version, pricing_sha256, agent_id, subject_domain, subject_id, payload, status, \
         created_at, updated_at, dd_id) \
         select p_payment_id, p_network, p_asset, p_payer, p_nonce, p_amount_units, p_pay_to, p_valid_after, p_valid_before, \
         p_route, p_pricing_version, p_pricing_sha256, agent_id, 'declaration', dd_id, p_payload, 'reserved', b_now, b_now, dd_id \
         from fits on conflict do nothing returning payment_id), \
         e as (insert into x402_payment_event (payment_id, status, reason, at) \
         select p.payment_id, 'reserved', null, fits.b_now from p join fits on fits.p_payment_id = p.payment_id), \
         stored as (insert into declaration (",
    );
    q.push(&names.join(", ")).push(") select ");
    q.push(&names.iter().map(|name| format!("fits.{name}")).collect::<Vec<_>>().join(", "));
    // A retried paid create reserves nothing and gets its record.
    q.push(" from fits join p on p.payment_id = fits.p_payment_id returning *)").push(REPLAYED);
    Some(q.labelled("insert", "declaration"))
}

/// The batch's settling confirmations as one statement: each moves its
/// reserved payment to settled (with its event), fixes the record, writes
/// its usage rows (the external ones naming the payment) and queues its log
/// leaf; it returns the jobs (by index) it confirmed. A payment moved for a
/// record a concurrent write changed first (released, or confirmed by
/// another host) makes the statement fail, so that nothing of it is
/// written; each confirmation then runs alone.
fn pg_settle_statement(confirms: &[ConfirmJob]) -> Option<Query<'_>> {
    let mut q = confirm_head(confirms)?;
    q.push(
        ", p as (update x402_payment set status = 'settled', settlement_ref = coalesce(once.b_ref, x402_payment.settlement_ref), \
         updated_at = once.b_now from once where x402_payment.dd_id = once.b_dd_id \
         and x402_payment.dd_id = any(array(select b_dd_id from once)) \
         and x402_payment.status in ('reserved', 'settle_unknown') \
         and exists (select 1 from declaration r where r.dd_id = once.b_dd_id and r.confirmed_at is null \
         and r.settlement_status <> 'released') \
         and (once.b_token is null or once.b_token = (select a.token_hash from agent a where a.agent_id = x402_payment.agent_id)) \
         returning x402_payment.payment_id, once.b_i, once.b_now), \
         d as (update declaration set confirmed_at = once.b_now, integrity_hash = once.b_hash, settlement_status = 'settled' \
         from once join p on p.b_i = once.b_i where declaration.dd_id = once.b_dd_id \
         and declaration.dd_id = any(array(select b_dd_id from once)) and declaration.confirmed_at is null \
         and declaration.settlement_status <> 'released' \
         returning declaration.dd_id, declaration.agent_id, once.b_i, once.b_now, once.b_leaf, p.payment_id), \
         e as (insert into x402_payment_event (payment_id, status, reason, at) select payment_id, 'settled', null, b_now from p)",
    );
    push_usage(&mut q, confirms, "d.payment_id")?;
    // The check: only when more payments moved than records were confirmed
    // is a text (made of the counts, so not folded into a constant when the
    // statement is planned) read as a number, which fails the statement.
    q.push(QUEUE_LEAVES).push(
        ", counts as (select (select count(*) from p) as moved, (select count(*) from d) as confirmed) \
         select b_i from d union all \
         select cast(moved || ' payments moved for ' || confirmed || ' records: a record changed under the batch' as bigint) \
         from counts where moved <> confirmed",
    );
    Some(q)
}

/// A create that reserves a payment, in a savepoint: a refusal or a failure
/// rolls back its writes alone. A failure (other than the database being
/// unavailable) is "not taken": the write then runs alone and finds why.
async fn paid_create<X: Exec>(tx: &mut X, for_update: &str, job: &CreateJob) -> Result<Taken> {
    tx.execute(sql("savepoint job")).await?;
    let outcome = paid_steps(tx, for_update, job).await;
    end_savepoint(tx, matches!(outcome, Ok(Taken::Stored(_)))).await?;
    match outcome {
        Err(error) if error.is_unavailable() => Err(error),
        Err(error) => {
            tracing::debug!(%error, "a payment's create failed in its batch; it runs alone");
            Ok(Taken::Not)
        }
        done => done,
    }
}

/// The ordinary path's steps for a create that reserves a payment, its
/// request_id looked up first (a retried request carries the same
/// authorization, whose nonce would otherwise refuse it).
async fn paid_steps<X: Exec>(tx: &mut X, for_update: &str, job: &CreateJob) -> Result<Taken> {
    let (new, d) = (&job.new, &job.new.declaration);
    // A token is checked where Trial pays no part (`sqlite_paid_create`, `pg_paid_create_statement`).
    if new.token_check.is_some() {
        return Ok(Taken::Not);
    }
    let earlier = sql("select * from declaration where agent_id = $1 and request_id = $2").bind(d.agent_id).bind(new.request_id);
    if let Some(row) = tx.fetch_optional(earlier).await? {
        return Ok(Taken::Replayed(Box::new(decode_declaration(&row)?)));
    }
    Ok(match rows::record_steps(tx, for_update, new, d.dd_id, job.now).await? {
        Created::New { record, .. } => Taken::Stored(record),
        Created::PaymentReplayed => Taken::NonceUsed,
        Created::DabReached { limit, spent } => Taken::DabReached { limit, spent },
        Created::TrialCannotPay { balance, expired } => Taken::TrialShort { balance, expired },
        Created::Replayed(_) | Created::ParentNotFound | Created::ParentForeign | Created::EarnedShort { .. } | Created::Unchecked => {
            Taken::Not
        }
    })
}

/// Keeps a savepoint's writes, or rolls them back; either way it ends.
async fn end_savepoint<X: Exec>(tx: &mut X, keep: bool) -> Result<()> {
    if !keep {
        tx.execute(sql("rollback to savepoint job")).await?;
    }
    tx.execute(sql("release savepoint job")).await?;
    Ok(())
}

/// SQLite: the whole batch in one transaction on the committer's connection,
/// answered once it is on disk: by the syncer if there is one, else after
/// the commit's own sync.
fn sqlite_batch(
    conn: &mut rusqlite::Connection,
    metrics: &StoreMetrics,
    syncer: Option<&Syncer>,
    creates: Vec<CreateJob>,
    confirms: Vec<ConfirmJob>,
) {
    let mut run = || -> Result<_> {
        let mut tx = DirectTx::begin(conn, metrics)?;
        let done = run_now(sqlite_writes(&mut tx, &creates, &confirms))?;
        tx.commit()?;
        Ok(done)
    };
    match run() {
        Ok((taken, confirmed)) => {
            let answer = move |failed: Option<&StoreError>| {
                if let Some(error) = failed {
                    return refuse_all(creates, confirms, error);
                }
                answer_creates(creates, taken);
                for (job, answer) in confirms.into_iter().zip(confirmed) {
                    let _ = job.reply.send(Ok(answer));
                }
            };
            match syncer {
                Some(syncer) => syncer.after_sync(Box::new(answer)),
                None => answer(None),
            }
        }
        Err(error) => {
            metrics.failed_batches.inc();
            if error.is_unavailable() {
                return refuse_all(creates, confirms, &error);
            }
            tracing::debug!(%error, "a batch failed as a whole; each write runs alone");
            answer_creates(creates, HashMap::new());
            for job in confirms {
                let _ = job.reply.send(Ok(None));
            }
        }
    }
}

/// The batch's writes, each its own statements (one writer: the balance a
/// create reads is the one its debit changes).
async fn sqlite_writes<X: Exec>(tx: &mut X, creates: &[CreateJob], confirms: &[ConfirmJob]) -> Result<SqliteDone> {
    let mut taken = HashMap::with_capacity(creates.len());
    for job in creates {
        let d = &job.new.declaration;
        if let Some(payment) = &job.new.external {
            let outcome = match job.new.base_from_trial {
                false => sqlite_paid_create(tx, job, payment).await?,
                true => paid_create(tx, "", job).await?,
            };
            taken.insert(d.dd_id, outcome);
            continue;
        }
        let amount = d.dac_amount.milli();
        // A request_id used before inserts nothing (not taken).
        let columns = DeclarationRow::trial_paid(&job.new).columns_but_trial_left();
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let mut q = sql(format!("insert into declaration ({}, trial_remaining_after_milli) select ", names.join(", ")));
        for (_, value) in columns {
            q.push_value(value).push(", ");
        }
        let amount_p = q.placeholder(amount);
        q.push("a.trial_balance_milli - ").push(&amount_p).push(" from agent a where a.agent_id = ").push_bind(d.agent_id);
        q.push(" and a.trial_balance_milli >= ").push(&amount_p).push(" and a.trial_expires_at > ").push_bind(job.now);
        if let Some(token_hash) = &job.new.token_check {
            q.push(" and a.token_hash = ").push_bind(token_hash);
        }
        q.push(" on conflict do nothing returning *");
        let Some(row) = tx.fetch_optional(q).await? else {
            // A request_id used before (or earlier in this batch): answered
            // with its record, its token checked.
            let mut earlier = sql("select d.* from declaration d join agent a on a.agent_id = d.agent_id \
                 where d.agent_id = $1 and d.request_id = $2")
            .bind(d.agent_id)
            .bind(job.new.request_id);
            if let Some(token_hash) = &job.new.token_check {
                earlier.push(" and a.token_hash = ").push_bind(token_hash);
            }
            if let Some(row) = tx.fetch_optional(earlier).await? {
                taken.insert(d.dd_id, Taken::Replayed(Box::new(decode_declaration(&row)?)));
                continue;
            }
            if job.new.token_check.is_some() {
                // Not taken: found again with the agent read afresh.
                continue;
            }
            // Trial short (or expired) now, after this batch's earlier debits:
            // said so, with the balance.
            let (balance, expired) = crate::agents::trial_shortfall(tx, d.agent_id, job.now).await?;
            if expired || balance.milli() < amount {
                taken.insert(d.dd_id, Taken::TrialShort { balance, expired });
            }
            continue;
        };
        let record = decode_declaration(&row)?;
        tx.execute(
            sql("update agent set trial_balance_milli = trial_balance_milli - $1 where agent_id = $2").bind(amount).bind(d.agent_id),
        )
        .await?;
        taken.insert(d.dd_id, Taken::Stored(Box::new(record)));
    }
    let mut confirmed = Vec::with_capacity(confirms.len());
    for job in confirms {
        if job.settlement_ref.is_some() {
            confirmed.push(Some(sqlite_settling_confirm(tx, job).await?));
            continue;
        }
        // A remembered record's token checked by the update itself.
        let token = job.token_check.as_ref();
        let done = match rows::confirm_record(tx, job.dd_id, &job.integrity_hash, job.now, token).await? {
            Some(agent_id) => {
                rows::confirmed_rest(tx, agent_id, job.dd_id, None, &job.usage, &job.leaf_data, job.now).await?;
                true
            }
            None => false,
        };
        confirmed.push(Some(done));
    }
    Ok((taken, confirmed))
}

/// SQLite: a create its payment pays whole (a batchable one: no Earned DAC,
/// no agreement, no parent), without a savepoint. With one writer, what it
/// reads holds until it writes: the request_id, the DAB (counting the
/// batch's earlier payments) and the nonce in one read, then the record,
/// the payment (naming the record) and its first event. A refusal writes
/// nothing; a write that fails fails the batch, whose writes then run
/// alone. Four statements where the ordinary steps in a savepoint take
/// nine; the committer thread is what bounds a paid run on SQLite.
async fn sqlite_paid_create<X: Exec>(tx: &mut X, job: &CreateJob, payment: &NewPayment) -> Result<Taken> {
    let (new, d) = (&job.new, &job.new.declaration);
    let check = sql(format!(
        "select a.dab_limit_milli as b_own, ({}) as b_spent, a.token_hash as b_token, \
         a.trial_balance_milli as b_trial, a.trial_expires_at as b_expires, \
         exists (select 1 from declaration e where e.agent_id = a.agent_id and e.request_id = $3) as b_earlier, \
         exists (select 1 from x402_payment x where x.network = $4 and x.asset = $5 and x.payer = $6 and x.nonce = $7) as b_used \
         from agent a where a.agent_id = $1",
        payments::dab_spent("a.agent_id", "$2")
    ))
    .bind(d.agent_id)
    .bind(payments::period_key(payment.period_start))
    .bind(new.request_id)
    .bind(payment.network.as_str())
    .bind(payment.asset.as_str())
    .bind(payment.payer.as_str())
    .bind(payment.nonce.as_str());
    let Some(row) = tx.fetch_optional(check).await? else { return Ok(Taken::Not) };
    // A remembered agent's token still its own, and Trial still unable to
    // pay the base fee: else found again with the agent read afresh.
    if let Some(token_hash) = &new.token_check {
        let token: Vec<u8> = row.get("b_token")?;
        let expires: DateTime<Utc> = row.get("b_expires")?;
        let trial_pays = expires > job.now && row.get::<i64>("b_trial")? >= new.base_fee.milli();
        if token.as_slice() != token_hash.as_slice() || trial_pays {
            return Ok(Taken::Not);
        }
    }
    if row.get::<i64>("b_earlier")? != 0 {
        let earlier = sql("select * from declaration where agent_id = $1 and request_id = $2").bind(d.agent_id).bind(new.request_id);
        return Ok(match tx.fetch_optional(earlier).await? {
            Some(row) => Taken::Replayed(Box::new(decode_declaration(&row)?)),
            None => Taken::Not,
        });
    }
    let limit = row.get::<Option<i64>>("b_own")?.unwrap_or(payment.dab_default.milli());
    let spent: i64 = row.get("b_spent")?;
    if spent + payment.amount_units > limit {
        return Ok(Taken::DabReached { limit: MilliDac(limit), spent: MilliDac(spent) });
    }
    if row.get::<i64>("b_used")? != 0 {
        return Ok(Taken::NonceUsed);
    }
    let mut insert = DeclarationRow::paid_externally(new).query();
    insert.push(" returning *");
    let record = decode_declaration(&tx.fetch_one(insert).await?)?;
    let mut columns = payments::payment_columns(payment, d.agent_id, Subject::declaration(d.dd_id), job.now);
    columns.push(("dd_id", d.dd_id.value()));
    tx.execute(Query::insert("x402_payment", columns)).await?;
    payments::insert_event(tx, payment.payment_id, PaymentStatus::Reserved, None, job.now).await?;
    Ok(Taken::Stored(Box::new(record)))
}

/// SQLite: a confirmation that settles its payment, without a savepoint:
/// the payment moves only while its record is unconfirmed and not
/// released (else nothing is written and it confirmed nothing), then the
/// record, the payment's event, the usage rows and the log leaf.
async fn sqlite_settling_confirm<X: Exec>(tx: &mut X, job: &ConfirmJob) -> Result<bool> {
    let mut settle = sql("update x402_payment set status = 'settled', settlement_ref = coalesce($1, settlement_ref), updated_at = $2 \
         where dd_id = $3 and status in ('reserved', 'settle_unknown') \
         and exists (select 1 from declaration r where r.dd_id = $3 and r.confirmed_at is null \
         and r.settlement_status <> 'released')")
    .bind(job.settlement_ref.as_deref())
    .bind(job.now)
    .bind(job.dd_id);
    // A remembered record's token, checked by the move itself.
    if let Some(token_hash) = &job.token_check {
        settle.push(" and (select a.token_hash from agent a where a.agent_id = x402_payment.agent_id) = ").push_bind(token_hash);
    }
    settle.push(" returning payment_id");
    let moved: Option<Uuid> = tx.scalar_optional(settle).await?;
    let Some(payment_id) = moved else { return Ok(false) };
    let agent_id = rows::confirm_record(tx, job.dd_id, &job.integrity_hash, job.now, None).await?;
    // Read unconfirmed by the statement before, with one writer: not
    // confirmed now is a defect, and failing the batch undoes the move.
    let agent_id = agent_id.ok_or_else(|| StoreError::Corrupt("a record seen unconfirmed was not confirmed".into()))?;
    payments::insert_event(tx, payment_id, PaymentStatus::Settled, None, job.now).await?;
    rows::confirmed_rest(tx, agent_id, job.dd_id, Some(payment_id), &job.usage, &job.leaf_data, job.now).await?;
    Ok(true)
}

/// A SQLite batch's outcome: what became of each create (by dd_id), and
/// whether each confirmation was taken (`None`: not taken).
type SqliteDone = (HashMap<Uuid, Taken>, Vec<Option<bool>>);

// Batches sent to the commit lease's holder (shared group commit,
// decision 0075; the lease and the holder's side are `peers.rs`). The
// encoding is JSON of the batch's own inputs.

#[derive(Serialize)]
struct BatchOut<'a> {
    creates: Vec<CreateOut<'a>>,
    confirms: Vec<ConfirmOut<'a>>,
}

#[derive(Serialize)]
struct CreateOut<'a> {
    new: &'a NewDeclaration,
    now: DateTime<Utc>,
}

#[derive(Serialize)]
struct ConfirmOut<'a> {
    dd_id: Uuid,
    integrity_hash: &'a str,
    now: DateTime<Utc>,
    usage: &'a [UsageEntry],
    leaf: String,
    settlement_ref: Option<&'a str>,
    token_check: Option<&'a [u8; 32]>,
}

#[derive(Deserialize)]
pub(crate) struct BatchIn {
    #[serde(default)]
    pub creates: Vec<CreateIn>,
    #[serde(default)]
    pub confirms: Vec<ConfirmIn>,
    /// Shared reads (`lookup.rs`): token hashes (hex), and token hashes
    /// beside the records a confirmation reads.
    #[serde(default)]
    pub agents: Vec<String>,
    #[serde(default)]
    pub confirming: Vec<(String, Uuid)>,
}

#[derive(Deserialize)]
pub(crate) struct CreateIn {
    pub new: NewDeclaration,
    pub now: DateTime<Utc>,
}

#[derive(Deserialize)]
pub(crate) struct ConfirmIn {
    pub dd_id: Uuid,
    pub integrity_hash: String,
    pub now: DateTime<Utc>,
    pub usage: Vec<UsageEntry>,
    pub leaf: String,
    pub settlement_ref: Option<String>,
    #[serde(default)]
    pub token_check: Option<[u8; 32]>,
}

/// What became of one write: its committer's answer, or the database
/// unavailable there.
#[derive(Serialize, Deserialize)]
pub(crate) enum Answer<T> {
    Done(T),
    Unavailable(String),
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Answers {
    #[serde(default)]
    pub creates: Vec<Answer<Taken>>,
    #[serde(default)]
    pub confirms: Vec<Answer<Option<bool>>>,
}

impl<T> Answer<T> {
    pub(crate) fn into_result(self) -> Result<T> {
        match self {
            Answer::Done(value) => Ok(value),
            Answer::Unavailable(why) => Err(StoreError::Unavailable(why)),
        }
    }
}

fn encode(creates: &[CreateJob], confirms: &[ConfirmJob]) -> Result<Vec<u8>> {
    let batch = BatchOut {
        creates: creates.iter().map(|job| CreateOut { new: &job.new, now: job.now }).collect(),
        confirms: confirms
            .iter()
            .map(|job| ConfirmOut {
                dd_id: job.dd_id,
                integrity_hash: &job.integrity_hash,
                now: job.now,
                usage: &job.usage,
                leaf: hex::encode(&job.leaf_data),
                settlement_ref: job.settlement_ref.as_deref(),
                token_check: job.token_check.as_ref(),
            })
            .collect(),
    };
    serde_json::to_vec(&batch).map_err(|error| StoreError::Unsupported(format!("a batch that does not encode: {error}")))
}

/// Sends `creates` and `confirms` (this host's own) to the committing host
/// and answers each with what it answered; `Some` with the writes it did not
/// answer, to be committed here.
pub(crate) async fn forward<E: Engine>(
    db: &E,
    to: &dyn Forwarder,
    creates: Vec<CreateJob>,
    confirms: Vec<ConfirmJob>,
) -> Option<(Vec<CreateJob>, Vec<ConfirmJob>)> {
    if creates.is_empty() && confirms.is_empty() {
        return None;
    }
    let writes = (creates.len() + confirms.len()) as u64;
    db.metrics().forwarded_writes.inc_by(writes);
    let answered = async {
        let answer = to.forward(encode(&creates, &confirms)?).await?;
        let answers: Answers = serde_json::from_slice(&answer)
            .map_err(|error| StoreError::Unsupported(format!("a batch's answer that does not decode: {error}")))?;
        if answers.creates.len() != creates.len() || answers.confirms.len() != confirms.len() {
            return Err(StoreError::Unsupported("a batch's answer of another length".into()));
        }
        Ok(answers)
    };
    match answered.await {
        Ok(answers) => {
            for (job, answer) in creates.into_iter().zip(answers.creates) {
                let _ = job.reply.send(answer.into_result());
            }
            for (job, answer) in confirms.into_iter().zip(answers.confirms) {
                let _ = job.reply.send(answer.into_result());
            }
            None
        }
        Err(error) => {
            db.metrics().forward_failures.inc_by(writes);
            tracing::debug!(%error, "a batch sent to the committing host came back unanswered; it is committed here");
            Some((creates, confirms))
        }
    }
}

/// Whether the committer takes a create of this shape, from this host's
/// requests or another's: no Earned DAC, no agreement, no parent.
pub(crate) fn batchable(new: &NewDeclaration) -> bool {
    new.earned_premium.is_none() && new.agreement.is_none() && new.declaration.dd.parent_dd_id.is_none()
}

/// A write's answer as its committer gave it: "not taken" if there was none
/// (the committer stopped), the database unavailable kept as such.
pub(crate) fn answer_of<T>(answer: std::result::Result<Result<T>, oneshot::error::RecvError>, not_taken: T) -> Answer<T> {
    match answer {
        Ok(Ok(value)) => Answer::Done(value),
        Ok(Err(error)) if error.is_unavailable() => Answer::Unavailable(error.to_string()),
        _ => Answer::Done(not_taken),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Queues `n` answers on `syncer`, each noting whether it was refused.
    fn queue(syncer: &Syncer, n: usize, seen: &Arc<Mutex<Vec<bool>>>) {
        for _ in 0..n {
            let seen = seen.clone();
            syncer.after_sync(Box::new(move |failed| seen.lock().unwrap().push(failed.is_some())));
        }
    }

    /// A folder of its own holding a database's write-ahead log (the
    /// database file itself is never opened): the folder and the database's path.
    fn log_to_sync(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("anchor-{name}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("anchor.db-wal"), b"frames").unwrap();
        let file = dir.join("anchor.db");
        (dir, file)
    }

    #[test]
    fn answers_wait_for_a_sync_and_a_failed_one_refuses() {
        let (dir, file) = log_to_sync("syncer");
        let syncs = Arc::new(Mutex::new(0));
        let counted = syncs.clone();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let syncer = Syncer::start(move |_| *counted.lock().unwrap() += 1, &file).unwrap();
        queue(&syncer, 5, &seen);
        // Dropped, the syncer gives every answer queued before.
        drop(syncer);
        assert_eq!(*seen.lock().unwrap(), vec![false; 5]);
        let synced = *syncs.lock().unwrap();
        assert!((1..=5).contains(&synced), "answers share syncs: {synced} for 5");

        // A log that cannot be synced (here: not there) refuses what waited for it.
        std::fs::remove_file(dir.join("anchor.db-wal")).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let syncer = Syncer::start(|_| {}, &file).unwrap();
        queue(&syncer, 3, &seen);
        drop(syncer);
        assert_eq!(*seen.lock().unwrap(), vec![true; 3]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn confirm_job() -> Job {
        Job::Confirm(Box::new(ConfirmJob {
            dd_id: Uuid::nil(),
            integrity_hash: String::new(),
            now: Utc::now(),
            usage: Vec::new(),
            leaf_data: Vec::new(),
            settlement_ref: None,
            token_check: None,
            from_peer: false,
            reply: oneshot::channel().0,
        }))
    }

    #[tokio::test]
    async fn a_batch_smaller_than_the_last_waits_for_it_as_long_as_the_last_took() {
        // A last batch of `writes` that took `took` and ended just now.
        let last = |writes: usize, took: Duration| Last { writes, took, ended: Instant::now() };
        let (queue, mut jobs) = mpsc::channel(16);
        // The last batch held three writes: two more writes coming while
        // this one waits (this runtime runs the sender only then) join it,
        // which then goes at once.
        let sender = queue.clone();
        let later = tokio::spawn(async move {
            sender.send(confirm_job()).await.unwrap();
            tokio::task::yield_now().await;
            sender.send(confirm_job()).await.unwrap();
        });
        let started = Instant::now();
        let mut batch = vec![confirm_job()];
        gather_more(&mut batch, &mut jobs, last(3, Duration::from_secs(2))).await;
        assert_eq!(batch.len(), 3, "the writes on their way join the batch");
        assert!(started.elapsed() < Duration::from_secs(1), "a batch as large as the last goes at once: {:?}", started.elapsed());
        later.await.unwrap();

        // Fewer come than the last batch held: it waits as long as the last took, no longer.
        let started = Instant::now();
        let mut batch = vec![confirm_job()];
        gather_more(&mut batch, &mut jobs, last(3, Duration::from_millis(3))).await;
        let waited = started.elapsed();
        assert_eq!(batch.len(), 1);
        assert!(waited >= Duration::from_millis(3) && waited < Duration::from_secs(1), "waited {waited:?}");
        // Never longer than MAX_GATHER_WAIT, however long the last took.
        let started = Instant::now();
        gather_more(&mut batch, &mut jobs, last(3, Duration::from_secs(60))).await;
        assert!(started.elapsed() < MAX_GATHER_WAIT + Duration::from_secs(1), "waited {:?}", started.elapsed());

        // Alone (the last batch held one), stopping, or first come later
        // after the last batch than it took, a batch takes nothing more,
        // even what is queued.
        queue.send(confirm_job()).await.unwrap();
        let stopping = || vec![confirm_job(), Job::Stop(oneshot::channel().0)];
        let came_late = Last { writes: 5, took: Duration::from_millis(2), ended: Instant::now() - Duration::from_millis(50) };
        for (mut batch, last) in [
            (vec![confirm_job()], last(1, Duration::from_secs(60))),
            (stopping(), last(5, Duration::from_secs(60))),
            (vec![confirm_job()], came_late),
        ] {
            let before = batch.len();
            gather_more(&mut batch, &mut jobs, last).await;
            assert_eq!(batch.len(), before);
        }
        assert!(jobs.try_recv().is_ok(), "the queued write is left for the next batch");
    }

    #[test]
    fn the_committer_gathers_while_a_sync_is_under_way_and_not_after() {
        let (dir, file) = log_to_sync("gather");
        // This thread is the committer: it started the syncer.
        let syncer = Syncer::start(|_| {}, &file).unwrap();
        // A sync under way until `release`: its answer blocks the syncer.
        let (release, held) = std::sync::mpsc::channel::<()>();
        syncer.after_sync(Box::new(move |_| {
            let _ = held.recv();
        }));
        let (queue, mut jobs) = mpsc::channel(16);
        queue.try_send(confirm_job()).unwrap();
        queue.try_send(confirm_job()).unwrap();
        let later = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            queue.blocking_send(confirm_job()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
            release.send(()).unwrap();
            queue
        });
        let mut batch = vec![confirm_job()];
        syncer.gather_while_syncing(&mut batch, &mut jobs);
        assert_eq!(batch.len(), 4, "the writes queued before and during the sync join the batch");
        assert_eq!(syncer.pending.load(std::sync::atomic::Ordering::SeqCst), 0);
        // No sync under way: the batch is committed as it is.
        let queue = later.join().unwrap();
        queue.try_send(confirm_job()).unwrap();
        let mut batch = vec![confirm_job()];
        syncer.gather_while_syncing(&mut batch, &mut jobs);
        assert_eq!(batch.len(), 1, "nothing is waited for without a sync");
        drop(syncer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
