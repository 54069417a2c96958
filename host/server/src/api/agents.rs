//! agents: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::agents`) and MCP.

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time, one_of};
use anchor_app::agents::{self};
use anchor_domain::agents::{DisclosureLevel, TRIAL_DAYS};
use axum::http::HeaderName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Where an agent says it is based: five tracked countries, then macro-regions.
pub const REGION_CODES: &[&str] =
    &["KR", "CN", "JP", "TW", "HK", "ASIA", "EUROPE", "N_AMERICA", "S_AMERICA", "AFRICA", "OCEANIA", "ANTARCTICA", "unknown"];

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
    one_of(REGION_CODES)
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
    let region = match request.and_then(|r| r.region_code) {
        Some(code) => Some(REGION_CODES.iter().copied().find(|r| *r == code).ok_or_else(|| {
            ApiError::bad(
                "INVALID_ENUM",
                format!("region_code must be one of {}; got {}", REGION_CODES.join(", "), anchor_domain::brief(&code)),
            )
        })?),
        None => None,
    };
    let registered = agents::register(&state.app, region).await?;
    let base = &state.settings.public_url;
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
