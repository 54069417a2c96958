//! `anchor witness serve`: a transparency-log witness (C2SP `tlog-witness`),
//! so that two operators of self-hosted instances can vouch for each other's
//! logs, or anyone can watch one.
//!
//! It follows a fixed list of logs, each named by its note verifier key (the
//! log's origin is the key's name, as this service's logs are). For each, it
//! keeps the latest checkpoint it cosigned (`anchor_store::witness_state`), and
//! cosigns a new one only when a consistency proof shows the new tree extends
//! that one. Its answers are the protocol's: 200 with the cosignature line,
//! 400 (malformed, or an old size above the new one), 403 (no valid signature
//! of the log), 404 (a log it does not follow), 409 with the size it holds
//! (`text/x.tlog.size`), 422 (not consistent: the log forked or rewrote
//! history; logged as an error and counted). `GET /<sha256(origin), hex>/checkpoint`
//! serves the latest cosigned checkpoint for monitors.
//!
//! Requests are bounded: 64 KiB bodies, a per-client rate limit, and the
//! connection limits of the service's own listener.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anchor_store::witness_state::{Advance, WitnessState, Witnessed};
use anchor_verify::cosignature::{WitnessSigner, parse_add_checkpoint};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use signed_note::{Note, NoteError, StandardVerifier, VerifierList};
use tlog_tiles::{Checkpoint, Hash};

use crate::listener::HttpLimits;
use crate::ratelimit::RateLimiter;

/// The largest request body a witness reads.
pub const MAX_BODY: usize = 64 * 1024;

#[derive(clap::Args, Clone, Debug)]
pub struct WitnessServeArgs {
    /// Address to listen on.
    #[arg(long, env = "ANCHOR_WITNESS_LISTEN", default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// The witness's name, as in its key (`anchor witness keygen --name`).
    #[arg(long, env = "ANCHOR_WITNESS_NAME")]
    pub name: String,
    /// The file holding the witness's signing key.
    #[arg(long, env = "ANCHOR_WITNESS_KEY_FILE")]
    pub key_file: PathBuf,
    /// A log to witness, by its note verifier key (`<origin>+<id>+<key>`, as
    /// `GET /v1/log/key` serves it); repeatable.
    #[arg(long = "log", env = "ANCHOR_WITNESS_LOGS", value_delimiter = ',', required = true)]
    pub logs: Vec<String>,
    /// Where the witness keeps its state (`witness.db`).
    #[arg(long, env = "ANCHOR_WITNESS_DATA_DIR", default_value = "./witness-data")]
    pub data_dir: PathBuf,
    /// Requests per client (an IPv4 address or an IPv6 /64) per minute, then 429.
    #[arg(long, env = "ANCHOR_WITNESS_RATE_LIMIT", default_value_t = 600)]
    pub rate_limit: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OriginLabel {
    origin: String,
}

struct Metrics {
    registry: Registry,
    requests: Family<StatusLabel, Counter>,
    refused_inconsistent: Family<OriginLabel, Counter>,
    size: Family<OriginLabel, Gauge>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<StatusLabel, Counter>::default();
        registry.register("anchor_witness_add_checkpoint", "add-checkpoint requests by answer status", requests.clone());
        let refused_inconsistent = Family::<OriginLabel, Counter>::default();
        registry.register(
            "anchor_witness_inconsistent",
            "checkpoints refused as not consistent with the one cosigned before (422): a log that forked or rewrote history",
            refused_inconsistent.clone(),
        );
        let size = Family::<OriginLabel, Gauge>::default();
        registry.register("anchor_witness_cosigned_size", "size of the latest checkpoint cosigned, per log", size.clone());
        Metrics { registry, requests, refused_inconsistent, size }
    }
}

/// A running witness: its key, the logs it follows, its state.
pub struct Witness {
    signer: WitnessSigner,
    /// Each followed origin and the note verifier keys it is signed with.
    logs: HashMap<String, Vec<String>>,
    state: WitnessState,
    limiter: RateLimiter,
    metrics: Metrics,
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Witness {
    /// A witness over `state`, following the logs of `log_vkeys`.
    pub fn new(signer: WitnessSigner, log_vkeys: &[String], state: WitnessState, rate_limit: u32) -> anyhow::Result<Witness> {
        let mut logs: HashMap<String, Vec<String>> = HashMap::new();
        for vkey in log_vkeys {
            let vkey = vkey.trim();
            StandardVerifier::new(vkey).map_err(|e| anyhow::anyhow!("log key {vkey:?}: {e}"))?;
            let origin = vkey.split('+').next().unwrap_or_default().to_owned();
            logs.entry(origin).or_default().push(vkey.to_owned());
        }
        Ok(Witness {
            signer,
            logs,
            state,
            limiter: RateLimiter::new(rate_limit.max(1), 60),
            metrics: Metrics::new(),
            clock: Box::new(unix_now),
        })
    }

    pub fn vkey(&self) -> String {
        self.signer.public().vkey()
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], body.into()).into_response()
}

