//! The owner's human shares of its agents' tool sales (`anchor_app::tsl`).
//! Owners hold no Earned DAC: a human share is an accrual, reported here.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use anchor_domain::records::HumanShareRecord;

use crate::error::ApiResult;
use crate::extract::{ApiPath, Body};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Rate, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/dap/tsl/human-share", post(set))
            .tag("DAP TSL")
            .summary("Take a share of the price of each sale of a tool your agent sells (at most 0.5)")
            .describe(
                "For human owners. The share accrues to the owner on every sale (owners hold no Earned DAC), and the seller's Earned \
                 DAC is the price less the tool's revenue shares and this share; together they take at most the whole price. A new \
                 agreement for the same tool replaces the earlier one; it ends when the tool moves to another agent or the agent \
                 leaves this owner.",
            )
            .owner()
            .takes::<HumanShareRequest>(json!({ "tool_id": "5b0d4a56-8a57-4e4c-9a3f-2f3c4d5e6f70", "human_share_rate": 0.1 }))
            .returns::<HumanShareView>(201, "Human share set")
            .error(
                400,
                "A malformed field, a rate above 0.5, or rates that would pass 1.",
                &["INVALID_UUID", "INVALID_VALUE", "MISSING_FIELD", "UNKNOWN_FIELD", "SHARE_RATE_EXCEEDED"],
            )
            .error(403, "An agent-type owner, or the tool's seller is not your agent.", &["HUMAN_OWNER_REQUIRED", "NOT_LINKED"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"])
            .error(
                429,
                "You set the tool's human share 10 times today already (each setting is kept); Retry-After says when the day turns.",
                &["RATE_LIMITED"],
            ),
        op(Method::GET, "/dap/tsl/human-shares", get(list))
            .tag("DAP TSL")
            .summary("Your human shares, newest first, with what each accrued")
            .owner()
            .returns::<HumanShareList>(200, "Human shares"),
        op(Method::GET, "/dap/agent/{agent_id}/market", get(market))
            .tag("DAP TSL")
            .summary("A managed agent in the tool market: its Earned DAC and what expires next, its tools, their sales")
            .describe("For the portal; free. Sales show the tool's price and the agent's part of it; never who bought.")
            .extension()
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .returns::<MarketView>(200, "The agent's market view")
            .error(400, "agent_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Not an agent of yours.", &["NOT_LINKED"]),
    ]
}

#[derive(Serialize, JsonSchema)]
struct EarnedView {
    earned_balance: Dac,
    /// The balance reaches min_spend_threshold, so Earned DAC can pay.
    spendable: bool,
    min_spend_threshold: Dac,
    expiry_days: u32,
    /// What expires next, and when; null when nothing is left.
    next_expiry_dac: Option<Dac>,
    next_expiry_at: Option<Time>,
    received_total: Dac,
    spent_total: Dac,
    expired_total: Dac,
}

#[derive(Serialize, JsonSchema)]
struct OwnedToolView {
    tool_id: Id,
    tool_name: String,
    layer: crate::wire::Named<anchor_domain::tsl::Layer>,
    price_dac: Dac,
    status: crate::wire::Named<anchor_domain::tsl::ToolStatus>,
    sales: i64,
    gross_sales_dac: Dac,
    /// What the agent earned from them, after revenue shares and the human share.
    earned_dac: Dac,
    /// The version buyers run; null for a listing without a component.
    component_version: Option<i32>,
}

#[derive(Serialize, JsonSchema)]
struct SaleView {
    purchase_id: Id,
    tool_id: Id,
    tool_name: String,
    price_dac: Dac,
    /// The agent's part, as seller.
    earned_dac: Dac,
    sold_at: Time,
}

#[derive(Serialize, JsonSchema)]
struct MarketView {
    agent_id: Id,
    earned: EarnedView,
    tools: Vec<OwnedToolView>,
    recent_sales: Vec<SaleView>,
}

