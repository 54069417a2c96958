//! ara: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::ara`) and MCP.

use crate::api::reports::EvidenceReport;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time, TimeSecs};
use anchor_app::ara::agents::{self as agent_level, Granularity};
use anchor_app::ara::releases::{self, Kind, Release};
use anchor_app::ara::{self, Observed, PremiumSource, meta, privacy};
use anchor_domain::agents::DisclosureLevel;
use anchor_domain::ara::{Dimension, Position, day_start};
use anchor_domain::records::AgentRecord;
use chrono::Datelike;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

// ---- releases ----

/// The window a release covers: whole UTC days.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Period {
    pub(crate) from: TimeSecs,
    pub(crate) to: TimeSecs,
    pub(crate) window_days: i32,
}

/// How a release was protected and what it spent.
#[derive(Serialize, JsonSchema)]
pub(crate) struct PrivacyView {
    /// No figure stands for fewer agents.
    pub(crate) k: i64,
    /// discrete_laplace, or none (k-anonymity alone, test configurations).
    pub(crate) mechanism: &'static str,
    /// What the whole release spent (null: no noise).
    pub(crate) epsilon: Option<f64>,
    pub(crate) delta: f64,
    /// Once this release was stored: the most epsilon all the releases of
    /// its kind had spent on one day of its window, this one included (the
    /// ledger), and the budget they are held to. Absent without noise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) epsilon_spent_on_window: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) epsilon_budget: Option<f64>,
    /// How agents are counted.
    pub(crate) counted_as: &'static str,
    pub(crate) released_at: Time,
}

pub(crate) fn period(release: &Release) -> Period {
    let window = release.window();
    Period { from: window.from().into(), to: window.to().into(), window_days: window.days }
}

pub(crate) fn privacy_of(release: &Release) -> PrivacyView {
    PrivacyView {
        k: privacy::K,
        mechanism: if release.exact { "none" } else { "discrete_laplace" },
        epsilon: (!release.exact).then_some(release.epsilon),
        delta: release.delta,
        epsilon_spent_on_window: release.epsilon_ledger,
        epsilon_budget: release.epsilon_budget,
        counted_as: "each agent once per distribution, in the value it declared most in the window; dd_count counts at most 100 declarations per agent",
        released_at: release.released_at.into(),
    }
}

