//! Configuration: every option is a flag with an environment-variable twin.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// The options of `anchor serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeConfig {
    /// Address to listen on.
    #[arg(long, env = "ANCHOR_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the embedded database (`anchor.db`) and other local state.
    #[arg(long, env = "ANCHOR_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// `postgres://…` selects PostgreSQL; unset means SQLite under --data-dir.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A PostgreSQL streaming replica (hot standby) of the primary: ARA
    /// observation reads go there, and fall back to the primary while it
    /// fails. They may trail the primary by the replica's replay lag.
    #[arg(long, env = "DATABASE_READ_URL", hide_env_values = true)]
    pub database_read_url: Option<String>,

    /// Shared group commit (PostgreSQL, decision 0075): where this host takes
    /// the batches of the other hosts sharing its database and
    /// ANCHOR_PEER_KEY, while it holds the commit lease; the holder commits
    /// every host's hot-path writes in its own batches. A private address,
    /// not the API's. Unset: this host commits its own batches.
    #[arg(long, env = "ANCHOR_PEER_LISTEN")]
    pub peer_listen: Option<SocketAddr>,

    /// The URL the other hosts reach --peer-listen at. Defaults to
    /// http://<peer-listen> (which must then name an address, not 0.0.0.0).
    #[arg(long, env = "ANCHOR_PEER_URL")]
    pub peer_url: Option<String>,

    /// The key (at least 32 bytes) every host of the deployment shares: it
    /// authenticates the batches one host sends another. Needed with
    /// --peer-listen.
    #[arg(long, env = "ANCHOR_PEER_KEY", hide_env_values = true)]
    pub peer_key: Option<String>,

    /// The URL clients reach this service at; used in links, x402 resources and
    /// discovery documents. Defaults to http://<listen>.
    #[arg(long, env = "ANCHOR_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// A pricing component (.wasm) to use instead of the bundled v1.3.0.
    #[arg(long, env = "ANCHOR_PRICING_COMPONENT")]
    pub pricing_component: Option<PathBuf>,

    /// Requests per client per window before 429.
    #[arg(long, env = "ANCHOR_RATE_LIMIT", default_value_t = 100)]
    pub rate_limit: u32,

    /// Load balancers whose connections carry the client in
    /// `X-Forwarded-For` (addresses or networks, comma-separated, e.g.
    /// `10.0.0.0/8`): per-client limits then count that client, and the
    /// balancers' own connections are not held to the per-client connection
    /// limit. Empty: the peer of each connection is the client.
    #[arg(long, env = "ANCHOR_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: String,

    /// The rate-limit window, in seconds.
    #[arg(long, env = "ANCHOR_RATE_WINDOW_SECS", default_value_t = 60)]
    pub rate_window_secs: u64,

    /// The log's signing key (`PRIVATE+KEY+<origin>+<id>+<base64>`). Unset: the
    /// key in <data-dir>/log-signing.key, created on first start. Hosts that
    /// share a database must share this key.
    #[arg(long, env = "ANCHOR_LOG_SIGNING_KEY", hide_env_values = true)]
    pub log_signing_key: Option<String>,

    /// The key COSE receipts are signed with (`PRIVATE+COSE+ES256+<base64url>`).
    /// Unset: the key in <data-dir>/receipt-signing.key, created on first
    /// start. Every host's key is published at /.well-known/scitt-keys.
    #[arg(long, env = "ANCHOR_RECEIPT_SIGNING_KEY", hide_env_values = true)]
    pub receipt_signing_key: Option<String>,

    /// The log's origin (its name in checkpoints), used when a key is created.
    /// Defaults to <public host>/anchor-log.
    #[arg(long, env = "ANCHOR_LOG_ORIGIN")]
    pub log_origin: Option<String>,

    /// How x402 payments settle: `local` (signatures and terms checked, no
    /// money moved) or `facilitator` (the x402 facilitator API at --facilitator-url).
    #[arg(long, env = "ANCHOR_X402_MODE", default_value = "local", value_parser = ["local", "facilitator"])]
    pub x402_mode: String,

    /// The facilitator's base URL (facilitator mode).
    #[arg(long, env = "ANCHOR_FACILITATOR_URL")]
    pub facilitator_url: Option<String>,

    /// One header sent with every facilitator call, as `Name: value`.
    #[arg(long, env = "ANCHOR_FACILITATOR_AUTH", hide_env_values = true)]
    pub facilitator_auth: Option<String>,

    /// Marks a production deployment: local x402 settlement refuses to start.
    #[arg(long, env = "ANCHOR_PRODUCTION", default_value_t = false)]
    pub production: bool,

    /// The DAB (external spending cap per calendar month, in whole DAC) of
    /// agents whose owner set none. At least 100.
    #[arg(long, env = "ANCHOR_DAB_DEFAULT_DAC", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..))]
    pub dab_default_dac: u32,

    /// The Trial credit (whole DAC, valid 30 days) each new agent receives;
    /// 0 for a host where every paid route is paid over x402 (tests, load).
    #[arg(long, env = "ANCHOR_TRIAL_DAC", default_value_t = 500)]
    pub trial_dac: u32,

    /// The lowest DAB (whole DAC per month) an owner may set in the portal.
    #[arg(long, env = "ANCHOR_DAB_FLOOR_DAC", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub dab_floor_dac: u32,

    /// How long an owner portal session lasts, in hours.
    #[arg(long, env = "ANCHOR_DAP_SESSION_HOURS", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=720))]
    pub dap_session_hours: u32,

    /// Turns agent-type owners off (the same as `--features-off agent_owners`):
    /// /dap/owner/register-agent and /dap/auth/agent-login then answer 503
    /// FEATURE_NOT_AVAILABLE.
    #[arg(long, env = "ANCHOR_DAP_NO_AGENT_OWNERS", default_value_t = false)]
    pub dap_no_agent_owners: bool,

    /// Areas to switch off at start, comma-separated: retention
    /// (indefinite-retention subscriptions), dap_asa_cancel (owners cancelling
    /// an agent's ASA subscription), agent_owners (agent-type owners). Their
    /// routes answer 503 FEATURE_NOT_AVAILABLE. `anchor feature on|off NAME`
    /// overrides this on every host sharing the database.
    #[arg(long, env = "ANCHOR_FEATURES_OFF", value_delimiter = ',')]
    pub features_off: Vec<String>,

    /// The differential-privacy budget (epsilon) each histogram and count of
    /// a cross-agent ARA release spends; a release states its total.
    #[arg(long, env = "ANCHOR_ARA_EPSILON", default_value_t = 1.0, value_parser = positive)]
    pub ara_epsilon: f64,

    /// The most likely a value fewer than ten agents stand for is shown: it
    /// sets a release's noisy threshold (PRIVACY.md). A value of one agent
    /// alone is shown far less often; each release states that delta.
    #[arg(long, env = "ANCHOR_ARA_DELTA", default_value_t = 1e-6, value_parser = probability)]
    pub ara_delta: f64,

    /// The most epsilon all the ARA releases of one kind may spend on one day
    /// of data (a day is in every release whose window covers it); a release
    /// that would pass it is not cut, and its observation answers 404.
    #[arg(long, env = "ANCHOR_ARA_EPSILON_BUDGET", default_value_t = anchor_app::ara::privacy::DEFAULT_BUDGET, value_parser = positive)]
    pub ara_epsilon_budget: f64,

    /// Open connections at most; past that, new ones wait in the backlog.
    #[arg(long, env = "ANCHOR_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Open connections at most from one client (an IPv4 address, or an
    /// IPv6 /64); past that a new one is answered 429 TOO_MANY_CONNECTIONS.
    /// 0: no limit per client. The balancers named by `--trusted-proxies`
    /// are not held to it (they carry many clients' connections).
    #[arg(long, env = "ANCHOR_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 256)]
    pub max_connections_per_client: u32,

    /// Seconds a client has to send a request's head, on a new connection
    /// and between requests of a kept-alive one; then the connection closes.
    #[arg(long, env = "ANCHOR_HEADER_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub header_timeout_secs: u32,

    /// Seconds a client has to send a request's body once its head arrived (408 after).
    #[arg(long, env = "ANCHOR_BODY_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub body_timeout_secs: u32,

    /// The largest request body accepted, in bytes (413 above).
    #[arg(long, env = "ANCHOR_MAX_BODY_BYTES", default_value_t = 1_048_576, value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_body_bytes: u32,

    /// Also serve `GET /metrics` on a listener of its own at this address
    /// (for example 127.0.0.1:9464), for a Prometheus that reaches the host
    /// privately.
    #[arg(long, env = "ANCHOR_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Export this host's own spans (one per request, one per MCP tool call)
    /// over OTLP/HTTP, JSON encoded, to this collector beside the host (for
    /// example http://127.0.0.1:4318; /v1/traces is added). The spans start traces
    /// of their own: a caller's traceparent is never exported.
    #[arg(long, env = "ANCHOR_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Threads that run requests and background work (the runtime's
    /// workers). Unset: one per core. Hosts sharing one machine split its
    /// cores between them: with more workers than cores in all, they take
    /// turns and each turn costs a context switch (docs/deployment.md).
    #[arg(long, env = "ANCHOR_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,

    /// Serve `GET /metrics` on the API's listener too. Off by default: the
    /// counters tell business volumes (records anchored, DAC debited, payment
    /// outcomes) that are the operator's, not the agents'.
    #[arg(long, env = "ANCHOR_METRICS_ON_API", default_value_t = false)]
    pub metrics_on_api: bool,

    /// A JSON file with the won-per-dollar rate local-currency estimates use,
    /// dated and sourced: {"krw_per_usd": 1391.25, "as_of": "2026-11-20T00:00:00Z", "source": "…"}.
    /// Without it the estimates use a fixed indicative rate and say so.
    #[arg(long, env = "ANCHOR_FIAT_RATE")]
    pub fiat_rate: Option<std::path::PathBuf>,

    /// A witness of the log, as `VKEY=URL`: its cosignature verifier key
    /// (`<name>+<id>+<key>`) and its submission prefix. Repeatable; the
    /// environment variable takes a comma-separated list. Each new checkpoint
    /// is sent to every witness; receipts prove inclusion in the newest one
    /// the quorum cosigned.
    #[arg(long = "witness", env = "ANCHOR_WITNESSES", value_delimiter = ',')]
    pub witnesses: Vec<String>,

    /// An issuer whose signed statements `POST /entries` registers (SCRAPI),
    /// as `ISS=KEYFILE`: the CWT issuer its statements name and a file
    /// holding its public keys, a COSE_Key or a COSE Key Set (CBOR).
    /// Repeatable; the environment variable takes a comma-separated list.
    /// With none, every statement is refused (Rejected).
    #[arg(long = "scitt-issuer", env = "ANCHOR_SCITT_ISSUERS", value_delimiter = ',')]
    pub scitt_issuers: Vec<String>,

    /// How many witnesses must cosign a checkpoint for it to be witnessed
    /// (default: every configured witness).
    #[arg(long, env = "ANCHOR_WITNESS_QUORUM")]
    pub witness_quorum: Option<usize>,

    /// A time-stamping authority (RFC 3161) to ask for tokens over
    /// checkpoints, by URL. Repeatable: the next is asked when one fails.
    /// Needs --tsa-ca.
    #[arg(long = "tsa-url", env = "ANCHOR_TSA_URLS", value_delimiter = ',', requires = "tsa_ca")]
    pub tsa_urls: Vec<String>,

    /// The PEM file of the CA certificates the TSAs' tokens must chain to.
    #[arg(long, env = "ANCHOR_TSA_CA")]
    pub tsa_ca: Option<std::path::PathBuf>,

    /// At most one time-stamp token per this many seconds.
    #[arg(long, env = "ANCHOR_TSA_INTERVAL_SECS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=86400))]
    pub tsa_interval_secs: u32,

    /// On SIGTERM or SIGINT: seconds requests in flight get to finish after
    /// the listener closes; connections still open then are dropped.
    #[arg(long, env = "ANCHOR_SHUTDOWN_GRACE_SECS", default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub shutdown_grace_secs: u32,

    /// `text` (for a terminal) or `json` (one object per line, for log shippers).
    #[arg(long, env = "ANCHOR_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// The address that receives x402 payments (USDC on Base).
    #[arg(long, env = "ANCHOR_PAY_TO", default_value = "0x0000000000000000000000000000000000000000")]
    pub pay_to: String,
}

