//! What the active pricing generation publishes: its policy, its presets with
//! their quotes, and its service prices. Nothing here is computed by the host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use anchor_domain::declarations::ee::{ContentScope, Delegation, Disclosure, Integrity, Responsibility, Retention, Scope};
use anchor_domain::pricing::{Generation, Policy, Preset, Pricing, PricingError, Quote, ServicePrices};
use anchor_domain::{Clock, MilliDac};
use chrono::{DateTime, Utc};

use crate::{AppResult, Services};

/// The generation in force and everything it prices.
#[derive(Clone, Debug)]
pub struct Published {
    pub generation: Generation,
    /// The generation's policy, each axis value's `available` saying what
    /// this host offers: the generation's, less indefinite retention while
    /// the operator has it switched off.
    pub policy: Policy,
    /// Whether a declaration may be kept indefinitely here now.
    pub indefinite_available: bool,
    /// `None` for generations of `anchor:pricing@1.0.0`, which price declarations only.
    pub services: Option<ServicePrices>,
    /// Since when it is in force, and the next one published.
    pub standing: Standing,
}

pub fn current(services: &Services) -> AppResult<Published> {
    let mut policy = services.pricing.policy()?;
    let retention_on = services.features().retention;
    let mut indefinite_available = false;
    for price in &mut policy.axes {
        if price.axis == "ee_retention_period" && Retention::parse(&price.value) == Some(Retention::Indefinite) {
            price.available &= retention_on;
            indefinite_available = price.available;
        }
    }
    Ok(Published {
        generation: services.pricing.generation().clone(),
        policy,
        indefinite_available,
        services: services.pricing.services()?,
        standing: services.schedule.standing(),
    })
}

/// Every preset of the generation with what it costs.
pub fn presets(services: &Services) -> AppResult<(Generation, Vec<(Preset, Quote)>)> {
    let mut out = Vec::new();
    for preset in services.pricing.presets()? {
        let quote = services.pricing.quote(preset.scope())?;
        out.push((preset, quote));
    }
    Ok((services.pricing.generation().clone(), out))
}

/// How two generations' prices differ: every combination of the six EE
/// axes, every preset and every service price (`anchor pricing diff`).
#[derive(Clone, Debug)]
pub struct PricingDiff {
    pub from: Generation,
    pub to: Generation,
    /// Every combination: its axes' wire names and each side's total (`None`: refused).
    pub grid: Vec<(String, Option<MilliDac>, Option<MilliDac>)>,
    pub presets: Vec<(String, Option<MilliDac>, Option<MilliDac>)>,
    /// Service prices by name, each side's value as text (`None`: not priced).
    pub services: Vec<(String, Option<String>, Option<String>)>,
}

/// Every EE scope: the six axes' values, combined.
pub fn grid() -> Vec<Scope> {
    let mut out = Vec::new();
    for &retention in Retention::ALL {
        for &integrity in Integrity::ALL {
            for &disclosure in Disclosure::ALL {
                for &responsibility in Responsibility::ALL {
                    for &content_scope in ContentScope::ALL {
                        for &delegation in Delegation::ALL {
                            out.push(Scope { retention, integrity, disclosure, responsibility, content_scope, delegation });
                        }
                    }
                }
            }
        }
    }
    out
}

fn scope_name(s: &Scope) -> String {
    [
        s.retention.as_str(),
        s.integrity.as_str(),
        s.disclosure.as_str(),
        s.responsibility.as_str(),
        s.content_scope.as_str(),
        s.delegation.as_str(),
    ]
    .join("/")
}

fn dac(amount: MilliDac) -> String {
    format!("{} DAC", amount.to_decimal_string())
}

