//! The anchoring service: configuration, HTTP API and start-up.
//!
//! `app` builds the whole router from an [`AppState`]; `serve` binds and runs
//! it. Tests build the same app around their own store and clock.

pub mod areas;
pub mod body;
pub mod config;
pub mod error;
pub mod extract;
pub mod http;
pub mod listener;
pub mod mcp;
use anchor_app::log;
pub mod log_peers;
pub mod monitor;
pub mod openapi;
pub mod operate;
pub mod otlp;
pub mod owner;
pub mod peer_commit;
pub mod proxies;
pub mod ratelimit;
pub mod state;
pub mod tool_kit;
pub mod wire;
pub mod witness_server;
pub mod x402_headers;

use std::sync::Arc;

use anchor_domain::pricing::Pricing;
use anchor_domain::{Clock, SystemClock};
use anchor_plugin_host::{Limits, PluginEngine, WasmPricing};
use anchor_x402::settlement::{FacilitatorSettler, LocalSettler, Settler, StaticHeader};

/// The whole application: the REST routes and the portal, with the MCP
/// endpoint beside them under the same layers.
pub fn app(state: AppState) -> axum::Router {
    http::app(state.clone(), mcp::router(state))
}
pub use state::{AppState, Settings};

/// Loads the pricing component: the operator's file if given, else the
/// bundled v1.3.0; through `cache` (compiled components on disk) when given.
pub fn load_pricing(
    engine: &PluginEngine,
    path: Option<&std::path::Path>,
    cache: Option<&anchor_plugin_host::CompiledCache>,
) -> anyhow::Result<Arc<dyn Pricing>> {
    let pricing: Arc<dyn Pricing> = match path {
        Some(path) => {
            let wasm = std::fs::read(path).map_err(|e| anyhow::anyhow!("reading pricing component {}: {e}", path.display()))?;
            WasmPricing::load_cached(engine, &wasm, Limits::PRICING, cache)?
        }
        None => WasmPricing::load_cached(engine, anchor_plugin_host::DEFAULT_PRICING_WASM, Limits::PRICING, cache)?,
    };
    Ok(pricing)
}

