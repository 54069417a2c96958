//! The service's numbers, for an operator's Prometheus: one registry per
//! host (per `Services`), filled by the use cases, the jobs and the front
//! ends, and read by [`render`] in the OpenMetrics text format.
//!
//! Counters count what this host did since it started; the log's gauges and
//! the pool's are read when scraped. Every family is listed in the README's
//! "Operating" section.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use anchor_domain::MilliDac;
use anchor_domain::declarations::ee::Scope;
use anchor_domain::pricing::{Generation, Policy, Preset, Pricing, PricingError, Quote, ServicePrices};
use anchor_ports::Store;

use crate::Services;

/// A request's route template (`/v1/dd/{dd_id}`, or `unmatched`), method and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: String,
}

/// A guest call: which plugin (`pricing`, `tool`) and which call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: &'static str,
    pub call: &'static str,
}

/// Why a guest call failed: `fuel`, `deadline`, `memory`, `trap`, or what
/// the guest itself refused (`refused`, `output_too_large`, `unavailable`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub plugin: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: &'static str,
}

/// Where a debit came from: `trial` or `earned`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

/// An ARA release kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    pub kind: &'static str,
}

/// A declared integrity level.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    pub declared: &'static str,
}

/// Why a time-stamp request brought no token: `unavailable`, `refused`, `invalid`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TsaFailureLabels {
    pub reason: &'static str,
}

/// A witness of the log, by name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WitnessLabels {
    pub witness: String,
}

/// Why a witness did not cosign: `unavailable`, `inconsistent`, `ahead`,
/// `bad_cosignature`, or the status it refused with.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WitnessFailureLabels {
    pub witness: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub state: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

fn guest_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_005, 3.0, 14))
}

/// Every metric of one host.
pub struct Metrics {
    registry: Registry,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_seconds: Histograms<RouteLabels>,
    pub rate_limited: Counter,
    pub feedback_received: Counter,
    pub plugin_seconds: Histograms<PluginLabels>,
    pub plugin_failures: Family<FailureLabels, Counter>,
    pub x402_verifications: Family<OutcomeLabels, Counter>,
    pub x402_settlements: Family<OutcomeLabels, Counter>,
    pub job_runs: Family<JobLabels, Counter>,
    pub job_failures: Family<JobLabels, Counter>,
    pub debits: Family<SourceLabels, Counter>,
    pub debited_millidac: Family<SourceLabels, Counter>,
    pub declarations_created: Counter,
    pub declarations_confirmed: Counter,
    pub checkpoints_signed: Counter,
    pub replica_reads: Family<OutcomeLabels, Counter>,
    log_size: Gauge,
    log_pending: Gauge,
    checkpoint_age: Gauge<f64, AtomicU64>,
    pool: Family<PoolLabels, Gauge>,
    ara_epsilon: Family<ReleaseLabels, Gauge<f64, AtomicU64>>,
    witness_seconds: Histograms<WitnessLabels>,
    witness_failures: Family<WitnessFailureLabels, Counter>,
    witness_size: Family<WitnessLabels, Gauge>,
    witnessed_size: Gauge,
    witnessed_lag: Histogram,
    tsa_failures: Family<TsaFailureLabels, Counter>,
    timestamped_size: Gauge,
    beyond_reach: Family<LevelLabels, Counter>,
    below_level: Family<LevelLabels, Gauge>,
}

