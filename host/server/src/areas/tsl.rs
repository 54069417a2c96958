//! The tool market (`anchor_app::tsl`): tools, dependencies,
//! purchases (paid over x402, settled before the answer), revenue, revenue
//! shares and transfer declarations. The owner's human shares are in
//! `owners/tsl.rs`.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{ConnectionNamed, Dac, Id, InputNamed, Named, Rate, Time, ToolPrice};
use crate::x402_headers::with_settlement;
use anchor_app::charge::Route;
use anchor_app::tsl::{self, Purchased, Registration};
use anchor_domain::records::{DependencyRecord, PurchaseRecord, ShareRecord, ToolRecord, TransferRecord};
use anchor_domain::tsl::{Layer, ObservationType, PurchaseStatus, ShareKind, ToolStatus, TransferAction, TransferStatus};
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
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
    pub(crate) run_limits: Option<crate::areas::tools::RunLimitsView>,
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
    Ok(ToolList { tools: page.items.iter().map(ToolView::from).collect(), total: page.total, page: page.page(), limit: page.limit })
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

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/tsl/tool/register", post(register))
            .tag(TAG)
            .summary("Register an interpretation tool over ARA observations (free)")
            .describe(
                "The tool names the ARA observations it reads (ara_connections: agent-level observations at resolution 1 to 3, \
                 pattern_compare at 1 or 2, the others at 1) and its price in DAC. Buyers pay the price plus the service fee over \
                 x402; the price becomes the seller's Earned DAC, less the tool's revenue shares and its owner's human share. \
                 The answer carries the stored layer.",
            )
            .agent()
            .takes::<RegisterRequest>(json!({
                "tool_name": "ee-mix",
                "tool_description": "EE choices of the environment, as shares per axis",
                "layer": "layer1",
                "price_dac": 50,
                "ara_connections": [{ "observation_type": "pattern_ee_distribution", "resolution_level": 1 }]
            }))
            .returns::<ToolView>(201, "Tool registered")
            .error(409, "The agent already sells as many active tools as one agent may (100).", &["TOOL_LIMIT_REACHED"])
            .error(
                400,
                "Missing or empty ara_connections, an observation at a level it is not offered at, an empty or long name, a price \
                 of 0 or less, personal data in the name or description.",
                &[
                    "ARA_CONNECTION_REQUIRED",
                    "INVALID_ARA_CONNECTION",
                    "INVALID_INPUT",
                    "PII_DETECTED",
                    "MISSING_FIELD",
                    "INVALID_ENUM",
                    "INVALID_VALUE",
                    "UNKNOWN_FIELD",
                ],
            ),
        op(Method::GET, "/v1/tsl/tools", get(list))
            .tag(TAG)
            .summary("The tools on the market, newest first (public)")
            .describe(
                "Ordered by registration, newest first. The service lists tools; it does not rate them, so no sales figures are shown.",
            )
            .query::<ListQuery>()
            .returns::<ToolList>(200, "Tool list")
            .error(400, "A layer or status outside its values, limit outside 1 to 100, page below 1.", &["INVALID_ENUM", "INVALID_VALUE"]),
        op(Method::GET, "/v1/tsl/tool/{tool_id}", get(detail))
            .tag(TAG)
            .summary("One tool (public)")
            .path::<Uuid>("tool_id")
            .returns::<ToolView>(200, "Tool detail")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"]),
        op(Method::GET, "/v1/tsl/tool/{tool_id}/dependencies", get(dependencies))
            .tag(TAG)
            .summary("The tools a tool builds on (public)")
            .path::<Uuid>("tool_id")
            .returns::<DependencyList>(200, "Dependency list")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"]),
        op(Method::POST, "/v1/tsl/tool/{tool_id}/dependency", post(add_dependency))
            .tag(TAG)
            .summary("Declare that your tool builds on another (free)")
            .describe(
                "Only the seller of tool_id may. purchase_id, when given, must be your completed purchase of the dependency. \
                 Dependencies may not form a cycle. A dependency is what a revenue share is given for.",
            )
            .agent()
            .path::<Uuid>("tool_id")
            .takes::<DependencyRequest>(json!({ "depends_on_tool_id": "5b0d4a56-8a57-4e4c-9a3f-2f3c4d5e6f70" }))
            .returns::<DependencyView>(201, "Dependency registered")
            .error(
                400,
                "A malformed id, the tool itself, a cycle, or a purchase that is not yours of that tool.",
                &["INVALID_UUID", "MISSING_FIELD", "UNKNOWN_FIELD", "INVALID_DEPENDENCY", "DEPENDENCY_CYCLE", "INVALID_PURCHASE"],
            )
            .error(403, "You do not sell tool_id.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"])
            .error(
                409,
                "The dependency is declared already, or the tool declares 50 dependencies already.",
                &["DEPENDENCY_EXISTS", "DEPENDENCY_LIMIT_REACHED"],
            ),
        purchase_operation(tsl::PURCHASE, post(purchase), "Buy a layer 1 tool: its price plus the service fee, over x402")
            .error(409, "Or: a purchase with this request_id is settling.", &["PURCHASE_PENDING"])
            .error(400, "Or: the request_id was used for a purchase of another tool, or one that failed.", &["REQUEST_ID_USED"])
            .takes::<PurchaseRequest>(
                json!({ "tool_id": "5b0d4a56-8a57-4e4c-9a3f-2f3c4d5e6f70", "request_id": "0f8e7d6c-5b4a-4938-8271-605f4e3d2c1b" }),
            )
            .returns::<PurchaseView>(201, "Purchase completed"),
        purchase_operation(tsl::PURCHASE_LAYER2, post(purchase_layer2), "Buy a layer 2 tool: its price plus the service fee, over x402")
            .takes::<Layer2Request>(json!({ "tool_id": "5b0d4a56-8a57-4e4c-9a3f-2f3c4d5e6f70" }))
            .returns::<PurchaseView>(201, "Layer 2 purchase completed"),
        op(Method::GET, "/v1/tsl/purchases", get(purchases))
            .tag(TAG)
            .summary("Your purchases and sales, newest first (free)")
            .describe("role: buyer, seller or all (the default). A sale shows how its price was shared.")
            .agent()
            .query::<PurchasesQuery>()
            .returns::<PurchaseList>(200, "Transaction history")
            .error(
                400,
                "A role outside buyer, seller, all; limit outside 1 to 100; a negative offset.",
                &["INVALID_ENUM", "INVALID_VALUE"],
            ),
        op(Method::GET, "/v1/tsl/revenue", get(revenue))
            .tag(TAG)
            .summary("What your tools sold and earned, what you shared and bought (free)")
            .agent()
            .returns::<RevenueView>(200, "Revenue status"),
        op(Method::POST, "/v1/tsl/revenue-share", post(add_revenue_share))
            .tag(TAG)
            .summary("Give a component's author a share of your tool's price (free)")
            .describe(
                "Only the seller of tool_id may, for a component_tool_id it declared as a dependency. A share is agreed once: it \
                 cannot be changed. The tool's shares and its owner's human share together take at most the whole price; the \
                 seller keeps the rest. Each sale credits every beneficiary its rate of the price (rounded down) in Earned DAC.",
            )
            .agent()
            .takes::<ShareRequest>(json!({
                "tool_id": "5b0d4a56-8a57-4e4c-9a3f-2f3c4d5e6f70",
                "component_tool_id": "6c1e5b67-9b68-4f5d-8b40-3a4d5e6f7081",
                "beneficiary_agent_id": "7d2f6c78-ac79-4a6e-9c51-4b5e6f708192",
                "share_rate": 0.2
            }))
            .returns::<ShareView>(201, "Agreement created")
            .error(
                400,
                "A malformed field, a component that is not a dependency, or rates that would pass 1.",
                &["INVALID_UUID", "INVALID_VALUE", "MISSING_FIELD", "UNKNOWN_FIELD", "NOT_A_DEPENDENCY", "SHARE_RATE_EXCEEDED"],
            )
            .error(403, "You do not sell tool_id.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool or beneficiary.", &["TOOL_NOT_FOUND", "AGENT_NOT_FOUND"])
            .error(
                409,
                "This tool, component and beneficiary have a share already, or the tool has 20 revenue shares already.",
                &["REVENUE_SHARE_EXISTS", "REVENUE_SHARE_LIMIT_REACHED"],
            ),
        op(Method::GET, "/v1/tsl/tool/{tool_id}/revenue-shares", get(revenue_shares))
            .tag(TAG)
            .summary("A tool's revenue shares (its seller and beneficiaries only)")
            .agent()
            .path::<Uuid>("tool_id")
            .returns::<ShareList>(200, "Revenue share agreement list")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "You neither sell the tool nor benefit from it.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"]),
        op(Method::POST, "/v1/tsl/tool/{tool_id}/transfer-declaration", post(declare_transfer))
            .tag(TAG)
            .summary("Declare that your tool moves to another agent, or retires, in 7 days")
            .describe(
                "action transfer (with target_agent_id) moves the seller role, and the revenue of later sales, to the target; \
                 retire makes the tool defunct, so it no longer sells. Either takes effect 7 days after the declaration unless it \
                 is cancelled first; a tool has one pending declaration at a time. A transfer whose target sells 100 active tools \
                 when it falls due is cancelled instead (status cancelled), and the tool stays yours.",
            )
            .agent()
            .path::<Uuid>("tool_id")
            .takes::<TransferRequest>(json!({ "action": "transfer", "target_agent_id": "7d2f6c78-ac79-4a6e-9c51-4b5e6f708192" }))
            .returns::<TransferView>(201, "Transfer declared")
            .error(
                400,
                "An action outside transfer and retire, a transfer without a target or to yourself, a retirement with one.",
                &["INVALID_UUID", "INVALID_ENUM", "INVALID_INPUT", "MISSING_FIELD", "UNKNOWN_FIELD"],
            )
            .error(403, "You do not sell the tool.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool or target agent.", &["TOOL_NOT_FOUND", "AGENT_NOT_FOUND"])
            .error(
                409,
                "A declaration is pending already, the tool is defunct, or the target sells 100 active tools already.",
                &["TRANSFER_PENDING", "TOOL_NOT_AVAILABLE", "TOOL_LIMIT_REACHED"],
            ),
        op(Method::GET, "/v1/tsl/tool/{tool_id}/transfer-declaration", get(transfer_declaration))
            .tag(TAG)
            .summary("The tool's transfer declaration: the pending one, else the latest")
            .agent()
            .path::<Uuid>("tool_id")
            .returns::<TransferView>(200, "Transfer declaration info")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "You neither sell the tool nor declared its transfer.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool, or it has no declaration.", &["TOOL_NOT_FOUND", "NO_TRANSFER_DECLARATION"]),
        op(Method::DELETE, "/v1/tsl/tool/{tool_id}/transfer-declaration", axum::routing::delete(cancel_transfer))
            .tag(TAG)
            .summary("Cancel the tool's pending transfer declaration")
            .agent()
            .path::<Uuid>("tool_id")
            .returns::<TransferView>(200, "Transfer cancelled")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "You do not sell the tool.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool, or nothing pending.", &["TOOL_NOT_FOUND", "NO_TRANSFER_DECLARATION"]),
    ]
}

