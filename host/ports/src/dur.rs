//! DUR: what agents spent (usage entries, the observation log, settlements)
//! and what their own branch-1 decisions declared, over a time range.
//! Every query names its agents and a range: the cost follows one agent's
//! own records, not the store's size.

use anchor_domain::payments::SubjectDomain;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{EarnedFlow, ObservationSpend, SpendLine, TslLine, UsageLine};

/// A range of time and the agents whose records it covers.
#[derive(Clone, Debug)]
pub struct Span<'a> {
    pub agents: &'a [Uuid],
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

#[async_trait]
pub trait DurStore: Send + Sync {
    /// Usage entries recorded in the span, by kind and source.
    async fn spend(&self, span: &Span<'_>) -> Result<Vec<SpendLine>>;
    /// Observations made in the span.
    async fn observation_spend(&self, span: &Span<'_>) -> Result<ObservationSpend>;
    /// Declarations anchored in the span and on record (not released or failed).
    async fn anchored_count(&self, span: &Span<'_>) -> Result<i64>;
    /// What the Earned ledger of the span's agents received and how many of its lines moved money.
    async fn earned_flow(&self, span: &Span<'_>) -> Result<EarnedFlow>;
    /// Settlement references of external payments settled in the span, newest first.
    async fn settlement_refs(&self, span: &Span<'_>) -> Result<Vec<String>>;
    /// Usage entries in the span, newest first, of the given kinds (all when
    /// none is given): a page, and how many there are.
    async fn usage_lines(&self, span: &Span<'_>, domains: &[SubjectDomain], offset: i64, limit: i64) -> Result<(Vec<UsageLine>, i64)>;
    /// Template values of the agent's confirmed branch-1 decisions anchored in
    /// the span: (column, value, declarations) for the class, target,
    /// trigger and human-involvement columns, and how many decisions there are.
    async fn template_counts(&self, span: &Span<'_>) -> Result<(Vec<(String, String, i64)>, i64)>;
    /// (unit, value text) of every decision scale in the span's branch-1 decisions.
    async fn scale_values(&self, span: &Span<'_>) -> Result<Vec<(String, String)>>;
    /// One agent's tool-market money in the span, newest first: what it paid
    /// for purchases (`paid`: its usage entries) and what its sales and
    /// revenue shares credited it in Earned DAC (`received`); and how many in all.
    async fn tsl_lines(
        &self,
        agent_id: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        direction: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<TslLine>, i64)>;
}
