//! Environment- and pattern-level observations: de-identified releases over
//! fixed, aligned windows (`anchor_domain::ara::Window`), cut once per window
//! from the aggregate model and stored, so every agent asking on the same day
//! gets the same figures and asking again draws no new noise.
//!
//! In every distribution an agent counts once, in the value it declared most
//! in the window; totals count distinct agents, and declarations with each
//! agent counted at most `privacy::DECLARATION_CAP` times. See `privacy` for
//! how figures are protected and what each release spends.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use anchor_domain::ara::{Dimension, Window};
use anchor_domain::pricing::ObservationTier;

use anchor_ports::SavedRelease;

use super::privacy::{self, DECLARATION_CAP, K, Privacy};
use super::{Observed, Purchase, pay, unavailable};
use crate::charge::{Offered, Route};
use crate::{AppError, AppResult, Services};

/// The releases ARA cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Agents and declarations, by action type and retention.
    Environment,
    /// How much agents declare, and when (6-hour UTC buckets).
    Density,
    /// Agents by their most used EE values, axis by axis.
    EeDistribution,
    /// Agents by their most declared action type, selection state, decision type and origin.
    ActionType,
    /// Agents by where their branch-1 decisions sat in their own pattern, per dimension.
    EnvironmentAnomaly,
    /// The tool market: tools by layer, buyers by the layer they bought most.
    Tsl,
}

/// The band dimensions of an anomaly release, by the name the API uses.
pub const ANOMALY_DIMENSIONS: [(&str, Dimension); 5] = [
    ("decision_scale", Dimension::BandDecisionScale),
    ("decision_class", Dimension::BandDecisionClass),
    ("target_class", Dimension::BandTargetClass),
    ("time_zone", Dimension::BandTimeZone),
    ("ee_resolution", Dimension::BandEeResolution),
];

/// Agents by how many declarations they made in the window.
const ACTIVITY_BUCKETS: [(i64, &str); 5] = [(1, "1"), (5, "2-5"), (20, "6-20"), (100, "21-100"), (i64::MAX, "101+")];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Environment => "environment",
            Kind::Density => "density",
            Kind::EeDistribution => "ee_distribution",
            Kind::ActionType => "action_type",
            Kind::EnvironmentAnomaly => "environment_anomaly",
            Kind::Tsl => "tsl",
        }
    }

    /// The distributions of the release, by dimension.
    fn dimensions(self) -> &'static [Dimension] {
        match self {
            Kind::Environment => &[Dimension::ActionType, Dimension::Retention],
            Kind::Density => &[Dimension::TimeZone],
            Kind::EeDistribution => &[
                Dimension::Retention,
                Dimension::Integrity,
                Dimension::Disclosure,
                Dimension::Responsibility,
                Dimension::ContentScope,
                Dimension::Delegation,
                Dimension::Preset,
            ],
            Kind::ActionType => &[Dimension::ActionType, Dimension::SelectionState, Dimension::DecisionType, Dimension::OriginContext],
            Kind::EnvironmentAnomaly => &[
                Dimension::BandDecisionScale,
                Dimension::BandDecisionClass,
                Dimension::BandTargetClass,
                Dimension::BandTimeZone,
                Dimension::BandEeResolution,
            ],
            // Not from the aggregate model: see `cut_market`.
            Kind::Tsl => &[],
        }
    }

    /// The window lengths the release is cut for.
    pub fn windows(self) -> &'static [i32] {
        match self {
            Kind::EnvironmentAnomaly => &anchor_domain::ara::WINDOW_DAYS,
            _ => &[30],
        }
    }

    pub const ALL: [Kind; 6] =
        [Kind::Environment, Kind::Density, Kind::EeDistribution, Kind::ActionType, Kind::EnvironmentAnomaly, Kind::Tsl];
}

/// One release: what it shows, over which window, at what privacy cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Release {
    pub kind: String,
    pub window_days: i32,
    /// The day after the window (UTC day number).
    pub window_end: i32,
    /// Distinct agents in the window (noisy); absent under k.
    pub agents: Option<i64>,
    /// Declarations in the window, each agent counted at most the cap (noisy); absent under k.
    pub declarations: Option<i64>,
    /// Per dimension: the released values and their agent counts.
    pub distributions: BTreeMap<String, Vec<(String, i64)>>,
    /// Agents by declarations made in the window (density only).
    pub activity: Vec<(String, i64)>,
    /// What this release spent: the sum over its components.
    pub epsilon: f64,
    pub delta: f64,
    /// Once this release was stored, the most ε the releases of its kind had
    /// spent on any one day of its window (the ledger), and the budget.
    #[serde(default)]
    pub epsilon_ledger: Option<f64>,
    #[serde(default)]
    pub epsilon_budget: Option<f64>,
    /// k-anonymity only, no noise (test configurations).
    pub exact: bool,
    pub released_at: DateTime<Utc>,
}

