//! sDAC (`anchor_app::sdac`): session start, trial, history, end.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::areas::declarations::{CostBreakdown, EeRequest};
use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use crate::x402_headers::with_settlement;
use anchor_app::sdac;
use anchor_domain::payments::PaymentSource;
use anchor_domain::records::{AgentRecord, SdacRecord};
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

#[derive(Serialize, JsonSchema)]
pub(crate) struct SessionView {
    pub(crate) session_id: Id,
    pub(crate) status: &'static str,
    pub(crate) started_at: Time,
    pub(crate) ended_at: Option<Time>,
    pub(crate) trial_count: i32,
    /// What the trials would have cost as declarations, together.
    pub(crate) simulated_total_dac: Dac,
    /// What ending cost (0 while open).
    pub(crate) dac_charged: Dac,
    pub(crate) payment_source: Option<Named<PaymentSource>>,
}

impl From<&SdacRecord> for SessionView {
    fn from(s: &SdacRecord) -> SessionView {
        SessionView {
            session_id: Id(s.session_id),
            status: if s.ended_at.is_some() { "ended" } else { "active" },
            started_at: s.started_at.into(),
            ended_at: s.ended_at.map(Time::from),
            trial_count: s.trials,
            simulated_total_dac: s.simulated.into(),
            dac_charged: s.charged.into(),
            payment_source: s.source.map(Named),
        }
    }
}