impl Metrics {
    /// A registry with every family, and the store's own registered in it.
    pub fn new(store: &dyn Store) -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("anchor"),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(request_histogram),
            rate_limited: Counter::default(),
            feedback_received: Counter::default(),
            plugin_seconds: Family::new_with_constructor(guest_histogram),
            plugin_failures: Family::default(),
            x402_verifications: Family::default(),
            x402_settlements: Family::default(),
            job_runs: Family::default(),
            job_failures: Family::default(),
            debits: Family::default(),
            debited_millidac: Family::default(),
            declarations_created: Counter::default(),
            declarations_confirmed: Counter::default(),
            checkpoints_signed: Counter::default(),
            replica_reads: Family::default(),
            log_size: Gauge::default(),
            log_pending: Gauge::default(),
            checkpoint_age: Gauge::default(),
            ara_epsilon: Family::default(),
            pool: Family::default(),
            witness_seconds: Family::new_with_constructor(request_histogram),
            witness_failures: Family::default(),
            witness_size: Family::default(),
            witnessed_size: Gauge::default(),
            witnessed_lag: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            tsa_failures: Family::default(),
            timestamped_size: Gauge::default(),
            beyond_reach: Family::default(),
            below_level: Family::default(),
        };
        let r = &mut m.registry;
        r.register("http_requests", "Requests answered, by route template, method and status", m.http_requests.clone());
        r.register("http_request_duration_seconds", "Time from request head to response head", m.http_seconds.clone());
        r.register("rate_limit_refusals", "Requests refused with 429 by the per-client limit", m.rate_limited.clone());
        r.register("feedback_notes", "Anonymous feedback notes received (MCP submit_feedback)", m.feedback_received.clone());
        r.register("plugin_call_duration_seconds", "Time of each call into a WebAssembly guest", m.plugin_seconds.clone());
        r.register("plugin_call_failures", "Guest calls that failed, by plugin and reason", m.plugin_failures.clone());
        r.register("x402_verifications", "x402 payment verifications, by outcome", m.x402_verifications.clone());
        r.register("x402_settlements", "x402 settlements, by outcome", m.x402_settlements.clone());
        r.register("job_runs", "Background job runs on this host", m.job_runs.clone());
        r.register("job_failures", "Background job runs that failed", m.job_failures.clone());
        r.register("dac_debits", "Debits of internal DAC, by source", m.debits.clone());
        r.register("dac_debited_millidac", "Internal DAC debited, in milli-DAC, by source", m.debited_millidac.clone());
        r.register("declarations_created", "Decision declarations created on this host", m.declarations_created.clone());
        r.register("declarations_confirmed", "Decision declarations confirmed (anchored) on this host", m.declarations_confirmed.clone());
        r.register("log_checkpoints_signed", "Checkpoints this host signed", m.checkpoints_signed.clone());
        r.register(
            "replica_reads",
            "Observation reads on the read replica, and those that fell back to the primary",
            m.replica_reads.clone(),
        );
        r.register("log_size", "Leaves in the verifiable log", m.log_size.clone());
        r.register("log_pending_leaves", "Confirmed declarations waiting for a log index", m.log_pending.clone());
        r.register("log_seconds_since_checkpoint", "Seconds since the latest signed checkpoint", m.checkpoint_age.clone());
        r.register(
            "ara_epsilon_spent",
            "The most differential-privacy epsilon the ARA releases of a kind spent on one day of data, as of its latest release",
            m.ara_epsilon.clone(),
        );
        r.register("db_pool_connections", "Database connections by state (in_use, idle, max)", m.pool.clone());
        r.register("log_witness_request_duration_seconds", "Time of each add-checkpoint call to a witness", m.witness_seconds.clone());
        r.register(
            "log_witness_failures",
            "Witness calls that brought no cosignature, by witness and reason (inconsistent and ahead are alerts)",
            m.witness_failures.clone(),
        );
        r.register("log_witness_cosigned_size", "The size of the latest checkpoint each witness cosigned", m.witness_size.clone());
        r.register("log_witnessed_size", "The size of the newest checkpoint the witness quorum cosigned", m.witnessed_size.clone());
        r.register("log_witnessed_lag_seconds", "Time from signing a checkpoint to its cosignature by the quorum", m.witnessed_lag.clone());
        r.register(
            "log_timestamp_failures",
            "Time-stamp requests that brought no token kept, by reason (unavailable, refused, invalid)",
            m.tsa_failures.clone(),
        );
        r.register(
            "declarations_beyond_reach",
            "Declarations created with an integrity level this instance cannot reach (no witnesses, or no TSA), by declared level",
            m.beyond_reach.clone(),
        );
        r.register(
            "log_records_below_declared_level",
            "Records in the log whose receipts do not reach their declared integrity level yet (waiting on a witness quorum or a time stamp), by declared level",
            m.below_level.clone(),
        );
        r.register(
            "log_timestamped_size",
            "The size of the newest checkpoint with an RFC 3161 time-stamp token",
            m.timestamped_size.clone(),
        );
        let store_metrics = store.metrics();
        r.register("store_statement_duration_seconds", "Database statements, by verb and first table", store_metrics.statements.clone());
        r.register(
            "db_pool_acquire_waits",
            "Statements and transactions that found no idle connection",
            store_metrics.acquire_waits.clone(),
        );
        r.register(
            "db_pool_acquire_wait_seconds",
            "How long those waits for a connection lasted",
            store_metrics.acquire_wait_seconds.clone(),
        );
        r.register(
            "store_batch_writes",
            "Writes per group commit (creates and confirmations sharing one commit)",
            store_metrics.batch_size.clone(),
        );
        r.register("store_shared_batches", "Group commits that carried more than one write", store_metrics.shared_batches.clone());
        r.register(
            "store_batch_reads",
            "Reads per gathered statement (token lookups and declaration reads sharing one round trip)",
            store_metrics.read_batch_size.clone(),
        );
        r.register("store_shared_reads", "Gathered statements that answered more than one read", store_metrics.shared_reads.clone());
        r.register(
            "store_forwarded_writes",
            "Hot-path writes sent to the host that commits for every host (shared group commit)",
            store_metrics.forwarded_writes.clone(),
        );
        r.register(
            "store_forward_failures",
            "Forwarded writes and shared reads that came back with no answer and then ran on this host",
            store_metrics.forward_failures.clone(),
        );
        r.register(
            "store_peer_writes",
            "Writes other hosts sent here, committed in this host's batches",
            store_metrics.peer_writes.clone(),
        );
        r.register(
            "store_forwarded_reads",
            "Hot-path reads sent to the host that commits for every host, to share its statements (shared reads)",
            store_metrics.forwarded_reads.clone(),
        );
        r.register("store_peer_reads", "Reads other hosts sent here, read in this host's statements", store_metrics.peer_reads.clone());
        r.register(
            "store_remembered_records",
            "Confirmations that used the record this host's create stored by the same token within a second, unread (their write checks the token)",
            store_metrics.remembered_records.clone(),
        );
        r.register(
            "store_failed_batches",
            "Batch statements (creates or confirmations of a group commit) that failed as a whole, whose writes then ran one by one",
            store_metrics.failed_batches.clone(),
        );
        r.register(
            "store_failed_reads",
            "Gathered reads that failed as a whole, whose reads then ran one by one (or, on SQLite, direct reads then run on the pool)",
            store_metrics.failed_reads.clone(),
        );
        r.register(
            "store_direct_reads",
            "Token lookups and declaration reads answered on SQLite's own reader connections, off the pool",
            store_metrics.direct_reads.clone(),
        );
        m
    }

    /// The ledger of ARA releases of `kind` after its latest one: the most ε spent on a day.
    pub fn ara_epsilon(&self, kind: &'static str, spent: f64) {
        self.ara_epsilon.get_or_create(&ReleaseLabels { kind }).set(spent);
    }

    /// Times one call to a witness.
    pub fn witness_latency(&self, witness: &str, elapsed: std::time::Duration) {
        self.witness_seconds.get_or_create(&WitnessLabels { witness: witness.to_owned() }).observe(elapsed.as_secs_f64());
    }

    /// Counts a witness call that brought no cosignature.
    pub fn witness_failure(&self, witness: &str, reason: &str) {
        self.witness_failures.get_or_create(&WitnessFailureLabels { witness: witness.to_owned(), reason: reason.to_owned() }).inc();
    }

    /// The size a witness now holds.
    pub fn witness_size(&self, witness: &str, size: i64) {
        self.witness_size.get_or_create(&WitnessLabels { witness: witness.to_owned() }).set(size);
    }

    /// Counts a time-stamp request that brought no token kept.
    pub fn tsa_failure(&self, reason: &'static str) {
        self.tsa_failures.get_or_create(&TsaFailureLabels { reason }).inc();
    }

    /// Counts a declaration created with a level out of this instance's reach.
    pub fn beyond_reach(&self, declared: &'static str) {
        self.beyond_reach.get_or_create(&LevelLabels { declared }).inc();
    }

    /// How many records of a declared level wait to reach it.
    pub fn below_level(&self, declared: &'static str, count: i64) {
        self.below_level.get_or_create(&LevelLabels { declared }).set(count);
    }

    /// The newest checkpoint with a time-stamp token.
    pub fn timestamped(&self, size: i64) {
        self.timestamped_size.set(size);
    }

    /// A checkpoint reached the witness quorum, `lag` after it was signed.
    pub fn witnessed(&self, size: i64, lag: std::time::Duration) {
        self.witnessed_size.set(size);
        self.witnessed_lag.observe(lag.as_secs_f64());
    }

    /// Counts an internal debit of `amount` from `source` (`trial`, `earned`).
    pub fn debit(&self, source: &'static str, amount: MilliDac) {
        if amount > MilliDac::ZERO {
            self.debits.get_or_create(&SourceLabels { source }).inc();
            self.debited_millidac.get_or_create(&SourceLabels { source }).inc_by(amount.milli().max(0) as u64);
        }
    }

    /// Counts a job run and, if it failed, its failure.
    pub fn job<T, E>(&self, job: &'static str, result: Result<T, E>) -> Result<T, E> {
        self.job_runs.get_or_create(&JobLabels { job }).inc();
        if result.is_err() {
            self.job_failures.get_or_create(&JobLabels { job }).inc();
        }
        result
    }

    /// Times one guest call and counts its failure.
    pub fn guest<T, E>(
        &self,
        plugin: &'static str,
        call: &'static str,
        reason: impl Fn(&E) -> &'static str,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = f();
        self.plugin_seconds.get_or_create(&PluginLabels { plugin, call }).observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            self.plugin_failures.get_or_create(&FailureLabels { plugin, reason: reason(error) }).inc();
        }
        result
    }
}

