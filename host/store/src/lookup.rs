//! Gathered reads of the hot path, where every statement is a round trip to
//! a server (PostgreSQL): the agent a bearer token names (every
//! authenticated request), a declaration by dd_id, alone or beside the
//! agent a token names (every confirmation), an
//! agent's declaration by request_id with its DAB status (every create
//! that may be paid over x402) and a declaration's payment with its history
//! (every confirmation that settles one).
//!
//! A read hands its key to a reader task and waits. A reader takes whatever
//! is queued when it is free (up to [`MAX_READS`]) and runs one statement
//! per kind for all of them: alone, a read waits for no one; under load, the
//! reads that queued during the previous statement share the next one. The
//! keys are one array parameter, so each kind is one statement text (one
//! plan kept per connection) whatever the number of reads.
//!
//! Nothing is cached: each statement starts after every read it answers was
//! queued, so it sees every commit made before the request asked (a rotated
//! or recovered token is refused on every host from its commit on, as with a
//! read of its own). A batch that fails answers "not read", and each of its
//! reads then runs alone, which reports its own error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use crate::agents::{AGENT_BESIDE, AGENT_BESIDE_JOIN, AGENT_SELECT, decode_agent};
use crate::declarations::decode_request;
use crate::engine::{Array, Bind, Engine, Exec, KEPT_IDLE, Kept, Row, sql};
use crate::metrics::StoreMetrics;
use crate::payments::{
    PAYMENT_COLUMNS, PAYMENT_EVENT_ORDER, PAYMENT_EVENTS_EACH, SETTLING_COLUMNS, SETTLING_JOIN, dab_columns_since, decode_payments,
    decode_settling,
};
use crate::rows::decode_declaration;
use crate::*;
use crate::{Result, StoreError, StoredDeclaration};

/// The most reads one statement answers.
pub(crate) const MAX_READS: usize = 64;

/// One read: its key, and where the answer goes (`None`: not read).
pub(crate) struct Read<K, T> {
    key: K,
    /// The row (or none), or `None`: not read here (the caller reads alone);
    /// an error when the database is unavailable (alone would fail too).
    reply: oneshot::Sender<Option<Result<Option<T>>>>,
}

/// An agent, one of its request_ids, and the DAB period its external
/// spending is read for ([`crate::payments::period_key`]).
pub(crate) type RequestKey = (Uuid, Uuid, String);

/// The declaration recorded under a request_id (if any), and the DAB status
/// of its agent.
pub(crate) type RequestFound = (Option<StoredDeclaration>, DabStatus);

pub(crate) enum Lookup {
    Agent(Read<[u8; 32], AgentRecord>),
    Declaration(Read<Uuid, (StoredDeclaration, Option<Settling>)>),
    Confirming(Read<([u8; 32], Uuid), Confirming>),
    Request(Read<RequestKey, RequestFound>),
    Payment(Read<Uuid, PaymentRecord>),
}

/// A declaration with its settling facts, beside the agent that recorded it.
pub(crate) type Confirming = (AgentRecord, StoredDeclaration, Option<Settling>);

/// The queue the reader tasks take from.
pub(crate) struct Reader {
    queue: mpsc::Sender<Lookup>,
}

impl Reader {
    /// Starts two reader tasks on the current runtime (a statement in flight
    /// while the next gathers).
    pub(crate) fn start<E: Engine>(db: &E) -> Reader {
        let (queue, reads) = mpsc::channel(4 * MAX_READS);
        let reads = Arc::new(Mutex::new(reads));
        for _ in 0..2 {
            let (db, reads) = (db.clone(), reads.clone());
            tokio::spawn(async move { read_loop(db, reads).await });
        }
        Reader { queue }
    }

    /// The agent holding this token hash; `None` if it was not read here.
    pub(crate) async fn agent(&self, token_hash: [u8; 32]) -> Option<Result<Option<AgentRecord>>> {
        self.ask(token_hash, Lookup::Agent).await
    }

    /// The declaration (not de-identified), with its payment's settling
    /// facts if it is paid externally; `None` if it was not read here.
    pub(crate) async fn declaration(&self, dd_id: Uuid) -> Option<Result<Option<(StoredDeclaration, Option<Settling>)>>> {
        self.ask(dd_id, Lookup::Declaration).await
    }

    /// The declaration as [`Reader::declaration`] reads it, with its agent,
    /// if that agent holds the token hash; `None` if it was not read here.
    pub(crate) async fn confirming(&self, key: ([u8; 32], Uuid)) -> Option<Result<Option<Confirming>>> {
        self.ask(key, Lookup::Confirming).await
    }

    /// The agent's declaration under `request_id` and its DAB status (`Ok(None)`:
    /// no such agent); `None` if it was not read here.
    pub(crate) async fn request(&self, key: RequestKey) -> Option<Result<Option<RequestFound>>> {
        self.ask(key, Lookup::Request).await
    }