/// Every service price of a generation as (name, value), in a fixed order.
fn service_lines(prices: &ServicePrices) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in &prices.observations {
        let level = if p.resolution == 0 { String::new() } else { format!(" level {}", p.resolution) };
        out.push((format!("observation {}{level}", p.tier.as_str()), format!("{} + surcharge {}", dac(p.base), dac(p.surcharge))));
    }
    let mut add = |name: &str, value: String| out.push((name.to_string(), value));
    add("ise fee", dac(prices.ise_fee));
    add("ise free seconds", prices.ise_free_seconds.to_string());
    add("ise max minutes", prices.ise_max_minutes.to_string());
    add("sdac base fee", dac(prices.sdac_base_fee));
    add("sdac ratio (per mille)", prices.sdac_ratio_permille.to_string());
    add("asa period", dac(prices.asa_period));
    add("asa period days", prices.asa_period_days.to_string());
    add("asa grace days", prices.asa_grace_days.to_string());
    add("asa max periods", prices.asa_max_periods.to_string());
    add("retention monthly", dac(prices.retention_monthly));
    add("retention grace days", prices.retention_grace_days.to_string());
    add("earned threshold", dac(prices.earned_threshold));
    add("earned expiry days", prices.earned_expiry_days.to_string());
    add("tsl base fee", dac(prices.tsl_base_fee));
    out
}

/// Quotes the whole grid, the presets and the service prices with both generations.
pub fn diff(from: &dyn Pricing, to: &dyn Pricing) -> Result<PricingDiff, PricingError> {
    let grid = grid()
        .iter()
        .map(|scope| (scope_name(scope), from.quote(*scope).ok().map(|q| q.total), to.quote(*scope).ok().map(|q| q.total)))
        .collect();
    let mut names: Vec<String> = Vec::new();
    let (from_presets, to_presets) = (from.presets()?, to.presets()?);
    for preset in from_presets.iter().chain(&to_presets) {
        if !names.contains(&preset.name) {
            names.push(preset.name.clone());
        }
    }
    let price = |presets: &[Preset], pricing: &dyn Pricing, name: &str| {
        presets.iter().find(|p| p.name == name).and_then(|p| pricing.quote(p.scope()).ok()).map(|q| q.total)
    };
    let presets = names.iter().map(|n| (n.clone(), price(&from_presets, from, n), price(&to_presets, to, n))).collect();
    let (a, b) =
        (from.services()?.map(|s| service_lines(&s)).unwrap_or_default(), to.services()?.map(|s| service_lines(&s)).unwrap_or_default());
    let mut services: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    for (name, _) in a.iter().chain(&b) {
        if !services.iter().any(|(n, _, _)| n == name) {
            let find = |lines: &[(String, String)]| lines.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            services.push((name.clone(), find(&a), find(&b)));
        }
    }
    Ok(PricingDiff { from: from.generation().clone(), to: to.generation().clone(), grid, presets, services })
}

