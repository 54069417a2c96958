//! `AppState`: what every handler can reach. Cheap to clone.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anchor_domain::Clock;
use anchor_domain::pricing::Pricing;
use anchor_ports::Store;

use crate::ratelimit::RateLimiter;
use anchor_app::log::LogKey;
use anchor_x402::settlement::{LocalSettler, Settler};

/// The host's configuration, parsed once: what the use cases read
/// (`config`, the same value the application holds) and what only the
/// transport reads (rate limits, proxies, connection limits, metrics, the
/// local-currency rate).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The deployment as the use cases know it: the base URL, the x402
    /// recipient, the default DAB, the Trial grant, the owners' settings,
    /// ARA's privacy and the switched-off areas.
    pub config: Arc<anchor_app::Config>,
    pub rate_limit: u32,
    pub rate_window_secs: u64,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: crate::proxies::TrustedProxies,
    /// Connection and request limits.
    pub http: crate::listener::HttpLimits,
    /// Whether `GET /metrics` is served on the API's own listener.
    pub metrics_on_api: bool,
    /// The rate local-currency estimates use.
    pub fiat: crate::x402_headers::FiatRate,
}

/// What every handler can reach, behind one shared pointer: the router
/// clones the state several times per request (each layer and extractor
/// that takes it), and a clone of the parts themselves was some 25
/// reference counts, each an atomic increment and later a decrement shared
/// by every core (about 6 % of the runtime threads' time under load,
/// BENCHMARKS.md). Read through [`Deref`]; built or changed only before it
/// serves ([`AppState::new`], the `with_` methods).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Clone)]
pub struct Shared {
    /// This host's identity, as the integrator lease names it.
    pub host_id: uuid::Uuid,
    /// The log's origin and signing key.
    pub log_key: Arc<LogKey>,
    /// The key COSE receipts are signed with, and whether this host has
    /// published it with the others (once, on first use).
    pub receipt_key: Arc<anchor_app::receipt_key::ReceiptKey>,
    pub receipt_key_published: Arc<tokio::sync::OnceCell<()>>,
    pub settings: Arc<Settings>,
    pub started: Instant,
    pub limiter: Arc<RateLimiter>,
    /// The OpenAPI document, built on first request from the route table.
    pub openapi: Arc<OnceLock<serde_json::Value>>,
    /// The use cases' view of the same parts.
    pub app: anchor_app::Services,
    /// Where this host's own spans go (`--otlp-endpoint`), if anywhere.
    pub spans: Option<Arc<crate::otlp::Exporter>>,
}

impl AppState {
    pub fn new(
        store: Arc<dyn Store>,
        pricing: Arc<dyn Pricing>,
        clock: Arc<dyn Clock>,
        log_key: Arc<LogKey>,
        settings: Settings,
    ) -> AppState {
        let limiter = Arc::new(RateLimiter::new(settings.rate_limit, settings.rate_window_secs));
        let settler: Arc<dyn Settler> = Arc::new(LocalSettler);
        let metrics = Arc::new(anchor_app::metrics::Metrics::new(store.as_ref()));
        let schedule = anchor_app::pricing::Schedule::new(pricing, clock.clone());
        let scheduled: Arc<dyn Pricing> = Arc::new(anchor_app::pricing::Scheduled(schedule.clone()));
        let pricing = anchor_app::metrics::MeteredPricing::wrap(scheduled, metrics.clone());
        let app: anchor_app::Services = anchor_app::Parts {
            metrics,
            replica: Default::default(),
            switches: anchor_app::features::Switches::new(settings.config.features),
            schedule,
            trust: Default::default(),
            store: store.clone(),
            pricing: pricing.clone(),
            settler: settler.clone(),
            clock: clock.clone(),
            config: settings.config.clone(),
            // Compiled tools stay in memory only; `serve` gives a disk cache.
            tools: anchor_app::tools::Tools::new(Arc::new(
                anchor_plugin_host::WasmTools::new(None, anchor_domain::tools::ToolLimits::DEFAULT)
                    .expect("the tools' WebAssembly engine starts"),
            )),
        }
        .into();
        // The log key signs x402 offers too (decision 0069).
        let app = match anchor_app::offers::OfferSigner::new(&log_key, &settings.config.public_url) {
            Ok(signer) => app.with_offers(signer),
            Err(error) => {
                tracing::warn!(%error, "the log key cannot sign x402 offers; 402 answers go out unsigned");
                app
            }
        };
        AppState(Arc::new(Shared {
            host_id: uuid::Uuid::new_v4(),
            log_key,
            receipt_key: Arc::new(anchor_app::receipt_key::ReceiptKey::generate()),
            receipt_key_published: Arc::default(),
            settings: Arc::new(settings),
            started: Instant::now(),
            limiter,
            openapi: Arc::default(),
            app,
            spans: None,
        }))
    }
}

impl AppState {
    /// The same state with another tool runtime (one with a disk cache, or
    /// one shared by several test servers).
    pub fn with_tools(mut self, tools: anchor_app::tools::Tools) -> AppState {
        Arc::make_mut(&mut self.0).app.tools = tools;
        self
    }

    /// The same state exporting its spans over OTLP.
    pub fn with_spans(mut self, exporter: Arc<crate::otlp::Exporter>) -> AppState {
        Arc::make_mut(&mut self.0).spans = Some(exporter);
        self
    }

    /// The same state with the receipt key `serve` loaded (a new one otherwise).
    pub fn with_receipt_key(mut self, key: Arc<anchor_app::receipt_key::ReceiptKey>) -> AppState {
        Arc::make_mut(&mut self.0).receipt_key = key;
        self
    }

    /// The receipt key, published with the others first if this host has not yet.
    pub async fn published_receipt_key(&self) -> anchor_app::AppResult<&anchor_app::receipt_key::ReceiptKey> {
        self.receipt_key_published.get_or_try_init(|| anchor_app::transparency::publish_receipt_key(&self.app, &self.receipt_key)).await?;
        Ok(&self.receipt_key)
    }

    /// The same state with another settler (facilitator mode).
    pub fn with_settler(mut self, settler: Arc<dyn Settler>) -> AppState {
        Arc::make_mut(&mut self.0).app.set_settler(settler);
        self
    }

    /// The same state with the issuers whose signed statements are registered.
    pub fn with_scitt(mut self, registry: anchor_app::scitt::Registry) -> AppState {
        Arc::make_mut(&mut self.0).app.scitt = registry;
        self
    }

    /// The same state with witnesses of the log.
    pub fn with_trust(mut self, trust: anchor_app::witness::Trust) -> AppState {
        Arc::make_mut(&mut self.0).app.trust = trust;
        self
    }

    /// The same state serving `GET /metrics` on the API's listener or not
    /// (the configuration the use cases hold is left as it was built).
    pub fn with_metrics_on_api(mut self, on: bool) -> AppState {
        let shared = Arc::make_mut(&mut self.0);
        let mut settings = (*shared.settings).clone();
        settings.metrics_on_api = on;
        shared.settings = Arc::new(settings);
        self
    }
}
