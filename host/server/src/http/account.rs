//! The agent's own account views: Trial status and the classification keys it may use.

use crate::api::account::*;
use crate::error::ApiResult;
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;
use anchor_app::agents;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/trial/status", get(trial_status))
            .tag("Trial")
            .summary("Trial DAC: what is left and until when")
            .agent()
            .returns::<TrialStatus>(200, "Trial status"),
        op(Method::GET, "/v1/classification", get(classifications))
            .tag("Classification")
            .summary("The self_classification keys this agent may use")
            .agent()
            .returns::<Classifications>(200, "Operator base categories, then the agent's owner's"),
    ]
}

async fn trial_status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> Json<TrialStatus> {
    Json(agents::trial(&state.app, &agent).into())
}

async fn classifications(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Classifications>> {
    Ok(Json(classifications_of(&state, &agent).await?))
}