    /// The declaration's payment, as `PaymentStore::payment_for` reads it;
    /// `None` if it was not read here.
    pub(crate) async fn payment(&self, dd_id: Uuid) -> Option<Result<Option<PaymentRecord>>> {
        self.ask(dd_id, Lookup::Payment).await
    }

    /// Queues a read of `key` as `kind` and waits for its answer.
    async fn ask<K, T>(&self, key: K, kind: fn(Read<K, T>) -> Lookup) -> Option<Result<Option<T>>> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(kind(Read { key, reply })).await.ok()?;
        answer.await.ok()?
    }
}

async fn read_loop<E: Engine>(db: E, reads: Arc<Mutex<mpsc::Receiver<Lookup>>>) {
    let mut kept = [Kept::new(&db), Kept::new(&db), Kept::new(&db), Kept::new(&db), Kept::new(&db)];
    loop {
        let batch = {
            let mut reads = match reads.try_lock() {
                Ok(reads) => reads,
                // The other reader holds the queue, waiting for reads or
                // taking them: this one keeps its connections while it
                // waits, as a reader waiting for reads does, for a while
                // ([`KEPT_IDLE`]), then lets them go.
                Err(_) => match tokio::time::timeout(KEPT_IDLE, reads.lock()).await {
                    Ok(reads) => reads,
                    Err(_) => {
                        kept.iter_mut().for_each(Kept::release);
                        reads.lock().await
                    }
                },
            };
            let Some(first) = crate::batch::next(&mut reads, kept.each_mut()).await else { return };
            crate::batch::gather(first, &mut reads, MAX_READS)
        };
        db.metrics().read_batch_size.observe(batch.len() as f64);
        if batch.len() > 1 {
            db.metrics().shared_reads.inc();
        }
        let (mut agents, mut declarations, mut confirming, mut requests, mut payments) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for read in batch {
            match read {
                Lookup::Agent(read) => agents.push(read),
                Lookup::Declaration(read) => declarations.push(read),
                Lookup::Confirming(read) => confirming.push(read),
                Lookup::Request(read) => requests.push(read),
                Lookup::Payment(read) => payments.push(read),
            }
        }
        // A kind with no reads does not touch its connection.
        let [for_agents, for_declarations, for_confirming, for_requests, for_payments] = &mut kept;
        tokio::join!(
            read_agents(&db, for_agents, agents),
            read_declarations(&db, for_declarations, declarations),
            read_confirming(&db, for_confirming, confirming),
            read_requests(&db, for_requests, requests),
            read_payments(&db, for_payments, payments)
        );
    }
}

/// Answers each read with the row found under its key (or none), every read
/// with "not read" if the statement failed.
fn answer<K: Eq + std::hash::Hash, T: Clone>(metrics: &StoreMetrics, reads: Vec<Read<K, T>>, found: Result<Vec<(K, T)>>) {
    match found {
        Ok(found) => {
            let found: HashMap<K, T> = found.into_iter().collect();
            for read in reads {
                let _ = read.reply.send(Some(Ok(found.get(&read.key).cloned())));
            }
        }
        Err(error) if error.is_unavailable() => {
            metrics.failed_reads.inc();
            for read in reads {
                let _ = read.reply.send(Some(Err(error.clone())));
            }
        }
        Err(error) => {
            metrics.failed_reads.inc();
            tracing::debug!(%error, "a gathered read failed; each runs alone");
            for read in reads {
                let _ = read.reply.send(None);
            }
        }
    }
}

async fn read_agents<E: Engine>(db: &E, conn: &mut Kept<E>, reads: Vec<Read<[u8; 32], AgentRecord>>) {
    if reads.is_empty() {
        return;
    }
    let found = async {
        let hashes = Array::Bytes(reads.iter().map(|read| Some(Cow::Borrowed(&read.key[..]))).collect());
        let mut q = sql(format!("{AGENT_SELECT} where a.token_hash = any("));
        q.push_array(hashes).push(")");
        let rows = conn.fetch_all(q).await?;
        rows.iter().map(|row| decode_agent(row).map(|agent| (agent.token_hash, agent))).collect::<Result<Vec<_>>>()
    }
    .await;
    answer(db.metrics(), reads, found);
}

/// Declarations by dd_id, each externally paid one with what settling its
/// payment needs (a confirmation reads both; one statement, not two).
async fn read_declarations<E: Engine>(db: &E, conn: &mut Kept<E>, reads: Vec<Read<Uuid, (StoredDeclaration, Option<Settling>)>>) {
    if reads.is_empty() {
        return;
    }
    let found = async {
        let ids = Array::Uuid(reads.iter().map(|read| Some(read.key)).collect());
        // The records first, as a statement of their own (materialized: the
        // plan of the records' read does not depend on the payments').
        let mut q = sql("with d as materialized (select * from declaration where deidentified_at is null and dd_id = any(");
        q.push_array(ids).push(&format!(")) select d.*, {SETTLING_COLUMNS} from d {SETTLING_JOIN}"));
        let rows = conn.fetch_all(q).await?;
        let found = first_payments(&rows, |row| Ok((row.get("dd_id")?, decode_declaration(row)?)))?;
        Ok(found.into_iter().collect::<Vec<_>>())
    }
    .await;
    answer(db.metrics(), reads, found);
}

