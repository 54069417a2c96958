//! ARA: observations of recorded history (`anchor_app::ara`).
//!
//! Every answer carries `dac_charged`; a paid one carries `PAYMENT-RESPONSE`
//! too. Environment- and pattern-level figures are de-identified releases
//! over fixed windows, and say how (`privacy`).
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::areas::reports::EvidenceReport;
use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time, TimeSecs};
use crate::x402_headers::with_settlement;
use anchor_app::ara::agents::{self as agent_level, Granularity, Queried, QueryType};
use anchor_app::ara::releases::{self, Kind, Release};
use anchor_app::ara::{self, Observed, PremiumSource, meta, privacy};
use anchor_domain::agents::DisclosureLevel;
use anchor_domain::ara::{Dimension, Position, day_start};
use anchor_domain::records::AgentRecord;
use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::Datelike;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
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
    let observed =
        releases::environment_anomaly(&state.app, agent.agent_id, query.period_days, query.dimension.as_deref(), offered).await?;
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
    let observed = meta::anomaly_compare(&state.app, agent, query.dd_id.0, query.period_days, offered).await?;
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
    let body = EvidenceReport::of(&observed.result, "external", observed.charged, &state.settings.config.public_url);
    Ok((body, observed.settlement))
}

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        release_operation(ara::ENVIRONMENT, get(environment), "The environment: agents and their declarations, by action type and retention")
            .returns::<EnvironmentView>(200, "Environment statistics (dac_charged included)"),
        release_operation(ara::ENVIRONMENT_SUMMARY, get(environment_summary), "Deprecated: the same as GET /v1/ara/environment")
            .returns::<EnvironmentView>(200, "Environment statistics (dac_charged included)"),
        release_operation(ara::DENSITY, get(density), "Activity density: how much agents declare, and at which hours (UTC)")
            .returns::<DensityView>(200, "Activity density (dac_charged included)"),
        paid(
            op(Method::GET, ara::TSL.path, get(tsl))
                .tag("ARA")
                .summary("The tool market's activity: tools by layer, and buyers by the layer they bought most")
                .describe(
                    "Over the last 30 full UTC days (the same all day). Tools listed on the market are counted as listed; buyers and \
                     purchases are shown once at least 10 agents bought, each buyer counted once (in the layer it bought most), with \
                     the same noise as every other release. Paid per call over x402; 404 DATA_UNAVAILABLE, free, while there is nothing to show.",
                )
                .agent()
                .error(404, "The market has no activity to show yet.", &["DATA_UNAVAILABLE"]),
        )
        .returns::<PatternView>(200, "TSL market statistics (dac_charged included)"),
        release_operation(ara::EE_DISTRIBUTION, get(ee_distribution), "Agents by the EE values they choose most, axis by axis")
            .returns::<PatternView>(200, "EE distribution (dac_charged included)"),
        release_operation(ara::ACTION_TYPE, get(action_type), "Agents by the action types, selection states and decision types they declare most")
            .returns::<PatternView>(200, "Action type distribution (dac_charged included)"),
        paid(
            op(Method::GET, ara::COMPARE.path, get(compare))
                .tag("ARA")
                .summary("Two to ten agents side by side (1 DAC at level 1, 2 DAC at level 2)")
                .describe("Every listed agent other than the caller must disclose the level asked. Level 3 and Earned DAC are not offered here.")
                .agent()
                .query::<CompareQuery>()
                .returns::<CompareView>(200, "Comparison (dac_charged included)")
                .error(400, "agents missing or malformed (2 to 10 ids), level 3, or premium_source earned.", &[
                    "MISSING_FIELD",
                    "INVALID_UUID",
                    "INVALID_VALUE",
                    "INVALID_ENUM",
                ])
                .error(403, "A listed agent's disclosure level does not reach the resolution asked.", &["DISCLOSURE_CAP_EXCEEDED"])
                .error(404, "A listed agent does not exist or has nothing others may observe.", &["AGENT_NOT_FOUND", "DATA_UNAVAILABLE"]),
        ),
        agent_operation(ara::PROFILE, get(profile), "An agent's profile").returns::<ProfileView>(200, "Profile (dac_charged included)"),
        agent_operation(ara::TIMELINE, get(timeline), "An agent's activity over time: 12 months, 12 weeks or 30 days by resolution")
            .returns::<TimelineView>(200, "Timeline (dac_charged included)"),
        agent_operation(ara::EE_PATTERN, get(ee_pattern), "The EE values an agent chooses").returns::<EePatternView>(200, "EE pattern (dac_charged included)"),
        paid(
            op(Method::GET, ara::ANOMALY_COMPARE.path, get(anomaly_compare))
                .tag("ARA")
                .summary("Where one of your decisions sits in your own recent pattern (5 DAC)")
                .describe("The decision against your branch-1 decisions (with a template) of the last period_days, itself left out: within_band or outlier for decision_scale, decision_class, target_class, time_zone (6-hour UTC buckets) and ee_resolution (the premium). At least 2 are needed.")
                .agent()
                .query::<AnomalyQuery>()
                .returns::<AnomalyView>(200, "Band positions (dac_charged included)")
                .error(400, "dd_id missing or malformed, or period_days out of range.", &["MISSING_FIELD", "INVALID_UUID", "INVALID_VALUE"])
                .error(403, "Not your own decision.", &["FORBIDDEN"])
                .error(404, "No such decision, or fewer than 2 to compare with.", &["DD_NOT_FOUND", "DATA_UNAVAILABLE"]),
        ),
        paid(
            op(Method::GET, ara::EVIDENCE_REPORT.path, get(evidence_report))
                .tag("ARA")
                .summary("The evidence report of one of your decisions, for an external audience (10 DAC)")
                .describe("The same sections as the owner's GET /dap/evidence-report, with audience external.")
                .agent()
                .query::<DdQuery>()
                .returns::<EvidenceReport>(200, "Evidence report (dac_charged included)")
                .error(400, "dd_id missing or malformed.", &["MISSING_FIELD", "INVALID_UUID"])
                .error(403, "Not your own decision.", &["FORBIDDEN"])
                .error(404, "No such decision.", &["DD_NOT_FOUND"])
                .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        ),
        paid(
            op(Method::GET, ara::ENVIRONMENT_ANOMALY.path, get(environment_anomaly))
                .tag("ARA")
                .summary("How often decisions sit outside their agents' own bands, per dimension (2 DAC)")
                .describe("Agents by where their branch-1 decisions sat in their own pattern (within_band or outlier), per dimension, over a fixed window of 7, 30 or 90 full days; de-identified like every environment release (k = 10, then differential privacy).")
                .agent()
                .query::<EnvironmentAnomalyQuery>()
                .returns::<EnvironmentAnomalyView>(200, "Anomaly distribution (dac_charged included)")
                .error(400, "period_days not 7, 30 or 90, or an unknown dimension.", &["INVALID_VALUE", "INVALID_ENUM"])
                .error(404, HIDDEN, &["DATA_UNAVAILABLE"]),
        ),
        paid(
            op(Method::POST, ara::QUERY.path, post(query))
                .tag("ARA")
                .summary("Deprecated: use GET /v1/ara/agent/{agent_id}/profile or /timeline")
                .describe("summary is a level-1 profile, period a level-2 profile, detail a level-2 timeline; priced and gated as those.")
                .agent()
                .takes::<QueryRequest>(json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "query_type": "summary" }))
                .returns::<QueryView>(200, "The observation it maps to (dac_charged included)")
                .error(400, "Invalid request, or an Earned surcharge that cannot be paid.", &[
                    "MISSING_FIELD",
                    "INVALID_UUID",
                    "INVALID_ENUM",
                    "UNKNOWN_FIELD",
                    "INSUFFICIENT_DAC",
                ])
                .error(403, "The agent's disclosure level does not reach the resolution asked.", &["DISCLOSURE_CAP_EXCEEDED"])
                .error(404, "No such agent, or it has nothing others may observe.", &["AGENT_NOT_FOUND", "DATA_UNAVAILABLE"]),
        ),
        op(Method::GET, "/dap/agent/{agent_id}/ara", get(owner_view))
            .tag("DAP Dashboard")
            .summary("What ARA shows a managed agent about itself: its timeline and its EE pattern, for the portal's charts (free)")
            .describe("The agent's own view (its internal_only declarations included), read by its owner: nothing is charged and no observation is recorded.")
            .extension()
            .owner()
            .path::<Uuid>("agent_id")
            .query::<OwnerLevelQuery>()
            .returns::<OwnerAraView>(200, "The timeline at the level asked, and the EE pattern at level 3")
            .error(400, "agent_id is not a UUID, or resolution_level is not 1, 2 or 3", &["INVALID_UUID", "INVALID_VALUE"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
    ]
}