impl PricingDiff {
    /// The report `anchor pricing diff` prints; `all` lists every changed combination.
    pub fn render(&self, all: bool) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let side = |g: &Generation| format!("{} (sha256 {}, {})", g.version, &g.sha256[..g.sha256.len().min(16)], g.interface);
        let _ = writeln!(out, "from {}\nto   {}\n", side(&self.from), side(&self.to));
        let shown = |v: Option<MilliDac>| v.map_or("refused".to_string(), dac);
        let change = |a: MilliDac, b: MilliDac| {
            let delta = b - a;
            let sign = if delta >= MilliDac::ZERO { "+" } else { "" };
            match a.milli() {
                0 => format!("{sign}{}", delta.to_decimal_string()),
                base => format!("{sign}{}, {sign}{:.1}%", delta.to_decimal_string(), delta.milli() as f64 * 100.0 / base as f64),
            }
        };
        let changed: Vec<_> = self.grid.iter().filter(|(_, a, b)| a != b).collect();
        let _ = writeln!(
            out,
            "EE grid: {} combinations of the six axes; {} change, {} do not",
            self.grid.len(),
            changed.len(),
            self.grid.len() - changed.len()
        );
        let mut moves: Vec<(&String, MilliDac, MilliDac)> = changed.iter().filter_map(|(n, a, b)| Some((n, (*a)?, (*b)?))).collect();
        let refused = changed.len() - moves.len();
        if refused > 0 {
            let _ = writeln!(out, "  {refused} are refused by one generation and priced by the other");
        }
        moves.sort_by_key(|(_, a, b)| (*b - *a).milli());
        let listed: Vec<_> = if all {
            changed.iter().map(|(n, a, b)| (n.clone(), *a, *b)).collect()
        } else {
            // The five largest decreases and increases.
            let mut picked: Vec<_> = moves.iter().take(5).chain(moves.iter().rev().take(5)).collect();
            picked.dedup_by_key(|(n, _, _)| n.as_str());
            picked.into_iter().map(|(n, a, b)| ((*n).clone(), Some(*a), Some(*b))).collect()
        };
        if !listed.is_empty() {
            let _ = writeln!(
                out,
                "  {} (retention/integrity/disclosure/responsibility/content_scope/delegation):",
                if all { "every change" } else { "the five smallest and five largest changes" }
            );
        }
        for (name, a, b) in listed {
            let delta = match (a, b) {
                (Some(a), Some(b)) => format!(" ({})", change(a, b)),
                _ => String::new(),
            };
            let _ = writeln!(out, "    {name}: {} -> {}{delta}", shown(a), shown(b));
        }
        let _ = writeln!(out, "\npresets:");
        for (name, a, b) in &self.presets {
            let delta = match (a, b) {
                (Some(a), Some(b)) if a != b => format!(" ({})", change(*a, *b)),
                (Some(_), Some(_)) => " (unchanged)".into(),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {name}: {} -> {}{delta}", shown(*a), shown(*b));
        }
        let _ = writeln!(out, "\nservice prices:");
        let priced = |v: &Option<String>| v.clone().unwrap_or_else(|| "not priced".into());
        let mut same = 0;
        for (name, a, b) in &self.services {
            if a == b {
                same += 1;
                continue;
            }
            let _ = writeln!(out, "  {name}: {} -> {}", priced(a), priced(b));
        }
        if self.services.is_empty() {
            let _ = writeln!(out, "  neither generation prices services (both are anchor:pricing@1.0.0)");
        } else {
            let _ = writeln!(out, "  {same} of {} unchanged", self.services.len());
        }
        out
    }
}

/// What `anchor pricing publish` checks before storing a component: every
/// preset quotes, and the policy and service prices answer.
pub fn check_publishable(pricing: &dyn Pricing, allow_no_services: bool) -> anyhow::Result<usize> {
    let presets = pricing.presets()?;
    anyhow::ensure!(!presets.is_empty(), "the generation publishes no preset");
    for preset in &presets {
        pricing.quote(preset.scope()).map_err(|e| anyhow::anyhow!("preset {}: {e}", preset.name))?;
    }
    pricing.policy()?;
    if pricing.services()?.is_none() && !allow_no_services {
        anyhow::bail!(
            "{} ({}) prices no services: with it in force, every paid route but DD create would answer 503; \
             publish it anyway with --allow-no-services",
            pricing.generation().version,
            pricing.generation().interface
        );
    }
    // Every EE combination quotes or is refused; none traps.
    for scope in grid() {
        if let Err(PricingError::Failed { reason, .. }) = pricing.quote(scope) {
            anyhow::bail!("quoting {} failed: {reason}", scope_name(&scope));
        }
    }
    Ok(presets.len())
}

