//! The tool market (TSL): registering tools, their dependencies and revenue
//! shares, purchases paid over x402 and shared in Earned DAC, owners' human
//! shares, and transfer declarations carried out by a job on the lease.
//!
//! The service lists tools; it does not rate them: lists are ordered by
//! registration, newest first, and show no sales counts.

use async_trait::async_trait;
use chrono::Duration;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::owners::OwnerType;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::records::{
    AgentRecord, ComponentRecord, Connection, DependencyRecord, EarnedBalance, HumanShareRecord, OwnerRecord, PurchaseRecord, Revenue,
    ShareRecord, ToolRecord, ToolSales, TransferRecord,
};
use anchor_domain::tsl::{
    self, CONNECTIONS_MAX, DESCRIPTION_MAX_CHARS, HUMAN_SHARE_MAX_PPM, Layer, NAME_MAX_CHARS, ObservationType, PPM_ONE, PurchaseStatus,
    TRANSFER_DELAY_DAYS, ToolStatus, TransferAction, TransferStatus,
};
use anchor_ports::{DependencyAdded, HumanShareSet, NewPurchase, NewShare, NewTool, Pending, PurchaseRole, ShareAdded, ToolFilter};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const PURCHASE: Route = Route { method: "POST", path: "/v1/tsl/purchase" };
pub const PURCHASE_LAYER2: Route = Route { method: "POST", path: "/v1/tsl/purchase/layer2" };

/// The most tools or purchases a page holds.
pub const PAGE_MAX: i64 = 100;
/// The most active tools one agent may sell.
pub const TOOLS_PER_AGENT: i64 = 100;
/// The most dependencies one tool declares.
pub const DEPENDENCIES_PER_TOOL: i64 = 50;
/// The most revenue shares one tool agrees (each sale writes one
/// distribution per share, in the settlement's transaction).
pub const SHARES_PER_TOOL: i64 = 20;
/// The most times a tool's human share is set in a UTC day (each setting
/// stays in the owner's listing).
pub const HUMAN_SHARE_SETTINGS_PER_DAY: i64 = 10;

fn tool_not_found(tool_id: Uuid) -> AppError {
    AppError::not_found("TOOL_NOT_FOUND", format!("no tool {tool_id} is registered"))
}

fn not_owner(tool_id: Uuid) -> AppError {
    AppError::forbidden("NOT_TOOL_OWNER", format!("only the seller of tool {tool_id} may do this"))
}

fn conflict(code: &'static str, message: impl Into<String>) -> AppError {
    AppError::Conflict { code, message: message.into() }
}

/// A tool, or 404 `TOOL_NOT_FOUND`.
pub async fn tool(services: &Services, tool_id: Uuid) -> AppResult<ToolRecord> {
    services.store.tool(tool_id).await?.ok_or_else(|| tool_not_found(tool_id))
}

/// A tool the agent sells, or 404 / 403 `NOT_TOOL_OWNER`.
async fn own_tool(services: &Services, agent: &AgentRecord, tool_id: Uuid) -> AppResult<ToolRecord> {
    let tool = tool(services, tool_id).await?;
    if tool.seller_agent_id != agent.agent_id {
        return Err(not_owner(tool_id));
    }
    Ok(tool)
}

/// An agent that exists, or 404 `AGENT_NOT_FOUND`.
async fn existing_agent(services: &Services, field: &str, agent_id: Uuid) -> AppResult<AgentRecord> {
    services.store.agent(agent_id).await?.ok_or_else(|| AppError::not_found("AGENT_NOT_FOUND", format!("{field}: no agent {agent_id}")))
}

/// What an agent registers.
#[derive(Clone, Debug)]
pub struct Registration {
    pub name: String,
    pub description: Option<String>,
    pub layer: Option<Layer>,
    pub price: MilliDac,
    /// Each observation the tool reads, with its level (1 when not given).
    pub connections: Option<Vec<(ObservationType, Option<u8>)>>,
}

