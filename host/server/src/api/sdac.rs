//! sdac: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::sdac`) and MCP.

use crate::api::declarations::{CostBreakdown, EeRequest};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::sdac;
use anchor_domain::payments::PaymentSource;
use anchor_domain::records::AgentRecord;
use anchor_domain::records::SdacRecord;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
