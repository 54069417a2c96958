//! Payment status of a declaration (one row per cost component, aggregated),
//! and the agent's DAB.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use anchor_app::payment_status;
use anchor_domain::MilliDac;
use anchor_domain::payments::{CostComponent, PaymentSource, PaymentStatus, SettlementStatus};

use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, AuthAgent};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Named, Time, TimeSecs};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/payment/{dd_id}/status", get(status))
            .tag("Payment")
            .summary("Payment status of a declaration, per cost component")
            .agent()
            .path::<Uuid>("dd_id")
            .returns::<PaymentStatusView>(200, "Status, aggregated over the rows (pending > unreserved > failed > released > settled)")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/v1/dab/status", get(dab_status))
            .tag("DAB")
            .summary("The agent's DAB: its external spending cap this month and what is used")
            .describe("Trial-covered work does not count. Only the agent's owner can change the cap (PUT /dap/dab/set), and a change applies at once.")
            .agent()
            .returns::<DabStatus>(200, "DAB status"),
    ]
}

/// The only budget period.
#[derive(Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Monthly,
}

/// Who set the limit in force.
#[derive(Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    OperatorDefault,
    Owner,
}

impl LimitSource {
    pub fn of(owner_set: bool) -> LimitSource {
        if owner_set { LimitSource::Owner } else { LimitSource::OperatorDefault }
    }
}

/// An agent's DAB as the agent and its owner see it.
#[derive(Serialize, JsonSchema)]
pub struct DabStatus {
    pub agent_id: Uuid,
    pub budget_limit_dac: Dac,
    pub budget_period: BudgetPeriod,
    pub limit_source: LimitSource,
    pub period_start: TimeSecs,
    pub period_resets_at: TimeSecs,
    pub spent_dac: Dac,
    /// The same as spent_dac, under the owner report's name.
    pub budget_used_dac: Dac,
    pub remaining_dac: Dac,
    pub limit_reached: bool,
}

impl DabStatus {
    pub fn new(agent_id: Uuid, dab: payment_status::Dab) -> DabStatus {
        DabStatus {
            agent_id,
            budget_limit_dac: dab.limit.into(),
            budget_period: BudgetPeriod::Monthly,
            limit_source: LimitSource::of(dab.owner_set),
            period_start: dab.period_start.into(),
            period_resets_at: dab.resets_at.into(),
            spent_dac: dab.spent.into(),
            budget_used_dac: dab.spent.into(),
            remaining_dac: dab.remaining.into(),
            limit_reached: dab.remaining == MilliDac::ZERO,
        }
    }
}

async fn dab_status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<DabStatus>> {
    Ok(Json(DabStatus::new(agent.agent_id, payment_status::dab(&state.app, agent.agent_id).await?)))
}

#[derive(Serialize, JsonSchema)]
struct PaymentStatusView {
    dd_id: Uuid,
    /// The first row's id.
    payment_id: Uuid,
    settlement_status: Named<SettlementStatus>,
    payment_method: Option<&'static str>,
    paid_at: Option<Time>,
    dac_amount_total: Dac,
    payments: Vec<PaymentRow>,
    /// The x402 payment row and its status history, for externally paid declarations.
    x402: Option<X402Payment>,
}

#[derive(Serialize, JsonSchema)]
struct PaymentRow {
    payment_id: Uuid,
    cost_component: Named<CostComponent>,
    dac_amount: Dac,
    settlement_status: Named<SettlementStatus>,
    payment_source: Named<PaymentSource>,
    created_at: Time,
}

#[derive(Serialize, JsonSchema)]
struct X402Payment {
    payment_id: Uuid,
    network: String,
    asset: String,
    payer: String,
    pay_to: String,
    /// USDC base units.
    amount_units: String,
    status: Named<PaymentStatus>,
    error_reason: Option<String>,
    settlement_ref: Option<String>,
    history: Vec<PaymentEvent>,
}

#[derive(Serialize, JsonSchema)]
struct PaymentEvent {
    status: Named<PaymentStatus>,
    reason: Option<String>,
    at: Time,
}

/// A stable row id for a component that has no payment row of its own.
fn row_id(dd_id: Uuid, component: CostComponent) -> Uuid {
    let digest = Sha256::new().chain_update(dd_id.as_bytes()).chain_update(component.as_str().as_bytes()).finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("16 bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // a custom (version 8) UUID
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

async fn status(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<Json<PaymentStatusView>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let (stored, x402) = payment_status::status(&state.app, &agent, dd_id).await?;
    let mut components = vec![(CostComponent::BaseFee, stored.base_fee, stored.base_fee_source)];
    if stored.premium() > MilliDac::ZERO {
        components.push((CostComponent::Premium, stored.premium(), stored.premium_source));
    }
    let payments: Vec<PaymentRow> = components
        .into_iter()
        .map(|(component, amount, source)| PaymentRow {
            payment_id: match (&x402, source) {
                (Some(p), PaymentSource::External) => p.payment_id,
                _ => row_id(dd_id, component),
            },
            cost_component: Named(component),
            dac_amount: amount.into(),
            settlement_status: Named(stored.settlement_status),
            payment_source: Named(source),
            created_at: stored.declaration.anchored_at.into(),
        })
        .collect();
    Ok(Json(PaymentStatusView {
        dd_id,
        payment_id: payments[0].payment_id,
        settlement_status: Named(stored.settlement_status),
        payment_method: x402.as_ref().map(|_| "x402"),
        paid_at: stored.confirmed_at.map(Time),
        dac_amount_total: stored.declaration.dac_amount.into(),
        payments,
        x402: x402.map(|p| X402Payment {
            payment_id: p.payment_id,
            network: p.network,
            asset: p.asset,
            payer: p.payer,
            pay_to: p.pay_to,
            amount_units: p.amount_units.to_string(),
            status: Named(p.status),
            error_reason: p.error_reason,
            settlement_ref: p.settlement_ref,
            history: p
                .history
                .into_iter()
                .map(|(status, reason, at)| PaymentEvent { status: Named(status), reason, at: at.into() })
                .collect(),
        }),
    }))
}