/// POST /v1/tsl/tool/register (free).
pub async fn register(services: &Services, agent: &AgentRecord, registration: Registration) -> AppResult<ToolRecord> {
    tsl::check_text("tool_name", &registration.name, NAME_MAX_CHARS, true)?;
    if let Some(description) = &registration.description {
        tsl::check_text("tool_description", description, DESCRIPTION_MAX_CHARS, false)?;
    }
    tsl::check_price(registration.price)?;
    let asked = registration.connections.unwrap_or_default();
    if asked.is_empty() {
        return Err(AppError::invalid(
            "ARA_CONNECTION_REQUIRED",
            "ara_connections must name at least one ARA observation the tool reads ({observation_type, resolution_level})",
        ));
    }
    if asked.len() > CONNECTIONS_MAX {
        return Err(AppError::invalid(
            "INVALID_INPUT",
            format!("ara_connections holds at most {CONNECTIONS_MAX} entries; got {}", asked.len()),
        ));
    }
    let mut connections: Vec<Connection> = Vec::with_capacity(asked.len());
    for (index, (observation_type, level)) in asked.into_iter().enumerate() {
        let level = level.unwrap_or(1);
        if connections.iter().any(|c| c.observation_type == observation_type && c.resolution_level == level) {
            return Err(AppError::invalid(
                "INVALID_ARA_CONNECTION",
                format!("ara_connections[{index}]: {observation_type} at level {level} is declared twice"),
            ));
        }
        if level == 0 || level > observation_type.max_level() {
            return Err(AppError::invalid(
                "INVALID_ARA_CONNECTION",
                format!(
                    "ara_connections[{index}]: {observation_type} is offered at resolution levels 1 to {}; got {level}",
                    observation_type.max_level()
                ),
            ));
        }
        connections.push(Connection { observation_type, resolution_level: level });
    }
    let tool = NewTool {
        tool_id: Uuid::new_v4(),
        seller_agent_id: agent.agent_id,
        name: registration.name,
        description: registration.description.filter(|d| !d.is_empty()),
        layer: registration.layer.unwrap_or(Layer::Layer1),
        price: registration.price,
        connections,
        registered_at: services.clock.now(),
    };
    if !services.store.register_tool(&tool, TOOLS_PER_AGENT).await? {
        return Err(conflict(
            "TOOL_LIMIT_REACHED",
            format!("an agent sells at most {TOOLS_PER_AGENT} active tools; retire one first (transfer-declaration, action retire)"),
        ));
    }
    tool_after_write(services, tool.tool_id).await
}

async fn tool_after_write(services: &Services, tool_id: Uuid) -> AppResult<ToolRecord> {
    services.store.tool(tool_id).await?.ok_or_else(|| AppError::Internal(anyhow::anyhow!("tool {tool_id} vanished after its write")))
}

/// A page of something, and how many there are in all.
pub use crate::paging::Page;

/// GET /v1/tsl/tools (public): newest first, `page` from 1.
pub async fn list(
    services: &Services,
    layer: Option<Layer>,
    status: Option<ToolStatus>,
    limit: Option<i64>,
    page: Option<i64>,
) -> AppResult<Page<ToolRecord>> {
    let crate::paging::Window { limit, offset } = crate::paging::by_page(crate::paging::MARKET, limit, page)?;
    let (items, total) = services.store.tools(ToolFilter { layer, status, seller: None, limit, offset }).await?;
    Ok(Page { items, total, limit, offset })
}

/// GET /v1/tsl/tool/{tool_id}/dependencies (public).
pub async fn dependencies(services: &Services, tool_id: Uuid) -> AppResult<(ToolRecord, Vec<DependencyRecord>)> {
    let tool = tool(services, tool_id).await?;
    let dependencies = services.store.dependencies(tool_id).await?;
    Ok((tool, dependencies))
}