/// Publishes a checked generation from `activate_at`: false if another is
/// published for exactly that time.
pub async fn publish(
    store: &dyn anchor_ports::Store,
    pricing: &dyn Pricing,
    wasm: &[u8],
    activate_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> anyhow::Result<bool> {
    let generation = pricing.generation();
    let activation = anchor_domain::records::PricingActivation {
        sha256: generation.sha256.clone(),
        version: generation.version.clone(),
        interface: generation.interface.clone(),
        activate_at,
        published_at: now,
    };
    Ok(store.publish_pricing(&activation, wasm).await?)
}

/// Every publication, by activation time.
pub async fn publications(store: &dyn anchor_ports::Store) -> anyhow::Result<Vec<anchor_domain::records::PricingActivation>> {
    Ok(store.pricing_activations().await?)
}

/// Every generation a host can price with: the one it started with (its
/// flag, or the bundled one) and those published in the database, each in
/// force from its activation time. Generations are loaded once and kept for
/// the life of the host (a publication is rare and small), which is what
/// lets a request hold one for its whole length.
pub struct Schedule {
    base: &'static dyn Pricing,
    clock: Arc<dyn Clock>,
    /// (activation, generation), by activation time.
    timeline: RwLock<Vec<(DateTime<Utc>, &'static dyn Pricing)>>,
    /// Loaded generations by component hash.
    loaded: Mutex<HashMap<String, &'static dyn Pricing>>,
    /// Components that failed to load, and when.
    failed: Mutex<HashMap<String, std::time::Instant>>,
}

/// How a host turns a published component into a generation (compiling it
/// in its sandbox); the server gives the WebAssembly host's loader.
pub type Loader = Arc<dyn Fn(&[u8]) -> anyhow::Result<Arc<dyn Pricing>> + Send + Sync>;

fn keep(pricing: Arc<dyn Pricing>) -> &'static dyn Pricing {
    let kept: &'static Arc<dyn Pricing> = Box::leak(Box::new(pricing));
    kept.as_ref()
}

tokio::task_local! {
    /// When a request started, and the generation in force then.
    static REQUEST_GENERATION: (DateTime<Utc>, &'static dyn Pricing);
}

/// Where the schedule stands for a request: since when its generation is in
/// force (`None`: the host's own, in force from its start), and the next
/// published one with its activation time.
#[derive(Clone, Debug)]
pub struct Standing {
    pub since: Option<DateTime<Utc>>,
    pub next: Option<(DateTime<Utc>, Generation)>,
}

impl Schedule {
    pub fn new(base: Arc<dyn Pricing>, clock: Arc<dyn Clock>) -> Arc<Schedule> {
        Arc::new(Schedule { base: keep(base), clock, timeline: RwLock::default(), loaded: Mutex::default(), failed: Mutex::default() })
    }

    /// The generation in force at `at`.
    pub fn at(&self, at: DateTime<Utc>) -> &'static dyn Pricing {
        let timeline = self.timeline.read().unwrap_or_else(|p| p.into_inner());
        timeline.iter().rev().find(|(from, _)| *from <= at).map_or(self.base, |(_, pricing)| *pricing)
    }

    /// The next generation to come into force after `at`, and when.
    pub fn next_after(&self, at: DateTime<Utc>) -> Option<(DateTime<Utc>, Generation)> {
        let timeline = self.timeline.read().unwrap_or_else(|p| p.into_inner());
        timeline.iter().find(|(from, _)| *from > at).map(|(from, pricing)| (*from, pricing.generation().clone()))
    }

    /// The generation of this request (the one it started with), or the one in force now.
    fn current(&self) -> &'static dyn Pricing {
        REQUEST_GENERATION.try_with(|(_, pricing)| *pricing).unwrap_or_else(|_| self.at(self.clock.now()))
    }

    /// Since when the request's generation is in force, and what comes next,
    /// as of the request's start (or now, outside a request).
    pub fn standing(&self) -> Standing {
        let at = REQUEST_GENERATION.try_with(|(at, _)| *at).unwrap_or_else(|_| self.clock.now());
        let since = {
            let timeline = self.timeline.read().unwrap_or_else(|p| p.into_inner());
            timeline.iter().rev().find(|(from, _)| *from <= at).map(|(from, _)| *from)
        };
        Standing { since, next: self.next_after(at) }
    }

    /// Runs `work` (one request) priced by one generation throughout: the one
    /// in force when it starts, even if another comes into force meanwhile.
    pub async fn in_one_generation<F: std::future::Future>(&self, work: F) -> F::Output {
        let now = self.clock.now();
        REQUEST_GENERATION.scope((now, self.at(now)), work).await
    }

    /// Loads the publications not loaded yet and puts the timeline in force;
    /// how many generations it loaded. A component that does not load is
    /// left out (logged, and tried again after a minute); the others still
    /// come into force.
    pub async fn refresh(&self, store: &dyn anchor_ports::Store, loader: &Loader) -> anyhow::Result<usize> {
        let activations = store.pricing_activations().await?;
        let mut fresh = 0;
        let mut timeline = Vec::with_capacity(activations.len());
        for activation in activations {
            let known = self.loaded.lock().unwrap_or_else(|p| p.into_inner()).get(&activation.sha256).copied();
            let pricing = match known {
                Some(pricing) => pricing,
                None => {
                    let failed_at = self.failed.lock().unwrap_or_else(|p| p.into_inner()).get(&activation.sha256).copied();
                    if failed_at.is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(60)) {
                        continue;
                    }
                    match self.load(store, loader, &activation.sha256).await {
                        Ok(pricing) => {
                            self.loaded.lock().unwrap_or_else(|p| p.into_inner()).insert(activation.sha256.clone(), pricing);
                            fresh += 1;
                            if activation.activate_at < self.clock.now() {
                                tracing::warn!(version = %activation.version, activate_at = %activation.activate_at, "loaded a pricing generation after its activation time");
                            }
                            tracing::info!(version = %activation.version, sha256 = %activation.sha256, activate_at = %activation.activate_at, "loaded a published pricing generation");
                            pricing
                        }
                        Err(error) => {
                            self.failed
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(activation.sha256.clone(), std::time::Instant::now());
                            tracing::error!(version = %activation.version, sha256 = %activation.sha256, error = format!("{error:#}"), "a published pricing generation does not load on this host; left out");
                            continue;
                        }
                    }
                }
            };
            timeline.push((activation.activate_at, pricing));
        }
        *self.timeline.write().unwrap_or_else(|p| p.into_inner()) = timeline;
        Ok(fresh)
    }

    async fn load(&self, store: &dyn anchor_ports::Store, loader: &Loader, sha256: &str) -> anyhow::Result<&'static dyn Pricing> {
        let wasm =
            store.pricing_wasm(sha256).await?.ok_or_else(|| anyhow::anyhow!("pricing component {sha256} is published but not stored"))?;
        let loader = loader.clone();
        let pricing = tokio::task::spawn_blocking(move || loader(&wasm)).await??;
        if pricing.generation().sha256 != sha256 {
            anyhow::bail!("pricing component {sha256} does not hash to its name");
        }
        Ok(keep(pricing))
    }
}

/// Reads the publications every half second (every host runs it), so a
/// generation published with an activation time a few seconds ahead is
/// loaded on every host before it comes into force.
pub async fn watch(services: Services, loader: Loader) {
    loop {
        if let Err(error) = services.schedule.refresh(services.store.as_ref(), &loader).await {
            tracing::warn!(error = format!("{error:#}"), "reading published pricing generations failed; the loaded ones stay in force");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// A `Pricing` that answers with the request's generation (see [`Schedule`]).
pub struct Scheduled(pub Arc<Schedule>);

impl Pricing for Scheduled {
    fn generation(&self) -> &Generation {
        self.0.current().generation()
    }
    fn quote(&self, scope: Scope) -> Result<Quote, PricingError> {
        self.0.current().quote(scope)
    }
    fn presets(&self) -> Result<Vec<Preset>, PricingError> {
        self.0.current().presets()
    }
    fn policy(&self) -> Result<Policy, PricingError> {
        self.0.current().policy()
    }
    fn services(&self) -> Result<Option<ServicePrices>, PricingError> {
        self.0.current().services()
    }
}
