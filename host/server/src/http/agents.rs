//! Agent: registration, token rotation, recovery and disclosure level.

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{post, put};
use chrono::SecondsFormat;
use serde_json::{Value, json};

use anchor_app::agents::{self, Credentials, Recovered, Rotated};
use anchor_domain::agents::{DisclosureLevel, RECOVERY_ATTEMPTS, RECOVERY_WINDOW_MINUTES, TRIAL_DAC, TRIAL_DAYS};

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

/// Responses that carry a secret must not be kept by any cache.
pub(crate) const NO_STORE: [(axum::http::HeaderName, &str); 1] = [(axum::http::header::CACHE_CONTROL, "no-store")];

type Secret = ([(axum::http::HeaderName, &'static str); 1], axum::Json<Value>);

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The answer that shows a new pair of secrets, with `at_field` naming its time.
fn credentials(c: &Credentials, at_field: &str) -> Value {
    json!({ "agent_id": c.agent_id, "auth_token": c.token, "recovery_key": c.recovery_key, at_field: time(c.at) })
}

async fn register(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, [(axum::http::HeaderName, &'static str); 1], axum::Json<Value>)> {
    let empty = json!({});
    let body = if body.is_null() { &empty } else { &body };
    let input = Obj::new(body, "", &["region_code", "request_id"])?;
    let region = input.opt_enum("region_code", |s| REGION_CODES.iter().find(|r| **r == s).copied(), REGION_CODES)?;
    input.opt_uuid("request_id")?;
    let registered = agents::register(&state.app, region).await?;
    let base = &state.settings.public_url;
    let mut body = credentials(&registered.credentials, "registered_at");
    let extra = json!({
        "trial_dac_amount": TRIAL_DAC.to_json_number(),
        "trial_period_days": TRIAL_DAYS,
        "trial_expires_at": time(registered.trial_expires_at),
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
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    Ok((StatusCode::CREATED, NO_STORE, axum::Json(body)))
}

async fn rotate(State(state): State<AppState>, AuthAgent(agent): AuthAgent, JsonBody(body): JsonBody) -> ApiResult<Secret> {
    let input = Obj::new(&body, "", &["agent_id"])?;
    let agent_id = input.req_uuid("agent_id")?;
    match agents::rotate(&state.app, &agent, agent_id).await? {
        Rotated::Done(c) => Ok((NO_STORE, axum::Json(credentials(&c, "rotated_at")))),
        Rotated::TokenReplaced => {
            Err(ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.public_url.clone() })
        }
    }
}

async fn disclosure(State(state): State<AppState>, AuthAgent(agent): AuthAgent, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let input = Obj::new(&body, "", &["disclosure_level"])?;
    let level = input.req_enum("disclosure_level", DisclosureLevel::parse, DisclosureLevel::NAMES)?;
    agents::set_disclosure(&state.app, agent.agent_id, level).await?;
    Ok(axum::Json(json!({ "agent_id": agent.agent_id, "disclosure_level": level.as_str() })))
}

async fn recover(State(state): State<AppState>, JsonBody(body): JsonBody) -> ApiResult<Secret> {
    let input = Obj::new(&body, "", &["agent_id", "recovery_key"])?;
    let agent_id = input.req_uuid("agent_id")?;
    let key = input.req_str("recovery_key")?;
    match agents::recover(&state.app, agent_id, key).await? {
        Recovered::Done(c) => Ok((NO_STORE, axum::Json(credentials(&c, "recovered_at")))),
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