fn conflict(size: u64) -> Response {
    (StatusCode::CONFLICT, [(header::CONTENT_TYPE, HeaderValue::from_static("text/x.tlog.size"))], format!("{size}\n")).into_response()
}

/// The root of the empty tree: SHA-256 of nothing.
fn empty_root() -> [u8; 32] {
    Sha256::digest([]).into()
}

impl Witness {
    /// One `add-checkpoint` request, checked in the protocol's order.
    pub async fn add_checkpoint(&self, body: &[u8]) -> Response {
        let Ok(body) = std::str::from_utf8(body) else {
            return text(StatusCode::BAD_REQUEST, "the request is not UTF-8\n");
        };
        let request = match parse_add_checkpoint(body) {
            Ok(request) => request,
            Err(why) => return text(StatusCode::BAD_REQUEST, format!("{why}\n")),
        };
        let Ok(note) = Note::from_bytes(request.checkpoint.as_bytes()) else {
            return text(StatusCode::BAD_REQUEST, "the checkpoint is not a signed note\n");
        };
        let Ok(checkpoint) = Checkpoint::from_bytes(note.text()) else {
            return text(StatusCode::BAD_REQUEST, "the note is not a checkpoint\n");
        };
        let origin = checkpoint.origin().to_owned();
        let Some(vkeys) = self.logs.get(&origin) else {
            return text(StatusCode::NOT_FOUND, "this witness does not follow that log\n");
        };
        // The verifier list is not Send: it lives only in this block.
        let log_signatures = {
            let verifiers = VerifierList::new(
                vkeys.iter().filter_map(|k| StandardVerifier::new(k).ok()).map(|v| Box::new(v) as Box<dyn signed_note::Verifier>).collect(),
            );
            match note.verify(&verifiers) {
                Ok((verified, _)) => verified,
                Err(NoteError::UnverifiedNote) => return text(StatusCode::FORBIDDEN, "no signature of the log's key\n"),
                Err(e) => return text(StatusCode::FORBIDDEN, format!("the log's signature does not verify: {e}\n")),
            }
        };
        let (size, root) = (checkpoint.size(), checkpoint.hash().0);
        if request.old_size > size {
            return text(StatusCode::BAD_REQUEST, "the old size is larger than the checkpoint's\n");
        }
        // The state keeps sizes as signed 64-bit integers: a tree of 2^63
        // leaves or more is no log this witness can follow.
        if i64::try_from(size).is_err() {
            return text(StatusCode::BAD_REQUEST, "the checkpoint's size is 2^63 or more, larger than any log this witness follows\n");
        }
        let stored = match self.state.latest(&origin).await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::error!(error = %error, "reading the witness state failed");
                return text(StatusCode::SERVICE_UNAVAILABLE, "the witness cannot read its state\n");
            }
        };
        let (stored_size, stored_root) = stored.as_ref().map_or((0, empty_root()), |s| (s.size, s.root));
        if request.old_size != stored_size {
            return conflict(stored_size);
        }
        let inconsistent = |why: &str| {
            self.metrics.refused_inconsistent.get_or_create(&OriginLabel { origin: origin.clone() }).inc();
            tracing::error!(origin = %origin, old_size = stored_size, size, why, "refused a checkpoint not consistent with the one cosigned before");
            text(StatusCode::UNPROCESSABLE_ENTITY, format!("{why}\n"))
        };
        if size == 0 && root != empty_root() {
            return inconsistent("a tree of size 0 must have the empty tree's root");
        }
        if request.old_size == 0 && !request.proof.is_empty() {
            return inconsistent("a proof from size 0 must be empty");
        }
        if request.old_size == size {
            if request.old_size > 0 && root != stored_root {
                return inconsistent("two different roots for one size");
            }
        } else if request.old_size > 0 {
            let proof: Vec<Hash> = request.proof.iter().map(|h| Hash(*h)).collect();
            if tlog_tiles::check_tree(&proof, size, Hash(root), request.old_size, Hash(stored_root)).is_err() {
                return inconsistent("the consistency proof does not verify");
            }
        }
        let timestamp = (self.clock)();
        let cosignature = self.signer.cosign(note.text(), timestamp);
        let verified = match Note::new(note.text(), &log_signatures) {
            Ok(verified) => verified,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        };
        let kept = format!("{}{cosignature}", String::from_utf8_lossy(&verified.to_bytes()));
        let at = chrono::DateTime::from_timestamp(timestamp as i64, 0).unwrap_or_default().to_rfc3339();
        match self.state.advance(&origin, request.old_size, &Witnessed { size, root, note: kept }, &at).await {
            Ok(Advance::Stored) => {
                self.metrics.size.get_or_create(&OriginLabel { origin }).set(size as i64);
                text(StatusCode::OK, cosignature)
            }
            Ok(Advance::Conflict(now)) => conflict(now),
            Err(error) => {
                tracing::error!(error = %error, "storing the witness state failed");
                text(StatusCode::SERVICE_UNAVAILABLE, "the witness cannot store its state\n")
            }
        }
    }
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, body: Bytes) -> Response {
    let verdict = witness.limiter.check(crate::listener::client_key(peer.ip()), unix_now() as i64);
    let response = if verdict.allowed {
        witness.add_checkpoint(&body).await
    } else {
        let mut response = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(verdict.reset_secs.max(1)));
        response
    };
    witness.metrics.requests.get_or_create(&StatusLabel { status: response.status().as_u16() }).inc();
    response
}

