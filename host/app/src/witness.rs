//! Witnesses of the log (C2SP `tlog-witness`): the host holding the integrator
//! lease sends each new signed checkpoint to every configured witness with a
//! consistency proof from the size that witness last cosigned, checks each
//! cosignature that comes back, and keeps it (`log_cosignature`). A checkpoint
//! cosigned by the quorum is *witnessed*: receipts prove inclusion in the
//! newest such checkpoint, so that a third party who trusts neither the agent
//! nor the operator can see that the operator showed the same history to
//! independent parties.
//!
//! Witnessing runs in a task of its own beside the jobs loop: anchoring never
//! waits for a witness. Each witness is called in parallel with a bounded
//! timeout; one that fails is retried with exponential backoff, and the
//! answers the protocol defines are handled: a 409 names the size the witness
//! holds, and the checkpoint is sent again from there (a witness that lost
//! its state comes back on its own); a 422 says the witness saw a history
//! this one does not extend, which is logged as an error and counted on every
//! attempt, never retried quietly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anchor_domain::records::{CheckpointRecord, CosignatureRecord};
use anchor_verify::cosignature::{WitnessKey, add_checkpoint_request, find_cosignature};
use async_trait::async_trait;

use crate::Services;
use crate::log::consistency_proof;

/// A witness the log asks for cosignatures: its key and its submission prefix.
#[derive(Clone, Debug)]
pub struct WitnessEndpoint {
    pub key: WitnessKey,
    /// The submission prefix; requests go to `<url>/add-checkpoint`.
    pub url: String,
}

impl WitnessEndpoint {
    /// Reads `VKEY=URL` (the form of `--witness`).
    pub fn parse(spec: &str) -> Result<WitnessEndpoint, String> {
        let (vkey, url) = spec.trim().split_once('=').ok_or_else(|| format!("{spec:?} is not VKEY=URL"))?;
        let key = WitnessKey::parse(vkey).map_err(|e| e.to_string())?;
        let url = url.trim().trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("{url:?} is not an http(s) URL"));
        }
        Ok(WitnessEndpoint { key, url: url.to_owned() })
    }
}

/// What a witness answered an `add-checkpoint`.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// How the log reaches its witnesses (HTTP, in the server).
#[async_trait]
pub trait Transport: Send + Sync {
    /// POSTs `body` to `<url>/add-checkpoint`; an error when no answer came
    /// (unreachable, timed out).
    async fn add_checkpoint(&self, url: &str, body: String) -> Result<Answer, String>;
}

/// Who vouches for the log beyond its own key.
#[derive(Clone, Default)]
pub struct Trust {
    pub witnesses: Vec<WitnessEndpoint>,
    /// How many witnesses must cosign a checkpoint for it to be witnessed.
    pub quorum: usize,
    pub transport: Option<Arc<dyn Transport>>,
    /// RFC 3161 time stamps on checkpoints, when TSAs are configured.
    pub stamping: Option<Arc<crate::timestamp::Stamping>>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("witnesses", &self.witnesses)
            .field("quorum", &self.quorum)
            .field("stamping", &self.stamping)
            .finish_non_exhaustive()
    }
}

impl Trust {
    /// Witnesses with a quorum (every one of them when `quorum` is `None`).
    pub fn new(witnesses: Vec<WitnessEndpoint>, quorum: Option<usize>, transport: Arc<dyn Transport>) -> Result<Trust, String> {
        let quorum = quorum.unwrap_or(witnesses.len());
        if quorum > witnesses.len() {
            return Err(format!("a quorum of {quorum} needs at least that many witnesses; {} configured", witnesses.len()));
        }
        if !witnesses.is_empty() && quorum == 0 {
            return Err("a quorum of 0 would call any checkpoint witnessed".into());
        }
        let mut seen = std::collections::HashSet::new();
        for witness in &witnesses {
            if !seen.insert(witness.key.vkey()) {
                return Err(format!("witness {} is configured twice", witness.key.name()));
            }
        }
        Ok(Trust { witnesses, quorum, transport: Some(transport), stamping: None })
    }

    /// The same, with checkpoints time-stamped.
    pub fn with_stamping(mut self, stamping: crate::timestamp::Stamping) -> Trust {
        self.stamping = Some(Arc::new(stamping));
        self
    }

