//! Agent: registration, token rotation, recovery and disclosure level.

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{post, put};
use chrono::{Duration, SecondsFormat};
use rand::RngCore;
use serde_json::{Value, json};
use uuid::Uuid;

use anchor_domain::agents::{
    DisclosureLevel, RECOVERY_ATTEMPTS, RECOVERY_PREFIX, RECOVERY_WINDOW_MINUTES, TOKEN_PREFIX, TRIAL_DAC, TRIAL_DAYS, format_secret,
    hash_secret,
};
use anchor_store::{AttemptLimit, NewAgent, Recovery};

use super::input::Obj;
use crate::error::{ApiError, ApiResult, AuthFailure};
use crate::extract::{AuthAgent, JsonBody};
use crate::openapi::*;
use crate::state::AppState;

/// Where an agent says it is based: five tracked countries, then macro-regions.
pub const REGION_CODES: &[&str] =
    &["KR", "CN", "JP", "TW", "HK", "ASIA", "EUROPE", "N_AMERICA", "S_AMERICA", "AFRICA", "OCEANIA", "ANTARCTICA", "unknown"];

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/agent/register", post(register))
            .tag("Agent")
            .summary("Register an agent")
            .describe("Creates an agent and returns its bearer token and recovery key, each shown once. Every call creates a new agent; request_id is accepted and ignored.")
            .request(
                object(&[], vec![
                    ("region_code", enumeration(REGION_CODES)),
                    ("request_id", doc(uuid(), "Accepted and ignored: registration is never idempotent")),
                ]),
                json!({ "region_code": "KR" }),
            )
            .ok(201, "Registered", object(&[], vec![
                ("agent_id", uuid()),
                ("auth_token", doc(string(), "da_tk_ followed by 64 hex digits; shown once")),
                ("recovery_key", doc(string(), "da_rk_ followed by 64 hex digits; shown once")),
                ("registered_at", datetime()),
                ("trial_dac_amount", number()),
                ("trial_period_days", number()),
                ("trial_expires_at", datetime()),
                ("message", string()),
                ("next_steps", json!({ "type": "object" })),
            ]))
            .error(400, "Invalid request.", &["INVALID_ENUM", "INVALID_UUID", "UNKNOWN_FIELD", "INVALID_INPUT"]),
        op(Method::POST, "/v1/agent/token/rotate", post(rotate))
            .tag("Agent")
            .summary("Rotate the auth token and recovery key")
            .agent()
            .request(object(&["agent_id"], vec![("agent_id", uuid())]), json!({ "agent_id": "<your agent_id>" }))
            .ok(200, "New token and recovery key; the old ones stopped working", object(&[], vec![
                ("agent_id", uuid()),
                ("auth_token", string()),
                ("recovery_key", string()),
                ("rotated_at", datetime()),
            ]))
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(403, "agent_id is not the authenticated agent.", &["FORBIDDEN"]),
        op(Method::PUT, "/v1/agent/disclosure", put(disclosure))
            .tag("Agent")
            .summary("Set the disclosure level")
            .agent()
            .request(
                object(&["disclosure_level"], vec![("disclosure_level", enumeration(DisclosureLevel::NAMES))]),
                json!({ "disclosure_level": "summary" }),
            )
            .ok(200, "Updated", object(&[], vec![("agent_id", uuid()), ("disclosure_level", string())]))
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_ENUM", "UNKNOWN_FIELD"]),
        op(Method::POST, "/v1/agent/token/recover", post(recover))
            .tag("Agent")
            .summary("Recover a lost token with the recovery key")
            .describe("No bearer token needed: agent_id and recovery_key are the proof. Both secrets are replaced. At most 5 wrong keys per agent_id per 15 minutes; the right key always recovers.")
            .request(
                object(&["agent_id", "recovery_key"], vec![("agent_id", uuid()), ("recovery_key", string())]),
                json!({ "agent_id": "<agent_id>", "recovery_key": "da_rk_<64 hex>" }),
            )
            .ok(200, "Recovered", object(&[], vec![
                ("agent_id", uuid()),
                ("auth_token", string()),
                ("recovery_key", string()),
                ("recovered_at", datetime()),
            ]))
            .error(400, "Missing field or invalid UUID.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .ok(401, "agent_id and recovery_key do not match (the same answer whichever is wrong)", reference("UnauthorizedBody"))
            .error(429, "Too many recovery attempts for this agent_id.", &["RATE_LIMITED"]),
    ]
}

fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format_secret(prefix, &bytes)
}

/// Responses that carry a secret must not be kept by any cache.
pub(crate) const NO_STORE: [(axum::http::HeaderName, &str); 1] = [(axum::http::header::CACHE_CONTROL, "no-store")];

