//! The agent's own account views: Trial status and the classification keys it may use.

use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use serde_json::{Value, json};

use anchor_domain::MilliDac;

use crate::error::ApiResult;
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/trial/status", get(trial_status)).tag("Trial").summary("Trial DAC: what is left and until when").agent().ok(
            200,
            "Trial status",
            object(
                &[],
                vec![
                    ("trial_active", boolean()),
                    ("trial_dac_remaining", number()),
                    ("trial_expires_at", datetime()),
                    ("trial_days_remaining", integer()),
                    ("trial_dac_used", number()),
                    ("trial_dac_granted", number()),
                    ("trial_covered_routes", array(string())),
                ],
            ),
        ),
        op(Method::GET, "/v1/classification", get(classifications))
            .tag("Classification")
            .summary("The self_classification keys this agent may use")
            .agent()
            .ok(
                200,
                "Operator base categories, then the agent's owner's",
                object(
                    &[],
                    vec![
                        (
                            "classifications",
                            array(object(
                                &[],
                                vec![
                                    ("classification_id", uuid()),
                                    ("classification_key", string()),
                                    ("classification_label", string()),
                                    ("description", nullable(string())),
                                    ("source", enumeration(&["operator", "owner"])),
                                ],
                            )),
                        ),
                        ("count", integer()),
                    ],
                ),
            ),
    ]
}

async fn trial_status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(trial_view(&agent, state.clock.now())))
}

/// An agent's Trial DAC, as the agent and its owner see it.
pub(crate) fn trial_view(agent: &anchor_store::AgentRecord, now: chrono::DateTime<chrono::Utc>) -> Value {
    let active = agent.trial_expires_at > now && agent.trial_balance > MilliDac::ZERO;
    let seconds_left = (agent.trial_expires_at - now).num_seconds().max(0);
    json!({
        "trial_active": active,
        "trial_dac_remaining": if agent.trial_expires_at > now { agent.trial_balance } else { MilliDac::ZERO }.to_json_number(),
        "trial_expires_at": agent.trial_expires_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "trial_days_remaining": (seconds_left + 86_399) / 86_400,
        "trial_dac_used": (agent.trial_granted - agent.trial_balance).to_json_number(),
        "trial_dac_granted": agent.trial_granted.to_json_number(),
        // The routes Trial pays that this server serves.
        "trial_covered_routes": anchor_app::catalog::trial_routes()
            .filter(crate::http::implements)
            .map(|r| r.to_string())
            .collect::<Vec<_>>(),
    })
}

async fn classifications(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<axum::Json<Value>> {
    let list = state.store.classifications_for_agent(agent.agent_id).await?;
    Ok(axum::Json(json!({
        "classifications": list.iter().map(|c| json!({
            "classification_id": c.classification_id,
            "classification_key": c.key,
            "classification_label": c.label,
            "description": c.description,
            "source": if c.owner_id.is_some() { "owner" } else { "operator" },
        })).collect::<Vec<_>>(),
        "count": list.len(),
    })))
}