/// POST /v1/tsl/tool/{tool_id}/dependency: the seller declares that its
/// tool builds on another; `purchase_id`, when given, must be the seller's
/// own completed purchase of that tool. No cycles.
pub async fn add_dependency(
    services: &Services,
    agent: &AgentRecord,
    tool_id: Uuid,
    depends_on: Uuid,
    purchase_id: Option<Uuid>,
) -> AppResult<DependencyRecord> {
    own_tool(services, agent, tool_id).await?;
    if depends_on == tool_id {
        return Err(AppError::invalid("INVALID_DEPENDENCY", "a tool cannot depend on itself"));
    }
    tool(services, depends_on).await?;
    if let Some(purchase_id) = purchase_id {
        let purchase = services.store.purchase(purchase_id).await?;
        let valid = purchase
            .is_some_and(|p| p.buyer_agent_id == agent.agent_id && p.tool_id == depends_on && p.status == PurchaseStatus::Completed);
        if !valid {
            return Err(AppError::invalid(
                "INVALID_PURCHASE",
                format!("purchase_id {purchase_id} is not your completed purchase of tool {depends_on}"),
            ));
        }
    }
    match services.store.add_dependency(tool_id, depends_on, purchase_id, DEPENDENCIES_PER_TOOL, services.clock.now()).await? {
        DependencyAdded::Added => {}
        DependencyAdded::TooMany => {
            return Err(conflict(
                "DEPENDENCY_LIMIT_REACHED",
                format!("tool {tool_id} declares {DEPENDENCIES_PER_TOOL} dependencies already, the most a tool may"),
            ));
        }
        DependencyAdded::Exists => return Err(conflict("DEPENDENCY_EXISTS", format!("tool {tool_id} already depends on {depends_on}"))),
        DependencyAdded::Cycle => {
            return Err(AppError::invalid(
                "DEPENDENCY_CYCLE",
                format!("tool {depends_on} already depends, directly or through others, on {tool_id}: dependencies may not form a cycle"),
            ));
        }
    }
    let dependencies = services.store.dependencies(tool_id).await?;
    dependencies
        .into_iter()
        .find(|d| d.depends_on_tool_id == depends_on)
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("dependency {tool_id} -> {depends_on} vanished after its write")))
}

/// What a purchase answered: the purchase, and how it was paid.
#[derive(Clone, Debug)]
pub struct Purchased {
    pub purchase: PurchaseRecord,
    /// The settlement reference and payer; `None` for a replay of an earlier purchase.
    pub settlement: Option<crate::charge::Settlement>,
    pub replayed: bool,
}

/// Reads the purchase back once its payment settled (its distribution was
/// written in the settlement's transaction).
struct ReadPurchase<'a> {
    services: &'a Services,
    purchase_id: Uuid,
}

#[async_trait]
impl Commit for ReadPurchase<'_> {
    type Output = (PurchaseRecord, crate::charge::Settlement);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let Funding::Settled { settlement, .. } = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("a tool purchase is paid over x402 and settled inline only")));
        };
        let purchase = self
            .services
            .store
            .purchase(self.purchase_id)
            .await?
            .ok_or_else(|| AppError::Internal(anyhow::anyhow!("purchase {} vanished after its settlement", self.purchase_id)))?;
        Ok(Committed::Done((purchase, settlement)))
    }
}

/// An earlier purchase under the same request id, answered again (no new
/// charge), or the reason it cannot be.
fn replay(earlier: PurchaseRecord, tool_id: Uuid) -> AppResult<Purchased> {
    if earlier.tool_id != tool_id {
        return Err(AppError::invalid(
            "REQUEST_ID_USED",
            format!("this request_id was used for purchase {} of another tool; send a new request_id", earlier.purchase_id),
        ));
    }
    match earlier.status {
        PurchaseStatus::Completed => Ok(Purchased { purchase: earlier, settlement: None, replayed: true }),
        PurchaseStatus::Pending => Err(conflict(
            "PURCHASE_PENDING",
            format!("purchase {} with this request_id is still settling; ask again shortly", earlier.purchase_id),
        )),
        PurchaseStatus::Failed => Err(AppError::invalid(
            "REQUEST_ID_USED",
            format!("purchase {} with this request_id failed at settlement; send a new request_id to try again", earlier.purchase_id),
        )),
    }
}

