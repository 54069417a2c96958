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
use anchor_ports::Link;

use super::managed;
use crate::agents::Trial;
use crate::payment_status::Dab;
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

/// One managed agent as its owner's list shows it: its record and link,
/// where its credentials stand, the DAB in force (the owner's, or the
/// operator default) and its Trial.
#[derive(Clone, Debug)]
pub struct ManagedAgent {
    pub linked: LinkedAgent,
    pub auth_status: AuthStatus,
    /// The DAB in force: the owner's limit, or the operator default.
    pub dab_limit: MilliDac,
    /// Whether the owner set it (false: the operator default).
    pub dab_owner_set: bool,
    pub trial: Trial,
}

/// The owner's agents, oldest link first, each with the values its list shows.
pub async fn overview(services: &Services, owner: &OwnerRecord) -> AppResult<Vec<ManagedAgent>> {
    let linked = list(services, owner).await?;
    let statuses = auth_statuses(services, &linked.iter().map(|a| a.agent.agent_id).collect::<Vec<_>>()).await?;
    Ok(linked
        .into_iter()
        .map(|linked| ManagedAgent {
            auth_status: statuses.get(&linked.agent.agent_id).copied().unwrap_or(AuthStatus::Active),
            dab_limit: linked.dab_limit.unwrap_or(services.config.dab_default),
            dab_owner_set: linked.dab_limit.is_some(),
            trial: crate::agents::trial(services, &linked.agent),
            linked,
        })
        .collect())
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
    crate::payment_status::dab(services, agent_id).await
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
    crate::payment_status::dab(services, agent_id).await
}

/// Removes the owner's DAB (password confirmed): the operator default applies again.
pub async fn remove_dab(services: &Services, owner: &OwnerRecord, agent_id: Uuid, password: &str) -> AppResult<Dab> {
    managed(services, owner, agent_id).await?;
    super::confirm_password(services, owner, password).await?;
    services.store.set_agent_dab(agent_id, owner.owner_id, None).await?;
    crate::payment_status::dab(services, agent_id).await
}

/// The Trial of every managed agent, and what they hold together.
pub async fn trials(services: &Services, owner: &OwnerRecord) -> AppResult<(Vec<(Uuid, Trial)>, MilliDac)> {
    let agents = services.store.owner_agents(owner.owner_id).await?;
    let trials: Vec<(Uuid, Trial)> = agents.iter().map(|a| (a.agent.agent_id, crate::agents::trial(services, &a.agent))).collect();
    let total = trials.iter().fold(MilliDac::ZERO, |sum, (_, t)| sum + t.remaining);
    Ok((trials, total))
}

/// A managed agent's subscriptions as they stand now, and what will happen
/// by itself next.
#[derive(Clone, Debug)]
pub struct Subscriptions {
    /// None when indefinite retention is switched off.
    pub retention: Option<RetentionStanding>,
    /// The latest ASA subscription, if any.
    pub asa: Option<AsaStanding>,
    /// Soonest first.
    pub upcoming: Vec<Upcoming>,
}

/// Indefinite retention, for its owner.
#[derive(Clone, Debug)]
pub struct RetentionStanding {
    pub status: anchor_domain::retention::RetentionStatus,
    pub monthly: MilliDac,
    /// While the subscription is active or in grace.
    pub next_billing_at: Option<DateTime<Utc>>,
    /// While it is in grace.
    pub grace_ends_at: Option<DateTime<Utc>>,
    pub indefinite_records: i64,
    pub demoted_records: i64,
}

/// The latest ASA subscription, for its owner.
#[derive(Clone, Debug)]
pub struct AsaStanding {
    pub status: anchor_domain::asa::AsaStatus,
    pub expires_at: DateTime<Utc>,
    pub grace_ends_at: DateTime<Utc>,
    pub days_remaining: i64,
    pub periods: i64,
}

/// What will happen by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpcomingEvent {
    /// The monthly retention charge, debited from Earned DAC.
    RetentionCharge,
    /// A lapsed subscription's indefinite records become short ones.
    RetentionDemotion,
    AsaPeriodEnd,
    AsaGraceEnd,
}

impl UpcomingEvent {
    pub fn name(self) -> &'static str {
        match self {
            UpcomingEvent::RetentionCharge => "retention_charge",
            UpcomingEvent::RetentionDemotion => "retention_demotion",
            UpcomingEvent::AsaPeriodEnd => "asa_period_end",
            UpcomingEvent::AsaGraceEnd => "asa_grace_end",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upcoming {
    pub at: DateTime<Utc>,
    pub event: UpcomingEvent,
    /// What it charges, if anything.
    pub charge: Option<MilliDac>,
    /// How many records it concerns, for a demotion.
    pub records: Option<i64>,
}

/// A managed agent's subscriptions: indefinite retention (unless switched
/// off) and ASA, with the events each will bring by itself, soonest first.
pub async fn subscriptions(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<Subscriptions> {
    use anchor_domain::asa::AsaStatus;
    use anchor_domain::retention::RetentionStatus;
    managed(services, owner, agent_id).await?;
    let retention = match services.features().retention {
        true => Some(crate::retention::view(services, agent_id).await?),
        false => None,
    };
    let asa = services.store.asa_subscription(agent_id).await?;
    let now = services.clock.now();
    let mut upcoming = Vec::new();
    let retention = retention.map(|view| {
        let s = view.subscription.as_ref();
        let live = matches!(view.status, RetentionStatus::Active | RetentionStatus::Grace);
        let grace_ends_at = s.and_then(|s| s.grace_ends_at).filter(|_| view.status == RetentionStatus::Grace);
        if view.status == RetentionStatus::Active
            && let Some(s) = s
        {
            let event = UpcomingEvent::RetentionCharge;
            upcoming.push(Upcoming { at: s.next_billing_at, event, charge: Some(view.terms.monthly), records: None });
        }
        if let Some(end) = grace_ends_at {
            let event = UpcomingEvent::RetentionDemotion;
            upcoming.push(Upcoming { at: end, event, charge: None, records: Some(view.indefinite_records) });
        }
        RetentionStanding {
            status: view.status,
            monthly: view.terms.monthly,
            next_billing_at: s.filter(|_| live).map(|s| s.next_billing_at),
            grace_ends_at,
            indefinite_records: view.indefinite_records,
            demoted_records: s.map_or(0, |s| s.demoted_count),
        }
    });
    let asa = asa.map(|s| {
        let status = s.status(now);
        if status == AsaStatus::Active {
            upcoming.push(Upcoming { at: s.expires_at, event: UpcomingEvent::AsaPeriodEnd, charge: None, records: None });
        }
        if s.is_live(now) {
            upcoming.push(Upcoming { at: s.grace_ends_at(), event: UpcomingEvent::AsaGraceEnd, charge: None, records: None });
        }
        AsaStanding {
            status,
            expires_at: s.expires_at,
            grace_ends_at: s.grace_ends_at(),
            days_remaining: s.days_remaining(now),
            periods: s.periods,
        }
    });
    upcoming.sort_by_key(|u| u.at);
    Ok(Subscriptions { retention, asa, upcoming })
}
