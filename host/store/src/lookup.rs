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
//! While another host holds the commit lease, the token and confirmation
//! reads go to it instead (shared reads, decision 0076, below).
//!
//! Nothing is cached: each statement starts after every read it answers was
//! queued, so it sees every commit made before the request asked (a rotated
//! or recovered token is refused on every host from its commit on, as with a
//! read of its own). A batch that fails answers "not read", and each of its
//! reads then runs alone, which reports its own error.

use std::borrow::Cow;
use std::collections::HashMap;

use anchor_domain::{MilliDac, WireEnum};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::Forwarder;
use crate::agents::{AGENT_BESIDE, AGENT_BESIDE_JOIN, AGENT_SELECT, decode_agent};
use crate::batch::{Answer, ForwardTo};
use crate::declarations::decode_request;
use crate::engine::{Array, Bind, Engine, Exec, Kept, Row, sql};
use crate::metrics::StoreMetrics;
use crate::payments::{
    PAYMENT_COLUMNS, PAYMENT_EVENT_ORDER, PAYMENT_EVENTS_EACH, SETTLING_COLUMNS, SETTLING_JOIN, dab_columns_since, decode_payments,
};
use crate::rows::decode_declaration;
use crate::*;
use crate::{Result, StoreError, StoredDeclaration};

/// The most reads one statement answers.
pub(crate) const MAX_READS: usize = 64;

/// One read: its key, and where the answer goes (`None`: not read).
pub(crate) struct Read<K, T> {
    key: K,
    /// Sent here by another host ([`Reader::for_peer`]): read here, never
    /// sent on.
    from_peer: bool,
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
    /// Starts the reader task on the current runtime: what is queued while
    /// its statements run is gathered into the next ones. (A second task,
    /// taking reads while the first's statements ran, split the reads into
    /// more statements for no shorter wait: side by side on PostgreSQL, one
    /// task took 7 % less host and 5-8 % less database CPU per anchored DD,
    /// with the same confirm p99 at half the peak.) While `forward` names
    /// the commit lease's holder, it sends it this host's token and
    /// confirmation reads.
    pub(crate) fn start<E: Engine>(db: &E, forward: ForwardTo) -> Reader {
        let (queue, reads) = mpsc::channel(4 * MAX_READS);
        let db = db.clone();
        tokio::spawn(async move { read_loop(db, reads, forward).await });
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
        self.queue.send(kind(Read { key, from_peer: false, reply })).await.ok()?;
        answer.await.ok()?
    }

    /// Reads another host sent (shared reads): all queued before any is
    /// waited for, so that they share statements with each other and with
    /// this host's own; each answered as [`Reader::ask`] answers.
    pub(crate) async fn for_peer<K, T>(&self, keys: Vec<K>, kind: fn(Read<K, T>) -> Lookup) -> Vec<Option<Result<Option<T>>>> {
        let mut answers = Vec::with_capacity(keys.len());
        for key in keys {
            let (reply, answer) = oneshot::channel();
            let queued = self.queue.send(kind(Read { key, from_peer: true, reply })).await.is_ok();
            answers.push(queued.then_some(answer));
        }
        let mut found = Vec::with_capacity(answers.len());
        for answer in answers {
            found.push(match answer {
                Some(answer) => answer.await.ok().flatten(),
                None => None,
            });
        }
        found
    }
}

/// One gathered batch, by kind.
#[derive(Default)]
struct Kinds {
    agents: Vec<Read<[u8; 32], AgentRecord>>,
    declarations: Vec<Read<Uuid, (StoredDeclaration, Option<Settling>)>>,
    confirming: Vec<Read<([u8; 32], Uuid), Confirming>>,
    requests: Vec<Read<RequestKey, RequestFound>>,
    payments: Vec<Read<Uuid, PaymentRecord>>,
}

impl Kinds {
    fn of(batch: Vec<Lookup>) -> Kinds {
        let mut kinds = Kinds::default();
        for read in batch {
            match read {
                Lookup::Agent(read) => kinds.agents.push(read),
                Lookup::Declaration(read) => kinds.declarations.push(read),
                Lookup::Confirming(read) => kinds.confirming.push(read),
                Lookup::Request(read) => kinds.requests.push(read),
                Lookup::Payment(read) => kinds.payments.push(read),
            }
        }
        kinds
    }
}

