//! The agents an owner manages: link (rotates the agent's token), unlink,
//! the DAB the owner sets for each, and their Trial.
//!
//! DAB: the owner's value replaces the operator default for that agent at once
//! (the agent's own `GET /v1/dab/status` reads the same column). Removing it,
//! or unlinking the agent, returns the agent to the operator default.

use chrono::{DateTime, Utc};
use rand::RngCore;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::agents::{AuthStatus, TOKEN_PREFIX, format_secret, has_secret_shape, hash_secret};
use anchor_domain::records::{LinkedAgent, OwnerRecord};
use anchor_store::Link;

use super::managed;
use crate::agents::Trial;
use crate::payments::Dab;
use crate::{AppError, AppResult, Services};

/// A link made: when, and the agent's new token (shown once).
#[derive(Clone, Debug)]
pub struct Linked {
    pub linked_at: DateTime<Utc>,
    pub new_token: String,
}

/// Links the agent, proven by its current token, and replaces that token in
/// the same statement: the old one fails from this moment.
pub async fn link(services: &Services, owner: &OwnerRecord, agent_id: Uuid, token: &str) -> AppResult<Linked> {
    if !has_secret_shape(TOKEN_PREFIX, token) {
        return Err(AppError::TokenRefused);
    }
    if owner.managing_agent_id == Some(agent_id) {
        return Err(AppError::invalid("INVALID_VALUE", "an agent-type owner cannot link the agent it acts for"));
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let new_token = format_secret(TOKEN_PREFIX, &bytes);
    let max = services.config.owners.max_agents_per_owner;
    let outcome = services
        .store
        .link_agent(agent_id, owner.owner_id, &hash_secret(token), &hash_secret(&new_token), services.clock.now(), max)
        .await?;
    match outcome {
        Link::Linked { linked_at } => Ok(Linked { linked_at, new_token }),
        Link::WrongToken => Err(AppError::TokenRefused),
        Link::LinkedElsewhere => Err(AppError::Conflict {
            code: "AGENT_ALREADY_LINKED",
            message: "another owner manages this agent; it must unlink it first".into(),
        }),
        Link::TooMany => Err(AppError::forbidden("AGENT_LIMIT_REACHED", format!("an owner manages at most {max} agents"))),
        Link::OwnerGone => Err(AppError::Unauthenticated { message: "this account was deleted".into() }),
    }
}

/// Stops managing an agent (password confirmed); the agent keeps its records
/// and token, and the operator's default DAB applies to it again.
pub async fn unlink(services: &Services, owner: &OwnerRecord, agent_id: Uuid, password: &str) -> AppResult<()> {
    managed(services, owner, agent_id).await?;
    super::confirm_password(services, owner, password).await?;
    if !services.store.unlink_agent(agent_id, owner.owner_id, services.clock.now()).await? {
        return Err(super::not_linked(agent_id));
    }
    Ok(())
}

/// The owner's agents, oldest link first.
pub async fn list(services: &Services, owner: &OwnerRecord) -> AppResult<Vec<LinkedAgent>> {
    Ok(services.store.owner_agents(owner.owner_id).await?)
}

/// Where each of `agents`' credentials stand ([`AuthStatus`]), read from
/// its recovery window.
pub async fn auth_statuses(services: &Services, agents: &[Uuid]) -> AppResult<std::collections::HashMap<Uuid, AuthStatus>> {
    let subjects: Vec<String> = agents.iter().map(Uuid::to_string).collect();
    let locked = services.store.spent_windows(crate::agents::RECOVERY_LIMIT, &subjects, services.clock.now()).await?;
    Ok(agents
        .iter()
        .map(|id| (*id, if locked.contains(&id.to_string()) { AuthStatus::RecoveryLocked } else { AuthStatus::Active }))
        .collect())
}

/// The DAB in force for a managed agent.
pub async fn dab(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<Dab> {
    managed(services, owner, agent_id).await?;
    crate::payments::dab(services, agent_id).await
}

/// Sets the owner's DAB for an agent: at least the operator's floor.
pub async fn set_dab(services: &Services, owner: &OwnerRecord, agent_id: Uuid, limit: MilliDac) -> AppResult<Dab> {
    let floor = services.config.owners.dab_floor;
    if limit < floor {
        return Err(AppError::invalid("INVALID_VALUE", format!("budget_limit_dac must be at least {floor} DAC; got {limit}")));
    }
    managed(services, owner, agent_id).await?;
    if !services.store.set_agent_dab(agent_id, owner.owner_id, Some(limit)).await? {
        return Err(super::not_linked(agent_id));
    }
    crate::payments::dab(services, agent_id).await
}

/// Removes the owner's DAB (password confirmed): the operator default applies again.
pub async fn remove_dab(services: &Services, owner: &OwnerRecord, agent_id: Uuid, password: &str) -> AppResult<Dab> {
    managed(services, owner, agent_id).await?;
    super::confirm_password(services, owner, password).await?;
    services.store.set_agent_dab(agent_id, owner.owner_id, None).await?;
    crate::payments::dab(services, agent_id).await
}

/// The Trial of every managed agent, and what they hold together.
pub async fn trials(services: &Services, owner: &OwnerRecord) -> AppResult<(Vec<(Uuid, Trial)>, MilliDac)> {
    let agents = services.store.owner_agents(owner.owner_id).await?;
    let trials: Vec<(Uuid, Trial)> = agents.iter().map(|a| (a.agent.agent_id, crate::agents::trial(services, &a.agent))).collect();
    let total = trials.iter().fold(MilliDac::ZERO, |sum, (_, t)| sum + t.remaining);
    Ok((trials, total))
}

/// A managed agent's subscriptions, for its owner (the portal): indefinite
/// retention (`None` when switched off) and ASA (its latest subscription).
pub async fn subscriptions(
    services: &Services,
    owner: &OwnerRecord,
    agent_id: Uuid,
) -> AppResult<(Option<crate::retention::View>, Option<anchor_domain::asa::AsaSubscription>)> {
    managed(services, owner, agent_id).await?;
    let retention = match services.features().retention {
        true => Some(crate::retention::view(services, agent_id).await?),
        false => None,
    };
    Ok((retention, services.store.asa_subscription(agent_id).await?))
}
