//! The agent's own account views: Trial status and the classification keys it may use.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::ApiResult;
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Time};
use anchor_app::agents;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

/// An agent's Trial DAC, as the agent and its owner see it.
#[derive(Serialize, JsonSchema)]
pub struct TrialStatus {
    pub trial_active: bool,
    /// What Trial can still pay; 0 once the period has ended.
    pub trial_dac_remaining: Dac,
    pub trial_expires_at: Time,
    /// Whole days left, rounded up.
    pub trial_days_remaining: i64,
    pub trial_dac_used: Dac,
    pub trial_dac_granted: Dac,
    /// The routes Trial pays that this server serves (`METHOD /path`).
    pub trial_covered_routes: Vec<String>,
}

impl From<agents::Trial> for TrialStatus {
    fn from(trial: agents::Trial) -> TrialStatus {
        TrialStatus {
            trial_active: trial.active,
            trial_dac_remaining: trial.remaining.into(),
            trial_expires_at: trial.expires_at.into(),
            trial_days_remaining: trial.days_remaining,
            trial_dac_used: trial.used.into(),
            trial_dac_granted: trial.granted.into(),
            trial_covered_routes: anchor_app::catalog::trial_routes().map(|r| r.to_string()).collect(),
        }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Classifications {
    pub(crate) classifications: Vec<ClassificationEntry>,
    pub(crate) count: usize,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ClassificationEntry {
    pub(crate) classification_id: Uuid,
    pub(crate) classification_key: String,
    pub(crate) classification_label: String,
    pub(crate) description: Option<String>,
    pub(crate) source: CategorySource,
}

/// Who defined a category: the operator (base) or the agent's owner.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CategorySource {
    Operator,
    Owner,
}

/// The classification keys an agent may use, as REST and the MCP tool list_classifications answer them.
pub(crate) async fn classifications_of(state: &AppState, agent: &anchor_domain::records::AgentRecord) -> ApiResult<Classifications> {
    let list = agents::classifications(&state.app, agent.agent_id).await?;
    let classifications: Vec<ClassificationEntry> = list
        .into_iter()
        .map(|c| ClassificationEntry {
            classification_id: c.classification_id,
            source: if c.owner_id.is_some() { CategorySource::Owner } else { CategorySource::Operator },
            classification_key: c.key,
            classification_label: c.label,
            description: c.description,
        })
        .collect();
    Ok(Classifications { count: classifications.len(), classifications })
}

// ---- over HTTP ----

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
