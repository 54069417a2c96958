//! ARA over HTTP: observations of recorded history, paid per call.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;

use anchor_app::ara;

use crate::error::ApiResult;
use crate::extract::{AuthAgent, PaymentOffer};
use crate::openapi::*;
use crate::payment::with_settlement;
use crate::state::AppState;
use crate::wire::{Dac, TimeSecs};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, ara::ENVIRONMENT.path, get(environment))
            .tag("ARA")
            .summary("The environment: every agent's anchored declarations of the last 30 days, counted")
            .describe(
                "De-identified: counts only, never a record or an agent id; declarations with access_class internal_only are left out, \
                 and nothing is shown unless at least 10 agents contribute. Paid per call over x402 and settled before the answer \
                 (PAYMENT-RESPONSE); Trial never pays an observation.",
            )
            .agent()
            .returns::<Environment>(200, "Environment statistics")
            .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
            .error(404, "Too few agents contribute to show statistics that identify none of them.", &["DATA_UNAVAILABLE"])
            .payment_required("No payment came with the request, or it was refused (the reason is in `error`).")
            .error(400, "A PAYMENT-SIGNATURE (or X-PAYMENT) header that is not base64 JSON.", &["INVALID_PAYLOAD"])
            .error(
                503,
                "The settlement's outcome is unknown; it is settled in the background and charged at most once.",
                &["SETTLEMENT_PENDING"],
            ),
    ]
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ObservationKind {
    Environment,
}

#[derive(Serialize, JsonSchema)]
struct Period {
    from: TimeSecs,
    to: TimeSecs,
}

#[derive(Serialize, JsonSchema)]
struct Environment {
    observation: ObservationKind,
    period: Period,
    dd_count: i64,
    agent_count: i64,
    /// Declarations by action type.
    action_type_distribution: BTreeMap<String, i64>,
    /// Declarations by retention period.
    retention_distribution: BTreeMap<String, i64>,
    dac_charged: Dac,
}

async fn environment(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let observed = ara::environment(&state.app, agent.agent_id, offered).await?;
    let stats = &observed.result;
    let body = Environment {
        observation: ObservationKind::Environment,
        period: Period { from: observed.from.into(), to: observed.to.into() },
        dd_count: stats.declarations,
        agent_count: stats.agents,
        action_type_distribution: stats.by_action_type.iter().cloned().collect(),
        retention_distribution: stats.by_retention.iter().cloned().collect(),
        dac_charged: observed.charged.into(),
    };
    Ok(with_settlement(Json(body).into_response(), observed.settlement.as_ref()))
}
