//! Linked agents: link (rotates the agent's token), unlink, list, limits, the
//! DAB an owner sets for an agent, and the agents' Trial
//! (`anchor_app::owners::agents`).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, Method};
use axum::routing::{delete, get, post, put};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use anchor_app::AppError;
use anchor_app::owners::{self, agents};
use anchor_domain::agents::{AuthStatus, DisclosureLevel};
use anchor_domain::owners::{KEY_MAX, KEY_PATTERN, LABEL_MAX, PASSWORD_MAX, PASSWORD_MIN};

use crate::areas::payment_status::{BudgetPeriod, DabStatus, LimitSource};
use crate::error::{ApiError, ApiResult, AuthFailure, UnauthorizedBody};
use crate::extract::{ApiQuery, Body};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/dap/agent/link", post(link))
            .tag("DAP Agent")
            .summary("Link an agent with its current token; the token is replaced and the new one returned")
            .describe("The submitted token stops working at this moment: store new_auth_token in the agent.")
            .owner()
            .takes::<LinkRequest>(json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "auth_token": "da_tk_…" }))
            .returns::<Linked>(200, "Linked; the agent's token was rotated")
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_UUID", "INVALID_VALUE"])
            .returns::<UnauthorizedBody>(
                401,
                "The token is not the agent's current token (or the session is missing). Codes: INVALID_TOKEN, UNAUTHORIZED.",
            )
            .error(403, "The owner manages as many agents as allowed", &["AGENT_LIMIT_REACHED"])
            .error(409, "Another owner manages the agent", &["AGENT_ALREADY_LINKED"]),
        op(Method::DELETE, "/dap/agent/unlink", delete(unlink))
            .tag("DAP Agent")
            .summary("Stop managing an agent (password confirmed)")
            .owner()
            .takes::<AgentConfirmation>(json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "password": "a long passphrase 7" }))
            .returns::<Unlinked>(200, "Unlinked")
            .error(403, "Not managed by this owner", &["NOT_LINKED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::GET, "/dap/agents", get(list))
            .tag("DAP Agent")
            .summary("The agents this owner manages")
            .owner()
            .returns::<AgentList>(200, "Agents"),
        op(Method::GET, "/dap/system/limits", get(limits))
            .tag("DAP Agent")
            .summary("The limits this service applies to owners")
            .owner()
            .returns::<Limits>(200, "Limits"),
        op(Method::PUT, "/dap/dab/set", put(dab_set))
            .tag("DAP DAB")
            .summary("Set an agent's monthly budget for external spending")
            .owner()
            .takes::<DabRequest>(
                json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "budget_limit_dac": 250, "budget_period": "monthly" }),
            )
            .returns::<DabStatus>(200, "Saved; in force at once")
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_ENUM"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/dab/status", get(dab_status))
            .tag("DAP DAB")
            .summary("An agent's DAB and what it spent this period")
            .owner()
            .query::<AgentQuery>()
            .returns::<DabStatus>(200, "DAB status")
            .error(400, "agent_id missing or malformed", &["MISSING_FIELD", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::DELETE, "/dap/dab/remove", delete(dab_remove))
            .tag("DAP DAB")
            .summary("Remove the owner's DAB: the operator default applies again (password confirmed)")
            .owner()
            .takes::<AgentConfirmation>(json!({ "agent_id": "00000000-0000-4000-8000-000000000000", "password": "a long passphrase 7" }))
            .returns::<DabStatus>(200, "Removed")
            .error(403, "Not managed by this owner", &["NOT_LINKED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::GET, "/dap/trial/status", get(trial_status))
            .tag("DAP Trial")
            .summary("The Trial DAC of every agent this owner manages")
            .owner()
            .returns::<Trials>(200, "Trial status per agent"),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct LinkRequest {
    agent_id: Id,
    /// The agent's current token; it is replaced.
    auth_token: String,
}

#[derive(Serialize, JsonSchema)]
struct Linked {
    agent_id: Uuid,
    linked_at: Time,
    /// The agent's token from now on; the submitted one is revoked.
    new_auth_token: String,
    message: &'static str,
}

async fn link(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<LinkRequest>,
) -> ApiResult<([(HeaderName, &'static str); 1], Json<Linked>)> {
    let agent_id = request.agent_id.0;
    let linked = agents::link(&state.app, &owner.owner, agent_id, &request.auth_token).await.map_err(|error| match error {
        AppError::TokenRefused => {
            ApiError::Unauthorized { failure: AuthFailure::InvalidToken, base_url: state.settings.config.public_url.clone() }
        }
        other => other.into(),
    })?;
    Ok((
        crate::areas::agents::NO_STORE,
        Json(Linked {
            agent_id,
            linked_at: linked.linked_at.into(),
            new_auth_token: linked.new_token,
            message: "linked; the agent's previous token is revoked: give it new_auth_token",
        }),
    ))
}

/// A change about one agent, confirmed with the owner's password (an
/// agent-type owner sends its agent's current token instead).
#[derive(Deserialize, JsonSchema)]
struct AgentConfirmation {
    agent_id: Id,
    password: String,
}

#[derive(Serialize, JsonSchema)]
struct Unlinked {
    agent_id: Uuid,
    message: &'static str,
}

async fn unlink(State(state): State<AppState>, owner: AuthOwner, Body(request): Body<AgentConfirmation>) -> ApiResult<Json<Unlinked>> {
    agents::unlink(&state.app, &owner.owner, request.agent_id.0, &request.password).await?;
    Ok(Json(Unlinked {
        agent_id: request.agent_id.0,
        message: "unlinked; the agent keeps its records and token, and the operator's default DAB applies to it again",
    }))
}

#[derive(Serialize, JsonSchema)]
struct AgentList {
    agents: Vec<ManagedAgent>,
    count: usize,
}

#[derive(Serialize, JsonSchema)]
struct ManagedAgent {
    agent_id: Uuid,
    linked_at: Option<Time>,
    /// active, or recovery_locked while wrong recovery keys have spent its recovery window.
    auth_status: Named<AuthStatus>,
    registered_at: Time,
    region_code: Option<String>,
    disclosure_level: Named<DisclosureLevel>,
    budget_limit_dac: Dac,
    limit_source: LimitSource,
    trial_dac_remaining: Dac,
    trial_expires_at: Time,
}

async fn list(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<AgentList>> {
    let agents: Vec<ManagedAgent> = agents::overview(&state.app, &owner.owner)
        .await?
        .into_iter()
        .map(|a| ManagedAgent {
            agent_id: a.linked.agent.agent_id,
            linked_at: a.linked.linked_at.map(Time),
            auth_status: Named(a.auth_status),
            registered_at: a.linked.agent.registered_at.into(),
            region_code: a.linked.agent.region_code,
            disclosure_level: Named(a.linked.agent.disclosure_level),
            budget_limit_dac: a.dab_limit.into(),
            limit_source: LimitSource::of(a.dab_owner_set),
            trial_dac_remaining: a.trial.remaining.into(),
            trial_expires_at: a.trial.expires_at.into(),
        })
        .collect();
    Ok(Json(AgentList { count: agents.len(), agents }))
}

#[derive(Serialize, JsonSchema)]
struct Limits {
    dab: DabLimits,
    agents: AgentLimits,
    session: SessionLimits,
    login: LoginLimits,
    password: PasswordLimits,
    classification: CategoryLimits,
    rate_limit: RateLimit,
}

#[derive(Serialize, JsonSchema)]
struct DabLimits {
    minimum_budget_limit_dac: Dac,
    default_budget_limit_dac: Dac,
    budget_periods: Vec<BudgetPeriod>,
}

#[derive(Serialize, JsonSchema)]
struct AgentLimits {
    max_linked_agents: i64,
    linked_agents: usize,
}

#[derive(Serialize, JsonSchema)]
struct SessionLimits {
    lifetime_hours: i64,
}

#[derive(Serialize, JsonSchema)]
struct LoginLimits {
    /// Failed logins for one email from one client (an IPv4 address or an IPv6 /64) in the window.
    max_failed_attempts: i64,
    window_minutes: i64,
    /// Failed logins for one email from one client in a day.
    max_failed_attempts_per_day: i64,
    /// Failed logins from one client over every email, in the window.
    max_failed_attempts_per_client: i64,
    /// Failed logins for one email over every client, in the window.
    max_failed_attempts_per_email: i64,
}

#[derive(Serialize, JsonSchema)]
struct PasswordLimits {
    min_length: usize,
    max_length: usize,
}

#[derive(Serialize, JsonSchema)]
struct CategoryLimits {
    key_pattern: &'static str,
    key_max_length: usize,
    label_max_length: usize,
}

#[derive(Serialize, JsonSchema)]
struct RateLimit {
    requests: u32,
    window_seconds: u64,
}

async fn limits(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<Limits>> {
    let linked = agents::list(&state.app, &owner.owner).await?.len();
    let s = &state.settings.config;
    Ok(Json(Limits {
        dab: DabLimits {
            minimum_budget_limit_dac: s.owners.dab_floor.into(),
            default_budget_limit_dac: s.dab_default.into(),
            budget_periods: vec![BudgetPeriod::Monthly],
        },
        agents: AgentLimits { max_linked_agents: s.owners.max_agents_per_owner, linked_agents: linked },
        session: SessionLimits { lifetime_hours: s.owners.session_ttl.num_hours() },
        login: LoginLimits {
            max_failed_attempts: owners::LOGIN_MAX_FAILURES,
            window_minutes: owners::LOGIN_WINDOW_MINUTES,
            max_failed_attempts_per_day: owners::LOGIN_PER_CLIENT_AND_EMAIL_DAY.max,
            max_failed_attempts_per_client: owners::LOGIN_PER_CLIENT.max,
            max_failed_attempts_per_email: owners::LOGIN_PER_EMAIL.max,
        },
        password: PasswordLimits { min_length: PASSWORD_MIN, max_length: PASSWORD_MAX },
        classification: CategoryLimits { key_pattern: KEY_PATTERN, key_max_length: KEY_MAX, label_max_length: LABEL_MAX },
        rate_limit: RateLimit { requests: state.settings.rate_limit, window_seconds: state.settings.rate_window_secs },
    }))
}

#[derive(Deserialize, JsonSchema)]
struct DabRequest {
    agent_id: Id,
    /// DAC per month; at least the operator's floor (100 by default), at most three decimals.
    #[schemars(range(min = 100))]
    budget_limit_dac: Dac,
    budget_period: BudgetPeriodRequest,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum BudgetPeriodRequest {
    Monthly,
}

async fn dab_set(State(state): State<AppState>, owner: AuthOwner, Body(request): Body<DabRequest>) -> ApiResult<Json<DabStatus>> {
    let BudgetPeriodRequest::Monthly = request.budget_period;
    let agent_id = request.agent_id.0;
    let dab = agents::set_dab(&state.app, &owner.owner, agent_id, request.budget_limit_dac.0).await?;
    Ok(Json(DabStatus::new(agent_id, dab)))
}

#[derive(Deserialize, JsonSchema)]
struct AgentQuery {
    agent_id: Id,
}

async fn dab_status(State(state): State<AppState>, owner: AuthOwner, ApiQuery(query): ApiQuery<AgentQuery>) -> ApiResult<Json<DabStatus>> {
    let agent_id = query.agent_id.0;
    Ok(Json(DabStatus::new(agent_id, agents::dab(&state.app, &owner.owner, agent_id).await?)))
}

async fn dab_remove(State(state): State<AppState>, owner: AuthOwner, Body(request): Body<AgentConfirmation>) -> ApiResult<Json<DabStatus>> {
    let agent_id = request.agent_id.0;
    Ok(Json(DabStatus::new(agent_id, agents::remove_dab(&state.app, &owner.owner, agent_id, &request.password).await?)))
}

#[derive(Serialize, JsonSchema)]
struct Trials {
    agents: Vec<AgentTrial>,
    total_trial_dac_remaining: Dac,
}

#[derive(Serialize, JsonSchema)]
struct AgentTrial {
    agent_id: Uuid,
    trial_active: bool,
    trial_dac_remaining: Dac,
    trial_expires_at: Time,
    trial_days_remaining: i64,
    trial_dac_used: Dac,
}

async fn trial_status(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<Trials>> {
    let (trials, total) = agents::trials(&state.app, &owner.owner).await?;
    Ok(Json(Trials {
        agents: trials
            .into_iter()
            .map(|(agent_id, t)| AgentTrial {
                agent_id,
                trial_active: t.active,
                trial_dac_remaining: t.remaining.into(),
                trial_expires_at: t.expires_at.into(),
                trial_days_remaining: t.days_remaining,
                trial_dac_used: t.used.into(),
            })
            .collect(),
        total_trial_dac_remaining: total.into(),
    }))
}