async fn read_loop<E: Engine>(db: E, mut reads: mpsc::Receiver<Lookup>, forward: ForwardTo) {
    let mut kept = [Kept::new(&db), Kept::new(&db), Kept::new(&db), Kept::new(&db), Kept::new(&db)];
    loop {
        let Some(first) = crate::batch::next(&mut reads, kept.each_mut()).await else { return };
        let batch = crate::batch::gather(first, &mut reads, MAX_READS);
        db.metrics().read_batch_size.observe(batch.len() as f64);
        if batch.len() > 1 {
            db.metrics().shared_reads.inc();
        }
        let mut kinds = Kinds::of(batch);
        let to = forward.read().map(|to| to.clone()).unwrap_or(None);
        match to {
            // This host's own token and confirmation reads go to the commit
            // lease's holder, where they share statements with every host's;
            // what comes back unread is read here after all.
            Some(to) if kinds.agents.iter().any(|read| !read.from_peer) || kinds.confirming.iter().any(|read| !read.from_peer) => {
                let (agents, own_agents): (Vec<_>, Vec<_>) = std::mem::take(&mut kinds.agents).into_iter().partition(|read| read.from_peer);
                let (confirming, own_confirming): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut kinds.confirming).into_iter().partition(|read| read.from_peer);
                (kinds.agents, kinds.confirming) = (agents, confirming);
                let (left, ()) = tokio::join!(send_reads(&db, to.as_ref(), own_agents, own_confirming), read_here(&db, &mut kept, kinds));
                if let Some((agents, confirming)) = left {
                    read_here(&db, &mut kept, Kinds { agents, confirming, ..Kinds::default() }).await;
                }
            }
            _ => read_here(&db, &mut kept, kinds).await,
        }
    }
}

/// One statement per kind that has reads, each on its own connection.
async fn read_here<E: Engine>(db: &E, kept: &mut [Kept<E>; 5], kinds: Kinds) {
    // A kind with no reads does not touch its connection.
    let [for_agents, for_declarations, for_confirming, for_requests, for_payments] = kept;
    tokio::join!(
        read_agents(db, for_agents, kinds.agents),
        read_declarations(db, for_declarations, kinds.declarations),
        read_confirming(db, for_confirming, kinds.confirming),
        read_requests(db, for_requests, kinds.requests),
        read_payments(db, for_payments, kinds.payments)
    );
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
        let found = payments::first_payments(&rows, |row| Ok((row.get("dd_id")?, decode_declaration(row)?)))?;
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
        let found = payments::first_payments(&rows, |row| {
            let (agent, stored) = crate::declarations::decode_confirming(row)?;
            Ok(((agent.token_hash, stored.declaration.dd_id), (agent, stored)))
        })?;
        Ok(found.into_iter().map(|(key, ((agent, stored), settling))| (key, (agent, stored, settling))).collect::<Vec<_>>())
    }
    .await;
    answer(db.metrics(), reads, found);
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

// Shared reads (decision 0075): while another host holds the commit lease,
// a reader sends it this host's token and confirmation reads in one
// request on the batch endpoint, where they join the holder's own reads,
// so that every host's reads share statements as one host's do. What the
// holder does not answer (unreachable, not read there, an answer that does
// not decode) is read here in the same gathered statements, so a read
// never waits for a second attempt alone. The holder reads what it is sent
// after the sending host queued it: a read sees every commit made before
// its request asked, as a read here does.

/// A shared read's answer: the row, no row, or not read there.
#[derive(Serialize, Deserialize)]
pub(crate) enum Found<T> {
    Row(T),
    NoRow,
    NotRead,
}

/// An agent as the batch endpoint carries it.
#[derive(Serialize, Deserialize)]
pub(crate) struct AgentWire {
    agent_id: Uuid,
    token_hash: String,
    region_code: Option<String>,
    disclosure_level: String,
    registered_at: DateTime<Utc>,
    trial_granted: MilliDac,
    trial_balance: MilliDac,
    trial_expires_at: DateTime<Utc>,
    owner_policy: Option<String>,
}

/// A payment's settling facts as the batch endpoint carries them.
#[derive(Serialize, Deserialize)]
pub(crate) struct SettlingWire {
    payment_id: Uuid,
    network: String,
    asset: String,
    payer: String,
    status: String,
    payload: String,
}

/// A confirmation's read as the batch endpoint carries it.
#[derive(Serialize, Deserialize)]
pub(crate) struct ConfirmingWire {
    agent: AgentWire,
    stored: StoredDeclaration,
    settling: Option<SettlingWire>,
}

/// The holder's answers to shared reads, in the order they were sent.
#[derive(Serialize, Deserialize)]
pub(crate) struct ReadAnswers {
    pub agents: Vec<Answer<Found<AgentWire>>>,
    pub confirming: Vec<Answer<Found<ConfirmingWire>>>,
}

#[derive(Serialize)]
struct ReadsOut {
    agents: Vec<String>,
    confirming: Vec<(String, Uuid)>,
}

fn named<T: WireEnum>(what: &str, text: &str) -> Result<T> {
    T::parse(text).ok_or_else(|| StoreError::Unsupported(format!("a shared read whose {what} is {text:?}")))
}