/// The text Prometheus scrapes: the log's and the pool's gauges are read now.
pub async fn render(services: &Services) -> String {
    let m = &services.metrics;
    let store = services.store.as_ref();
    if let Ok(state) = store.log_state().await {
        m.log_size.set(state.size);
    }
    if let Ok(pending) = store.log_pending_count().await {
        m.log_pending.set(pending);
    }
    if let Ok(Some(latest)) = store.latest_checkpoint().await {
        let age = services.clock.now() - latest.published_at;
        m.checkpoint_age.set(age.num_milliseconds().max(0) as f64 / 1000.0);
    }
    let pool = store.pool_state();
    m.pool.get_or_create(&PoolLabels { state: "in_use" }).set(i64::from(pool.size - pool.idle));
    m.pool.get_or_create(&PoolLabels { state: "idle" }).set(i64::from(pool.idle));
    m.pool.get_or_create(&PoolLabels { state: "max" }).set(i64::from(pool.max));
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &m.registry);
    text
}

/// Why a pricing call failed, as a label.
fn pricing_reason(error: &PricingError) -> &'static str {
    match error {
        PricingError::Refused { .. } => "refused",
        PricingError::Failed { reason, .. } => {
            let reason = reason.to_ascii_lowercase();
            if reason.contains("fuel") {
                "fuel"
            } else if reason.contains("deadline") {
                "deadline"
            } else if reason.contains("memory") {
                "memory"
            } else {
                "trap"
            }
        }
    }
}