/// POST /v1/tsl/purchase and /v1/tsl/purchase/layer2: the service fee plus
/// the tool's price, over x402 only (never Trial or Earned; the DAB
/// applies), settled before the answer. The price is shared in Earned DAC in
/// the settlement's transaction.
pub async fn purchase(
    services: &Services,
    buyer: &AgentRecord,
    route: Route,
    tool_id: Uuid,
    request_id: Option<Uuid>,
    offered: Offered,
) -> AppResult<Purchased> {
    let tool = tool(services, tool_id).await?;
    let layer = if route == PURCHASE_LAYER2 { Layer::Layer2 } else { Layer::Layer1 };
    if tool.layer != layer {
        let other = if layer == Layer::Layer1 { PURCHASE_LAYER2.path } else { PURCHASE.path };
        return Err(AppError::invalid("LAYER_MISMATCH", format!("tool {tool_id} is a {} tool: buy it at {other}", tool.layer)));
    }
    if tool.seller_agent_id == buyer.agent_id {
        return Err(AppError::invalid("SELF_PURCHASE", "an agent cannot buy its own tool"));
    }
    if let Some(request_id) = request_id
        && let Some(earlier) = services.store.purchase_by_request(buyer.agent_id, request_id).await?
    {
        return replay(earlier, tool_id);
    }
    if tool.status != ToolStatus::Active {
        return Err(conflict("TOOL_NOT_AVAILABLE", format!("tool {tool_id} is {} and does not sell", tool.status)));
    }
    if let Some(live) = services.store.live_purchase(buyer.agent_id, tool_id).await? {
        return Err(conflict("ALREADY_PURCHASED", format!("you bought tool {tool_id} already (purchase {})", live.purchase_id)));
    }
    let prices = services.pricing.services()?.ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price tool purchases".into(),
    })?;
    let terms = crate::earned::terms(services)?;
    let fee = prices.tsl_base_fee;
    let total = fee + tool.price;
    let purchase_id = Uuid::new_v4();
    let pending = NewPurchase {
        purchase_id,
        tool_id,
        buyer_agent_id: buyer.agent_id,
        seller_agent_id: tool.seller_agent_id,
        request_id,
        layer,
        price: tool.price,
        fee,
        earned_expiry_days: terms.expiry_days,
    };
    let order = Order {
        agent_id: buyer.agent_id,
        route,
        path: None,
        total,
        description: format!("Tool {} ({} DAC + {fee} DAC service fee)", tool.name, tool.price),
        trial: TrialUse::None,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::TslPurchase, id: purchase_id }),
        pending: Some(Pending::Purchase(pending)),
    };
    match charge::charge(services, order, &ReadPurchase { services, purchase_id }).await {
        Ok((purchase, settlement)) => Ok(Purchased { purchase, settlement: Some(settlement), replayed: false }),
        // A concurrent twin won the race: answer with its result.
        Err(AppError::Conflict { code: "DUPLICATE_REQUEST", .. }) => {
            if let Some(request_id) = request_id
                && let Some(earlier) = services.store.purchase_by_request(buyer.agent_id, request_id).await?
            {
                return replay(earlier, tool_id);
            }
            Err(conflict("ALREADY_PURCHASED", format!("you bought tool {tool_id} already; nothing was charged")))
        }
        Err(other) => Err(other),
    }
}

/// GET /v1/tsl/purchases: `role` buyer, seller or all (default).
pub async fn purchases(
    services: &Services,
    agent: &AgentRecord,
    role: Option<&str>,
    limit: Option<i64>,
    offset: Option<i64>,
) -> AppResult<Page<PurchaseRecord>> {
    let role = match role {
        None | Some("all") => PurchaseRole::Any,
        Some("buyer") => PurchaseRole::Buyer,
        Some("seller") => PurchaseRole::Seller,
        Some(other) => {
            return Err(AppError::invalid(
                "INVALID_ENUM",
                format!("role must be buyer, seller or all; got {}", anchor_domain::brief(other)),
            ));
        }
    };
    let crate::paging::Window { limit, offset } = crate::paging::by_offset(crate::paging::MARKET, limit, offset)?;
    let (items, total) = services.store.purchases(agent.agent_id, role, limit, offset).await?;
    Ok(Page { items, total, limit, offset })
}

