//! Payment status of a declaration: one row per cost component, aggregated.

use crate::extract::ApiPath;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use chrono::SecondsFormat;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use anchor_app::payments;
use anchor_domain::MilliDac;
use anchor_domain::payments::SettlementStatus;

use super::input::path_uuid;
use crate::error::ApiResult;
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/payment/{dd_id}/status", get(status))
            .tag("Payment")
            .summary("Payment status of a declaration, per cost component")
            .agent()
            .path_param("dd_id", uuid())
            .ok(200, "Status, aggregated over the rows (pending > unreserved > failed > released > settled)", object(&[], vec![
                ("dd_id", uuid()),
                ("payment_id", uuid()),
                ("settlement_status", enumeration(SettlementStatus::NAMES)),
                ("payment_method", nullable(string())),
                ("paid_at", nullable(datetime())),
                ("dac_amount_total", number()),
                ("payments", array(object(&[], vec![
                    ("payment_id", uuid()),
                    ("cost_component", string()),
                    ("dac_amount", number()),
                    ("settlement_status", enumeration(SettlementStatus::NAMES)),
                    ("payment_source", string()),
                    ("created_at", datetime()),
                ]))),
                ("x402", nullable(json!({ "type": "object", "description": "The x402 payment row and its status history, for externally paid declarations" }))),
            ]))
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"]),
        op(Method::GET, "/v1/dab/status", get(dab_status))
            .tag("DAB")
            .summary("The agent's DAB: its external spending cap this month and what is used")
            .describe("Trial-covered work does not count. Only the agent's owner can change the cap (PUT /dap/dab/set), and a change applies at once.")
            .agent()
            .ok(200, "DAB status", object(&[], vec![
                ("agent_id", uuid()),
                ("budget_limit_dac", number()),
                ("budget_period", enumeration(&["monthly"])),
                ("limit_source", enumeration(&["operator_default", "owner"])),
                ("period_start", datetime()),
                ("period_resets_at", datetime()),
                ("spent_dac", number()),
                ("budget_used_dac", doc(number(), "The same as spent_dac, under the owner report's name")),
                ("remaining_dac", number()),
                ("limit_reached", boolean()),
            ])),
    ]
}

async fn dab_status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(dab_view(&state, agent.agent_id).await?))
}

/// An agent's DAB as the agent and its owner see it.
pub(crate) async fn dab_view(state: &AppState, agent_id: Uuid) -> ApiResult<Value> {
    let dab = payments::dab(&state.app, agent_id).await?;
    let time = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    Ok(json!({
        "agent_id": agent_id,
        "budget_limit_dac": dab.limit.to_json_number(),
        "budget_period": "monthly",
        "limit_source": if dab.owner_set { "owner" } else { "operator_default" },
        "period_start": time(dab.period_start),
        "period_resets_at": time(dab.resets_at),
        "spent_dac": dab.spent.to_json_number(),
        "budget_used_dac": dab.spent.to_json_number(),
        "remaining_dac": dab.remaining.to_json_number(),
        "limit_reached": dab.remaining == MilliDac::ZERO,
    }))
}

/// A stable row id for a component that has no payment row of its own.
fn row_id(dd_id: Uuid, component: &str) -> Uuid {
    let digest = Sha256::new().chain_update(dd_id.as_bytes()).chain_update(component.as_bytes()).finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("16 bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // a custom (version 8) UUID
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

async fn status(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<axum::Json<Value>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let (stored, x402) = payments::status(&state.app, &agent, dd_id).await?;
    let time = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    let mut components = vec![("base_fee", stored.base_fee, stored.base_fee_source)];
    if stored.premium() > MilliDac::ZERO {
        components.push(("premium", stored.premium(), stored.premium_source));
    }
    let rows: Vec<Value> = components
        .iter()
        .map(|(component, amount, source)| {
            let id = match (&x402, source) {
                (Some(p), anchor_store::PaymentSource::External) => p.payment_id,
                _ => row_id(dd_id, component),
            };
            json!({
                "payment_id": id,
                "cost_component": component,
                "dac_amount": amount.to_json_number(),
                "settlement_status": stored.settlement_status,
                "payment_source": source.as_str(),
                "created_at": time(stored.declaration.anchored_at),
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "dd_id": dd_id,
        "payment_id": rows[0]["payment_id"],
        "settlement_status": stored.settlement_status,
        "payment_method": x402.as_ref().map(|_| "x402"),
        "paid_at": stored.confirmed_at.map(time),
        "dac_amount_total": stored.declaration.dac_amount.to_json_number(),
        "payments": rows,
        "x402": x402.map(|p| json!({
            "payment_id": p.payment_id,
            "network": p.network,
            "asset": p.asset,
            "payer": p.payer,
            "pay_to": p.pay_to,
            "amount_units": p.amount_units.to_string(),
            "status": p.status,
            "error_reason": p.error_reason,
            "settlement_ref": p.settlement_ref,
            "history": p.history.iter().map(|(status, reason, at)| json!({ "status": status, "reason": reason, "at": time(*at) })).collect::<Vec<_>>(),
        })),
    })))
}