async fn environment(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let (view, settlement) = observe_environment(&state, &agent, offered).await?;
    Ok(answer(view, settlement.as_ref()))
}

async fn environment_summary(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let observed = releases::observe(&state.app, agent.agent_id, ara::ENVIRONMENT_SUMMARY, Kind::Environment, 30, offered).await?;
    Ok(answer(environment_view(&observed), observed.settlement.as_ref()))
}

async fn density(State(state): State<AppState>, AuthAgent(agent): AuthAgent, PaymentOffer(offered): PaymentOffer) -> ApiResult<Response> {
    let observed = releases::observe(&state.app, agent.agent_id, ara::DENSITY, Kind::Density, 30, offered).await?;
    let r = &observed.result;
    let body = DensityView {
        observation: "density",
        period: period(r),
        activity: r.activity.iter().map(|(bucket, agents)| ActivityBucket { declarations: bucket.clone(), agents: *agents }).collect(),
        time_zone_distribution: map(r.distribution(Dimension::TimeZone)),
        privacy: privacy_of(r),
        dac_charged: observed.charged.into(),
    };
    Ok(answer(body, observed.settlement.as_ref()))
}

async fn tsl(State(state): State<AppState>, AuthAgent(agent): AuthAgent, PaymentOffer(offered): PaymentOffer) -> ApiResult<Response> {
    let observed = releases::tsl(&state.app, agent.agent_id, offered).await?;
    Ok(answer(pattern_view("tsl", &observed), observed.settlement.as_ref()))
}