impl Release {
    pub fn window(&self) -> Window {
        Window { days: self.window_days, end: self.window_end }
    }

    /// Anything at all to show.
    pub fn shows_anything(&self) -> bool {
        self.agents.is_some() || self.distributions.values().any(|d| !d.is_empty()) || !self.activity.is_empty()
    }

    /// The released values of `dimension`.
    pub fn distribution(&self, dimension: Dimension) -> &[(String, i64)] {
        self.distributions.get(dimension.as_str()).map(Vec::as_slice).unwrap_or_default()
    }
}

fn internal(error: impl Into<anyhow::Error>) -> AppError {
    AppError::Internal(error.into())
}

/// How many purchases of one buyer a market release counts.
const PURCHASE_CAP: i64 = 20;

/// Cuts the market's release: tools by layer as listed (public), and, once
/// at least `K` agents bought in the window, buyers by the layer each bought
/// most (each agent once), their number and the purchases (each buyer at
/// most `PURCHASE_CAP` times), protected like every other release.
async fn cut_market(services: &Services, window: Window, privacy: Privacy) -> anyhow::Result<Release> {
    let market = services.store.market_window(window.from(), window.to(), PURCHASE_CAP).await?;
    let mut distributions = BTreeMap::new();
    let mut spent = Spent::new(privacy);
    let (mut agents, mut declarations) = (None, None);
    // The gate's noisy count of buyers is the released count.
    spent.count();
    if let Some(buyers) = privacy::gate(market.buyers, privacy)? {
        agents = Some(buyers);
        declarations = Some(privacy::count(market.capped_purchases, PURCHASE_CAP, privacy)?);
        spent.count();
        distributions.insert("buyers_by_layer".to_string(), privacy::histogram(&market.buyers_by_layer, privacy)?);
        spent.histogram()?;
    }
    if !market.tools_by_layer.is_empty() {
        distributions.insert("tools_by_layer".to_string(), market.tools_by_layer);
    }
    Ok(Release {
        kind: Kind::Tsl.name().to_string(),
        window_days: window.days,
        window_end: window.end,
        agents,
        declarations,
        distributions,
        activity: Vec::new(),
        epsilon: spent.epsilon,
        delta: spent.delta,
        epsilon_ledger: None,
        epsilon_budget: None,
        exact: privacy == Privacy::Exact,
        released_at: services.clock.now(),
    })
}

/// What a release spends, component by component.
struct Spent {
    privacy: Privacy,
    epsilon: f64,
    delta: f64,
}

impl Spent {
    fn new(privacy: Privacy) -> Spent {
        Spent { privacy, epsilon: 0.0, delta: 0.0 }
    }

    /// A noisy count (or the gate): ε, no δ.
    fn count(&mut self) {
        self.epsilon += self.privacy.per_component().0;
    }

    /// A thresholded histogram: ε, and the δ OpenDP's privacy map gives it.
    fn histogram(&mut self) -> anyhow::Result<()> {
        let (epsilon, delta) = privacy::histogram_cost(self.privacy)?;
        self.epsilon += epsilon;
        self.delta += delta;
        Ok(())
    }
}

/// The most a release of `kind` can spend: its gate, its counts and every histogram.
fn worst_case_epsilon(kind: Kind, privacy: Privacy) -> f64 {
    let components = match kind {
        Kind::Tsl => 3,
        Kind::Environment => 1 + 1 + kind.dimensions().len(),
        Kind::Density => 1 + kind.dimensions().len() + 1,
        _ => 1 + kind.dimensions().len(),
    };
    privacy.per_component().0 * components as f64
}

