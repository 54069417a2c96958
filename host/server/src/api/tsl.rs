//! tsl: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::tsl`) and MCP.

use crate::error::ApiResult;
use crate::payment::with_settlement;
use crate::state::AppState;
use crate::wire::{ConnectionNamed, Dac, Id, InputNamed, Named, Rate, Time, ToolPrice};
use anchor_app::tsl::{self, Purchased, Registration};
use anchor_domain::records::{DependencyRecord, PurchaseRecord, ShareRecord, ToolRecord, TransferRecord};
use anchor_domain::tsl::{Layer, ObservationType, PurchaseStatus, ShareKind, ToolStatus, TransferAction, TransferStatus};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub(crate) const TAG: &str = "TSL";

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ConnectionRequest {
    /// Outside the list: 400 INVALID_ARA_CONNECTION.
    pub(crate) observation_type: ConnectionNamed<ObservationType>,
    #[schemars(extend("minimum" = 1, "maximum" = 3, "default" = 1))]
    pub(crate) resolution_level: Option<u8>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RegisterRequest {
    pub(crate) tool_name: String,
    pub(crate) tool_description: Option<String>,
    #[schemars(extend("default" = "layer1"))]
    pub(crate) layer: Option<InputNamed<Layer>>,
    pub(crate) price_dac: ToolPrice,
    /// Required: at least one. Left out or empty, the answer is 400 ARA_CONNECTION_REQUIRED.
    #[schemars(extend("minItems" = 1))]
    pub(crate) ara_connections: Option<Vec<ConnectionRequest>>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ConnectionView {
    pub(crate) observation_type: Named<ObservationType>,
    pub(crate) resolution_level: u8,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ToolView {
    pub(crate) tool_id: Id,
    pub(crate) tool_name: String,
    pub(crate) tool_description: Option<String>,
    pub(crate) layer: Named<Layer>,
    pub(crate) price_dac: Dac,
    pub(crate) status: Named<ToolStatus>,
    /// Who sells it now (a transfer moves this).
    pub(crate) seller_agent_id: Id,
    pub(crate) ara_connections: Vec<ConnectionView>,
    pub(crate) registered_at: Time,
    pub(crate) updated_at: Time,
    /// The bounds a run of any tool on this host is held to (in the one
    /// tool's answer only; GET /v1/tsl/runtime gives them too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_limits: Option<crate::api::tools::RunLimitsView>,
}

impl From<&ToolRecord> for ToolView {
    fn from(t: &ToolRecord) -> ToolView {
        ToolView {
            tool_id: Id(t.tool_id),
            tool_name: t.name.clone(),
            tool_description: t.description.clone(),
            layer: Named(t.layer),
            price_dac: t.price.into(),
            status: Named(t.status),
            seller_agent_id: Id(t.seller_agent_id),
            ara_connections: t
                .connections
                .iter()
                .map(|c| ConnectionView { observation_type: Named(c.observation_type), resolution_level: c.resolution_level })
                .collect(),
            registered_at: t.registered_at.into(),
            updated_at: t.updated_at.into(),
            run_limits: None,
        }
    }
}

/// A tool's registration, as REST and the MCP tool register_tool answer it.
pub(crate) async fn register_tool(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    request: RegisterRequest,
) -> ApiResult<ToolView> {
    let registration = Registration {
        name: request.tool_name,
        description: request.tool_description,
        layer: request.layer.map(|l| l.0),
        price: request.price_dac.0,
        connections: request.ara_connections.map(|cs| cs.into_iter().map(|c| (c.observation_type.0, c.resolution_level)).collect()),
    };
    let tool = tsl::register(&state.app, agent, registration).await?;
    Ok(ToolView::from(&tool))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ListQuery {
    pub(crate) layer: Option<Named<Layer>>,
    pub(crate) status: Option<Named<ToolStatus>>,
    /// Above 100 the page holds 100; the answer's limit is the size used.
    #[schemars(extend("default" = 20, "minimum" = 1))]
    pub(crate) limit: Option<i64>,
    #[schemars(extend("default" = 1, "minimum" = 1))]
    pub(crate) page: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ToolList {
    pub(crate) tools: Vec<ToolView>,
    /// Tools matching the filter, on every page.
    pub(crate) total: i64,
    pub(crate) page: i64,
    pub(crate) limit: i64,
}

/// The market's tools, as REST and the MCP tool list_tools answer them.
pub(crate) async fn list_tools(state: &AppState, query: ListQuery) -> ApiResult<ToolList> {
    let page = tsl::list(&state.app, query.layer.map(|l| l.0), query.status.map(|s| s.0), query.limit, query.page).await?;
    Ok(ToolList {
        tools: page.items.iter().map(ToolView::from).collect(),
        total: page.total,
        page: page.offset / page.limit + 1,
        limit: page.limit,
    })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DependencyView {
    pub(crate) tool_id: Id,
    pub(crate) depends_on_tool_id: Id,
    pub(crate) depends_on_tool_name: String,
    pub(crate) layer: Named<Layer>,
    pub(crate) status: Named<ToolStatus>,
    pub(crate) purchase_id: Option<Id>,
    pub(crate) created_at: Time,
}

impl DependencyView {
    pub(crate) fn of(tool_id: Uuid, d: &DependencyRecord) -> DependencyView {
        DependencyView {
            tool_id: Id(tool_id),
            depends_on_tool_id: Id(d.depends_on_tool_id),
            depends_on_tool_name: d.name.clone(),
            layer: Named(d.layer),
            status: Named(d.status),
            purchase_id: d.purchase_id.map(Id),
            created_at: d.created_at.into(),
        }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DependencyList {
    pub(crate) tool_id: Id,
    pub(crate) dependencies: Vec<DependencyView>,
    pub(crate) count: usize,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct DependencyRequest {
    pub(crate) depends_on_tool_id: Id,
    pub(crate) purchase_id: Option<Id>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct PurchaseRequest {
    pub(crate) tool_id: Id,
    /// Idempotency key: a value you used before answers that purchase again.
    pub(crate) request_id: Option<Id>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Layer2Request {
    pub(crate) tool_id: Id,
    /// A layer-2 purchase takes no idempotency key: sent, it is refused
    /// (400 UNKNOWN_FIELD), not left out, as the client expects it to count.
    #[schemars(skip)]
    #[allow(dead_code)]
    pub(crate) request_id: Option<crate::wire::NotHere>,
}

/// One part of a sale's price.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ShareOfSale {
    pub(crate) kind: Named<ShareKind>,
    /// The seller or beneficiary credited; for a human share, the seller whose owner accrued it.
    pub(crate) agent_id: Id,
    pub(crate) rate: Option<Rate>,
    pub(crate) amount_dac: Dac,
    /// The Earned DAC ledger line it became (none for a human share: owners hold no Earned DAC).
    pub(crate) earned_entry_id: Option<Id>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PurchaseView {
    pub(crate) purchase_id: Id,
    pub(crate) tool_id: Id,
    pub(crate) tool_name: String,
    pub(crate) layer: Named<Layer>,
    pub(crate) buyer_agent_id: Id,
    /// Who sold it; delivery of anything beyond the right to run the tool is between buyer and seller.
    pub(crate) seller_agent_id: Id,
    pub(crate) request_id: Option<Id>,
    pub(crate) price_dac: Dac,
    pub(crate) service_fee_dac: Dac,
    /// What the buyer paid over x402: price plus fee.
    pub(crate) total_paid_dac: Dac,
    pub(crate) payment_source: &'static str,
    pub(crate) payment_id: Id,
    pub(crate) status: Named<PurchaseStatus>,
    pub(crate) purchased_at: Time,
    pub(crate) completed_at: Option<Time>,
    /// True when this answers an earlier purchase with the same request_id (nothing charged now).
    pub(crate) replayed: bool,
}

impl PurchaseView {
    pub(crate) fn of(p: &PurchaseRecord, replayed: bool) -> PurchaseView {
        PurchaseView {
            purchase_id: Id(p.purchase_id),
            tool_id: Id(p.tool_id),
            tool_name: p.tool_name.clone(),
            layer: Named(p.layer),
            buyer_agent_id: Id(p.buyer_agent_id),
            seller_agent_id: Id(p.seller_agent_id),
            request_id: p.request_id.map(Id),
            price_dac: p.price.into(),
            service_fee_dac: p.fee.into(),
            total_paid_dac: (p.price + p.fee).into(),
            payment_source: "external",
            payment_id: Id(p.payment_id),
            status: Named(p.status),
            purchased_at: p.created_at.into(),
            completed_at: p.completed_at.map(Time::from),
            replayed,
        }
    }
}

pub(crate) fn purchased(done: Purchased) -> Response {
    let response = (StatusCode::CREATED, Json(PurchaseView::of(&done.purchase, done.replayed))).into_response();
    with_settlement(response, done.settlement.as_ref())
}

/// A layer-1 tool's purchase, as REST and the MCP tool purchase_tool carry it out.
pub(crate) async fn buy_tool(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    offered: anchor_app::charge::Offered,
    request: PurchaseRequest,
) -> ApiResult<Purchased> {
    Ok(tsl::purchase(&state.app, agent, tsl::PURCHASE, request.tool_id.0, request.request_id.map(|r| r.0), offered).await?)
}

/// A purchase as its route answers it.
pub(crate) fn purchase_view(done: &Purchased) -> PurchaseView {
    PurchaseView::of(&done.purchase, done.replayed)
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct PurchasesQuery {
    /// buyer, seller or all.
    #[schemars(extend("enum" = ["buyer", "seller", "all"], "default" = "all"))]
    pub(crate) role: Option<String>,
    /// Above 100 the page holds 100; the answer's limit is the size used.
    #[schemars(extend("default" = 20, "minimum" = 1))]
    pub(crate) limit: Option<i64>,
    #[schemars(extend("default" = 0, "minimum" = 0))]
    pub(crate) offset: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PurchaseItem {
    /// Your side of it: buyer or seller.
    pub(crate) role: &'static str,
    #[serde(flatten)]
    pub(crate) purchase: PurchaseView,
    /// How the price was shared (sales only; empty until completed).
    pub(crate) shares: Vec<ShareOfSale>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PurchaseList {
    pub(crate) purchases: Vec<PurchaseItem>,
    pub(crate) total: i64,
    pub(crate) limit: i64,
    pub(crate) offset: i64,
}

pub(crate) fn item(agent_id: Uuid, p: &PurchaseRecord) -> PurchaseItem {
    let selling = p.seller_agent_id == agent_id;
    PurchaseItem {
        role: if selling { "seller" } else { "buyer" },
        purchase: PurchaseView::of(p, false),
        shares: if selling {
            p.distributions
                .iter()
                .map(|d| ShareOfSale {
                    kind: Named(d.kind),
                    agent_id: Id(d.agent_id),
                    rate: d.rate_ppm.map(Rate),
                    amount_dac: d.amount.into(),
                    earned_entry_id: d.earned_entry_id.map(Id),
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct RevenueView {
    pub(crate) agent_id: Id,
    pub(crate) tools_registered: i64,
    pub(crate) sales_count: i64,
    /// Tool prices of your completed sales.
    pub(crate) gross_sales_dac: Dac,
    /// The service fees your buyers paid on top (the operator's, not yours).
    pub(crate) service_fees_dac: Dac,
    pub(crate) earned_as_seller_dac: Dac,
    pub(crate) earned_from_revenue_shares_dac: Dac,
    /// What your sales gave to your tools' revenue-share beneficiaries.
    pub(crate) shared_with_components_dac: Dac,
    /// What your sales accrued to your owner's human share.
    pub(crate) human_share_accrued_dac: Dac,
    pub(crate) purchases_count: i64,
    /// Prices and fees of your own completed purchases.
    pub(crate) spent_on_purchases_dac: Dac,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ShareRequest {
    pub(crate) tool_id: Id,
    pub(crate) component_tool_id: Id,
    pub(crate) beneficiary_agent_id: Id,
    pub(crate) share_rate: Rate,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ShareView {
    pub(crate) share_id: Id,
    pub(crate) tool_id: Id,
    pub(crate) component_tool_id: Id,
    pub(crate) beneficiary_agent_id: Id,
    pub(crate) share_rate: Rate,
    pub(crate) created_at: Time,
}

impl From<&ShareRecord> for ShareView {
    fn from(s: &ShareRecord) -> ShareView {
        ShareView {
            share_id: Id(s.share_id),
            tool_id: Id(s.tool_id),
            component_tool_id: Id(s.component_tool_id),
            beneficiary_agent_id: Id(s.beneficiary_agent_id),
            share_rate: Rate(s.rate_ppm),
            created_at: s.created_at.into(),
        }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ShareList {
    pub(crate) tool_id: Id,
    pub(crate) shares: Vec<ShareView>,
    /// The shares' rates together.
    pub(crate) total_share_rate: Rate,
    pub(crate) count: usize,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct TransferRequest {
    /// transfer (with target_agent_id) or retire.
    pub(crate) action: Named<TransferAction>,
    pub(crate) target_agent_id: Option<Id>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TransferView {
    pub(crate) transfer_id: Id,
    pub(crate) tool_id: Id,
    pub(crate) action: Named<TransferAction>,
    pub(crate) target_agent_id: Option<Id>,
    pub(crate) status: Named<TransferStatus>,
    pub(crate) declared_at: Time,
    /// When it takes effect, unless cancelled first.
    pub(crate) effective_at: Time,
    /// When it was cancelled or carried out.
    pub(crate) ended_at: Option<Time>,
}

impl From<&TransferRecord> for TransferView {
    fn from(t: &TransferRecord) -> TransferView {
        TransferView {
            transfer_id: Id(t.transfer_id),
            tool_id: Id(t.tool_id),
            action: Named(t.action),
            target_agent_id: t.target_agent_id.map(Id),
            status: Named(t.status),
            declared_at: t.declared_at.into(),
            effective_at: t.effective_at.into(),
            ended_at: t.ended_at.map(Time::from),
        }
    }
}