/// Opens storage, loads pricing and serves until Ctrl-C.
pub async fn serve(config: config::ServeConfig) -> anyhow::Result<()> {
    let starting = std::time::Instant::now();
    let otlp_endpoint = otlp::endpoint(config.otlp_endpoint.as_deref())?;
    if config.production && config.x402_mode == "local" {
        anyhow::bail!(
            "this deployment is marked production, but x402 settlement is local (signatures checked, no money moved); \
             use --x402-mode facilitator"
        );
    }
    let settler: Arc<dyn Settler> = if config.x402_mode == "facilitator" {
        let url = config.facilitator_url.as_deref().ok_or_else(|| anyhow::anyhow!("--x402-mode facilitator needs --facilitator-url"))?;
        let header = config.facilitator_auth.as_deref().map(|h| {
            let (name, value) = h.split_once(':').unwrap_or((h, ""));
            (name.trim().to_string(), value.trim().to_string())
        });
        Arc::new(
            FacilitatorSettler::connect(
                url,
                Arc::new(StaticHeader(header)),
                std::time::Duration::from_secs(10),
                std::time::Duration::from_secs(30),
            )
            .await?,
        )
    } else {
        Arc::new(LocalSettler)
    };
    let url = config.database_url();
    // On the embedded database, a shared lock says a server runs on it (restore refuses then).
    let _serving = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        None
    } else {
        Some(operate::Embedded::new(url.strip_prefix("sqlite://").unwrap_or(&url).into()).serving_lock()?)
    };
    let store = anchor_store::open(&url).await?;
    let engine = PluginEngine::new()?;
    // Compiled pricing components, kept across restarts: a start or a switch
    // deserializes what this host (or another sharing the directory) compiled.
    let pricing_cache = anchor_plugin_host::CompiledCache::new(&config.data_dir.join("pricing-cache"))?;
    let pricing = load_pricing(&engine, config.pricing_component.as_deref(), Some(&pricing_cache))?;
    let settings = Settings {
        config: Arc::new(anchor_app::Config {
            public_url: config.public_url(),
            pay_to: config.pay_to.clone(),
            dab_default: anchor_domain::MilliDac::from_dac(i64::from(config.dab_default_dac)),
            trial_grant: anchor_domain::MilliDac::from_dac(i64::from(config.trial_dac)),
            owners: anchor_app::owners::OwnerSettings {
                dab_floor: anchor_domain::MilliDac::from_dac(i64::from(config.dab_floor_dac)),
                session_ttl: chrono::Duration::hours(i64::from(config.dap_session_hours)),
                ..Default::default()
            },
            privacy: anchor_app::ara::privacy::Privacy::Noisy {
                epsilon: config.ara_epsilon,
                delta: config.ara_delta,
                budget: config.ara_epsilon_budget,
            },
            features: {
                let mut features =
                    anchor_app::Features::without(&config.features_off).map_err(|e| anyhow::anyhow!("--features-off: {e}"))?;
                features.agent_owners &= !config.dap_no_agent_owners;
                features
            },
        }),
        rate_limit: config.rate_limit,
        rate_window_secs: config.rate_window_secs,
        trusted_proxies: crate::proxies::TrustedProxies::parse(&config.trusted_proxies)
            .map_err(|e| anyhow::anyhow!("--trusted-proxies: {e}"))?,
        http: config.http_limits(),
        metrics_on_api: config.metrics_on_api,
        fiat: match &config.fiat_rate {
            Some(path) => x402_headers::FiatRate::from_json(
                &std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading --fiat-rate {}: {e}", path.display()))?,
            )?,
            None => x402_headers::FiatRate::default(),
        },
    };
    let key = Arc::new(match &config.log_signing_key {
        Some(skey) if !skey.is_empty() => log::LogKey::from_skey(skey)?,
        _ => log::LogKey::load_or_create(&config.data_dir.join("log-signing.key"), &config.log_origin())?,
    });
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let generation = pricing.generation().clone();
    let tools = anchor_plugin_host::WasmTools::new(
        Some(&config.data_dir.join("tool-cache")),
        anchor_domain::tools::ToolLimits::for_this_machine(),
    )?;
    let receipt_key = Arc::new(match &config.receipt_signing_key {
        Some(skey) if !skey.is_empty() => anchor_app::receipt_key::ReceiptKey::from_skey(skey)?,
        _ => anchor_app::receipt_key::ReceiptKey::load_or_create(&config.data_dir.join("receipt-signing.key"))?,
    });
    let state = AppState::new(store.clone(), pricing, clock.clone(), key.clone(), settings)
        .with_receipt_key(receipt_key)
        .with_settler(settler.clone())
        .with_tools(anchor_app::tools::Tools::new(Arc::new(tools)));
    let state = match otlp_endpoint {
        Some(endpoint) => {
            let host_id = state.host_id;
            state.with_spans(otlp::Exporter::start(&endpoint, host_id))
        }
        None => state,
    };
    let witnesses = config
        .witnesses
        .iter()
        .filter(|spec| !spec.trim().is_empty())
        .map(|spec| anchor_app::witness::WitnessEndpoint::parse(spec).map_err(|e| anyhow::anyhow!("--witness: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let tsa_urls: Vec<String> =
        config.tsa_urls.iter().map(|u| u.trim().trim_end_matches('/').to_owned()).filter(|u| !u.is_empty()).collect();
    let state = if witnesses.is_empty() && tsa_urls.is_empty() {
        state
    } else {
        let names: Vec<String> = witnesses.iter().map(|w| w.key.name().to_owned()).collect();
        let mut trust = anchor_app::witness::Trust::new(witnesses, config.witness_quorum, Arc::new(log_peers::HttpTransport::new()?))
            .map_err(|e| anyhow::anyhow!("--witness-quorum: {e}"))?;
        if !names.is_empty() {
            tracing::info!(witnesses = ?names, quorum = trust.quorum, "checkpoints go to the witnesses");
        }
        if !tsa_urls.is_empty() {
            let ca = config.tsa_ca.as_ref().ok_or_else(|| anyhow::anyhow!("--tsa-url needs --tsa-ca"))?;
            let pem = std::fs::read(ca).map_err(|e| anyhow::anyhow!("--tsa-ca {}: {e}", ca.display()))?;
            let roots = anchor_verify::timestamp::roots_from_pem(&pem).map_err(|e| anyhow::anyhow!("--tsa-ca {}: {e}", ca.display()))?;
            tracing::info!(tsa = ?tsa_urls, roots = roots.len(), "checkpoints are time-stamped");
            trust = trust.with_stamping(anchor_app::timestamp::Stamping {
                urls: tsa_urls,
                roots,
                every: std::time::Duration::from_secs(config.tsa_interval_secs.into()),
                transport: Arc::new(log_peers::HttpTsa::new()?),
            });
        }
        state.with_trust(trust)
    };
    let issuers = config
        .scitt_issuers
        .iter()
        .filter(|spec| !spec.trim().is_empty())
        .map(|spec| scitt_issuer(spec).map_err(|e| anyhow::anyhow!("--scitt-issuer {spec}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let state = if issuers.is_empty() {
        state
    } else {
        tracing::info!(issuers = ?issuers.iter().map(|i| i.iss.as_str()).collect::<Vec<_>>(), "signed statements of these issuers are registered");
        state.with_scitt(anchor_app::scitt::Registry::new(issuers).map_err(|e| anyhow::anyhow!("--scitt-issuer: {e}"))?)
    };
    if let Some(read_url) = config.database_read_url.as_deref().filter(|u| !u.is_empty()) {
        state.app.replica.set(Some(anchor_store::open_replica(read_url, None).await?));
        tracing::info!("ARA observation reads go to the read replica");
    }
    // Published pricing generations, loaded before the first request, then watched.
    let loader: anchor_app::pricing::Loader = {
        let engine = engine.clone();
        Arc::new(move |wasm: &[u8]| Ok(WasmPricing::load_cached(&engine, wasm, Limits::PRICING, Some(&pricing_cache))? as Arc<dyn Pricing>))
    };
    let published = match state.app.schedule.refresh(store.as_ref(), &loader).await {
        Ok(n) => n,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "reading published pricing generations failed; retrying in the background");
            0
        }
    };
    if let Some((at, next)) = state.app.schedule.next_after(clock.now()) {
        tracing::info!(version = %next.version, activate_at = %at, "a published pricing generation is scheduled");
    }
    tracing::info!(in_force = %state.app.schedule.at(clock.now()).generation().version, published, "pricing generations");
    tracing::info!(workers = tokio::runtime::Handle::current().metrics().num_workers(), "runtime worker threads");
    tokio::spawn(anchor_app::pricing::watch(state.app.clone(), loader));
    // The operator's stored switches, in force before the first request, then watched.
    anchor_app::features::refresh(&state.app).await?;
    tokio::spawn(anchor_app::features::watch(state.app.clone()));
    // Tools compiled on this host before load from its disk cache, off the start-up path.
    let warming = state.app.clone();
    tokio::spawn(async move {
        match anchor_app::tools::warm(&warming).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tools = n, "loaded compiled tools from the cache"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "loading compiled tools failed"),
        }
    });
    // Background work (the log, reconciliation, erasure) runs in one loop on
    // the host holding the lease, so one host does it at a time.
    let (stop_jobs, jobs_stopped) = tokio::sync::watch::channel(false);
    let jobs_stopped_for_peers = jobs_stopped.clone();
    let jobs = tokio::spawn(anchor_app::jobs::run(
        state.app.clone(),
        key.clone(),
        state.host_id,
        anchor_app::jobs::Schedule::default(),
        jobs_stopped,
    ));
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let limits = state.settings.http;
    let peering = start_peering(&config, &state, store.backend(), jobs_stopped_for_peers).await?;
    listener::raise_open_files(&limits);
    let metrics_server = match config.metrics_listen {
        Some(addr) => {
            let metrics_listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(listen = %metrics_listener.local_addr()?, "serving /metrics");
            let router = http::observe::metrics_router(state.clone());
            Some(tokio::spawn(listener::serve(metrics_listener, router, limits, std::future::pending())))
        }
        None => None,
    };
    tracing::info!(
        listen = %listener.local_addr()?,
        storage = store.backend(),
        pricing = %generation.version,
        pricing_sha256 = %generation.sha256,
        log_key = %key.vkey,
        x402_settlement = settler.mode(),
        host_id = %state.host_id,
        start_ms = starting.elapsed().as_millis() as u64,
        "anchor is serving"
    );
    let proxies = state.settings.trusted_proxies.clone();
    listener::serve_behind(listener, app(state), limits, proxies, shutdown_signal()).await?;
    // Requests are done: the jobs finish their round and give up the lease,
    // then the pool closes (SQLite checkpoints its write-ahead log).
    let _ = stop_jobs.send(true);
    let abort = jobs.abort_handle();
    if tokio::time::timeout(std::time::Duration::from_secs(10), jobs).await.is_err() {
        abort.abort();
        tracing::warn!("the background jobs did not stop within 10 s; the lease runs out on its own");
    }
    if let Some(peering) = peering {
        peering.stop().await;
    }
    if let Some(metrics_server) = metrics_server {
        metrics_server.abort();
    }
    if tokio::time::timeout(std::time::Duration::from_secs(10), store.close()).await.is_err() {
        tracing::warn!("database connections were still busy after 10 s");
    }
    tracing::info!("anchor stopped");
    Ok(())
}

