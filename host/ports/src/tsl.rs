//! The tool market: tools, dependencies, purchases and how each sale's price
//! was shared, revenue shares, owners' human shares, transfer declarations.
//!
//! A purchase is written `pending` in the transaction that reserves its
//! payment ([`insert_pending`], called by `reserve_payment`), and completed in
//! the transaction that records the settlement ([`complete`], called by
//! `settle_payment`): there the price becomes Earned DAC lots of the revenue
//! shares' beneficiaries and of the seller, and the owner's human share is
//! accrued, so a settled payment and its distribution are never apart.
//! Rates are checked against each other under the tool row's lock.

use anchor_domain::MilliDac;
use anchor_domain::tsl::{Layer, ToolStatus};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{
    Connection, DependencyRecord, Distribution, HumanShareRecord, PurchaseRecord, Revenue, ShareRecord, ToolRecord, ToolSales,
    TransferRecord,
};

/// A tool to register.
#[derive(Clone, Debug)]
pub struct NewTool {
    pub tool_id: Uuid,
    pub seller_agent_id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub layer: Layer,
    pub price: MilliDac,
    pub connections: Vec<Connection>,
    pub registered_at: DateTime<Utc>,
}

/// Which tools to list: newest first.
#[derive(Clone, Copy, Debug, Default)]
pub struct ToolFilter {
    pub layer: Option<Layer>,
    pub status: Option<ToolStatus>,
    pub seller: Option<Uuid>,
    pub limit: i64,
    pub offset: i64,
}

/// What adding a dependency concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependencyAdded {
    Added,
    /// The tool already depends on it.
    Exists,
    /// The dependency already depends, directly or not, on the tool.
    Cycle,
    /// The tool has its most dependencies already.
    TooMany,
}

/// A record written in the same transaction as a payment's reservation.
#[derive(Clone, Debug)]
pub enum Pending {
    Purchase(NewPurchase),
    Asa(crate::asa::NewAsaPurchase),
}

/// A purchase to write with its payment's reservation.
#[derive(Clone, Debug)]
pub struct NewPurchase {
    pub purchase_id: Uuid,
    pub tool_id: Uuid,
    pub buyer_agent_id: Uuid,
    pub seller_agent_id: Uuid,
    pub request_id: Option<Uuid>,
    pub layer: Layer,
    /// The tool's price, which is shared in Earned DAC.
    pub price: MilliDac,
    /// The service's fee on top.
    pub fee: MilliDac,
    /// How long the Earned DAC it becomes lasts.
    pub earned_expiry_days: u32,
}

/// Whose purchases to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurchaseRole {
    Buyer,
    Seller,
    Any,
}

/// A revenue share to add.
#[derive(Clone, Copy, Debug)]
pub struct NewShare {
    pub share_id: Uuid,
    pub tool_id: Uuid,
    pub component_tool_id: Uuid,
    pub beneficiary_agent_id: Uuid,
    pub rate_ppm: u32,
    pub created_by: Uuid,
    pub created_at: DateTime<Utc>,
}

/// What adding a revenue share concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareAdded {
    Added,
    /// The same tool, component and beneficiary have a share already.
    Exists,
    /// With it, the rates of the tool's shares and its human share would pass one.
    Exceeded {
        committed_ppm: u32,
    },
    /// The tool has its most revenue shares already.
    TooMany,
}

/// What setting a human share concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HumanShareSet {
    Set {
        human_share_id: Uuid,
    },
    /// With it, the tool's rates would pass one.
    Exceeded {
        committed_ppm: u32,
    },
    /// The owner no longer manages the tool's seller (unlinked, or the tool
    /// moved, since it was checked).
    NotLinked,
    /// The tool's human share was set its most times since the day began.
    TooOften,
}

/// The market over a window, for its de-identified release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarketWindow {
    /// Active tools registered before the window's end, by layer (public anyway).
    pub tools_by_layer: Vec<(String, i64)>,
    /// Distinct buyers of the window, each counted once, in the layer it bought most.
    pub buyers_by_layer: Vec<(String, i64)>,
    /// Distinct buyers in the window.
    pub buyers: i64,
    /// Completed purchases in the window, each buyer counted at most `cap` times.
    pub capped_purchases: i64,
}

