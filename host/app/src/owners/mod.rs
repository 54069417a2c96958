//! Owners (DAP): the humans, or agents a human promoted, who manage agents in
//! the portal. Accounts and sessions (`auth`, `account`), the agents they
//! manage with their DAB and Trial (`agents`), classification categories and
//! the content-inclusion policy (`registry`), and reports (`reports`).
//!
//! An owner reaches only the agents it manages: [`managed`] answers 403
//! `NOT_LINKED` for another owner's agent and for an id that does not exist
//! alike, so the portal does not reveal which agent ids exist.

pub mod account;
pub mod agents;
pub mod auth;
pub mod password;
pub mod registry;
pub mod reports;
pub mod sessions;

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::owners::AccountStatus;
use anchor_store::{Attempt, AttemptLimit, LinkedAgent, OwnerRecord};

use crate::{AppError, AppResult, Services};

/// What the deployment lets owners do.
#[derive(Clone, Debug)]
pub struct OwnerSettings {
    /// The lowest DAB an owner may set.
    pub dab_floor: MilliDac,
    /// How long a session lasts from sign-in.
    pub session_ttl: Duration,
    /// Agents one owner may link.
    pub max_agents_per_owner: i64,
    /// Days between a deletion request and the erasure of the account.
    pub deletion_grace_days: i64,
}

impl Default for OwnerSettings {
    fn default() -> OwnerSettings {
        OwnerSettings {
            dab_floor: MilliDac::from_dac(100),
            session_ttl: Duration::hours(12),
            max_agents_per_owner: 100,
            deletion_grace_days: 30,
        }
    }
}

/// Password checks (logins and confirmations) per email: 5 in a fixed window of
/// 15 minutes. Each check reserves an attempt before the hash is computed; a
/// right password gives its attempt back, a wrong one keeps it.
pub const LOGIN_MAX_FAILURES: i64 = 5;
pub const LOGIN_WINDOW_MINUTES: i64 = 15;
pub const PASSWORD_ATTEMPTS: AttemptLimit =
    AttemptLimit { scope: "owner_password", window: Duration::minutes(LOGIN_WINDOW_MINUTES), max: LOGIN_MAX_FAILURES };

/// `active`, `pending_deletion` (inside the grace period) or `deleted`.
pub fn account_status(owner: &OwnerRecord, now: DateTime<Utc>) -> AccountStatus {
    match (owner.deleted_at, owner.deletion_response_due_at) {
        (Some(_), _) => AccountStatus::Deleted,
        (None, Some(due)) if due <= now => AccountStatus::Deleted,
        (None, Some(_)) => AccountStatus::PendingDeletion,
        (None, None) => AccountStatus::Active,
    }
}

fn not_linked(agent_id: Uuid) -> AppError {
    AppError::forbidden("NOT_LINKED", format!("agent {agent_id} is not managed by this owner"))
}

/// The agent, if `owner` manages it; 403 `NOT_LINKED` otherwise.
pub async fn managed(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<LinkedAgent> {
    services.store.managed_agent(owner.owner_id, agent_id).await?.ok_or_else(|| not_linked(agent_id))
}

/// The key login failures and password confirmations are counted under.
fn attempt_key(owner: &OwnerRecord) -> String {
    owner.email.clone().unwrap_or_else(|| format!("owner:{}", owner.owner_id))
}

/// Reserves one password check for `key` (an email, or `owner:<id>`), or
/// refuses with 429 while the window's attempts are spent. The reservation
/// happens in one statement before the hash is computed, so parallel attempts
/// cannot pass the limit; [`password_checked`] settles it.
async fn reserve_password_attempt(services: &Services, key: &str) -> AppResult<()> {
    let now = services.clock.now();
    match services.store.reserve_attempt(PASSWORD_ATTEMPTS, key, now).await? {
        Attempt::Reserved => Ok(()),
        Attempt::Spent { retry_at } => Err(AppError::RateLimited {
            message: format!("{LOGIN_MAX_FAILURES} failed password attempts in {LOGIN_WINDOW_MINUTES} minutes; wait before trying again"),
            retry_after_secs: (retry_at - now).num_seconds().max(1) as u64,
        }),
    }
}

/// Settles a reserved password check: a right password gives its attempt back.
async fn password_checked(services: &Services, key: &str, right: bool) -> AppResult<()> {
    if right {
        services.store.release_attempt(PASSWORD_ATTEMPTS, key, services.clock.now()).await?;
    }
    Ok(())
}

/// Confirms a sensitive change with the owner's password. An agent-type owner
/// has no password: it confirms with its managing agent's current auth token.
/// Each check takes an attempt of the same limit as logins.
pub async fn confirm_password(services: &Services, owner: &OwnerRecord, password: &str) -> AppResult<()> {
    let key = attempt_key(owner);
    reserve_password_attempt(services, &key).await?;
    let ok = match (&owner.password_hash, owner.managing_agent_id) {
        (Some(hash), _) => password::verify_off_thread(Some(hash), password).await,
        (None, Some(agent_id)) => {
            let hash = anchor_domain::agents::hash_secret(password);
            services.store.agent(agent_id).await?.is_some_and(|a| a.token_hash == hash)
        }
        (None, None) => false,
    };
    password_checked(services, &key, ok).await?;
    if !ok {
        return Err(AppError::Unauthenticated { message: "the password is wrong".into() });
    }
    Ok(())
}
