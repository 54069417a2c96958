//! ARA: the aggregate model statistics are read from, the releases cut from
//! it, and the log of observations made.
//!
//! Confirmed declarations are folded into `ara_agent_day` (per agent, UTC day,
//! dimension and value) and `ara_agent_total` (the same, all time) once, in
//! the verifiable log's order: the fold's watermark is a leaf index, and the
//! integrator gives every confirmed declaration a dense one. Cross-agent
//! statistics read only counts of visibility 0; they never name a record or an
//! agent.

use anchor_domain::MilliDac;
use anchor_domain::ara::{Dimension, Visibility, Window};
use anchor_domain::payments::PaymentSource;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::SampleRow;

/// One observation made, with what it cost.
#[derive(Clone, Debug)]
pub struct NewObservation {
    pub observation_id: Uuid,
    pub observer_agent_id: Uuid,
    /// The agent observed, for agent-level observations.
    pub target_agent_id: Option<Uuid>,
    /// The observation tier (`environment`, `pattern`, …).
    pub kind: &'static str,
    pub resolution_level: i32,
    pub base: MilliDac,
    pub premium: MilliDac,
    pub premium_source: Option<PaymentSource>,
    pub payment_id: Option<Uuid>,
    pub observed_at: DateTime<Utc>,
    pub priced_by: PricedBy,
}

/// A confirmed declaration waiting to be folded, with its leaf index.
#[derive(Clone, Debug)]
pub struct Unfolded {
    pub leaf_index: i64,
    pub declaration: StoredDeclaration,
}

/// A count to add to the aggregate model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DayCount {
    pub agent_id: Uuid,
    pub day: i32,
    pub dimension: Dimension,
    pub value: String,
    pub visibility: Visibility,
    pub n: i64,
}

/// What a branch-1 declaration's band positions added when it was folded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BandCount {
    pub dd_id: Uuid,
    pub dimension: Dimension,
    pub value: String,
    pub visibility: Visibility,
}

/// One of an agent's counts: all time, or on one day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCount {
    pub dimension: Dimension,
    pub value: String,
    pub n: i64,
    /// The first and last day it was counted (all-time counts), or the day.
    pub first_day: i32,
    pub last_day: i32,
}

/// A window's totals over every agent (shared counts only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowTotals {
    /// Distinct agents with at least one declaration.
    pub agents: i64,
    /// Declarations, each agent counted for at most the cap.
    pub capped_declarations: i64,
}

/// What storing a release within the ε budget concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SavedRelease {
    /// The stored release (this one, or the one stored first).
    Stored(String),
    /// A day of its window would pass the budget: nothing was stored.
    OverBudget { spent_micro: i64 },
}

#[async_trait]
pub trait AraStore: Send + Sync {
    async fn record_observation(&self, observation: &NewObservation) -> Result<()>;

    /// The next confirmed declarations to fold (in leaf order, at most `limit`).
    async fn unfolded(&self, limit: i64) -> Result<Vec<Unfolded>>;
    /// Adds `counts`, keeps `bands` (to be taken back at de-identification) and
    /// moves the watermark from `from_leaf` to `to_leaf`, in one transaction;
    /// false (and nothing written) if another host folded them first.
    async fn fold(&self, from_leaf: i64, to_leaf: i64, counts: &[DayCount], bands: &[BandCount]) -> Result<bool>;
    /// The next leaf index to fold, and the log's size: equal when caught up.
    async fn fold_progress(&self) -> Result<(i64, i64)>;

    /// The agent's branch-1 (template-carrying) confirmed declarations anchored
    /// in `[from, to)`, newest first, at most `limit`, leaving `except` out.
    async fn branch_one_sample(
        &self,
        agent_id: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        except: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<SampleRow>>;

    /// Per value of `dimension` in `window`: how many agents have it as the
    /// value they declared most (ties: the smallest value), shared counts only.
    async fn predominant(&self, dimension: Dimension, window: Window) -> Result<Vec<(String, i64)>>;
    /// Distinct agents and capped declarations in `window`.
    async fn window_totals(&self, window: Window, cap: i64) -> Result<WindowTotals>;
    /// How many agents declared how much in `window`: (declarations of one
    /// agent, agents), shared counts only.
    async fn activity(&self, window: Window) -> Result<Vec<(i64, i64)>>;

    /// A stored release, if this kind of release was cut for `window`.
    async fn release(&self, kind: &str, window: Window) -> Result<Option<String>>;
    /// Stores a release unless one exists; returns the stored one (the first wins).
    async fn save_release(&self, kind: &str, window: Window, body: &str, at: DateTime<Utc>) -> Result<String>;
    /// Stores a release that spent `epsilon_micro` (millionths of ε), in one
    /// transaction with the ledger: unless a release of the window is stored
    /// already (then that one), only if no day of its window would pass
    /// `budget_micro` of ε spent by the releases of `kind`; each day of the
    /// window is charged.
    async fn save_release_within_budget(
        &self,
        kind: &str,
        window: Window,
        body: &str,
        epsilon_micro: i64,
        budget_micro: i64,
        at: DateTime<Utc>,
    ) -> Result<SavedRelease>;
    /// The most ε (millionths) the releases of `kind` spent on any day of `window`.
    async fn epsilon_spent(&self, kind: &str, window: Window) -> Result<i64>;

    /// The agent's all-time counts; `own` includes what only it may see.
    async fn agent_totals(&self, agent_id: Uuid, own: bool) -> Result<Vec<AgentCount>>;
    /// The agent's daily counts of `dimensions` in `[from_day, to_day)`.
    async fn agent_days(&self, agent_id: Uuid, from_day: i32, to_day: i32, dimensions: &[Dimension], own: bool) -> Result<Vec<AgentCount>>;
}