async fn market(State(state): State<AppState>, owner: AuthOwner, ApiPath(agent_id): ApiPath<String>) -> ApiResult<Json<MarketView>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    let m = anchor_app::tsl::owner_market(&state.app, &owner.owner, agent_id).await?;
    let e = m.earned;
    Ok(Json(MarketView {
        agent_id: Id(m.agent_id),
        earned: EarnedView {
            earned_balance: e.balance.into(),
            spendable: e.balance >= m.terms.threshold && e.balance > anchor_domain::MilliDac::ZERO,
            min_spend_threshold: m.terms.threshold.into(),
            expiry_days: m.terms.expiry_days,
            next_expiry_dac: e.next_expiry.map(|(amount, _)| amount.into()),
            next_expiry_at: e.next_expiry.map(|(_, at)| at.into()),
            received_total: e.received.into(),
            spent_total: e.spent.into(),
            expired_total: e.expired.into(),
        },
        tools: m
            .tools
            .iter()
            .map(|o| OwnedToolView {
                tool_id: Id(o.tool.tool_id),
                tool_name: o.tool.name.clone(),
                layer: crate::wire::Named(o.tool.layer),
                price_dac: o.tool.price.into(),
                status: crate::wire::Named(o.tool.status),
                sales: o.sales.sales,
                gross_sales_dac: o.sales.gross.into(),
                earned_dac: o.sales.earned.into(),
                component_version: o.component.as_ref().map(|c| c.version),
            })
            .collect(),
        recent_sales: m
            .recent_sales
            .iter()
            .map(|p| SaleView {
                purchase_id: Id(p.purchase_id),
                tool_id: Id(p.tool_id),
                tool_name: p.tool_name.clone(),
                price_dac: p.price.into(),
                earned_dac: p
                    .distributions
                    .iter()
                    .filter(|d| d.kind == anchor_domain::tsl::ShareKind::Seller && d.agent_id == m.agent_id)
                    .fold(anchor_domain::MilliDac::ZERO, |sum, d| sum + d.amount)
                    .into(),
                sold_at: p.completed_at.unwrap_or(p.created_at).into(),
            })
            .collect(),
    }))
}

#[derive(Deserialize, JsonSchema)]
struct HumanShareRequest {
    tool_id: Id,
    #[schemars(extend("maximum" = 0.5))]
    human_share_rate: Rate,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct HumanShareView {
    human_share_id: Id,
    tool_id: Id,
    tool_name: String,
    /// The agent that sells the tool.
    agent_id: Id,
    human_share_rate: Rate,
    /// Not ended, and the agent is still yours.
    in_force: bool,
    created_at: Time,
    ended_at: Option<Time>,
    /// superseded, transferred, retired, unlinked or owner_erased.
    end_reason: Option<String>,
    sales: i64,
    accrued_dac: Dac,
}

impl From<&HumanShareRecord> for HumanShareView {
    fn from(h: &HumanShareRecord) -> HumanShareView {
        HumanShareView {
            human_share_id: Id(h.human_share_id),
            tool_id: Id(h.tool_id),
            tool_name: h.tool_name.clone(),
            agent_id: Id(h.agent_id),
            human_share_rate: Rate(h.rate_ppm),
            in_force: h.in_force,
            created_at: h.created_at.into(),
            ended_at: h.ended_at.map(Time::from),
            end_reason: h.end_reason.clone(),
            sales: h.sales,
            accrued_dac: h.accrued.into(),
        }
    }
}

async fn set(State(state): State<AppState>, owner: AuthOwner, Body(request): Body<HumanShareRequest>) -> ApiResult<Response> {
    let share = anchor_app::tsl::set_human_share(&state.app, &owner.owner, request.tool_id.0, request.human_share_rate.0).await?;
    Ok((StatusCode::CREATED, Json(HumanShareView::from(&share))).into_response())
}

#[derive(Serialize, JsonSchema)]
struct HumanShareList {
    human_shares: Vec<HumanShareView>,
    count: usize,
    /// What every agreement accrued together.
    accrued_total_dac: Dac,
}

async fn list(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<HumanShareList>> {
    let shares = anchor_app::tsl::human_shares(&state.app, &owner.owner).await?;
    let total = shares.iter().fold(anchor_domain::MilliDac::ZERO, |sum, h| sum + h.accrued);
    Ok(Json(HumanShareList {
        count: shares.len(),
        accrued_total_dac: total.into(),
        human_shares: shares.iter().map(HumanShareView::from).collect(),
    }))
}