/// Shared group commit, while it runs: the lease loop and the batch endpoint.
struct Peering {
    lease: tokio::task::JoinHandle<()>,
    endpoint: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_endpoint: tokio::sync::oneshot::Sender<()>,
}

impl Peering {
    /// After the API has stopped: the lease is given up (the jobs' stop
    /// signal ends its loop), then the endpoint goes on taking batches for
    /// a little longer than the others take to read the lease again, so
    /// that none they send meanwhile is refused; then it closes.
    async fn stop(self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.lease).await;
        tokio::time::sleep(anchor_app::peers::RENEW_EVERY + std::time::Duration::from_millis(500)).await;
        let _ = self.stop_endpoint.send(());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.endpoint).await;
    }
}

/// Starts shared group commit when `--peer-listen` is given (with its key).
async fn start_peering(
    config: &config::ServeConfig,
    state: &AppState,
    backend: &str,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<Peering>> {
    let key = config.peer_key.as_deref().filter(|key| !key.is_empty());
    let Some(listen) = config.peer_listen else {
        if key.is_some() {
            tracing::warn!("ANCHOR_PEER_KEY is set but --peer-listen is not: this host commits its own batches");
        }
        return Ok(None);
    };
    let key =
        peer_commit::PeerKey::new(key.ok_or_else(|| anyhow::anyhow!("--peer-listen needs ANCHOR_PEER_KEY, the key the hosts share"))?)?;
    if backend != "postgres" {
        anyhow::bail!("--peer-listen shares commits between hosts on one PostgreSQL; this host's database is {backend}");
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let address = match config.peer_url.as_deref().filter(|url| !url.is_empty()) {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if bound.ip().is_unspecified() => anyhow::bail!("--peer-listen {bound} needs --peer-url, the address the other hosts reach"),
        None => format!("http://{bound}"),
    };
    let (stop_endpoint, stopped) = tokio::sync::oneshot::channel();
    let router = peer_commit::router(state.app.clone(), key.clone());
    let endpoint = tokio::spawn(listener::serve(listener, router, state.settings.http, async {
        let _ = stopped.await;
    }));
    let peering = anchor_app::peers::Peering { address: address.clone(), connect: peer_commit::connect(key)? };
    let lease = tokio::spawn(anchor_app::peers::run(state.app.clone(), state.host_id, peering, stop));
    tracing::info!(listen = %bound, url = %address, "shared group commit: taking other hosts' batches while holding the commit lease");
    Ok(Some(Peering { lease, endpoint, stop_endpoint }))
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
                "SIGTERM"
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<&str>();
    let signal = tokio::select! {
        signal = interrupt => signal,
        signal = terminate => signal,
    };
    tracing::info!(signal, "shutting down");
}

/// Serves `state` on an already-bound listener with its connection limits
/// (tests bind port 0 themselves), until the task is dropped.
pub async fn serve_listener(listener: tokio::net::TcpListener, state: AppState) -> std::io::Result<()> {
    let (limits, proxies) = (state.settings.http, state.settings.trusted_proxies.clone());
    listener::serve_behind(listener, app(state), limits, proxies, std::future::pending()).await
}

/// An allowed SCITT issuer from `ISS=KEYFILE` (the file a COSE_Key or a COSE Key Set).
fn scitt_issuer(spec: &str) -> anyhow::Result<anchor_app::scitt::Issuer> {
    let (iss, file) = spec.trim().rsplit_once('=').ok_or_else(|| anyhow::anyhow!("give ISS=KEYFILE"))?;
    if iss.is_empty() || file.is_empty() {
        anyhow::bail!("give ISS=KEYFILE");
    }
    let bytes = std::fs::read(file).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let keys = anchor_app::scitt::issuer_keys(&bytes).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    Ok(anchor_app::scitt::Issuer { iss: iss.to_owned(), keys })
}