fn hash_of(text: &str) -> Result<[u8; 32]> {
    hex::decode(text)
        .ok()
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .ok_or_else(|| StoreError::Unsupported("a shared read whose token hash is not 32 bytes of hex".into()))
}

impl AgentWire {
    fn of(agent: &AgentRecord) -> AgentWire {
        AgentWire {
            agent_id: agent.agent_id,
            token_hash: hex::encode(agent.token_hash),
            region_code: agent.region_code.clone(),
            disclosure_level: agent.disclosure_level.as_str().to_owned(),
            registered_at: agent.registered_at,
            trial_granted: agent.trial_granted,
            trial_balance: agent.trial_balance,
            trial_expires_at: agent.trial_expires_at,
            owner_policy: agent.owner_policy.map(|policy| policy.as_str().to_owned()),
        }
    }

    fn into_record(self) -> Result<AgentRecord> {
        Ok(AgentRecord {
            agent_id: self.agent_id,
            token_hash: hash_of(&self.token_hash)?,
            region_code: self.region_code,
            disclosure_level: named("disclosure_level", &self.disclosure_level)?,
            registered_at: self.registered_at,
            trial_granted: self.trial_granted,
            trial_balance: self.trial_balance,
            trial_expires_at: self.trial_expires_at,
            owner_policy: self.owner_policy.map(|policy| named("owner_policy", &policy)).transpose()?,
        })
    }
}

impl ConfirmingWire {
    fn of((agent, stored, settling): Confirming) -> ConfirmingWire {
        ConfirmingWire {
            agent: AgentWire::of(&agent),
            stored,
            settling: settling.map(|s| SettlingWire {
                payment_id: s.payment_id,
                network: s.network,
                asset: s.asset,
                payer: s.payer,
                status: s.status.as_str().to_owned(),
                payload: s.payload,
            }),
        }
    }

    fn into_confirming(self) -> Result<Confirming> {
        let settling = match self.settling {
            Some(s) => Some(Settling {
                payment_id: s.payment_id,
                network: s.network,
                asset: s.asset,
                payer: s.payer,
                status: named("settling status", &s.status)?,
                payload: s.payload,
            }),
            None => None,
        };
        Ok((self.agent.into_record()?, self.stored, settling))
    }
}

/// A read's answer as the holder sends it back.
fn answer_for_peer<T, W>(found: Option<Result<Option<T>>>, wire: impl Fn(T) -> W) -> Answer<Found<W>> {
    match found {
        Some(Ok(Some(row))) => Answer::Done(Found::Row(wire(row))),
        Some(Ok(None)) => Answer::Done(Found::NoRow),
        Some(Err(error)) if error.is_unavailable() => Answer::Unavailable(error.to_string()),
        Some(Err(_)) | None => Answer::Done(Found::NotRead),
    }
}

/// The holder's side: reads another host sent, answered in its order.
pub(crate) async fn read_for_peer(
    reader: Option<&Reader>,
    agents: Vec<String>,
    confirming: Vec<(String, Uuid)>,
) -> Result<(Vec<Answer<Found<AgentWire>>>, Vec<Answer<Found<ConfirmingWire>>>)> {
    if agents.len() + confirming.len() > MAX_READS {
        return Err(StoreError::Unsupported(format!("a shared read of more than {MAX_READS} keys")));
    }
    let agents = agents.iter().map(|hash| hash_of(hash)).collect::<Result<Vec<_>>>()?;
    let confirming = confirming.into_iter().map(|(hash, dd_id)| Ok((hash_of(&hash)?, dd_id))).collect::<Result<Vec<_>>>()?;
    let Some(reader) = reader else {
        return Ok((
            agents.iter().map(|_| Answer::Done(Found::NotRead)).collect(),
            confirming.iter().map(|_| Answer::Done(Found::NotRead)).collect(),
        ));
    };
    // Both kinds queued before either is waited for.
    let (agents, confirming) = tokio::join!(reader.for_peer(agents, Lookup::Agent), reader.for_peer(confirming, Lookup::Confirming));
    Ok((
        agents.into_iter().map(|found| answer_for_peer(found, |agent| AgentWire::of(&agent))).collect(),
        confirming.into_iter().map(|found| answer_for_peer(found, ConfirmingWire::of)).collect(),
    ))
}

/// Reads left for this host to read itself: none, or some kinds' reads.
type Left = Option<(Vec<Read<[u8; 32], AgentRecord>>, Vec<Read<([u8; 32], Uuid), Confirming>>)>;