impl ServeConfig {
    pub fn http_limits(&self) -> crate::listener::HttpLimits {
        crate::listener::HttpLimits {
            max_connections: self.max_connections as usize,
            max_connections_per_client: match self.max_connections_per_client {
                0 => usize::MAX,
                n => n as usize,
            },
            header_read_timeout: std::time::Duration::from_secs(u64::from(self.header_timeout_secs)),
            body_read_timeout: std::time::Duration::from_secs(u64::from(self.body_timeout_secs)),
            max_body_bytes: self.max_body_bytes as usize,
            shutdown_grace: std::time::Duration::from_secs(u64::from(self.shutdown_grace_secs)),
        }
    }

    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) if !url.is_empty() => url.clone(),
            _ => self.data_dir.join("anchor.db").to_string_lossy().into_owned(),
        }
    }

    pub fn log_origin(&self) -> String {
        self.log_origin.clone().unwrap_or_else(|| {
            let url = self.public_url();
            let host = url.split("://").nth(1).unwrap_or(&url).split('/').next().unwrap_or("localhost").to_string();
            format!("{host}/anchor-log")
        })
    }

    pub fn public_url(&self) -> String {
        self.public_url.clone().unwrap_or_else(|| format!("http://{}", self.listen)).trim_end_matches('/').to_string()
    }
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text} is not a positive number")),
    }
}

fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("{text} is not a probability between 0 and 1 (exclusive)")),
    }
}
