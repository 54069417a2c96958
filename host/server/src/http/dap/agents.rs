//! Linked agents: link (rotates the agent's token), unlink, list, limits, the
//! DAB an owner sets for an agent, and the agents' Trial.
//!
//! DAB: the owner's value replaces the operator default for that agent at once
//! (`GET /v1/dab/status` reads the same column). Removing it, or unlinking the
//! agent, returns the agent to the operator default.

use crate::extract::ApiQuery;
use axum::extract::State;
use axum::http::Method;
use axum::routing::{delete, get, post, put};
use rand::RngCore;
use serde::Deserialize;
use serde_json::{Value, json};

use anchor_domain::agents::{TOKEN_PREFIX, format_secret, has_secret_shape, hash_secret};
use anchor_store::Link;

use super::{managed, time};
use crate::error::{ApiError, ApiResult, AuthFailure};
use crate::extract::JsonBody;
use crate::http::input::Obj;
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    let dab = object(
        &[],
        vec![
            ("agent_id", uuid()),
            ("budget_limit_dac", number()),
            ("budget_period", enumeration(&["monthly"])),
            ("limit_source", enumeration(&["owner", "operator_default"])),
            ("period_start", datetime()),
            ("period_resets_at", datetime()),
            ("budget_used_dac", number()),
            ("spent_dac", number()),
            ("remaining_dac", number()),
            ("limit_reached", boolean()),
        ],
    );
    vec![
        op(Method::POST, "/dap/agent/link", post(link))
            .tag("DAP Agent")
            .summary("Link an agent with its current token; the token is replaced and the new one returned")
            .describe("The submitted token stops working at this moment: store new_auth_token in the agent.")
            .owner()
            .request(
                object(&["agent_id", "auth_token"], vec![("agent_id", uuid()), ("auth_token", string())]),
                json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "auth_token": "da_tk_…" }),
            )
            .ok(200, "Linked; the agent's token was rotated", object(&[], vec![
                ("agent_id", uuid()),
                ("linked_at", datetime()),
                ("new_auth_token", doc(string(), "The agent's token from now on; the submitted one is revoked")),
                ("message", string()),
            ]))
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_UUID"])
            .error(403, "The owner manages as many agents as allowed", &["AGENT_LIMIT_REACHED"])
            .error(409, "Another owner manages the agent", &["AGENT_ALREADY_LINKED"]),
        op(Method::DELETE, "/dap/agent/unlink", delete(unlink))
            .tag("DAP Agent")
            .summary("Stop managing an agent (password confirmed)")
            .owner()
            .request(
                object(&["agent_id", "password"], vec![("agent_id", uuid()), ("password", string())]),
                json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "password": "a long passphrase 7" }),
            )
            .ok(200, "Unlinked", object(&[], vec![("agent_id", uuid()), ("message", string())]))
            .error(403, "Not managed by this owner", &["NOT_LINKED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::GET, "/dap/agents", get(list))
            .tag("DAP Agent")
            .summary("The agents this owner manages")
            .owner()
            .ok(200, "Agents", object(&[], vec![
                ("agents", array(object(&[], vec![
                    ("agent_id", uuid()),
                    ("linked_at", datetime()),
                    ("auth_status", string()),
                    ("registered_at", datetime()),
                    ("region_code", nullable(string())),
                    ("disclosure_level", string()),
                    ("budget_limit_dac", number()),
                    ("limit_source", string()),
                    ("trial_dac_remaining", number()),
                    ("trial_expires_at", datetime()),
                ]))),
                ("count", integer()),
            ])),
        op(Method::GET, "/dap/system/limits", get(limits))
            .tag("DAP Agent")
            .summary("The limits this service applies to owners")
            .owner()
            .ok(200, "Limits", object(&[], vec![
                ("dab", object(&[], vec![
                    ("minimum_budget_limit_dac", number()),
                    ("default_budget_limit_dac", number()),
                    ("budget_periods", array(string())),
                ])),
                ("agents", object(&[], vec![("max_linked_agents", integer()), ("linked_agents", integer())])),
                ("session", object(&[], vec![("lifetime_hours", integer())])),
                ("login", object(&[], vec![("max_failed_attempts", integer()), ("window_minutes", integer())])),
                ("password", object(&[], vec![("min_length", integer()), ("max_length", integer())])),
                ("classification", object(&[], vec![("key_pattern", string()), ("key_max_length", integer()), ("label_max_length", integer())])),
                ("rate_limit", object(&[], vec![("requests", integer()), ("window_seconds", integer())])),
            ])),
        op(Method::PUT, "/dap/dab/set", put(dab_set))
            .tag("DAP DAB")
            .summary("Set an agent's monthly budget for external spending")
            .owner()
            .request(
                object(&["agent_id", "budget_limit_dac", "budget_period"], vec![
                    ("agent_id", uuid()),
                    ("budget_limit_dac", json!({ "type": "number", "minimum": 100, "description": "DAC per month; at least the operator's floor (100 by default), at most three decimals" })),
                    ("budget_period", enumeration(&["monthly"])),
                ]),
                json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "budget_limit_dac": 250, "budget_period": "monthly" }),
            )
            .ok(200, "Saved; in force at once", dab.clone())
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_ENUM"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/dab/status", get(dab_status))
            .tag("DAP DAB")
            .summary("An agent's DAB and what it spent this period")
            .owner()
            .required_query("agent_id", uuid())
            .ok(200, "DAB status", dab.clone())
            .error(400, "agent_id missing or malformed", &["MISSING_FIELD", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::DELETE, "/dap/dab/remove", delete(dab_remove))
            .tag("DAP DAB")
            .summary("Remove the owner's DAB: the operator default applies again (password confirmed)")
            .owner()
            .request(
                object(&["agent_id", "password"], vec![("agent_id", uuid()), ("password", string())]),
                json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "password": "a long passphrase 7" }),
            )
            .ok(200, "Removed", dab)
            .error(403, "Not managed by this owner", &["NOT_LINKED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::GET, "/dap/trial/status", get(trial_status))
            .tag("DAP Trial")
            .summary("The Trial DAC of every agent this owner manages")
            .owner()
            .ok(200, "Trial status per agent", object(&[], vec![
                ("agents", array(object(&[], vec![
                    ("agent_id", uuid()),
                    ("trial_active", boolean()),
                    ("trial_dac_remaining", number()),
                    ("trial_expires_at", datetime()),
                    ("trial_days_remaining", integer()),
                    ("trial_dac_used", number()),
                ]))),
                ("total_trial_dac_remaining", number()),
            ])),
    ]
}