async fn register(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, [(axum::http::HeaderName, &'static str); 1], axum::Json<Value>)> {
    let empty = json!({});
    let body = if body.is_null() { &empty } else { &body };
    let input = Obj::new(body, "", &["region_code", "request_id"])?;
    let region = input.opt_enum("region_code", |s| REGION_CODES.iter().find(|r| **r == s).copied(), REGION_CODES)?;
    input.opt_uuid("request_id")?;

    let now = state.clock.now();
    let token = new_secret(TOKEN_PREFIX);
    let recovery = new_secret(RECOVERY_PREFIX);
    let agent = NewAgent {
        agent_id: Uuid::new_v4(),
        token_hash: hash_secret(&token),
        recovery_hash: hash_secret(&recovery),
        region_code: region.map(str::to_string),
        registered_at: now,
        trial_granted: TRIAL_DAC,
        trial_expires_at: now + Duration::days(TRIAL_DAYS),
    };
    state.store.insert_agent(&agent).await?;
    let base = &state.settings.public_url;
    Ok((
        StatusCode::CREATED,
        NO_STORE,
        axum::Json(json!({
            "agent_id": agent.agent_id,
            "auth_token": token,
            "recovery_key": recovery,
            "registered_at": now.to_rfc3339_opts(SecondsFormat::Micros, true),
            "trial_dac_amount": TRIAL_DAC.to_json_number(),
            "trial_period_days": TRIAL_DAYS,
            "trial_expires_at": agent.trial_expires_at.to_rfc3339_opts(SecondsFormat::Micros, true),
            "message": "Registered. Keep auth_token and recovery_key safe: neither is shown again, and the service keeps only their hashes.",
            "next_steps": {
                "first_record": {
                    "call": format!("POST {base}/v1/dd/create"),
                    "note": "declare a decision; the 10 DAC base fee and any scope adds are paid from Trial while it lasts",
                },
                "then_confirm": {
                    "call": format!("POST {base}/v1/dd/confirm"),
                    "note": "confirm after the action is carried out; free; returns the integrity hash",
                },
                "check_trial": {
                    "call": format!("GET {base}/v1/trial/status"),
                    "note": "free",
                },
            },
        })),
    ))
}

async fn rotate(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    JsonBody(body): JsonBody,
) -> ApiResult<([(axum::http::HeaderName, &'static str); 1], axum::Json<Value>)> {
    let input = Obj::new(&body, "", &["agent_id"])?;
    let agent_id = input.req_uuid("agent_id")?;
    if agent_id != agent.agent_id {
        return Err(ApiError::forbidden("FORBIDDEN", "agent_id must be the agent the bearer token belongs to"));
    }
    let token = new_secret(TOKEN_PREFIX);
    let recovery = new_secret(RECOVERY_PREFIX);
    let rotated = state.store.rotate_credentials(agent.agent_id, &agent.token_hash, &hash_secret(&token), &hash_secret(&recovery)).await?;
    if !rotated {
        // A concurrent rotation or recovery replaced the token first.
        return Err(ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.public_url.clone() });
    }
    Ok((
        NO_STORE,
        axum::Json(json!({
            "agent_id": agent.agent_id,
            "auth_token": token,
            "recovery_key": recovery,
            "rotated_at": state.clock.now().to_rfc3339_opts(SecondsFormat::Micros, true),
        })),
    ))
}

async fn disclosure(State(state): State<AppState>, AuthAgent(agent): AuthAgent, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let input = Obj::new(&body, "", &["disclosure_level"])?;
    let level = input.req_enum("disclosure_level", DisclosureLevel::parse, DisclosureLevel::NAMES)?;
    state.store.set_disclosure_level(agent.agent_id, level).await?;
    Ok(axum::Json(json!({ "agent_id": agent.agent_id, "disclosure_level": level.as_str() })))
}

async fn recover(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<([(axum::http::HeaderName, &'static str); 1], axum::Json<Value>)> {
    let input = Obj::new(&body, "", &["agent_id", "recovery_key"])?;
    let agent_id = input.req_uuid("agent_id")?;
    let key = input.req_str("recovery_key")?;
    let now = state.clock.now();
    let token = new_secret(TOKEN_PREFIX);
    let recovery = new_secret(RECOVERY_PREFIX);
    let outcome = state
        .store
        .recover_credentials(
            agent_id,
            &hash_secret(key),
            &hash_secret(&token),
            &hash_secret(&recovery),
            now,
            AttemptLimit { scope: "agent_recovery", window: Duration::minutes(RECOVERY_WINDOW_MINUTES), max: RECOVERY_ATTEMPTS },
        )
        .await?;
    match outcome {
        Recovery::Recovered => Ok((
            NO_STORE,
            axum::Json(json!({
                "agent_id": agent_id,
                "auth_token": token,
                "recovery_key": recovery,
                "recovered_at": now.to_rfc3339_opts(SecondsFormat::Micros, true),
            })),
        )),
        Recovery::Refused => {
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidRecoveryKey, base_url: state.settings.public_url.clone() })
        }
        Recovery::RateLimited => Err(ApiError::TooManyRequests {
            message: format!(
                "at most {RECOVERY_ATTEMPTS} recovery attempts per agent_id in {RECOVERY_WINDOW_MINUTES} minutes; try again later"
            ),
            retry_after_secs: (RECOVERY_WINDOW_MINUTES * 60) as u64,
        }),
    }
}
