//! Agents: registration, credentials, disclosure level, the categories an agent may use.

use anchor_domain::MilliDac;
use anchor_domain::agents::DisclosureLevel;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{AgentRecord, Classification};

/// A new agent, with its secrets already hashed.
#[derive(Clone, Debug)]
pub struct NewAgent {
    pub agent_id: Uuid,
    pub token_hash: [u8; 32],
    pub recovery_hash: [u8; 32],
    pub region_code: Option<String>,
    pub registered_at: DateTime<Utc>,
    pub trial_granted: MilliDac,
    pub trial_expires_at: DateTime<Utc>,
}

/// The outcome of a recovery attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    Recovered,
    /// Wrong agent_id or wrong key: the caller cannot tell which.
    Refused,
    /// Too many attempts for this agent_id in the window.
    RateLimited,
}

/// An agent found by its token (`AgentStore::recent_agent_by_token_hash`).
#[derive(Clone, Debug)]
pub struct FoundAgent {
    pub agent: AgentRecord,
    /// From this host's memory of an earlier read, not read now.
    pub remembered: bool,
}

#[async_trait]
pub trait AgentStore: Send + Sync {
    async fn insert_agent(&self, agent: &NewAgent) -> Result<()>;
    /// The agent, if it is one a request may name (never the nil agent that
    /// holds de-identified records).
    async fn agent(&self, agent_id: Uuid) -> Result<Option<AgentRecord>>;
    async fn agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>>;
    /// [`Self::agent_by_token_hash`], or the agent as this host found it by
    /// that token lately (at most a second ago, and before no write of this
    /// host that changed its token, its owner or its owner's policy). Only
    /// for a write that checks the token again itself
    /// (`NewDeclaration::token_check`).
    async fn recent_agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<FoundAgent>> {
        Ok(self.agent_by_token_hash(token_hash).await?.map(|agent| FoundAgent { agent, remembered: false }))
    }
    /// [`Self::agent_by_token_hash`], read now, and remembered in place of
    /// what [`Self::recent_agent_by_token_hash`] remembered.
    async fn agent_by_token_hash_again(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>> {
        self.agent_by_token_hash(token_hash).await
    }
    /// Replaces both secrets if the agent still holds `current_token_hash`.
    async fn rotate_credentials(
        &self,
        agent_id: Uuid,
        current_token_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
    ) -> Result<bool>;
    /// Replaces both secrets if `recovery_hash` matches. A wrong key (or an
    /// unknown agent_id) takes one attempt of `limit` for that agent_id; once
    /// they are spent, wrong keys are refused as `RateLimited`. The right key
    /// always recovers: guessing cannot lock its holder out.
    async fn recover_credentials(
        &self,
        agent_id: Uuid,
        recovery_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
        now: DateTime<Utc>,
        limit: AttemptLimit,
    ) -> Result<Recovery>;
    async fn set_disclosure_level(&self, agent_id: Uuid, level: DisclosureLevel) -> Result<()>;
    /// Operator base categories plus the agent's owner's active ones.
    async fn classifications_for_agent(&self, agent_id: Uuid) -> Result<Vec<Classification>>;
}