/// Cuts a release from the aggregate model.
async fn cut(services: &Services, kind: Kind, window: Window, privacy: Privacy) -> anyhow::Result<Release> {
    if kind == Kind::Tsl {
        return cut_market(services, window, privacy).await;
    }
    let store = &services.store;
    let mut spent = Spent::new(privacy);
    let totals = store.window_totals(window, DECLARATION_CAP).await?;
    // Whether the release shows anything is a noisy decision too.
    spent.count();
    let gated = privacy::gate(totals.agents, privacy)?;
    let enough = gated.is_some();
    let (mut agents, mut declarations) = (None, None);
    if let Some(noisy_agents) = gated
        && kind == Kind::Environment
    {
        agents = Some(noisy_agents);
        declarations = Some(privacy::count(totals.capped_declarations, DECLARATION_CAP, privacy)?);
        spent.count();
    }
    let mut distributions = BTreeMap::new();
    if enough {
        for dimension in kind.dimensions() {
            let counts = store.predominant(*dimension, window).await?;
            distributions.insert(dimension.as_str().to_string(), privacy::histogram(&counts, privacy)?);
            spent.histogram()?;
        }
    }
    let mut activity = Vec::new();
    if enough && kind == Kind::Density {
        let mut buckets: BTreeMap<usize, i64> = BTreeMap::new();
        for (declared, agents) in store.activity(window).await? {
            let bucket = ACTIVITY_BUCKETS.iter().position(|(upto, _)| declared <= *upto).unwrap_or(ACTIVITY_BUCKETS.len() - 1);
            *buckets.entry(bucket).or_default() += agents;
        }
        let counts: Vec<(String, i64)> = buckets.into_iter().map(|(i, n)| (ACTIVITY_BUCKETS[i].1.to_string(), n)).collect();
        let released = privacy::histogram(&counts, privacy)?;
        // In bucket order, not alphabetical.
        activity = ACTIVITY_BUCKETS.iter().filter_map(|(_, label)| released.iter().find(|(l, _)| l == label).cloned()).collect();
        spent.histogram()?;
    }
    Ok(Release {
        kind: kind.name().to_string(),
        window_days: window.days,
        window_end: window.end,
        agents,
        declarations,
        distributions,
        activity,
        epsilon: spent.epsilon,
        delta: spent.delta,
        epsilon_ledger: None,
        epsilon_budget: None,
        exact: privacy == Privacy::Exact,
        released_at: services.clock.now(),
    })
}

/// The release of `kind` for `window`: the stored one, or cut and stored now
/// (when two hosts cut one at once, the first stored wins and both serve it).
pub async fn release(services: &Services, kind: Kind, window: Window) -> AppResult<Release> {
    // A release, once cut, never changes: the replica serves it when it has it.
    if services.replica.get().is_some()
        && let Some(body) = crate::observation_read!(services, |s| s.release(kind.name(), window))?
    {
        return serde_json::from_str(&body).map_err(internal);
    }
    let store = &services.store;
    if let Some(body) = store.release(kind.name(), window).await? {
        return serde_json::from_str(&body).map_err(internal);
    }
    let privacy = services.config.privacy;
    let budget = privacy.budget();
    // Checked before anything is drawn: a release the ledger cannot take is never cut.
    let spent = store.epsilon_spent(kind.name(), window).await? as f64 / 1e6;
    let worst = worst_case_epsilon(kind, privacy);
    if spent + worst > budget {
        return Err(over_budget(kind, window, spent, worst, budget));
    }
    let mut release = cut(services, kind, window, privacy).await.map_err(AppError::Internal)?;
    let epsilon_micro = (release.epsilon * 1e6).ceil() as i64;
    if budget.is_finite() {
        release.epsilon_ledger = Some(spent + release.epsilon);
        release.epsilon_budget = Some(budget);
    }
    let body = serde_json::to_string(&release).map_err(internal)?;
    let budget_micro = if budget.is_finite() { (budget * 1e6) as i64 } else { i64::MAX };
    match store.save_release_within_budget(kind.name(), window, &body, epsilon_micro, budget_micro, services.clock.now()).await? {
        SavedRelease::Stored(stored) => {
            let stored: Release = serde_json::from_str(&stored).map_err(internal)?;
            if let Some(ledger) = stored.epsilon_ledger {
                services.metrics.ara_epsilon(kind.name(), ledger);
            }
            Ok(stored)
        }
        SavedRelease::OverBudget { spent_micro } => Err(over_budget(kind, window, spent_micro as f64 / 1e6, worst, budget)),
    }
}

