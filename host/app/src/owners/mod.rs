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
use anchor_domain::records::{Attempt, AttemptLimit, LinkedAgent, OwnerRecord};

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

/// Password checks. Each reserves an attempt in every limit it is counted
/// under before the hash is computed; a right password gives them back, a
/// wrong one keeps them. Logins are counted per (email, client), so a
/// stranger guessing an owner's password from elsewhere never locks the
/// owner out of its own client: 5 in 15 minutes, and 20 in a day (the
/// backoff: past the first windows the wait grows from minutes to a day).
/// Each client is also held to 30 in 15 minutes over every email it tries,
/// and each email to 100 in 15 minutes over every client (a backstop against
/// guessing spread over many addresses). A client is an IPv4 address or an
/// IPv6 /64.
pub const LOGIN_MAX_FAILURES: i64 = 5;
pub const LOGIN_WINDOW_MINUTES: i64 = 15;
pub const LOGIN_PER_CLIENT_AND_EMAIL: AttemptLimit =
    AttemptLimit { scope: "owner_login", window: Duration::minutes(LOGIN_WINDOW_MINUTES), max: LOGIN_MAX_FAILURES };
pub const LOGIN_PER_CLIENT_AND_EMAIL_DAY: AttemptLimit = AttemptLimit { scope: "owner_login_day", window: Duration::days(1), max: 20 };
pub const LOGIN_PER_CLIENT: AttemptLimit =
    AttemptLimit { scope: "owner_login_client", window: Duration::minutes(LOGIN_WINDOW_MINUTES), max: 30 };
pub const LOGIN_PER_EMAIL: AttemptLimit =
    AttemptLimit { scope: "owner_login_email", window: Duration::minutes(LOGIN_WINDOW_MINUTES), max: 100 };
/// A sign-in from a device of the owner's (a browser it signed in from
/// before) is counted for that device alone: 5 in 15 minutes.
pub const LOGIN_PER_DEVICE: AttemptLimit =
    AttemptLimit { scope: "owner_login_device", window: Duration::minutes(LOGIN_WINDOW_MINUTES), max: LOGIN_MAX_FAILURES };
/// Confirmations of a sensitive change, by a signed-in owner: 5 in 15
/// minutes per owner (only the owner's own sessions can spend them).
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

/// The key an owner's password confirmations are counted under.
fn attempt_key(owner: &OwnerRecord) -> String {
    format!("owner:{}", owner.owner_id)
}

/// Reserves one password check in each of `limits` (each with its key), or
/// refuses with 429 at the first whose window is spent, giving back what it
/// reserved before. Each reservation is one statement before the hash is
/// computed, so parallel attempts cannot pass a limit; [`password_checked`]
/// settles them.
async fn reserve_password_attempt(services: &Services, limits: &[(AttemptLimit, &str)]) -> AppResult<()> {
    let now = services.clock.now();
    for (at, (limit, key)) in limits.iter().enumerate() {
        if let Attempt::Spent { retry_at } = services.store.reserve_attempt(*limit, key, now).await? {
            for (reserved, key) in &limits[..at] {
                services.store.release_attempt(*reserved, key, now).await?;
            }
            let window = limit.window.num_minutes();
            let span = if window >= 24 * 60 { format!("{} hours", window / 60) } else { format!("{window} minutes") };
            return Err(AppError::RateLimited {
                message: format!("{} failed password attempts in {span}; wait before trying again", limit.max),
                retry_after_secs: (retry_at - now).num_seconds().max(1) as u64,
            });
        }
    }
    Ok(())
}

/// Settles reserved password checks: a right password gives its attempts back.
async fn password_checked(services: &Services, limits: &[(AttemptLimit, &str)], right: bool) -> AppResult<()> {
    if right {
        for (limit, key) in limits {
            services.store.release_attempt(*limit, key, services.clock.now()).await?;
        }
    }
    Ok(())
}

/// Confirms a sensitive change with the owner's password. An agent-type owner
/// has no password: it confirms with its managing agent's current auth token.
/// Each check takes an attempt of the same limit as logins.
pub async fn confirm_password(services: &Services, owner: &OwnerRecord, password: &str) -> AppResult<()> {
    let key = attempt_key(owner);
    let limits = [(PASSWORD_ATTEMPTS, key.as_str())];
    reserve_password_attempt(services, &limits).await?;
    let ok = match (&owner.password_hash, owner.managing_agent_id) {
        (Some(hash), _) => password::verify_off_thread(Some(hash), password).await,
        (None, Some(agent_id)) => {
            let hash = anchor_domain::agents::hash_secret(password);
            services.store.agent(agent_id).await?.is_some_and(|a| a.token_hash == hash)
        }
        (None, None) => false,
    };
    password_checked(services, &limits, ok).await?;
    if !ok {
        return Err(AppError::Unauthenticated { message: "the password is wrong".into() });
    }
    Ok(())
}