async fn link(
    State(state): State<AppState>,
    auth: AuthOwner,
    JsonBody(body): JsonBody,
) -> ApiResult<([(axum::http::HeaderName, &'static str); 1], axum::Json<Value>)> {
    let o = Obj::new(&body, "", &["agent_id", "auth_token"])?;
    let agent_id = o.req_uuid("agent_id")?;
    let token = o.req_str("auth_token")?;
    let invalid = || ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.public_url.clone() };
    if !has_secret_shape(TOKEN_PREFIX, token) {
        return Err(invalid());
    }
    if auth.owner.managing_agent_id == Some(agent_id) {
        return Err(ApiError::bad("INVALID_VALUE", "an agent-type owner cannot link the agent it acts for"));
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let new_token = format_secret(TOKEN_PREFIX, &bytes);
    let now = state.clock.now();
    let outcome = state
        .store
        .link_agent(
            agent_id,
            auth.owner.owner_id,
            &hash_secret(token),
            &hash_secret(&new_token),
            now,
            state.settings.dap.max_agents_per_owner,
        )
        .await?;
    let linked_at = match outcome {
        Link::Linked { linked_at } => linked_at,
        Link::WrongToken => return Err(invalid()),
        Link::LinkedElsewhere => {
            return Err(ApiError::conflict("AGENT_ALREADY_LINKED", "another owner manages this agent; it must unlink it first"));
        }
        Link::TooMany => {
            return Err(ApiError::forbidden(
                "AGENT_LIMIT_REACHED",
                format!("an owner manages at most {} agents", state.settings.dap.max_agents_per_owner),
            ));
        }
    };
    Ok((
        crate::http::agents::NO_STORE,
        axum::Json(json!({
            "agent_id": agent_id,
            "linked_at": time(linked_at),
            "new_auth_token": new_token,
            "message": "linked; the agent's previous token is revoked: give it new_auth_token",
        })),
    ))
}

async fn unlink(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["agent_id", "password"])?;
    let agent_id = o.req_uuid("agent_id")?;
    let password = o.req_str("password")?;
    managed(&state, &auth.owner, agent_id).await?;
    super::confirm_password(&state, &auth.owner, password).await?;
    if !state.store.unlink_agent(agent_id, auth.owner.owner_id).await? {
        return Err(ApiError::forbidden("NOT_LINKED", format!("agent {agent_id} is not managed by this owner")));
    }
    Ok(axum::Json(json!({
        "agent_id": agent_id,
        "message": "unlinked; the agent keeps its records and token, and the operator's default DAB applies to it again",
    })))
}

async fn list(State(state): State<AppState>, auth: AuthOwner) -> ApiResult<axum::Json<Value>> {
    let now = state.clock.now();
    let agents = state.store.owner_agents(auth.owner.owner_id).await?;
    let rows: Vec<Value> = agents
        .iter()
        .map(|a| {
            let trial = crate::http::account::trial_view(&a.agent, now);
            json!({
                "agent_id": a.agent.agent_id,
                "linked_at": a.linked_at.map(time),
                "auth_status": "active",
                "registered_at": time(a.agent.registered_at),
                "region_code": a.agent.region_code,
                "disclosure_level": a.agent.disclosure_level.as_str(),
                "budget_limit_dac": a.dab_limit.unwrap_or(state.settings.dab_default).to_json_number(),
                "limit_source": if a.dab_limit.is_some() { "owner" } else { "operator_default" },
                "trial_dac_remaining": trial["trial_dac_remaining"],
                "trial_expires_at": trial["trial_expires_at"],
            })
        })
        .collect();
    Ok(axum::Json(json!({ "count": rows.len(), "agents": rows })))
}

async fn limits(State(state): State<AppState>, auth: AuthOwner) -> ApiResult<axum::Json<Value>> {
    let linked = state.store.owner_agents(auth.owner.owner_id).await?.len();
    let s = &state.settings;
    Ok(axum::Json(json!({
        "dab": {
            "minimum_budget_limit_dac": s.dap.dab_floor.to_json_number(),
            "default_budget_limit_dac": s.dab_default.to_json_number(),
            "budget_periods": ["monthly"],
        },
        "agents": { "max_linked_agents": s.dap.max_agents_per_owner, "linked_agents": linked },
        "session": { "lifetime_hours": s.dap.session_ttl.num_hours() },
        "login": { "max_failed_attempts": crate::owner::LOGIN_MAX_FAILURES, "window_minutes": crate::owner::LOGIN_WINDOW_MINUTES },
        "password": { "min_length": crate::owner::PASSWORD_MIN, "max_length": crate::owner::PASSWORD_MAX },
        "classification": {
            "key_pattern": super::registry::KEY_PATTERN,
            "key_max_length": super::registry::KEY_MAX,
            "label_max_length": super::registry::LABEL_MAX,
        },
        "rate_limit": { "requests": s.rate_limit, "window_seconds": s.rate_window_secs },
    })))
}

async fn dab_set(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["agent_id", "budget_limit_dac", "budget_period"])?;
    let agent_id = o.req_uuid("agent_id")?;
    let limit = o.opt_dac("budget_limit_dac")?.ok_or_else(|| o.missing("budget_limit_dac"))?;
    let period = o.req_str("budget_period")?;
    if period != "monthly" {
        return Err(ApiError::bad("INVALID_ENUM", format!("budget_period must be monthly; got {}", anchor_domain::brief(period))));
    }
    let floor = state.settings.dap.dab_floor;
    if limit < floor {
        return Err(ApiError::bad("INVALID_VALUE", format!("budget_limit_dac must be at least {floor} DAC; got {limit}")));
    }
    managed(&state, &auth.owner, agent_id).await?;
    if !state.store.set_agent_dab(agent_id, auth.owner.owner_id, Some(limit)).await? {
        return Err(ApiError::forbidden("NOT_LINKED", format!("agent {agent_id} is not managed by this owner")));
    }
    Ok(axum::Json(crate::http::payments::dab_view(&state, agent_id).await?))
}

