//! Agent: registration, token rotation, recovery and disclosure level.

use crate::api::agents::*;
use crate::error::{ApiError, ApiResult, AuthFailure, UnauthorizedBody};
use crate::extract::{AuthAgent, Body};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::Named;
use anchor_app::agents::{self, Credentials, Recovered, Rotated};
use anchor_domain::agents::{RECOVERY_ATTEMPTS, RECOVERY_WINDOW_MINUTES};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, Method, StatusCode};
use axum::routing::{post, put};
use serde_json::json;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/agent/register", post(register))
            .tag("Agent")
            .summary("Register an agent")
            .describe("Creates an agent and returns its bearer token and recovery key, each shown once. Every call creates a new agent; request_id is accepted and ignored.")
            .takes::<RegisterRequest>(json!({ "region_code": "KR" }))
            .returns::<Registered>(201, "Registered")
            .error(400, "Invalid request.", &["INVALID_ENUM", "INVALID_UUID", "UNKNOWN_FIELD", "INVALID_INPUT"]),
        op(Method::POST, "/v1/agent/token/rotate", post(rotate))
            .tag("Agent")
            .summary("Rotate the auth token and recovery key")
            .agent()
            .takes::<RotateRequest>(json!({ "agent_id": "0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b" }))
            .returns::<Rotation>(200, "New token and recovery key; the old ones stopped working")
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(403, "agent_id is not the authenticated agent.", &["FORBIDDEN"]),
        op(Method::PUT, "/v1/agent/disclosure", put(disclosure))
            .tag("Agent")
            .summary("Set the disclosure level")
            .agent()
            .takes::<DisclosureRequest>(json!({ "disclosure_level": "summary" }))
            .returns::<DisclosureSet>(200, "Updated")
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_ENUM", "UNKNOWN_FIELD"]),
        op(Method::POST, "/v1/agent/token/recover", post(recover))
            .tag("Agent")
            .summary("Recover a lost token with the recovery key")
            .describe("No bearer token needed: agent_id and recovery_key are the proof. Both secrets are replaced. At most 5 wrong keys per agent_id per 15 minutes; the right key always recovers.")
            .takes::<RecoverRequest>(json!({ "agent_id": "0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b", "recovery_key": "da_rk_<64 hex>" }))
            .returns::<Recovery>(200, "Recovered")
            .error(400, "Missing field or invalid UUID.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .returns::<UnauthorizedBody>(401, "agent_id and recovery_key do not match (the same answer whichever is wrong). Code: INVALID_RECOVERY_KEY.")
            .error(429, "Too many recovery attempts for this agent_id.", &["RATE_LIMITED"]),
    ]
}

async fn register(
    State(state): State<AppState>,
    Body(request): Body<Option<RegisterRequest>>,
) -> ApiResult<(StatusCode, [(HeaderName, &'static str); 1], Json<Registered>)> {
    Ok((StatusCode::CREATED, NO_STORE, Json(register_agent(&state, request).await?)))
}

async fn rotate(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<RotateRequest>,
) -> ApiResult<([(HeaderName, &'static str); 1], Json<Rotation>)> {
    match agents::rotate(&state.app, &agent, request.agent_id.0).await? {
        Rotated::Done(Credentials { agent_id, token, recovery_key, at }) => {
            Ok((NO_STORE, Json(Rotation { agent_id, auth_token: token, recovery_key, rotated_at: at.into() })))
        }
        Rotated::TokenReplaced => {
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.public_url.clone() })
        }
    }
}

async fn disclosure(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<DisclosureRequest>,
) -> ApiResult<Json<DisclosureSet>> {
    let level = request.disclosure_level.0;
    agents::set_disclosure(&state.app, agent.agent_id, level).await?;
    Ok(Json(DisclosureSet { agent_id: agent.agent_id, disclosure_level: Named(level) }))
}

async fn recover(
    State(state): State<AppState>,
    Body(request): Body<RecoverRequest>,
) -> ApiResult<([(HeaderName, &'static str); 1], Json<Recovery>)> {
    match agents::recover(&state.app, request.agent_id.0, &request.recovery_key).await? {
        Recovered::Done(Credentials { agent_id, token, recovery_key, at }) => {
            Ok((NO_STORE, Json(Recovery { agent_id, auth_token: token, recovery_key, recovered_at: at.into() })))
        }
        Recovered::Refused => {
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidRecoveryKey, base_url: state.settings.public_url.clone() })
        }
        Recovered::RateLimited { retry_after_secs } => Err(ApiError::TooManyRequests {
            message: format!(
                "at most {RECOVERY_ATTEMPTS} recovery attempts per agent_id in {RECOVERY_WINDOW_MINUTES} minutes; try again later"
            ),
            retry_after_secs,
        }),
    }
}