async fn ee_distribution(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let (view, settlement) = observe_pattern(&state, &agent, offered, Kind::EeDistribution).await?;
    Ok(answer(view, settlement.as_ref()))
}

async fn action_type(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let (view, settlement) = observe_pattern(&state, &agent, offered, Kind::ActionType).await?;
    Ok(answer(view, settlement.as_ref()))
}

async fn environment_anomaly(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiQuery(query): ApiQuery<EnvironmentAnomalyQuery>,
) -> ApiResult<Response> {
    let (body, settlement) = environment_anomaly_of(&state, &agent, offered, query).await?;
    Ok(answer(body, settlement.as_ref()))
}

async fn profile(State(state): State<AppState>, AgentAsk { agent, ask }: AgentAsk) -> ApiResult<Response> {
    let (view, settlement) = agent_profile(&state, &agent, ask).await?;
    Ok(answer(view, settlement.as_ref()))
}

async fn timeline(State(state): State<AppState>, AgentAsk { agent, ask }: AgentAsk) -> ApiResult<Response> {
    let observed = agent_level::timeline(&state.app, &agent, ask).await?;
    Ok(answer(timeline_view(&observed), observed.settlement.as_ref()))
}

async fn ee_pattern(State(state): State<AppState>, AgentAsk { agent, ask }: AgentAsk) -> ApiResult<Response> {
    let observed = agent_level::ee_pattern(&state.app, &agent, ask).await?;
    Ok(answer(ee_pattern_view(&observed), observed.settlement.as_ref()))
}

async fn owner_view(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<OwnerLevelQuery>,
) -> ApiResult<Json<OwnerAraView>> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let view = agent_level::for_owner(&state.app, &owner.owner, agent_id, query.resolution_level).await?;
    Ok(Json(OwnerAraView { agent_id, timeline: timeline_view(&free(view.timeline)), ee_pattern: ee_pattern_view(&free(view.pattern)) }))
}

async fn compare(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiQuery(query): ApiQuery<CompareQuery>,
) -> ApiResult<Response> {
    let ids = query.agents.split(',').map(|id| path_uuid("agents", id.trim())).collect::<ApiResult<Vec<Uuid>>>()?;
    let observed =
        agent_level::compare(&state.app, &agent, &ids, query.resolution_level, premium_source(query.premium_source), offered).await?;
    let body = CompareView {
        resolution_level: observed.result.level,
        agents: observed
            .result
            .agents
            .iter()
            .map(|c| ComparedAgent { agent_id: c.agent_id, dd_count: c.declarations, distributions: distributions(&c.distributions) })
            .collect(),
        dac_charged: observed.charged.into(),
    };
    Ok(answer(body, observed.settlement.as_ref()))
}

async fn query(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<QueryRequest>,
) -> ApiResult<Response> {
    let (query_type, name) = match request.query_type {
        QueryTypeParam::Summary => (QueryType::Summary, "summary"),
        QueryTypeParam::Period => (QueryType::Period, "period"),
        QueryTypeParam::Detail => (QueryType::Detail, "detail"),
    };
    let target = request.agent_id.0;
    let ask = agent_level::Ask::new(target, None, premium_source(request.premium_source), offered);
    let observed = agent_level::query(&state.app, &agent, query_type, ask).await?;
    let charged = observed.charged;
    let settlement = observed.settlement.clone();
    let (result, path) = match observed.result {
        Queried::Profile(profile) => {
            let view = profile_view(&Observed { result: profile, charged, settlement: None });
            (QueryResult::Profile(view), ara::PROFILE.path)
        }
        Queried::Timeline(timeline) => {
            let view = timeline_view(&Observed { result: timeline, charged, settlement: None });
            (QueryResult::Timeline(view), ara::TIMELINE.path)
        }
    };
    let body =
        QueryView { query_type: name, mapped_to: path.replace("{agent_id}", &target.to_string()), result, dac_charged: charged.into() };
    Ok(answer(body, settlement.as_ref()))
}