/// Why a tool run failed, as a label.
pub fn tool_reason(failure: &anchor_domain::tools::RunFailure) -> &'static str {
    use anchor_domain::tools::RunFailure;
    match failure {
        RunFailure::OutOfFuel => "fuel",
        RunFailure::Deadline => "deadline",
        RunFailure::OutOfMemory(_) => "memory",
        RunFailure::Trap(_) => "trap",
        RunFailure::OutputTooLarge(_) => "output_too_large",
        RunFailure::Refused(_) => "refused",
        RunFailure::Unavailable(_) => "unavailable",
    }
}

/// A pricing generation whose every call is timed and whose failures are counted.
pub struct MeteredPricing {
    inner: Arc<dyn Pricing>,
    metrics: Arc<Metrics>,
}

impl MeteredPricing {
    pub fn wrap(inner: Arc<dyn Pricing>, metrics: Arc<Metrics>) -> Arc<dyn Pricing> {
        Arc::new(MeteredPricing { inner, metrics })
    }
}

impl Pricing for MeteredPricing {
    fn generation(&self) -> &Generation {
        self.inner.generation()
    }
    fn quote(&self, scope: Scope) -> Result<Quote, PricingError> {
        self.metrics.guest("pricing", "quote", pricing_reason, || self.inner.quote(scope))
    }
    fn presets(&self) -> Result<Vec<Preset>, PricingError> {
        self.metrics.guest("pricing", "presets", pricing_reason, || self.inner.presets())
    }
    fn policy(&self) -> Result<Policy, PricingError> {
        self.metrics.guest("pricing", "policy", pricing_reason, || self.inner.policy())
    }
    fn services(&self) -> Result<Option<ServicePrices>, PricingError> {
        self.metrics.guest("pricing", "services", pricing_reason, || self.inner.services())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pricing_failures_are_named_by_their_bound() {
        let failed = |reason: &str| PricingError::Failed { version: "v".into(), reason: reason.into() };
        assert_eq!(pricing_reason(&failed("CPU budget (fuel) exhausted")), "fuel");
        assert_eq!(pricing_reason(&failed("wall-clock deadline passed")), "deadline");
        assert_eq!(pricing_reason(&failed("memory bound reached: growing memory")), "memory");
        assert_eq!(pricing_reason(&failed("trap: unreachable")), "trap");
        assert_eq!(pricing_reason(&PricingError::Refused { version: "v".into(), reason: "no".into() }), "refused");
    }
}
