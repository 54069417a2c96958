//! ARA over HTTP: observations of recorded history, paid per call.

use axum::extract::State;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use anchor_app::ara;

use crate::error::ApiResult;
use crate::extract::{AuthAgent, PaymentOffer};
use crate::openapi::*;
use crate::payment::with_settlement;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    let counts = json!({ "type": "object", "additionalProperties": { "type": "integer" } });
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
            .ok(
                200,
                "Environment statistics",
                object(
                    &[],
                    vec![
                        ("observation", enumeration(&["environment"])),
                        ("period", object(&[], vec![("from", datetime()), ("to", datetime())])),
                        ("dd_count", integer()),
                        ("agent_count", integer()),
                        ("action_type_distribution", counts.clone()),
                        ("retention_distribution", counts),
                        ("dac_charged", number()),
                    ],
                ),
            )
            .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
            .error(404, "Too few agents contribute to show statistics that identify none of them.", &["DATA_UNAVAILABLE"])
            .payment_required("No payment came with the request, or it was refused (the reason is in `error`).")
            .error(
                503,
                "The settlement's outcome is unknown; it is settled in the background and charged at most once.",
                &["SETTLEMENT_PENDING"],
            ),
    ]
}

fn counts(pairs: &[(String, i64)]) -> Value {
    Value::Object(pairs.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<Map<_, _>>())
}

async fn environment(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
) -> ApiResult<Response> {
    let observed = ara::environment(&state.app, agent.agent_id, offered).await?;
    let stats = &observed.result;
    let body = json!({
        "observation": "environment",
        "period": {
            "from": observed.from.to_rfc3339_opts(SecondsFormat::Secs, true),
            "to": observed.to.to_rfc3339_opts(SecondsFormat::Secs, true),
        },
        "dd_count": stats.declarations,
        "agent_count": stats.agents,
        "action_type_distribution": counts(&stats.by_action_type),
        "retention_distribution": counts(&stats.by_retention),
        "dac_charged": observed.charged.to_json_number(),
    });
    Ok(with_settlement(axum::Json(body).into_response(), observed.settlement.as_ref()))
}