/// A release the ledger cannot take: refused for free, as a release with
/// nothing to show is, saying which of three it is: no release of this kind
/// fits the budget at all, the budget is spent, or what is left is less
/// than this release's worst case.
pub(crate) fn over_budget(kind: Kind, window: Window, spent: f64, worst: f64, budget: f64) -> AppError {
    let (name, days) = (kind.name(), window.days);
    unavailable(if worst > budget {
        format!(
            "a {name} release can spend up to {worst:.2} epsilon (its gate, counts and distributions), more than the whole \
             differential-privacy budget of {budget:.2} epsilon per day of data: no {name} release is cut under this budget"
        )
    } else if spent >= budget {
        format!(
            "the differential-privacy budget of {name} releases on the days of this {days}-day window is spent \
             ({spent:.2} of {budget:.2} epsilon): no new figures are released for them"
        )
    } else {
        format!(
            "this {days}-day window's {name} release could spend up to {worst:.2} epsilon, and {name} releases have spent up to \
             {spent:.2} of the {budget:.2} epsilon budget on its days: the {:.2} left is less than its worst case, so it is not cut",
            budget - spent
        )
    })
}

/// Why a release shows nothing, giving no count of agents: under noise, a
/// noisy threshold held everything back (a group of more than K agents can
/// fall short of it too); exact (k-anonymity only), fewer than K agents.
pub(crate) fn nothing_shown(release: &Release, privacy: Privacy, what: &str) -> String {
    match privacy {
        Privacy::Noisy { epsilon, delta, .. } if !release.exact => {
            let scale = 1.0 / epsilon;
            let tau = privacy::threshold(scale, delta);
            let step = if release.distributions.is_empty() && release.activity.is_empty() {
                "the noisy count of the agents who contribute to them did not reach the release threshold"
            } else {
                "no value's noisy count of agents reached the release threshold"
            };
            format!(
                "nothing is shown for {what}: {step} ({tau}, with discrete Laplace noise of scale {scale:.2}). A group of fewer \
                 than {K} agents reaches it with probability at most {delta:e}, and a larger one can fall short too, so this says \
                 nothing exact about how many agents contribute"
            )
        }
        _ => format!("fewer than {K} agents contribute to {what}, too few to show statistics that identify none of them"),
    }
}

/// Cuts today's releases that are not stored yet (the job, after the day
/// turned); returns how many were cut.
pub async fn cut_due(services: &Services) -> AppResult<usize> {
    let now = services.clock.now();
    let mut cut = 0;
    for kind in Kind::ALL {
        for days in kind.windows() {
            let window = Window::ending_today(now, *days);
            if services.store.release(kind.name(), window).await?.is_none() {
                match release(services, kind, window).await {
                    Ok(_) => cut += 1,
                    // Past the budget: not cut today, which is no failure of the job.
                    Err(AppError::NotFound { code: "DATA_UNAVAILABLE", .. }) => {}
                    Err(other) => return Err(other),
                }
            }
        }
    }
    Ok(cut)
}

fn describe(kind: Kind, days: i32) -> String {
    match kind {
        Kind::Environment => format!("Environment observation over the last {days} full days"),
        Kind::Density => format!("Activity density over the last {days} full days"),
        Kind::EeDistribution => format!("EE distribution over the last {days} full days"),
        Kind::ActionType => format!("Action type distribution over the last {days} full days"),
        Kind::EnvironmentAnomaly => format!("Environment anomaly distribution over the last {days} full days"),
        Kind::Tsl => format!("Tool market activity over the last {days} full days"),
    }
}

/// An environment- or pattern-level observation: refused for free when the
/// release shows nothing (too few agents), paid before the answer otherwise.
pub async fn observe(
    services: &Services,
    agent_id: Uuid,
    route: Route,
    kind: Kind,
    days: i32,
    offered: Offered,
) -> AppResult<Observed<Release>> {
    let window = Window::ending_today(services.clock.now(), days);
    let release = release(services, kind, window).await?;
    if !release.shows_anything() {
        return Err(unavailable(nothing_shown(&release, services.config.privacy, &format!("the {days} full days before today"))));
    }
    let tier = match kind {
        Kind::Environment | Kind::Density | Kind::Tsl => ObservationTier::Environment,
        Kind::EeDistribution | Kind::ActionType => ObservationTier::Pattern,
        Kind::EnvironmentAnomaly => ObservationTier::EnvironmentAnomaly,
    };
    let purchase = Purchase::flat(route, tier, None, describe(kind, days));
    pay(services, agent_id, purchase, offered, release).await
}