/// GET /v1/tsl/revenue.
pub async fn revenue(services: &Services, agent: &AgentRecord) -> AppResult<Revenue> {
    Ok(services.store.revenue(agent.agent_id).await?)
}

/// POST /v1/tsl/revenue-share: the seller of `tool_id` gives a share of its
/// price to the beneficiary of a component it depends on. The tool's shares
/// and its human share together stay at most one.
pub async fn add_revenue_share(
    services: &Services,
    agent: &AgentRecord,
    tool_id: Uuid,
    component_tool_id: Uuid,
    beneficiary: Uuid,
    rate_ppm: u32,
) -> AppResult<ShareRecord> {
    own_tool(services, agent, tool_id).await?;
    tool(services, component_tool_id).await?;
    if !services.store.dependencies(tool_id).await?.iter().any(|d| d.depends_on_tool_id == component_tool_id) {
        return Err(AppError::invalid(
            "NOT_A_DEPENDENCY",
            format!("tool {component_tool_id} is not a registered dependency of {tool_id} (POST /v1/tsl/tool/{tool_id}/dependency first)"),
        ));
    }
    if beneficiary == agent.agent_id {
        return Err(AppError::invalid("INVALID_INPUT", "the beneficiary is the seller itself, which keeps what no share takes anyway"));
    }
    existing_agent(services, "beneficiary_agent_id", beneficiary).await?;
    if rate_ppm > PPM_ONE {
        return Err(AppError::invalid("INVALID_VALUE", "share_rate must be between 0 and 1"));
    }
    let share = NewShare {
        share_id: Uuid::new_v4(),
        tool_id,
        component_tool_id,
        beneficiary_agent_id: beneficiary,
        rate_ppm,
        created_by: agent.agent_id,
        created_at: services.clock.now(),
    };
    match services.store.add_revenue_share(&share, SHARES_PER_TOOL).await? {
        ShareAdded::Added => {}
        ShareAdded::TooMany => {
            return Err(conflict(
                "REVENUE_SHARE_LIMIT_REACHED",
                format!("tool {tool_id} has {SHARES_PER_TOOL} revenue shares already, the most a tool may"),
            ));
        }
        ShareAdded::Exists => {
            return Err(conflict(
                "REVENUE_SHARE_EXISTS",
                "this tool already shares with this beneficiary for this component; shares are not changed once agreed",
            ));
        }
        ShareAdded::Exceeded { committed_ppm } => return Err(exceeded(committed_ppm, rate_ppm)),
    }
    Ok(ShareRecord {
        share_id: share.share_id,
        tool_id,
        component_tool_id,
        beneficiary_agent_id: beneficiary,
        rate_ppm,
        created_at: share.created_at,
    })
}

fn exceeded(committed_ppm: u32, asked_ppm: u32) -> AppError {
    AppError::invalid(
        "SHARE_RATE_EXCEEDED",
        format!(
            "the tool's revenue shares and human share already take {} of its price, and {} more would pass 1",
            ppm_text(committed_ppm),
            ppm_text(asked_ppm)
        ),
    )
}

