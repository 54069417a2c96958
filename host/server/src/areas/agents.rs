//! Agent: registration, token rotation, recovery and disclosure level.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::{ApiError, ApiResult, AuthFailure, UnauthorizedBody};
use crate::extract::{AuthAgent, Body};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time, one_of};
use anchor_app::agents::{self, Credentials, Recovered, Rotated};
use anchor_domain::agents::{DisclosureLevel, RECOVERY_ATTEMPTS, RECOVERY_WINDOW_MINUTES, TRIAL_DAYS};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, Method, StatusCode};
use axum::routing::{post, put};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// Responses that carry a secret must not be kept by any cache.
pub(crate) const NO_STORE: [(HeaderName, &str); 1] = [(axum::http::header::CACHE_CONTROL, "no-store")];

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RegisterRequest {
    #[serde(default)]
    #[schemars(schema_with = "region_codes")]
    pub(crate) region_code: Option<String>,
    /// Accepted and ignored: registration is never idempotent.
    #[allow(dead_code)]
    pub(crate) request_id: Option<Id>,
}

pub(crate) fn region_codes(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    one_of(anchor_domain::agents::REGION_CODES)
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Registered {
    pub(crate) agent_id: Uuid,
    /// da_tk_ followed by 64 hex digits; shown once.
    pub(crate) auth_token: String,
    /// da_rk_ followed by 64 hex digits; shown once.
    pub(crate) recovery_key: String,
    pub(crate) registered_at: Time,
    pub(crate) trial_dac_amount: Dac,
    pub(crate) trial_period_days: i64,
    pub(crate) trial_expires_at: Time,
    pub(crate) message: &'static str,
    pub(crate) next_steps: NextSteps,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct NextSteps {
    pub(crate) first_record: Step,
    pub(crate) then_confirm: Step,
    pub(crate) check_trial: Step,
    pub(crate) references: References,
}

/// Where the whole interface is described.
#[derive(Serialize, JsonSchema)]
pub(crate) struct References {
    /// The OpenAPI document of every route.
    pub(crate) openapi: String,
    /// A short guide for language-model agents.
    pub(crate) llms: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Step {
    pub(crate) call: String,
    pub(crate) note: &'static str,
}

/// Registration, as REST and the MCP tool register_agent answer it.
pub(crate) async fn register_agent(state: &AppState, request: Option<RegisterRequest>) -> ApiResult<Registered> {
    let region = request.and_then(|r| r.region_code);
    let registered = agents::register(&state.app, region.as_deref()).await?;
    let base = &state.settings.config.public_url;
    let c = registered.credentials;
    Ok(Registered {
        agent_id: c.agent_id,
        auth_token: c.token,
        recovery_key: c.recovery_key,
        registered_at: c.at.into(),
        trial_dac_amount: registered.trial_granted.into(),
        trial_period_days: TRIAL_DAYS,
        trial_expires_at: registered.trial_expires_at.into(),
        message: "Registered. Keep auth_token and recovery_key safe: neither is shown again, and the service keeps only their hashes.",
        next_steps: NextSteps {
            first_record: Step {
                call: format!("POST {base}/v1/dd/create"),
                note: "declare a decision; the 10 DAC base fee and any scope adds are paid from Trial while it lasts",
            },
            then_confirm: Step {
                call: format!("POST {base}/v1/dd/confirm"),
                note: "confirm after the action is carried out; free; returns the integrity hash",
            },
            check_trial: Step { call: format!("GET {base}/v1/trial/status"), note: "free" },
            references: References { openapi: format!("{base}/openapi.json"), llms: format!("{base}/llms.txt") },
        },
    })
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RotateRequest {
    pub(crate) agent_id: Id,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Rotation {
    pub(crate) agent_id: Uuid,
    pub(crate) auth_token: String,
    pub(crate) recovery_key: String,
    pub(crate) rotated_at: Time,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct DisclosureRequest {
    pub(crate) disclosure_level: Named<DisclosureLevel>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DisclosureSet {
    pub(crate) agent_id: Uuid,
    pub(crate) disclosure_level: Named<DisclosureLevel>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RecoverRequest {
    pub(crate) agent_id: Id,
    pub(crate) recovery_key: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Recovery {
    pub(crate) agent_id: Uuid,
    pub(crate) auth_token: String,
    pub(crate) recovery_key: String,
    pub(crate) recovered_at: Time,
}

// ---- over HTTP ----

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
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.config.public_url.clone() })
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
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidRecoveryKey, base_url: state.settings.config.public_url.clone() })
        }
        Recovered::RateLimited { retry_after_secs } => Err(ApiError::TooManyRequests {
            message: format!(
                "at most {RECOVERY_ATTEMPTS} recovery attempts per agent_id in {RECOVERY_WINDOW_MINUTES} minutes; try again later"
            ),
            retry_after_secs,
        }),
    }
}
