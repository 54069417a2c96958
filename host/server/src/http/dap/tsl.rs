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

use anchor_store::HumanShareRecord;

use crate::error::ApiResult;
use crate::extract::Body;
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
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"]),
        op(Method::GET, "/dap/tsl/human-shares", get(list))
            .tag("DAP TSL")
            .summary("Your human shares, newest first, with what each accrued")
            .owner()
            .returns::<HumanShareList>(200, "Human shares"),
    ]
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HumanShareRequest {
    tool_id: Id,
    #[schemars(extend("maximum" = 0.5))]
    human_share_rate: Rate,
}

#[derive(Serialize, JsonSchema)]
struct HumanShareView {
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
    /// superseded, transferred, retired or unlinked.
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