/// sDAC session start, as REST and the MCP tool create_sdac_session answer it.
pub(crate) async fn start_session(state: &AppState, agent: &AgentRecord) -> ApiResult<SessionView> {
    Ok(SessionView::from(&sdac::start(&state.app, agent).await?))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct TrialRequest {
    pub(crate) session_id: Id,
    pub(crate) ee: EeRequest,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TrialView {
    pub(crate) session_id: Id,
    pub(crate) trial_number: i32,
    pub(crate) pricing_version: String,
    /// What a declaration with this EE would cost; nothing is recorded or charged now.
    pub(crate) cost_breakdown: CostBreakdown,
    pub(crate) simulated_total_dac: Dac,
    /// What ending the session now would cost.
    pub(crate) session_end_dac: Dac,
}

/// An sDAC trial, as REST and the MCP tool run_sdac_trial answer it.
pub(crate) async fn run_trial(state: &AppState, agent: &AgentRecord, request: TrialRequest) -> ApiResult<TrialView> {
    let (quote, session) = sdac::trial(&state.app, agent, request.session_id.0, request.ee.into_request()).await?;
    Ok(TrialView {
        session_id: Id(session.session_id),
        trial_number: session.trials,
        pricing_version: state.app.pricing.generation().version.clone(),
        cost_breakdown: CostBreakdown::of_quote(&quote),
        simulated_total_dac: session.simulated.into(),
        session_end_dac: sdac::price(&state.app, &session)?.into(),
    })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TrialItem {
    pub(crate) trial_number: i32,
    /// The combination, by the EE's field names and values.
    pub(crate) ee: std::collections::BTreeMap<String, String>,
    pub(crate) total_dac: Dac,
    pub(crate) at: Time,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct HistoryView {
    #[serde(flatten)]
    pub(crate) session: SessionView,
    pub(crate) trials: Vec<TrialItem>,
}

/// An sDAC session's history, as REST and the MCP tool get_sdac_session answer it.
pub(crate) async fn session_history(state: &AppState, agent: &AgentRecord, session_id: uuid::Uuid) -> ApiResult<HistoryView> {
    let (session, trials) = sdac::history(&state.app, agent, session_id).await?;
    Ok(HistoryView {
        session: SessionView::from(&session),
        trials: trials
            .into_iter()
            .map(|t| TrialItem { trial_number: t.position, ee: t.axes.into_iter().collect(), total_dac: t.total.into(), at: t.at.into() })
            .collect(),
    })
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct EndRequest {
    pub(crate) session_id: Id,
}

/// An sDAC session's end, as REST and the MCP tool end_sdac_session answer
/// it, with the settlement (reference, payer) an external payment got.
pub(crate) async fn end_session(
    state: &AppState,
    agent: &AgentRecord,
    session_id: uuid::Uuid,
    offered: anchor_app::charge::Offered,
) -> ApiResult<(SessionView, Option<anchor_app::charge::Settlement>)> {
    let (session, settlement) = sdac::end(&state.app, agent, session_id, offered).await?;
    Ok((SessionView::from(&session), settlement))
}

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/sdac/session/start", post(start))
            .tag("sDAC")
            .summary("Start a simulation session: price EE combinations with accountability removed (free)")
            .agent()
            .returns::<SessionView>(201, "Session created")
            .error(409, "The agent has an open sDAC session.", &["SESSION_EXISTS"]),
        op(Method::POST, "/v1/sdac/trial", post(trial))
            .tag("sDAC")
            .summary("What an EE combination would cost, from the real pricing generation (free; no record is made)")
            .describe("The four axes are required; ee_preset is refused here (presets are for declarations). The trial is counted in the session, whose end costs a share of the simulated totals.")
            .agent()
            .takes::<TrialRequest>(json!({
                "session_id": "3f0c2a91-6d7e-4b8a-9c1d-2e3f4a5b6c7d",
                "ee": { "ee_retention_period": "long", "ee_integrity_verification_level": "enhanced", "ee_disclosure_format_policy": "shareable", "ee_responsibility_scope": "extended" }
            }))
            .returns::<TrialView>(200, "Simulation result (DAC cost preview)")
            .error(400, "A malformed session id or EE, or ee_preset.", &["INVALID_UUID", "MISSING_FIELD", "INVALID_ENUM", "INVALID_VALUE", "UNKNOWN_FIELD"])
            .error(404, "No open session of this agent with that id (or its end is being paid).", &["SESSION_NOT_FOUND"])
            .error(409, "The session holds its most trials (1,000) already; end it and start another.", &["SDAC_TRIAL_LIMIT_REACHED"]),
        op(Method::GET, "/v1/sdac/session/{session_id}", get(history))
            .tag("sDAC")
            .summary("A session of yours: its trials, their simulated totals, what it cost (free)")
            .agent()
            .path::<Uuid>("session_id")
            .returns::<HistoryView>(200, "Session history")
            .error(400, "session_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "No sDAC session of this agent with that id.", &["SESSION_NOT_FOUND"]),
        op(Method::POST, sdac::END.path, post(end))
            .tag("sDAC")
            .summary("End a session: the sDAC base fee plus a share of the simulated totals (nothing without trials)")
            .describe("Trial pays first, else x402 (the DAB applies), settled before the answer. Earned DAC never pays sDAC.")
            .agent()
            .takes::<EndRequest>(json!({ "session_id": "3f0c2a91-6d7e-4b8a-9c1d-2e3f4a5b6c7d" }))
            .returns::<SessionView>(200, "Session ended")
            .error(400, "A malformed session id or payment header.", &["INVALID_UUID", "MISSING_FIELD", "UNKNOWN_FIELD", "INVALID_PAYLOAD"])
            .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
            .error(404, "No open session of this agent with that id (or another end of it is being paid).", &["SESSION_NOT_FOUND"])
            .error(
                409,
                "Another end of the same session is being paid (it is paid once), or trials kept being counted while it was priced again.",
                &["DUPLICATE_REQUEST", "SESSION_CHANGED"],
            )
            .paid_inline("Trial cannot pay and no payment came, or it was refused (the reason is in `error`).")
            .error(503, "The settlement's outcome is unknown; it is settled in the background and charged at most once.", &["SETTLEMENT_PENDING"]),
    ]
}

async fn start(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Response> {
    Ok((StatusCode::CREATED, Json(start_session(&state, &agent).await?)).into_response())
}

async fn trial(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<TrialRequest>,
) -> ApiResult<Json<TrialView>> {
    Ok(Json(run_trial(&state, &agent, request).await?))
}

async fn history(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(session_id): ApiPath<String>,
) -> ApiResult<Json<HistoryView>> {
    Ok(Json(session_history(&state, &agent, path_uuid("session_id", &session_id)?).await?))
}

async fn end(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<EndRequest>,
) -> ApiResult<Response> {
    let (view, settlement) = end_session(&state, &agent, request.session_id.0, offered).await?;
    Ok(with_settlement(Json(view).into_response(), settlement.as_ref()))
}