/// Declarations by dd_id beside their agents, each only where its agent
/// holds the token hash it is asked with (a confirmation's authentication
/// and its record: one statement, not two).
async fn read_confirming<E: Engine>(db: &E, conn: &mut Kept<E>, reads: Vec<Read<([u8; 32], Uuid), Confirming>>) {
    if reads.is_empty() {
        return;
    }
    let found = async {
        let keys = reads.iter().map(|read| vec![("k_hash", (&read.key.0[..]).value()), ("k_id", read.key.1.value())]).collect();
        let mut q = sql("with d as materialized (select d.*, k.k_hash from ");
        q.push_unnest("k", keys).ok_or_else(|| StoreError::Unsupported("confirmation reads as arrays".into()))?;
        q.push(&format!(
            " join declaration d on d.dd_id = k.k_id where d.deidentified_at is null) \
             select d.*, {AGENT_BESIDE}, {SETTLING_COLUMNS} from d {AGENT_BESIDE_JOIN} {SETTLING_JOIN} \
             where a.token_hash = d.k_hash"
        ));
        let rows = conn.fetch_all(q).await?;
        let found = first_payments(&rows, |row| {
            let (agent, stored) = crate::declarations::decode_confirming(row)?;
            Ok(((agent.token_hash, stored.declaration.dd_id), (agent, stored)))
        })?;
        Ok(found.into_iter().map(|(key, ((agent, stored), settling))| (key, (agent, stored, settling))).collect::<Vec<_>>())
    }
    .await;
    answer(db.metrics(), reads, found);
}

/// Rows of records beside their payments' settling facts (one row per
/// payment), folded into one per key: a record with several payments keeps
/// the first by payment_id, as `payment_for` reads it.
fn first_payments<R: Row, K: Eq + std::hash::Hash, T>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<(K, T)>,
) -> Result<HashMap<K, (T, Option<Settling>)>> {
    let mut found: HashMap<K, (T, Option<Settling>)> = HashMap::with_capacity(rows.len());
    for row in rows {
        let settling = decode_settling(row)?;
        let (key, record) = decode(row)?;
        match found.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert((record, settling));
            }
            Entry::Occupied(mut entry) => {
                let kept = &mut entry.get_mut().1;
                if let Some(settling) = settling
                    && kept.as_ref().is_none_or(|first| settling.payment_id < first.payment_id)
                {
                    *kept = Some(settling);
                }
            }
        }
    }
    Ok(found)
}

async fn read_requests<E: Engine>(db: &E, conn: &mut Kept<E>, reads: Vec<Read<RequestKey, RequestFound>>) {
    if reads.is_empty() {
        return;
    }
    let found = async {
        let keys = reads
            .iter()
            .map(|read| {
                let (agent_id, request_id, period) = &read.key;
                vec![("r_agent_id", agent_id.value()), ("r_request_id", request_id.value()), ("r_period", period.as_str().value())]
            })
            .collect();
        let mut q = sql("select r.r_agent_id, r.r_request_id, r.r_period, ");
        q.push(&dab_columns_since("r.r_period")).push(", d.* from ");
        q.push_unnest("r", keys).ok_or_else(|| StoreError::Unsupported("request reads as arrays".into()))?;
        q.push(
            " join agent a on a.agent_id = r.r_agent_id \
             left join declaration d on d.agent_id = a.agent_id and d.request_id = r.r_request_id",
        );
        let rows = conn.fetch_all(q).await?;
        rows.iter()
            .map(|row| Ok(((row.get("r_agent_id")?, row.get("r_request_id")?, row.get("r_period")?), decode_request(row)?)))
            .collect::<Result<Vec<_>>>()
    }
    .await;
    answer(db.metrics(), reads, found);
}

async fn read_payments<E: Engine>(db: &E, conn: &mut Kept<E>, reads: Vec<Read<Uuid, PaymentRecord>>) {
    if reads.is_empty() {
        return;
    }
    let found = async {
        let ids = Array::Uuid(reads.iter().map(|read| Some(read.key)).collect());
        // Each payment by its index, then its events by theirs
        // ([`PAYMENT_EVENTS_EACH`]).
        let mut q = sql(format!("select {PAYMENT_COLUMNS} from x402_payment p {PAYMENT_EVENTS_EACH} where p.dd_id = any("));
        q.push_array(ids).push(&format!(") order by p.dd_id, p.payment_id, {PAYMENT_EVENT_ORDER}"));
        let rows = conn.fetch_all(q).await?;
        // A declaration's first payment, as a read of its own takes it.
        let mut seen = std::collections::HashSet::new();
        Ok(decode_payments(&rows)?
            .into_iter()
            .filter_map(|(dd_id, payment)| dd_id.filter(|dd_id| seen.insert(*dd_id)).map(|dd_id| (dd_id, payment)))
            .collect())
    }
    .await;
    answer(db.metrics(), reads, found);
}