async fn register(State(state): State<AppState>, AuthAgent(agent): AuthAgent, Body(request): Body<RegisterRequest>) -> ApiResult<Response> {
    Ok((StatusCode::CREATED, Json(register_tool(&state, &agent, request).await?)).into_response())
}

async fn list(State(state): State<AppState>, ApiQuery(query): ApiQuery<ListQuery>) -> ApiResult<Json<ToolList>> {
    Ok(Json(list_tools(&state, query).await?))
}

async fn detail(State(state): State<AppState>, ApiPath(tool_id): ApiPath<String>) -> ApiResult<Json<ToolView>> {
    let tool = tsl::tool(&state.app, path_uuid("tool_id", &tool_id)?).await?;
    let mut view = ToolView::from(&tool);
    view.run_limits = Some(crate::areas::tools::RunLimitsView::from(state.app.tools.limits()));
    Ok(Json(view))
}

async fn dependencies(State(state): State<AppState>, ApiPath(tool_id): ApiPath<String>) -> ApiResult<Json<DependencyList>> {
    let (tool, dependencies) = tsl::dependencies(&state.app, path_uuid("tool_id", &tool_id)?).await?;
    Ok(Json(DependencyList {
        tool_id: Id(tool.tool_id),
        count: dependencies.len(),
        dependencies: dependencies.iter().map(|d| DependencyView::of(tool.tool_id, d)).collect(),
    }))
}

