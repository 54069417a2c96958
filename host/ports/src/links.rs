//! Agents as their owner sees them: linking, unlinking, the owner-set DAB, the content-inclusion policy, totals for reports.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{LinkedAgent, Totals};

/// The outcome of linking an agent to an owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Linked (or re-linked) and the token replaced; linked since then.
    Linked { linked_at: DateTime<Utc> },
    /// No agent with that id holds that token.
    WrongToken,
    /// Another owner manages the agent.
    LinkedElsewhere,
    /// The owner already manages the maximum number of agents.
    TooMany,
    /// The owner's account was erased meanwhile.
    OwnerGone,
}

#[async_trait]
pub trait LinkStore: Send + Sync {
    /// Links the agent to the owner and replaces its token, if the agent holds
    /// `token_hash` and no other owner manages it, in one statement.
    async fn link_agent(
        &self,
        agent_id: Uuid,
        owner_id: Uuid,
        token_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        now: DateTime<Utc>,
        max_agents: i64,
    ) -> Result<Link>;
    /// Unlinks the agent from the owner, drops the owner-set DAB and ends the
    /// owner's human shares of the agent's tool sales; false if the owner
    /// does not manage it.
    async fn unlink_agent(&self, agent_id: Uuid, owner_id: Uuid, now: DateTime<Utc>) -> Result<bool>;
    /// The owner's agents, oldest link first.
    async fn owner_agents(&self, owner_id: Uuid) -> Result<Vec<LinkedAgent>>;
    /// The agent, if the owner manages it.
    async fn managed_agent(&self, owner_id: Uuid, agent_id: Uuid) -> Result<Option<LinkedAgent>>;
    /// Sets or clears the owner-set DAB; false if the owner does not manage the agent.
    async fn set_agent_dab(&self, agent_id: Uuid, owner_id: Uuid, limit: Option<MilliDac>) -> Result<bool>;
    /// Declarations on record (not released or failed) anchored in `[from, to)`.
    async fn declaration_totals(&self, agent_id: Uuid, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Result<Totals>;
}
