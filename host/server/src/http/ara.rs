//! ARA over HTTP: observations of recorded history (`anchor_app::ara`).
//!
//! Every answer carries `dac_charged`; a paid one carries `PAYMENT-RESPONSE`
//! too. Environment- and pattern-level figures are de-identified releases
//! over fixed windows, and say how (`privacy`).

use crate::api::ara::*;
use crate::api::reports::EvidenceReport;
use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::payment::with_settlement;
use crate::state::AppState;
use anchor_app::ara::agents::{self as agent_level, Queried, QueryType};
use anchor_app::ara::releases::{self, Kind};
use anchor_app::ara::{self, Observed};
use anchor_domain::ara::Dimension;
use anchor_domain::records::AgentRecord;
use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

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
    let level = query.resolution_level.unwrap_or(2);
    let view = agent_level::for_owner(&state.app, &owner.owner, agent_id, level).await?;
    Ok(Json(OwnerAraView { agent_id, timeline: timeline_view(&free(view.timeline)), ee_pattern: ee_pattern_view(&free(view.pattern)) }))
}

async fn compare(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiQuery(query): ApiQuery<CompareQuery>,
) -> ApiResult<Response> {
    let ids = query.agents.split(',').map(|id| path_uuid("agents", id.trim())).collect::<ApiResult<Vec<Uuid>>>()?;
    let level = query.resolution_level.unwrap_or(1);
    let observed = agent_level::compare(&state.app, &agent, &ids, level, premium_source(query.premium_source), offered).await?;
    let body = CompareView {
        resolution_level: level,
        agents: observed
            .result
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
    let ask = agent_level::Ask { target_id: target, level: 1, premium_source: premium_source(request.premium_source), offered };
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
        let ask = agent_level::Ask {
            target_id: path_uuid("agent_id", &agent_id)?,
            level: query.resolution_level.unwrap_or(1),
            premium_source: premium_source(query.premium_source),
            offered,
        };
        Ok(AgentAsk { agent, ask })
    }
}