/// A rate in parts per million as a decimal (`250000` is `0.25`).
pub fn ppm_text(ppm: u32) -> String {
    let text = format!("{}.{:06}", ppm / PPM_ONE, ppm % PPM_ONE);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// GET /v1/tsl/tool/{tool_id}/revenue-shares: for the seller and the beneficiaries only.
pub async fn revenue_shares(services: &Services, agent: &AgentRecord, tool_id: Uuid) -> AppResult<(ToolRecord, Vec<ShareRecord>)> {
    let tool = tool(services, tool_id).await?;
    let shares = services.store.revenue_shares(tool_id).await?;
    if tool.seller_agent_id != agent.agent_id && !shares.iter().any(|s| s.beneficiary_agent_id == agent.agent_id) {
        return Err(AppError::forbidden(
            "NOT_TOOL_OWNER",
            "only the tool's seller and its revenue-share beneficiaries may list its shares",
        ));
    }
    Ok((tool, shares))
}

/// POST /v1/tsl/tool/{tool_id}/transfer-declaration: `transfer` (to
/// `target`) or `retire`, taking effect seven days later unless cancelled.
pub async fn declare_transfer(
    services: &Services,
    agent: &AgentRecord,
    tool_id: Uuid,
    action: TransferAction,
    target: Option<Uuid>,
) -> AppResult<TransferRecord> {
    let tool = own_tool(services, agent, tool_id).await?;
    match (action, target) {
        (TransferAction::Transfer, None) => {
            return Err(AppError::invalid("MISSING_FIELD", "target_agent_id is required to transfer a tool"));
        }
        (TransferAction::Transfer, Some(target)) if target == agent.agent_id => {
            return Err(AppError::invalid("INVALID_INPUT", "target_agent_id is the seller itself"));
        }
        (TransferAction::Transfer, Some(target)) => {
            existing_agent(services, "target_agent_id", target).await?;
        }
        (TransferAction::Retire, Some(_)) => {
            return Err(AppError::invalid("INVALID_INPUT", "a retirement names no target_agent_id"));
        }
        (TransferAction::Retire, None) => {}
    }
    if tool.status == ToolStatus::Defunct {
        return Err(conflict("TOOL_NOT_AVAILABLE", format!("tool {tool_id} is defunct")));
    }
    if let Some(target) = target {
        let filter = ToolFilter { layer: None, status: Some(ToolStatus::Active), seller: Some(target), limit: 1, offset: 0 };
        if services.store.tools(filter).await?.1 >= TOOLS_PER_AGENT {
            return Err(target_full(target));
        }
    }
    let now = services.clock.now();
    let declaration = TransferRecord {
        transfer_id: Uuid::new_v4(),
        tool_id,
        declared_by: agent.agent_id,
        action,
        target_agent_id: target,
        status: TransferStatus::Pending,
        declared_at: now,
        effective_at: now + Duration::days(TRANSFER_DELAY_DAYS),
        ended_at: None,
    };
    services
        .store
        .declare_transfer(&declaration)
        .await?
        .ok_or_else(|| conflict("TRANSFER_PENDING", format!("tool {tool_id} has a pending transfer declaration; cancel it first (DELETE)")))
}

/// 409 for a transfer to an agent that sells its most active tools already.
fn target_full(target: Uuid) -> AppError {
    conflict(
        "TOOL_LIMIT_REACHED",
        format!("agent {target} sells {TOOLS_PER_AGENT} active tools already, the most an agent may; it must retire one first"),
    )
}

fn no_declaration(tool_id: Uuid) -> AppError {
    AppError::not_found("NO_TRANSFER_DECLARATION", format!("tool {tool_id} has no transfer declaration"))
}

/// GET /v1/tsl/tool/{tool_id}/transfer-declaration: the latest one (the
/// pending one if there is one), for the seller or its declarer.
pub async fn transfer_declaration(services: &Services, agent: &AgentRecord, tool_id: Uuid) -> AppResult<TransferRecord> {
    let tool = tool(services, tool_id).await?;
    let latest = services.store.latest_transfer(tool_id).await?;
    let declarer = latest.is_some_and(|t| t.declared_by == agent.agent_id);
    if tool.seller_agent_id != agent.agent_id && !declarer {
        return Err(not_owner(tool_id));
    }
    latest.ok_or_else(|| no_declaration(tool_id))
}

/// DELETE /v1/tsl/tool/{tool_id}/transfer-declaration: cancels the pending one.
pub async fn cancel_transfer(services: &Services, agent: &AgentRecord, tool_id: Uuid) -> AppResult<TransferRecord> {
    own_tool(services, agent, tool_id).await?;
    services.store.cancel_transfer(tool_id, services.clock.now()).await?.ok_or_else(|| no_declaration(tool_id))
}

/// The job: carries out the declarations whose seven days are over.
pub async fn execute_due_transfers(services: &Services) -> anyhow::Result<u64> {
    Ok(services.store.execute_due_transfers(services.clock.now(), 100, TOOLS_PER_AGENT).await?)
}

/// POST /dap/tsl/human-share: a human owner takes `rate_ppm` (at most one
/// half) of the price of each sale of a tool its agent sells, as an accrual
/// (owners hold no Earned DAC). It supersedes the owner's earlier agreement
/// for that tool and ends when the tool moves or the agent leaves the owner.
pub async fn set_human_share(services: &Services, owner: &OwnerRecord, tool_id: Uuid, rate_ppm: u32) -> AppResult<HumanShareRecord> {
    if owner.owner_type != OwnerType::Human {
        return Err(AppError::forbidden(
            "HUMAN_OWNER_REQUIRED",
            "human shares are for human owners; an agent-type owner earns nothing here",
        ));
    }
    if rate_ppm > HUMAN_SHARE_MAX_PPM {
        return Err(AppError::invalid("INVALID_VALUE", "human_share_rate must be between 0 and 0.5"));
    }
    let tool = tool(services, tool_id).await?;
    crate::owners::managed(services, owner, tool.seller_agent_id).await?;
    let now = services.clock.now();
    let day_start = anchor_domain::ara::day_start_of(now);
    let set = services
        .store
        .set_human_share(owner.owner_id, tool.seller_agent_id, tool_id, rate_ppm, day_start, HUMAN_SHARE_SETTINGS_PER_DAY, now)
        .await?;
    let id = match set {
        HumanShareSet::Set { human_share_id } => human_share_id,
        HumanShareSet::TooOften => {
            return Err(AppError::until_the_day_turns(
                format!(
                    "an owner sets a tool's human share at most {HUMAN_SHARE_SETTINGS_PER_DAY} times a UTC day (each setting is kept); try again after the day turns"
                ),
                now,
            ));
        }
        HumanShareSet::Exceeded { committed_ppm } => return Err(exceeded(committed_ppm, rate_ppm)),
        HumanShareSet::NotLinked => {
            return Err(AppError::forbidden("NOT_LINKED", format!("agent {} is not managed by this owner", tool.seller_agent_id)));
        }
    };
    services
        .store
        .human_shares(owner.owner_id)
        .await?
        .into_iter()
        .find(|h| h.human_share_id == id)
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("human share {id} vanished after its write")))
}