/// Sends this host's reads to the commit lease's holder and answers each
/// with what it found; what it did not answer is returned, to be read here.
async fn send_reads<E: Engine>(
    db: &E,
    to: &dyn Forwarder,
    agents: Vec<Read<[u8; 32], AgentRecord>>,
    confirming: Vec<Read<([u8; 32], Uuid), Confirming>>,
) -> Left {
    if agents.is_empty() && confirming.is_empty() {
        return None;
    }
    let sent = (agents.len() + confirming.len()) as u64;
    db.metrics().forwarded_reads.inc_by(sent);
    let answered = async {
        let out = ReadsOut {
            agents: agents.iter().map(|read| hex::encode(read.key)).collect(),
            confirming: confirming.iter().map(|read| (hex::encode(read.key.0), read.key.1)).collect(),
        };
        let body = serde_json::to_vec(&out).map_err(|error| StoreError::Unsupported(format!("reads that do not encode: {error}")))?;
        let answer = to.forward(body).await?;
        let answers: ReadAnswers = serde_json::from_slice(&answer)
            .map_err(|error| StoreError::Unsupported(format!("a shared read's answer that does not decode: {error}")))?;
        if answers.agents.len() != agents.len() || answers.confirming.len() != confirming.len() {
            return Err(StoreError::Unsupported("a shared read's answer of another length".into()));
        }
        Ok(answers)
    };
    let answers = match answered.await {
        Ok(answers) => answers,
        Err(error) => {
            db.metrics().forward_failures.inc_by(sent);
            tracing::debug!(%error, "reads sent to the committing host came back unanswered; they are read here");
            return Some((agents, confirming));
        }
    };
    let left_agents = reply_each(agents, answers.agents, AgentWire::into_record);
    let left_confirming = reply_each(confirming, answers.confirming, ConfirmingWire::into_confirming);
    (!left_agents.is_empty() || !left_confirming.is_empty()).then_some((left_agents, left_confirming))
}

/// Answers each read with the holder's answer in its place; the reads it
/// left to be read here are returned.
fn reply_each<K, T, W>(reads: Vec<Read<K, T>>, answers: Vec<Answer<Found<W>>>, decode: impl Fn(W) -> Result<T>) -> Vec<Read<K, T>> {
    let mut left = Vec::new();
    for (read, answer) in reads.into_iter().zip(answers) {
        match settle(answer, &decode) {
            Some(found) => {
                let _ = read.reply.send(Some(found));
            }
            None => left.push(read),
        }
    }
    left
}

/// A shared read's answer as a reply: `None` when it is to be read here (not
/// read there, or a row that does not decode).
fn settle<W, T>(answer: Answer<Found<W>>, decode: impl Fn(W) -> Result<T>) -> Option<Result<Option<T>>> {
    match answer.into_result() {
        Ok(Found::Row(wire)) => decode(wire).ok().map(|row| Ok(Some(row))),
        Ok(Found::NoRow) => Some(Ok(None)),
        Ok(Found::NotRead) => None,
        Err(error) => Some(Err(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anchor_domain::agents::DisclosureLevel;
    use anchor_domain::owners::ContentPolicy;

    fn agent() -> AgentRecord {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-02T05:00:00.123456Z").unwrap().with_timezone(&Utc);
        AgentRecord {
            agent_id: Uuid::now_v7(),
            token_hash: [7; 32],
            region_code: Some("KR".into()),
            disclosure_level: DisclosureLevel::Summary,
            registered_at: at,
            trial_granted: MilliDac(10_000),
            trial_balance: MilliDac(2_500),
            trial_expires_at: at + chrono::Duration::days(30),
            owner_policy: Some(ContentPolicy::AlwaysBranch1),
        }
    }

    /// What the holder sends back is what the sending host reads, exactly;
    /// an answer it cannot decode is read at home instead of taken.
    #[test]
    fn a_shared_read_arrives_as_it_was_read() {
        let read = agent();
        let wire = serde_json::to_vec(&Answer::Done(Found::Row(AgentWire::of(&read)))).unwrap();
        let answer: Answer<Found<AgentWire>> = serde_json::from_slice(&wire).unwrap();
        assert_eq!(settle(answer, AgentWire::into_record).unwrap().unwrap(), Some(read.clone()));

        let mut bad = AgentWire::of(&read);
        bad.token_hash = "00ff".into();
        assert!(settle(Answer::Done(Found::Row(bad)), AgentWire::into_record).is_none(), "a short hash is read at home");
        let mut bad = AgentWire::of(&read);
        bad.disclosure_level = "everything".into();
        assert!(settle(Answer::Done(Found::Row(bad)), AgentWire::into_record).is_none(), "an unknown level is read at home");
        assert!(settle(Answer::<Found<AgentWire>>::Done(Found::NotRead), AgentWire::into_record).is_none());
        assert!(matches!(settle(Answer::<Found<AgentWire>>::Done(Found::NoRow), AgentWire::into_record), Some(Ok(None))));
        let unavailable = settle(Answer::<Found<AgentWire>>::Unavailable("down".into()), AgentWire::into_record);
        assert!(matches!(unavailable, Some(Err(error)) if error.is_unavailable()));
    }
}