async fn add_dependency(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(tool_id): ApiPath<String>,
    Body(request): Body<DependencyRequest>,
) -> ApiResult<Response> {
    let tool_id = path_uuid("tool_id", &tool_id)?;
    let added = tsl::add_dependency(&state.app, &agent, tool_id, request.depends_on_tool_id.0, request.purchase_id.map(|p| p.0)).await?;
    Ok((StatusCode::CREATED, Json(DependencyView::of(tool_id, &added))).into_response())
}

async fn purchase(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<PurchaseRequest>,
) -> ApiResult<Response> {
    Ok(purchased(buy_tool(&state, &agent, offered, request).await?))
}

async fn purchase_layer2(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<Layer2Request>,
) -> ApiResult<Response> {
    let done = tsl::purchase(&state.app, &agent, tsl::PURCHASE_LAYER2, request.tool_id.0, None, offered).await?;
    Ok(purchased(done))
}

async fn purchases(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<PurchasesQuery>,
) -> ApiResult<Json<PurchaseList>> {
    let page = tsl::purchases(&state.app, &agent, query.role.as_deref(), query.limit, query.offset).await?;
    Ok(Json(PurchaseList {
        purchases: page.items.iter().map(|p| item(agent.agent_id, p)).collect(),
        total: page.total,
        limit: page.limit,
        offset: page.offset,
    }))
}