#[async_trait]
pub trait TslStore {
    /// Registers a tool unless its seller sells `max_active` active tools
    /// already (counted under the seller's lock); whether it was registered.
    async fn register_tool(&self, tool: &NewTool, max_active: i64) -> Result<bool>;
    async fn tool(&self, tool_id: Uuid) -> Result<Option<ToolRecord>>;
    /// A page of tools, newest first, and how many match in all.
    async fn tools(&self, filter: ToolFilter) -> Result<(Vec<ToolRecord>, i64)>;
    async fn dependencies(&self, tool_id: Uuid) -> Result<Vec<DependencyRecord>>;
    /// Adds a dependency of the tool, unless it exists, would close a
    /// cycle, or the tool has `max_dependencies` already.
    async fn add_dependency(
        &self,
        tool_id: Uuid,
        depends_on: Uuid,
        purchase_id: Option<Uuid>,
        max_dependencies: i64,
        now: DateTime<Utc>,
    ) -> Result<DependencyAdded>;
    async fn purchase(&self, purchase_id: Uuid) -> Result<Option<PurchaseRecord>>;
    /// The buyer's purchase made with `request_id`, in any state.
    async fn purchase_by_request(&self, buyer: Uuid, request_id: Uuid) -> Result<Option<PurchaseRecord>>;
    /// The buyer's pending or completed purchase of the tool.
    async fn live_purchase(&self, buyer: Uuid, tool_id: Uuid) -> Result<Option<PurchaseRecord>>;
    /// A page of the agent's purchases and sales, newest first, and how many in all.
    async fn purchases(&self, agent_id: Uuid, role: PurchaseRole, limit: i64, offset: i64) -> Result<(Vec<PurchaseRecord>, i64)>;
    async fn revenue(&self, agent_id: Uuid) -> Result<Revenue>;
    /// Per tool the agent sold as seller: completed sales and what they earned it.
    async fn tool_sales(&self, seller: Uuid) -> Result<Vec<ToolSales>>;
    /// The market between `from` and `to`, each buyer's purchases counted at most `cap` times.
    async fn market_window(&self, from: DateTime<Utc>, to: DateTime<Utc>, cap: i64) -> Result<MarketWindow>;
    /// Adds a revenue share of the tool, unless it has `max_shares` already
    /// (counted under the tool's lock).
    async fn add_revenue_share(&self, share: &NewShare, max_shares: i64) -> Result<ShareAdded>;
    async fn revenue_shares(&self, tool_id: Uuid) -> Result<Vec<ShareRecord>>;
    /// Sets the owner's human share of the tool (superseding any earlier
    /// one), unless the owner set it `per_day` times since `day_start`.
    #[allow(clippy::too_many_arguments)]
    async fn set_human_share(
        &self,
        owner_id: Uuid,
        agent_id: Uuid,
        tool_id: Uuid,
        rate_ppm: u32,
        day_start: DateTime<Utc>,
        per_day: i64,
        now: DateTime<Utc>,
    ) -> Result<HumanShareSet>;
    /// The owner's human shares, newest first, with what they accrued.
    async fn human_shares(&self, owner_id: Uuid) -> Result<Vec<HumanShareRecord>>;
    /// Declares a transfer; `None` when the tool has a pending one already.
    async fn declare_transfer(&self, transfer: &TransferRecord) -> Result<Option<TransferRecord>>;
    /// The tool's latest declaration, in any state.
    async fn latest_transfer(&self, tool_id: Uuid) -> Result<Option<TransferRecord>>;
    /// Cancels the tool's pending declaration, if it has one.
    async fn cancel_transfer(&self, tool_id: Uuid, now: DateTime<Utc>) -> Result<Option<TransferRecord>>;
    /// Carries out up to `limit` declarations due by `now`; a transfer to
    /// an agent that sells `max_active` active tools by then is cancelled
    /// instead (the tool stays with its seller). Returns how many were
    /// carried out.
    async fn execute_due_transfers(&self, now: DateTime<Utc>, limit: i64, max_active: i64) -> Result<u64>;
}