async fn anomaly_compare(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiQuery(query): ApiQuery<AnomalyQuery>,
) -> ApiResult<Response> {
    let (body, settlement) = anomaly_compare_of(&state, &agent, offered, query).await?;
    Ok(answer(body, settlement.as_ref()))
}

async fn evidence_report(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiQuery(query): ApiQuery<DdQuery>,
) -> ApiResult<Response> {
    let (body, settlement) = evidence_report_of(&state, &agent, offered, query.dd_id.0).await?;
    Ok(answer(body, settlement.as_ref()))
}

pub(crate) const PAID: &str =
    "No payment came with the request, or it was refused (the reason is in `error`). Trial never pays an observation.";
pub(crate) const SETTLING: &str = "The settlement's outcome is unknown; it is settled in the background and charged at most once.";

pub(crate) const HIDDEN: &str =
    "Too few agents contribute to show figures that identify none of them (k = 10), or the noisy threshold held them back.";

/// The refusals every paid observation shares.
pub(crate) fn paid(operation: Operation) -> Operation {
    operation
        .error(400, "A PAYMENT-SIGNATURE (or X-PAYMENT) header that is not base64 JSON.", &["INVALID_PAYLOAD"])
        .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
        .paid_inline(PAID)
        .error(503, SETTLING, &["SETTLEMENT_PENDING"])
}

pub(crate) fn release_operation(
    route: anchor_app::charge::Route,
    handler: axum::routing::MethodRouter<AppState>,
    summary: &'static str,
) -> Operation {
    paid(
        op(Method::GET, route.path, handler)
            .tag("ARA")
            .summary(summary)
            .describe(
                "A de-identified release over the last 30 full UTC days (the same for every caller all day): each agent counts once per \
                 distribution, in the value it declared most; every count gets discrete Laplace noise and a value is shown only when its \
                 noisy count passes a threshold (differential privacy; `privacy` says what the release spent). Paid per call over x402, \
                 settled before the answer.",
            )
            .agent()
            .error(404, HIDDEN, &["DATA_UNAVAILABLE"]),
    )
}

pub(crate) fn agent_operation(
    route: anchor_app::charge::Route,
    handler: axum::routing::MethodRouter<AppState>,
    summary: &'static str,
) -> Operation {
    paid(
        op(Method::GET, route.path, handler)
            .tag("ARA")
            .summary(summary)
            .describe(
                "Free for the agent itself at every resolution level. Another agent is seen only as far as its disclosure_level allows \
                 (none: not at all, summary: level 1, detailed: 2, full: 3), for 3 DAC over x402 plus a surcharge at levels 2 and 3 \
                 (2 and 4 DAC), which premium_source earned pays from Earned DAC (once the balance reaches min_spend_threshold, see GET /v1/earned-dac/balance); the challenge then asks for the base alone.",
            )
            .agent()
            .path::<Uuid>("agent_id")
            .query::<LevelQuery>()
            .error(
                400,
                "A malformed agent_id, resolution level or premium source, or an Earned surcharge that cannot be paid.",
                &["INVALID_UUID", "INVALID_VALUE", "INVALID_ENUM", "INSUFFICIENT_DAC"],
            )
            .error(403, "The agent's disclosure level does not reach the resolution asked.", &["DISCLOSURE_CAP_EXCEEDED"])
            .error(404, "No such agent, or it has nothing others may observe.", &["AGENT_NOT_FOUND", "DATA_UNAVAILABLE"]),
    )
}

/// A paid (or free) answer, with `PAYMENT-RESPONSE` when it settled.
pub(crate) fn answer<T: Serialize>(body: T, settlement: Option<&anchor_app::charge::Settlement>) -> Response {
    with_settlement(Json(body).into_response(), settlement)
}

/// An agent-level observation as its route asks for it: the agent observing
/// (bearer token), the payment offered, the target (path) and the level and
/// surcharge source (query), read in that order, so refusals keep theirs.
pub(crate) struct AgentAsk {
    pub(crate) agent: AgentRecord,
    pub(crate) ask: agent_level::Ask,
}

impl FromRequestParts<AppState> for AgentAsk {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<AgentAsk, ApiError> {
        let AuthAgent(agent) = AuthAgent::from_request_parts(parts, state).await?;
        let PaymentOffer(offered) = PaymentOffer::from_request_parts(parts, state).await?;
        let ApiPath(agent_id) = ApiPath::<String>::from_request_parts(parts, state).await?;
        let ApiQuery(query) = ApiQuery::<LevelQuery>::from_request_parts(parts, state).await?;
        let ask =
            agent_level::Ask::new(path_uuid("agent_id", &agent_id)?, query.resolution_level, premium_source(query.premium_source), offered);
        Ok(AgentAsk { agent, ask })
    }
}