#[derive(Deserialize)]
struct AgentQuery {
    agent_id: Option<String>,
}

async fn dab_status(State(state): State<AppState>, auth: AuthOwner, ApiQuery(q): ApiQuery<AgentQuery>) -> ApiResult<axum::Json<Value>> {
    let agent_id = query_agent(q.agent_id.as_deref())?;
    managed(&state, &auth.owner, agent_id).await?;
    Ok(axum::Json(crate::http::payments::dab_view(&state, agent_id).await?))
}

/// The required `agent_id` query parameter.
pub(crate) fn query_agent(value: Option<&str>) -> ApiResult<uuid::Uuid> {
    let value = value.ok_or_else(|| ApiError::bad("MISSING_FIELD", "the agent_id query parameter is required"))?;
    crate::http::input::path_uuid("agent_id", value)
}

async fn dab_remove(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["agent_id", "password"])?;
    let agent_id = o.req_uuid("agent_id")?;
    let password = o.req_str("password")?;
    managed(&state, &auth.owner, agent_id).await?;
    super::confirm_password(&state, &auth.owner, password).await?;
    state.store.set_agent_dab(agent_id, auth.owner.owner_id, None).await?;
    Ok(axum::Json(crate::http::payments::dab_view(&state, agent_id).await?))
}

async fn trial_status(State(state): State<AppState>, auth: AuthOwner) -> ApiResult<axum::Json<Value>> {
    let now = state.clock.now();
    let agents = state.store.owner_agents(auth.owner.owner_id).await?;
    let mut total = anchor_domain::MilliDac::ZERO;
    let rows: Vec<Value> = agents
        .iter()
        .map(|a| {
            if a.agent.trial_expires_at > now {
                total = total + a.agent.trial_balance;
            }
            let mut view = crate::http::account::trial_view(&a.agent, now);
            view["agent_id"] = json!(a.agent.agent_id);
            view
        })
        .collect();
    Ok(axum::Json(json!({ "agents": rows, "total_trial_dac_remaining": total.to_json_number() })))
}