async fn monitor_checkpoint(State(witness): State<Arc<Witness>>, Path(origin_hash): Path<String>) -> Response {
    let origin = witness.logs.keys().find(|origin| hex::encode(Sha256::digest(origin.as_bytes())) == origin_hash);
    let Some(origin) = origin else {
        return text(StatusCode::NOT_FOUND, "this witness does not follow that log\n");
    };
    match witness.state.latest(origin).await {
        Ok(Some(stored)) => text(StatusCode::OK, stored.note),
        Ok(None) => text(StatusCode::NOT_FOUND, "no checkpoint of that log cosigned yet\n"),
        Err(error) => {
            tracing::error!(error = %error, "reading the witness state failed");
            text(StatusCode::SERVICE_UNAVAILABLE, "the witness cannot read its state\n")
        }
    }
}

async fn metrics(State(witness): State<Arc<Witness>>) -> Response {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &witness.metrics.registry).is_err() {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be encoded\n");
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"))], out)
        .into_response()
}

/// The witness's routes: `POST /add-checkpoint` (the submission prefix is
/// the server's root), `GET /{origin hash}/checkpoint`, `GET /metrics`,
/// `GET /health`.
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(monitor_checkpoint))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { text(StatusCode::OK, "ok\n") }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(witness)
}

/// Reads the witness key file and opens the state, then serves until SIGTERM or SIGINT.
pub async fn serve(args: WitnessServeArgs) -> anyhow::Result<()> {
    let skey = std::fs::read_to_string(&args.key_file).map_err(|e| anyhow::anyhow!("reading {}: {e}", args.key_file.display()))?;
    let signer = WitnessSigner::parse(&skey).map_err(|e| anyhow::anyhow!("{e}"))?;
    if signer.public().name() != args.name {
        anyhow::bail!("the key in {} is for {:?}, not {:?}", args.key_file.display(), signer.public().name(), args.name);
    }
    let state = WitnessState::open(&args.data_dir.join("witness.db")).await?;
    let witness = Arc::new(Witness::new(signer, &args.logs, state, args.rate_limit)?);
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| anyhow::anyhow!("listening on {}: {e}", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, witness = %witness.vkey(), logs = witness.logs.len(), "witness serving");
    let limits = HttpLimits { max_body_bytes: MAX_BODY, ..HttpLimits::default() };
    crate::listener::raise_open_files(&limits);
    serve_on(listener, witness, limits, crate::shutdown_signal()).await?;
    Ok(())
}

/// Serves the witness on `listener` until `shutdown`, on the service's own
/// listener: its connection limits (per client and in all), its head and
/// body deadlines, its bounds on URLs, heads and bodies, and a panic caught
/// as a 500.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    witness: Arc<Witness>,
    limits: HttpLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = HttpLimits { max_body_bytes: limits.max_body_bytes.min(MAX_BODY), ..limits };
    crate::listener::serve(listener, crate::listener::guarded(router(witness), limits, &[]), limits, shutdown).await
}

/// `anchor witness keygen`: a new witness key in `file` (mode 0600, refused
/// if the file exists); returns the verifier key.
pub fn keygen(name: &str, file: &std::path::Path) -> anyhow::Result<String> {
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
    let signer = WitnessSigner::from_seed(name, &seed).map_err(|e| anyhow::anyhow!("{e}"))?;
    write_private(file, &format!("{}\n", signer.skey()))?;
    Ok(signer.public().vkey())
}

/// Writes a secret to `file`, readable by its owner only; refused if the file exists.
#[cfg(unix)]
pub fn write_private(file: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", file.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

#[cfg(not(unix))]
pub fn write_private(file: &std::path::Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(file, text)?;
    Ok(())
}