    /// The highest integrity level this instance's receipts can reach:
    /// certifiable with witnesses and a TSA, enhanced with witnesses, else basic.
    pub fn reachable_level(&self) -> anchor_domain::declarations::ee::Integrity {
        use anchor_domain::declarations::ee::Integrity;
        match (self.witnessing(), self.stamping.is_some()) {
            (true, true) => Integrity::Certifiable,
            (true, false) => Integrity::Enhanced,
            (false, _) => Integrity::Basic,
        }
    }

    /// The newest checkpoint the quorum cosigned, if witnessing is configured.
    pub async fn newest_witnessed(&self, store: &dyn anchor_ports::Store) -> anyhow::Result<Option<CheckpointRecord>> {
        if !self.witnessing() {
            return Ok(None);
        }
        Ok(store.newest_witnessed_checkpoint(&self.keys(), self.quorum as i64).await?)
    }

    /// Whether checkpoints can be witnessed here at all.
    pub fn witnessing(&self) -> bool {
        self.quorum > 0 && !self.witnesses.is_empty()
    }

    /// The witnesses' verifier keys, as the store names them.
    pub fn keys(&self) -> Vec<String> {
        self.witnesses.iter().map(|w| w.key.vkey()).collect()
    }
}

/// The newest checkpoint the quorum cosigned, if witnessing is configured.
pub async fn newest_witnessed(services: &Services) -> anyhow::Result<Option<CheckpointRecord>> {
    services.trust.newest_witnessed(services.store.as_ref()).await
}

/// A checkpoint's note with the cosignatures kept for it appended (one
/// signed note, as C2SP defines it: the log's line, then the witnesses').
pub async fn with_cosignatures(services: &Services, checkpoint: &CheckpointRecord) -> anyhow::Result<(String, Vec<CosignatureRecord>)> {
    let trust = &services.trust;
    if trust.witnesses.is_empty() {
        return Ok((checkpoint.note.clone(), Vec::new()));
    }
    let cosignatures = services.store.cosignatures(checkpoint.size, &trust.keys()).await?;
    let mut note = checkpoint.note.clone();
    for cosignature in &cosignatures {
        note.push_str(&cosignature.line);
    }
    Ok((note, cosignatures))
}

/// A witness's name, from its verifier key.
pub fn name_of(vkey: &str) -> &str {
    vkey.split('+').next().unwrap_or(vkey)
}

/// When a witness may be tried again, after how many failures in a row.
#[derive(Clone, Copy, Debug, Default)]
struct Backoff {
    failures: u32,
    next_try: Option<Instant>,
}

impl Backoff {
    fn ready(&self) -> bool {
        self.next_try.is_none_or(|at| Instant::now() >= at)
    }

    fn succeeded(&mut self) {
        *self = Backoff::default();
    }

    /// Doubles the wait from `first`, up to `most`.
    fn failed(&mut self, first: Duration, most: Duration) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let wait = first.saturating_mul(1u32 << self.failures.saturating_sub(1).min(16)).min(most);
        self.next_try = Some(Instant::now() + wait);
        wait
    }
}

/// What one submission came to.
#[derive(Debug)]
enum Outcome {
    /// The witness already holds this checkpoint.
    Current,
    /// Cosigned and checked; kept with the round's others.
    Cosigned(CosignatureRecord),
    /// The witness holds a larger tree of this log than the log has: a
    /// rollback of this log's database, or a fork someone else showed it.
    Ahead(u64),
    /// 422: not consistent with what the witness cosigned before.
    Inconsistent(String),
    /// 400, 403, 404: the witness does not take this log's checkpoints as
    /// configured (an unknown log, an unknown key).
    Refused(u16, String),
    /// A cosignature that does not verify, or is dated in the future.
    BadCosignature(String),
    /// No answer, a 5xx or 429, or an answer the protocol does not define.
    Failed(String),
}

/// How long a cosignature's time may be ahead of this host's clock.
const CLOCK_SKEW: i64 = 10;