async fn revenue(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<RevenueView>> {
    let r = tsl::revenue(&state.app, &agent).await?;
    Ok(Json(RevenueView {
        agent_id: Id(agent.agent_id),
        tools_registered: r.tools,
        sales_count: r.sales,
        gross_sales_dac: r.gross.into(),
        service_fees_dac: r.fees.into(),
        earned_as_seller_dac: r.earned_as_seller.into(),
        earned_from_revenue_shares_dac: r.earned_from_shares.into(),
        shared_with_components_dac: r.shared_out.into(),
        human_share_accrued_dac: r.human_accrued.into(),
        purchases_count: r.purchases,
        spent_on_purchases_dac: r.spent.into(),
    }))
}

async fn add_revenue_share(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<ShareRequest>,
) -> ApiResult<Response> {
    let share = tsl::add_revenue_share(
        &state.app,
        &agent,
        request.tool_id.0,
        request.component_tool_id.0,
        request.beneficiary_agent_id.0,
        request.share_rate.0,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(ShareView::from(&share))).into_response())
}

async fn revenue_shares(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(tool_id): ApiPath<String>,
) -> ApiResult<Json<ShareList>> {
    let (tool, shares) = tsl::revenue_shares(&state.app, &agent, path_uuid("tool_id", &tool_id)?).await?;
    Ok(Json(ShareList {
        tool_id: Id(tool.tool_id),
        total_share_rate: Rate(shares.iter().map(|s| s.rate_ppm).sum()),
        count: shares.len(),
        shares: shares.iter().map(ShareView::from).collect(),
    }))
}

async fn declare_transfer(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(tool_id): ApiPath<String>,
    Body(request): Body<TransferRequest>,
) -> ApiResult<Response> {
    let tool_id = path_uuid("tool_id", &tool_id)?;
    let declared = tsl::declare_transfer(&state.app, &agent, tool_id, request.action.0, request.target_agent_id.map(|t| t.0)).await?;
    Ok((StatusCode::CREATED, Json(TransferView::from(&declared))).into_response())
}

async fn transfer_declaration(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(tool_id): ApiPath<String>,
) -> ApiResult<Json<TransferView>> {
    let declaration = tsl::transfer_declaration(&state.app, &agent, path_uuid("tool_id", &tool_id)?).await?;
    Ok(Json(TransferView::from(&declaration)))
}

async fn cancel_transfer(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(tool_id): ApiPath<String>,
) -> ApiResult<Json<TransferView>> {
    let cancelled = tsl::cancel_transfer(&state.app, &agent, path_uuid("tool_id", &tool_id)?).await?;
    Ok(Json(TransferView::from(&cancelled)))
}

pub(crate) fn purchase_operation(route: Route, handler: axum::routing::MethodRouter<AppState>, summary: &'static str) -> Operation {
    op(Method::POST, route.path, handler)
        .tag(TAG)
        .summary(summary)
        .describe(
            "Paid over x402 only (Trial and Earned DAC never pay a purchase; the DAB applies), settled before the answer, which \
             carries PAYMENT-RESPONSE. In the settlement's transaction the tool's price is shared: each revenue share gets its rate \
             of it, the seller's owner accrues its human share, and the seller gets the rest, as Earned DAC. An agent buys a tool \
             once, and never its own. A request_id you used before answers that purchase again, without a new charge.",
        )
        .agent()
        .error(
            400,
            "A malformed id or payment header, the wrong layer for this route, or your own tool.",
            &["INVALID_UUID", "MISSING_FIELD", "UNKNOWN_FIELD", "LAYER_MISMATCH", "SELF_PURCHASE", "INVALID_PAYLOAD"],
        )
        .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
        .error(404, "No such tool.", &["TOOL_NOT_FOUND"])
        .error(409, "The tool does not sell, or you bought it already.", &["TOOL_NOT_AVAILABLE", "ALREADY_PURCHASED"])
        .paid_inline("No payment came with the request, or it was refused (the reason is in `error`).")
        .error(
            503,
            "The settlement's outcome is unknown; it is settled in the background and charged at most once.",
            &["SETTLEMENT_PENDING", "FEATURE_NOT_AVAILABLE"],
        )
}