pub(crate) fn map(values: &[(String, i64)]) -> BTreeMap<String, i64> {
    values.iter().cloned().collect()
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct EnvironmentView {
    pub(crate) observation: &'static str,
    pub(crate) period: Period,
    /// Distinct agents with a declaration in the window.
    pub(crate) agent_count: Option<i64>,
    /// Declarations in the window, at most 100 per agent.
    pub(crate) dd_count: Option<i64>,
    /// Agents by the action type they declared most.
    pub(crate) action_type_distribution: BTreeMap<String, i64>,
    /// Agents by the retention they chose most.
    pub(crate) retention_distribution: BTreeMap<String, i64>,
    pub(crate) privacy: PrivacyView,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn environment_view(observed: &Observed<Release>) -> EnvironmentView {
    let r = &observed.result;
    EnvironmentView {
        observation: "environment",
        period: period(r),
        agent_count: r.agents,
        dd_count: r.declarations,
        action_type_distribution: map(r.distribution(Dimension::ActionType)),
        retention_distribution: map(r.distribution(Dimension::Retention)),
        privacy: privacy_of(r),
        dac_charged: observed.charged.into(),
    }
}

/// The environment observation, as REST and the MCP tool observe_environment
/// answer it, with the settlement (reference, payer) its payment got.
pub(crate) async fn observe_environment(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    offered: anchor_app::charge::Offered,
) -> ApiResult<(EnvironmentView, Option<anchor_app::charge::Settlement>)> {
    let observed = releases::observe(&state.app, agent.agent_id, ara::ENVIRONMENT, Kind::Environment, 30, offered).await?;
    Ok((environment_view(&observed), observed.settlement))
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ActivityBucket {
    /// Declarations one agent made in the window: 1, 2-5, 6-20, 21-100 or 101+.
    pub(crate) declarations: String,
    pub(crate) agents: i64,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DensityView {
    pub(crate) observation: &'static str,
    pub(crate) period: Period,
    /// Agents by how much they declared in the window.
    pub(crate) activity: Vec<ActivityBucket>,
    /// Agents by the 6-hour UTC bucket they declared most in.
    pub(crate) time_zone_distribution: BTreeMap<String, i64>,
    pub(crate) privacy: PrivacyView,
    pub(crate) dac_charged: Dac,
}

/// Distributions of agents, by dimension.
#[derive(Serialize, JsonSchema)]
pub(crate) struct PatternView {
    pub(crate) observation: &'static str,
    pub(crate) period: Period,
    /// Per dimension: agents by the value they declared most.
    pub(crate) distributions: BTreeMap<String, BTreeMap<String, i64>>,
    pub(crate) privacy: PrivacyView,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn pattern_view(name: &'static str, observed: &Observed<Release>) -> PatternView {
    let r = &observed.result;
    PatternView {
        observation: name,
        period: period(r),
        distributions: r.distributions.iter().map(|(dimension, values)| (dimension.clone(), map(values))).collect(),
        privacy: privacy_of(r),
        dac_charged: observed.charged.into(),
    }
}

/// A pattern observation (ee-distribution or action-type), as REST and the
/// MCP tool observe_pattern answer it, with its payment's settlement.
pub(crate) async fn observe_pattern(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
    kind: Kind,
) -> ApiResult<(PatternView, Option<anchor_app::charge::Settlement>)> {
    let (route, kind, name) = match kind {
        Kind::ActionType => (ara::ACTION_TYPE, Kind::ActionType, "action_type"),
        _ => (ara::EE_DISTRIBUTION, Kind::EeDistribution, "ee_distribution"),
    };
    let observed = releases::observe(&state.app, agent.agent_id, route, kind, 30, offered).await?;
    Ok((pattern_view(name, &observed), observed.settlement))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct EnvironmentAnomalyQuery {
    /// A fixed window: 7, 30 or 90 full days.
    #[schemars(extend("enum" = [7, 30, 90], "default" = 30))]
    pub(crate) period_days: Option<i32>,
    /// One dimension only: decision_scale, decision_class, target_class, time_zone or ee_resolution.
    #[schemars(extend("enum" = ["decision_scale", "decision_class", "target_class", "time_zone", "ee_resolution"]))]
    pub(crate) dimension: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct EnvironmentAnomalyView {
    pub(crate) observation: &'static str,
    pub(crate) period: Period,
    /// Per dimension: agents by where their decisions mostly sat (within_band, outlier).
    pub(crate) dimensions: BTreeMap<String, BTreeMap<String, i64>>,
    pub(crate) privacy: PrivacyView,
    pub(crate) dac_charged: Dac,
}

/// The environment anomaly observation, as REST and the MCP tool
/// get_environment_anomaly answer it, with its payment's settlement.
pub(crate) async fn environment_anomaly_of(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
    query: EnvironmentAnomalyQuery,
) -> ApiResult<(EnvironmentAnomalyView, Option<anchor_app::charge::Settlement>)> {
    let days = query.period_days.unwrap_or(30);
    let observed = releases::environment_anomaly(&state.app, agent.agent_id, days, query.dimension.as_deref(), offered).await?;
    let r = &observed.result;
    let name_of = |dimension: &str| releases::ANOMALY_DIMENSIONS.iter().find(|(_, d)| d.as_str() == dimension).map(|(n, _)| n.to_string());
    let body = EnvironmentAnomalyView {
        observation: "environment_anomaly",
        period: period(r),
        dimensions: r
            .distributions
            .iter()
            .filter(|(_, values)| !values.is_empty())
            .filter_map(|(dimension, values)| name_of(dimension).map(|name| (name, map(values))))
            .collect(),
        privacy: privacy_of(r),
        dac_charged: observed.charged.into(),
    };
    Ok((body, observed.settlement))
}

// ---- agent level ----

/// 1, 2 or 3.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PremiumSourceParam {
    External,
    Earned,
}

/// Who pays a surcharge; external unless said otherwise.
pub(crate) fn premium_source(value: Option<PremiumSourceParam>) -> PremiumSource {
    match value {
        Some(PremiumSourceParam::Earned) => PremiumSource::Earned,
        _ => PremiumSource::External,
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct LevelQuery {
    #[schemars(extend("enum" = [1, 2, 3], "default" = 1))]
    pub(crate) resolution_level: Option<u8>,
    /// Who pays the surcharge of levels 2 and 3 when observing another agent.
    #[schemars(extend("default" = "external"))]
    pub(crate) premium_source: Option<PremiumSourceParam>,
}

/// Whether the agent observed itself.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ObservedAs {
    #[serde(rename = "self")]
    Itself,
    Other,
}

/// Who was observed, and how far.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Subject {
    pub(crate) agent_id: Uuid,
    pub(crate) resolution_level: u8,
    pub(crate) observed_as: ObservedAs,
    pub(crate) disclosure_level: Named<DisclosureLevel>,
}

pub(crate) fn subject(target: &agent_level::Target) -> Subject {
    Subject {
        agent_id: target.agent_id,
        resolution_level: target.level,
        observed_as: if target.own { ObservedAs::Itself } else { ObservedAs::Other },
        disclosure_level: Named(target.disclosure),
    }
}

pub(crate) fn distributions(values: &[(Dimension, Vec<(String, i64)>)]) -> BTreeMap<String, BTreeMap<String, i64>> {
    values.iter().map(|(dimension, counts)| (dimension.as_str().to_string(), map(counts))).collect()
}

/// A UTC day as `YYYY-MM-DD`.
pub(crate) fn date(day: i32) -> String {
    let d = day_start(day).date_naive();
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

/// How retention was demoted (the agent itself only).
#[derive(Serialize, JsonSchema)]
pub(crate) struct DemotionStats {
    pub(crate) demoted_dd_count: i64,
    /// YYYY-MM-DD (UTC), or null.
    pub(crate) last_demoted_on: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ProfileView {
    #[serde(flatten)]
    pub(crate) subject: Subject,
    pub(crate) dd_count: i64,
    /// YYYY-MM-DD (UTC), or null.
    pub(crate) first_anchored_on: Option<String>,
    pub(crate) last_anchored_on: Option<String>,
    /// Days with a declaration among the last 30.
    pub(crate) active_days_30d: i64,
    /// Per dimension: declarations by value (more dimensions at higher levels).
    pub(crate) distributions: BTreeMap<String, BTreeMap<String, i64>>,
    /// Present only when an agent observes itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) demotion_stats: Option<DemotionStats>,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn profile_view(observed: &Observed<agent_level::Profile>) -> ProfileView {
    let p = &observed.result;
    ProfileView {
        subject: subject(&p.target),
        dd_count: p.target.declarations(),
        first_anchored_on: p.first_day.map(date),
        last_anchored_on: p.last_day.map(date),
        active_days_30d: p.active_days_30,
        distributions: distributions(&p.distributions),
        demotion_stats: p
            .demotion
            .as_ref()
            .map(|d| DemotionStats { demoted_dd_count: d.demoted_declarations, last_demoted_on: d.last_demoted_day.map(date) }),
        dac_charged: observed.charged.into(),
    }
}

/// An agent's profile, as REST and the MCP tool get_agent_profile answer
/// it, with the settlement (reference, payer) its payment got.
pub(crate) async fn agent_profile(
    state: &AppState,
    agent: &AgentRecord,
    ask: agent_level::Ask,
) -> ApiResult<(ProfileView, Option<anchor_app::charge::Settlement>)> {
    let observed = agent_level::profile(&state.app, agent, ask).await?;
    Ok((profile_view(&observed), observed.settlement))
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GranularityView {
    Month,
    Week,
    Day,
}

/// The agent's declarations of a bucket demoted since (the agent itself only).
#[derive(Serialize, JsonSchema)]
pub(crate) struct RetentionDemotion {
    pub(crate) demoted_dd_count: i64,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TimelineItem {
    /// YYYY-MM-DD (UTC): the bucket's first day.
    pub(crate) period_start: String,
    pub(crate) dd_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action_type_distribution: Option<BTreeMap<String, i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) selection_state_distribution: Option<BTreeMap<String, i64>>,
    /// Present only when an agent observes itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retention_demotion: Option<RetentionDemotion>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TimelineView {
    #[serde(flatten)]
    pub(crate) subject: Subject,
    pub(crate) granularity: GranularityView,
    /// Oldest first, today included.
    pub(crate) items: Vec<TimelineItem>,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn timeline_view(observed: &Observed<agent_level::Timeline>) -> TimelineView {
    let t = &observed.result;
    let part = |bucket: &agent_level::Bucket, dimension: Dimension| {
        bucket.breakdown.iter().find(|(d, _)| *d == dimension).map(|(_, values)| map(values))
    };
    TimelineView {
        subject: subject(&t.target),
        granularity: match t.granularity {
            Granularity::Month => GranularityView::Month,
            Granularity::Week => GranularityView::Week,
            Granularity::Day => GranularityView::Day,
        },
        items: t
            .buckets
            .iter()
            .map(|b| TimelineItem {
                period_start: date(b.start_day),
                dd_count: b.declarations,
                action_type_distribution: part(b, Dimension::ActionType),
                selection_state_distribution: part(b, Dimension::SelectionState),
                retention_demotion: b.demoted.map(|n| RetentionDemotion { demoted_dd_count: n }),
            })
            .collect(),
        dac_charged: observed.charged.into(),
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Combination {
    /// retention|integrity|disclosure|responsibility
    pub(crate) ee: String,
    pub(crate) dd_count: i64,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct EePatternView {
    #[serde(flatten)]
    pub(crate) subject: Subject,
    pub(crate) distributions: BTreeMap<String, BTreeMap<String, i64>>,
    /// Level 3: the most used combinations of the four priced axes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) combinations: Option<Vec<Combination>>,
    /// Retention as it stands after demotions; present only when an agent observes itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retention_distribution_effective: Option<BTreeMap<String, i64>>,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn ee_pattern_view(observed: &Observed<agent_level::EePattern>) -> EePatternView {
    let p = &observed.result;
    EePatternView {
        subject: subject(&p.target),
        distributions: distributions(&p.distributions),
        combinations: (p.target.level >= 3)
            .then(|| p.combinations.iter().map(|(ee, n)| Combination { ee: ee.clone(), dd_count: *n }).collect()),
        retention_distribution_effective: p.retention_effective.as_deref().map(map),
        dac_charged: observed.charged.into(),
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct OwnerLevelQuery {
    /// The timeline's resolution: 12 months (1), 12 weeks (2) or 30 days (3).
    #[schemars(extend("enum" = [1, 2, 3], "default" = 2))]
    pub(crate) resolution_level: Option<u8>,
}

/// What ARA shows a managed agent about itself, for its owner.
#[derive(Serialize, JsonSchema)]
pub(crate) struct OwnerAraView {
    pub(crate) agent_id: Uuid,
    pub(crate) timeline: TimelineView,
    /// At resolution level 3.
    pub(crate) ee_pattern: EePatternView,
}

/// A free answer: nothing charged, nothing settled.
pub(crate) fn free<T>(result: T) -> Observed<T> {
    Observed { result, charged: anchor_domain::MilliDac::ZERO, settlement: None }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct CompareQuery {
    /// Comma-separated agent ids, 2 to 10.
    pub(crate) agents: String,
    #[schemars(extend("enum" = [1, 2, 3], "default" = 1))]
    pub(crate) resolution_level: Option<u8>,
    #[schemars(extend("default" = "external"))]
    pub(crate) premium_source: Option<PremiumSourceParam>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ComparedAgent {
    pub(crate) agent_id: Uuid,
    pub(crate) dd_count: i64,
    pub(crate) distributions: BTreeMap<String, BTreeMap<String, i64>>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct CompareView {
    pub(crate) resolution_level: u8,
    pub(crate) agents: Vec<ComparedAgent>,
    pub(crate) dac_charged: Dac,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum QueryTypeParam {
    Summary,
    Period,
    Detail,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct QueryRequest {
    pub(crate) agent_id: Id,
    pub(crate) query_type: QueryTypeParam,
    pub(crate) premium_source: Option<PremiumSourceParam>,
}

/// The observation a legacy query mapped to.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum QueryResult {
    Profile(ProfileView),
    Timeline(TimelineView),
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct QueryView {
    pub(crate) query_type: &'static str,
    /// The route it maps to.
    pub(crate) mapped_to: String,
    pub(crate) result: QueryResult,
    pub(crate) dac_charged: Dac,
}

// ---- meta-observation ----

#[derive(Deserialize, JsonSchema)]
pub(crate) struct AnomalyQuery {
    pub(crate) dd_id: Id,
    #[schemars(range(min = 1, max = 365), extend("default" = 90))]
    pub(crate) period_days: Option<i32>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BandPosition {
    WithinBand,
    Outlier,
}

impl From<Position> for BandPosition {
    fn from(p: Position) -> BandPosition {
        match p {
            Position::WithinBand => BandPosition::WithinBand,
            Position::Outlier => BandPosition::Outlier,
        }
    }
}

/// Per dimension: within_band, outlier, or null when the decision (or the sample) lacks it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct BandPositions {
    pub(crate) decision_scale: Option<BandPosition>,
    pub(crate) decision_class: Option<BandPosition>,
    pub(crate) target_class: Option<BandPosition>,
    pub(crate) time_zone: Option<BandPosition>,
    pub(crate) ee_resolution: Option<BandPosition>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ScaleBand {
    pub(crate) unit: String,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ResolutionBand {
    pub(crate) min_dac: Dac,
    pub(crate) max_dac: Dac,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Bands {
    pub(crate) decision_scale: Option<ScaleBand>,
    pub(crate) ee_resolution: Option<ResolutionBand>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct AnomalyView {
    pub(crate) dd_id: Uuid,
    pub(crate) period_days: i32,
    /// Your branch-1 decisions compared with.
    pub(crate) sample_size: usize,
    pub(crate) band_position: BandPositions,
    pub(crate) bands: Bands,
    pub(crate) dac_charged: Dac,
}

/// The anomaly comparison, as REST and the MCP tool compare_anomaly answer
/// it, with its payment's settlement.
pub(crate) async fn anomaly_compare_of(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
    query: AnomalyQuery,
) -> ApiResult<(AnomalyView, Option<anchor_app::charge::Settlement>)> {
    let observed = meta::anomaly_compare(&state.app, agent, query.dd_id.0, query.period_days.unwrap_or(90), offered).await?;
    let c = &observed.result;
    let p = c.positions;
    let body = AnomalyView {
        dd_id: c.dd_id,
        period_days: c.period_days,
        sample_size: c.sample_size,
        band_position: BandPositions {
            decision_scale: p.decision_scale.map(Into::into),
            decision_class: p.decision_class.map(Into::into),
            target_class: p.target_class.map(Into::into),
            time_zone: p.time_zone.map(Into::into),
            ee_resolution: p.ee_resolution.map(Into::into),
        },
        bands: Bands {
            decision_scale: c.scale_band.as_ref().map(|(min, max, unit)| ScaleBand { unit: unit.clone(), min: *min, max: *max }),
            ee_resolution: c.resolution_band.map(|(min, max)| ResolutionBand { min_dac: min.into(), max_dac: max.into() }),
        },
        dac_charged: observed.charged.into(),
    };
    Ok((body, observed.settlement))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct DdQuery {
    pub(crate) dd_id: Id,
}

/// The evidence report, as REST and the MCP tool get_evidence_report answer
/// it, with its payment's settlement.
pub(crate) async fn evidence_report_of(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
    dd_id: uuid::Uuid,
) -> ApiResult<(EvidenceReport, Option<anchor_app::charge::Settlement>)> {
    let observed = meta::evidence_report(&state.app, agent, dd_id, offered).await?;
    let body = EvidenceReport::of(&observed.result, "external", observed.charged, &state.settings.public_url);
    Ok((body, observed.settlement))
}