/// Sends `checkpoint` to one witness, from the size the log believes it
/// holds; on a 409, again from the size it says it holds (a few times).
async fn submit(services: &Services, transport: &dyn Transport, witness: &WitnessEndpoint, checkpoint: &CheckpointRecord) -> Outcome {
    let store = services.store.as_ref();
    let vkey = witness.key.vkey();
    let size = checkpoint.size as u64;
    let mut old = match store.witness_size(&vkey).await {
        Ok(old) => old as u64,
        Err(error) => return Outcome::Failed(format!("reading the witness's size: {error}")),
    };
    for _ in 0..4 {
        if old == size {
            return Outcome::Current;
        }
        if old > size {
            return Outcome::Ahead(old);
        }
        let proof = if old == 0 {
            Vec::new()
        } else {
            match consistency_proof(store, size, old).await {
                Ok(Some(proof)) => proof.into_iter().map(|h| h.0).collect(),
                Ok(None) => return Outcome::Failed(format!("no consistency proof from {old} to {size}")),
                Err(error) => return Outcome::Failed(format!("consistency proof: {error:#}")),
            }
        };
        let started = Instant::now();
        let answer = transport.add_checkpoint(&witness.url, add_checkpoint_request(old, &proof, &checkpoint.note)).await;
        services.metrics.witness_latency(witness.key.name(), started.elapsed());
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => return Outcome::Failed(error),
        };
        match answer.status {
            200 => {
                let body = checkpoint.note.split_once("\n\n").map_or("", |(text, _)| text);
                let body = format!("{body}\n");
                let Some((line, timestamp)) = find_cosignature(body.as_bytes(), &answer.body, &witness.key) else {
                    return Outcome::BadCosignature("no valid cosignature by its key in the answer".into());
                };
                let now = services.clock.now().timestamp();
                if timestamp as i64 > now + CLOCK_SKEW {
                    return Outcome::BadCosignature(format!("the cosignature is dated {timestamp}, {}s ahead", timestamp as i64 - now));
                }
                return Outcome::Cosigned(CosignatureRecord {
                    size: checkpoint.size,
                    witness: vkey.clone(),
                    line,
                    signed_at: timestamp as i64,
                });
            }
            409 if answer.content_type.starts_with("text/x.tlog.size") => {
                let Some(held) = answer.body.trim_end_matches('\n').parse::<u64>().ok().filter(|_| answer.body.ends_with('\n')) else {
                    return Outcome::Failed(format!("a 409 whose body is not a size: {:?}", answer.body));
                };
                if held > size {
                    return Outcome::Ahead(held);
                }
                if let Err(error) = store.set_witness_size(&vkey, held as i64, services.clock.now()).await {
                    return Outcome::Failed(format!("keeping the witness's size: {error}"));
                }
                old = held;
            }
            422 => return Outcome::Inconsistent(answer.body.trim().chars().take(200).collect()),
            400 | 403 | 404 => return Outcome::Refused(answer.status, answer.body.trim().chars().take(200).collect()),
            other => return Outcome::Failed(format!("answered {other}")),
        }
    }
    Outcome::Failed("the witness's size kept changing".into())
}