/// GET /dap/tsl/human-shares: the owner's agreements, newest first, with what each accrued.
pub async fn human_shares(services: &Services, owner: &OwnerRecord) -> AppResult<Vec<HumanShareRecord>> {
    Ok(services.store.human_shares(owner.owner_id).await?)
}

/// One of an agent's tools, as its owner sees it.
#[derive(Clone, Debug)]
pub struct OwnedTool {
    pub tool: ToolRecord,
    pub sales: ToolSales,
    /// The component buyers run, if one was uploaded.
    pub component: Option<ComponentRecord>,
}

/// What the market means for one managed agent: its Earned DAC, its tools
/// and their sales, its latest sales.
#[derive(Clone, Debug)]
pub struct AgentMarket {
    pub agent_id: Uuid,
    pub earned: EarnedBalance,
    pub terms: crate::earned::Terms,
    pub tools: Vec<OwnedTool>,
    pub recent_sales: Vec<PurchaseRecord>,
}

/// GET /dap/agent/{agent_id}/market (the portal's view): free, for a managed agent only.
pub async fn owner_market(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<AgentMarket> {
    crate::owners::managed(services, owner, agent_id).await?;
    let store = &services.store;
    let terms = crate::earned::terms(services)?;
    let earned = store.earned_balance(agent_id, services.clock.now()).await?;
    let (tools, _) = store.tools(ToolFilter { seller: Some(agent_id), limit: PAGE_MAX, ..Default::default() }).await?;
    let sales = store.tool_sales(agent_id).await?;
    let mut owned = Vec::with_capacity(tools.len());
    for tool in tools {
        let sold =
            sales.iter().find(|s| s.tool_id == tool.tool_id).copied().unwrap_or(ToolSales { tool_id: tool.tool_id, ..Default::default() });
        let component = store.current_component(tool.tool_id).await?;
        owned.push(OwnedTool { tool, sales: sold, component });
    }
    let (recent_sales, _) = store.purchases(agent_id, PurchaseRole::Seller, 10, 0).await?;
    Ok(AgentMarket { agent_id, earned, terms, tools: owned, recent_sales })
}