/// GET /v1/ara/environment-anomaly: within_band and outlier counts per
/// dimension; `dimension` narrows it to one, `period_days` is 7, 30 or 90.
pub async fn environment_anomaly(
    services: &Services,
    agent_id: Uuid,
    period_days: Option<i32>,
    dimension: Option<&str>,
    offered: Offered,
) -> AppResult<Observed<Release>> {
    // 30 days unless asked: the interface's default window.
    let period_days = period_days.unwrap_or(30);
    if !anchor_domain::ara::WINDOW_DAYS.contains(&period_days) {
        return Err(AppError::invalid(
            "INVALID_VALUE",
            format!("period_days must be 7, 30 or 90 (windows are fixed, so that two of them cannot be subtracted); got {period_days}"),
        ));
    }
    let wanted = match dimension {
        None => None,
        Some(name) => Some(ANOMALY_DIMENSIONS.iter().find(|(n, _)| *n == name).map(|(_, d)| *d).ok_or_else(|| {
            let names: Vec<&str> = ANOMALY_DIMENSIONS.iter().map(|(n, _)| *n).collect();
            AppError::invalid("INVALID_ENUM", format!("dimension must be one of {}; got {}", names.join(", "), anchor_domain::brief(name)))
        })?),
    };
    let window = Window::ending_today(services.clock.now(), period_days);
    let mut release = release(services, Kind::EnvironmentAnomaly, window).await?;
    if let Some(dimension) = wanted {
        release.distributions.retain(|name, _| name == dimension.as_str());
    }
    if !release.distributions.values().any(|d| !d.is_empty()) {
        let what = format!("branch-1 band positions in the {period_days} full days before today");
        return Err(unavailable(nothing_shown(&release, services.config.privacy, &what)));
    }
    let purchase = Purchase {
        asked: dimension.unwrap_or_default().to_string(),
        ..Purchase::flat(
            super::ENVIRONMENT_ANOMALY,
            ObservationTier::EnvironmentAnomaly,
            None,
            describe(Kind::EnvironmentAnomaly, period_days),
        )
    };
    pay(services, agent_id, purchase, offered, release).await
}

/// GET /v1/ara/environment/tsl: the tool market's activity over the 30
/// full days before today (`cut_market`); refused for free while there is
/// nothing to show.
pub async fn tsl(services: &Services, agent_id: Uuid, offered: Offered) -> AppResult<Observed<Release>> {
    observe(services, agent_id, super::TSL, Kind::Tsl, 30, offered).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(distributions: BTreeMap<String, Vec<(String, i64)>>, exact: bool) -> Release {
        Release {
            kind: "environment".into(),
            window_days: 30,
            window_end: 20_000,
            agents: None,
            declarations: None,
            distributions,
            activity: Vec::new(),
            epsilon: 1.0,
            delta: 0.0,
            epsilon_ledger: None,
            epsilon_budget: None,
            exact,
            released_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    fn message(error: AppError) -> String {
        error.to_string()
    }

    /// Under noise, a release that shows nothing names the noisy threshold
    /// that held it back, and no count of agents.
    #[test]
    fn nothing_shown_names_the_noisy_threshold_not_a_count() {
        let gate_failed = nothing_shown(&release(BTreeMap::new(), false), Privacy::default(), "the 30 full days before today");
        assert!(gate_failed.contains("did not reach the release threshold (23"), "{gate_failed}");
        assert!(!gate_failed.contains("fewer than 10 agents contribute"), "{gate_failed}");
        let empty = BTreeMap::from([("action_type".to_string(), Vec::new())]);
        let values_held = nothing_shown(&release(empty, false), Privacy::default(), "the 30 full days before today");
        assert!(values_held.contains("no value's noisy count"), "{values_held}");
        let exact = nothing_shown(&release(BTreeMap::new(), true), Privacy::Exact, "the 7 full days before today");
        assert!(exact.starts_with("fewer than 10 agents contribute"), "{exact}");
    }

    /// A release refused by the budget says which of three it is.
    #[test]
    fn the_budget_refusal_says_whether_it_is_spent_or_too_small() {
        let window = Window { days: 30, end: 20_000 };
        let left_short = message(over_budget(Kind::EeDistribution, window, 1.0, 8.0, 8.0));
        assert!(left_short.contains("the 7.00 left is less than its worst case") && !left_short.contains("is spent"), "{left_short}");
        let spent = message(over_budget(Kind::Environment, window, 8.0, 3.0, 8.0));
        assert!(spent.contains("is spent (8.00 of 8.00 epsilon)"), "{spent}");
        let never = message(over_budget(Kind::EeDistribution, window, 0.0, 40.0, 30.0));
        assert!(never.contains("up to 40.00 epsilon") && never.contains("more than the whole"), "{never}");
    }
}