/// Sends the newest checkpoint to every witness that does not hold it and
/// may be tried now, all at once, and notes when it reaches the quorum.
async fn round(services: &Services, transport: &dyn Transport, backoff: &mut [Backoff], last_quorum: &mut i64) -> anyhow::Result<()> {
    let trust = &services.trust;
    let Some(checkpoint) = services.store.latest_checkpoint().await? else { return Ok(()) };
    let calls = trust.witnesses.iter().zip(backoff.iter()).map(|(witness, backoff)| {
        let checkpoint = &checkpoint;
        async move { if backoff.ready() { Some(submit(services, transport, witness, checkpoint).await) } else { None } }
    });
    let mut outcomes = futures_util::future::join_all(calls).await;
    // The round's cosignatures are kept in one transaction.
    let cosigned: Vec<CosignatureRecord> =
        outcomes.iter().filter_map(|o| if let Some(Outcome::Cosigned(record)) = o { Some(record.clone()) } else { None }).collect();
    if let Err(error) = services.store.record_cosignatures(&cosigned, services.clock.now()).await {
        for outcome in outcomes.iter_mut() {
            if matches!(outcome, Some(Outcome::Cosigned(_))) {
                *outcome = Some(Outcome::Failed(format!("keeping the cosignature: {error}")));
            }
        }
    }
    let mut holding = 0;
    for ((witness, backoff), outcome) in trust.witnesses.iter().zip(backoff.iter_mut()).zip(outcomes) {
        let name = witness.key.name();
        let Some(outcome) = outcome else { continue };
        match outcome {
            Outcome::Current | Outcome::Cosigned(_) => {
                if backoff.failures > 0 {
                    tracing::info!(witness = name, size = checkpoint.size, "the witness cosigns again");
                }
                backoff.succeeded();
                services.metrics.witness_size(name, checkpoint.size);
                holding += 1;
            }
            Outcome::Ahead(held) => {
                let wait = backoff.failed(Duration::from_secs(30), Duration::from_secs(900));
                services.metrics.witness_failure(name, "ahead");
                tracing::error!(
                    witness = name,
                    witness_size = held,
                    log_size = checkpoint.size,
                    retry_in_s = wait.as_secs(),
                    "ALERT: the witness holds a larger tree of this log than the log has: the log's database was rolled back, or someone showed the witness another history"
                );
            }
            Outcome::Inconsistent(why) => {
                let wait = backoff.failed(Duration::from_secs(30), Duration::from_secs(900));
                services.metrics.witness_failure(name, "inconsistent");
                tracing::error!(
                    witness = name,
                    size = checkpoint.size,
                    why = %why,
                    retry_in_s = wait.as_secs(),
                    "ALERT: the witness says this checkpoint is not consistent with the one it cosigned before (422): the log forked"
                );
            }
            Outcome::Refused(status, why) => {
                let wait = backoff.failed(Duration::from_secs(5), Duration::from_secs(600));
                services.metrics.witness_failure(name, &status.to_string());
                tracing::error!(witness = name, status, why = %why, retry_in_s = wait.as_secs(), "the witness refuses this log's checkpoints (is it configured with this log's key?)");
            }
            Outcome::BadCosignature(why) => {
                let wait = backoff.failed(Duration::from_secs(5), Duration::from_secs(600));
                services.metrics.witness_failure(name, "bad_cosignature");
                tracing::error!(witness = name, why = %why, retry_in_s = wait.as_secs(), "the witness's answer holds no valid cosignature; not kept");
            }
            Outcome::Failed(why) => {
                let wait = backoff.failed(Duration::from_secs(1), Duration::from_secs(60));
                services.metrics.witness_failure(name, "unavailable");
                tracing::warn!(witness = name, why = %why, retry_in_s = wait.as_secs(), "the witness did not cosign; retrying");
            }
        }
    }
    if holding >= trust.quorum && checkpoint.size > *last_quorum {
        // Counted once per checkpoint, on the host that saw the quorum form.
        *last_quorum = checkpoint.size;
        let lag = (services.clock.now() - checkpoint.published_at).to_std().unwrap_or_default();
        services.metrics.witnessed(checkpoint.size, lag);
    }
    Ok(())
}

/// Counts the integrated records whose receipts do not reach their declared
/// level yet: enhanced ones past the newest witnessed checkpoint, certifiable
/// ones past the newest time-stamped one. Both reads start at a leaf index,
/// so they scan only the records the witnesses and the TSA have not caught
/// up with.
async fn count_below_level(services: &Services) -> anyhow::Result<()> {
    let witnessed = newest_witnessed(services).await?.map_or(0, |c| c.size);
    let enhanced = services.store.declared_level_count("enhanced", witnessed).await?;
    services.metrics.below_level("enhanced", enhanced);
    // Without a TSA no record reaches certifiable: creates count those
    // (anchor_declarations_beyond_reach), and no scan of the whole log runs here.
    if services.trust.stamping.is_some() {
        let stamped = services.store.newest_timestamped_checkpoint().await?.map_or(0, |c| c.size).min(witnessed);
        let certifiable = services.store.declared_level_count("certifiable", stamped).await?;
        services.metrics.below_level("certifiable", certifiable);
    }
    Ok(())
}

/// Runs witnessing rounds while `holding` says this host holds the
/// integrator lease, until `stop` says true. Does nothing without witnesses.
pub async fn run(services: Services, holding: Arc<AtomicBool>, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(transport) = services.trust.transport.clone().filter(|_| services.trust.witnessing()) else { return };
    let mut backoff = vec![Backoff::default(); services.trust.witnesses.len()];
    let mut last_quorum = 0;
    let mut last_count: Option<Instant> = None;
    loop {
        if holding.load(Ordering::Acquire) {
            if let Err(error) = round(&services, transport.as_ref(), &mut backoff, &mut last_quorum).await {
                tracing::warn!(error = format!("{error:#}"), "witnessing round failed");
            }
            if last_count.is_none_or(|at| at.elapsed() >= Duration::from_secs(5)) {
                last_count = Some(Instant::now());
                if let Err(error) = count_below_level(&services).await {
                    tracing::warn!(error = format!("{error:#}"), "counting records below their declared level failed");
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            Ok(_) = stop.wait_for(|stop| *stop) => break,
        }
    }
}
