//! The owner portal's API (DAP), under `/dap`: owner accounts and sessions
//! (`auth`, `account`), linked agents with their DAB and Trial (`agents`),
//! reports (`reports`), and the classification registry and content-inclusion
//! policy (`registry`).
//!
//! Every route but register, login, logout and the country suggestion needs an
//! owner session (`crate::owner::AuthOwner`). An owner reaches only the agents
//! it manages: anything else is 403 `NOT_LINKED`, whether the agent exists or
//! not, so the portal does not reveal which agent ids exist.

pub mod account;
pub mod agents;
pub mod auth;
pub mod registry;
pub mod reports;

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;

use anchor_store::{Attempt, LinkedAgent, OwnerRecord};

use crate::error::{ApiError, ApiResult};
use crate::openapi::Operation;
use crate::owner;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    let mut all = Vec::new();
    all.extend(auth::operations());
    all.extend(account::operations());
    all.extend(agents::operations());
    all.extend(reports::operations());
    all.extend(registry::operations());
    all
}

pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `active`, `pending_deletion` (inside the grace period) or `deleted`.
pub(crate) fn account_status(owner: &OwnerRecord, now: DateTime<Utc>) -> &'static str {
    match (owner.deleted_at, owner.deletion_response_due_at) {
        (Some(_), _) => "deleted",
        (None, Some(due)) if due <= now => "deleted",
        (None, Some(_)) => "pending_deletion",
        (None, None) => "active",
    }
}

/// The agent, if `owner` manages it; 403 `NOT_LINKED` otherwise.
pub(crate) async fn managed(state: &AppState, owner: &OwnerRecord, agent_id: Uuid) -> ApiResult<LinkedAgent> {
    state
        .store
        .managed_agent(owner.owner_id, agent_id)
        .await?
        .ok_or_else(|| ApiError::forbidden("NOT_LINKED", format!("agent {agent_id} is not managed by this owner")))
}

/// The key login failures and password confirmations are counted under.
fn attempt_key(owner: &OwnerRecord) -> String {
    owner.email.clone().unwrap_or_else(|| format!("owner:{}", owner.owner_id))
}

/// Reserves one password check for `key` (an email, or `owner:<id>`), or
/// refuses with 429 while the window's attempts are spent. The reservation
/// happens in one statement before the hash is computed, so parallel attempts
/// cannot pass the limit; [`password_checked`] settles it.
pub(crate) async fn reserve_password_attempt(state: &AppState, key: &str) -> ApiResult<()> {
    let now = state.clock.now();
    match state.store.reserve_attempt(owner::PASSWORD_ATTEMPTS, key, now).await? {
        Attempt::Reserved => Ok(()),
        Attempt::Spent { retry_at } => Err(ApiError::TooManyRequests {
            message: format!(
                "{} failed password attempts in {} minutes; wait before trying again",
                owner::LOGIN_MAX_FAILURES,
                owner::LOGIN_WINDOW_MINUTES
            ),
            retry_after_secs: (retry_at - now).num_seconds().max(1) as u64,
        }),
    }
}

/// Settles a reserved password check: a right password gives its attempt back.
pub(crate) async fn password_checked(state: &AppState, key: &str, right: bool) -> ApiResult<()> {
    if right {
        state.store.release_attempt(owner::PASSWORD_ATTEMPTS, key, state.clock.now()).await?;
    }
    Ok(())
}

/// Confirms a sensitive change with the owner's password. An agent-type owner
/// has no password: it confirms with its managing agent's current auth token.
/// Each check takes an attempt of the same limit as logins.
pub(crate) async fn confirm_password(state: &AppState, owner: &OwnerRecord, password: &str) -> ApiResult<()> {
    let key = attempt_key(owner);
    reserve_password_attempt(state, &key).await?;
    let ok = match (&owner.password_hash, owner.managing_agent_id) {
        (Some(hash), _) => owner::verify_password_off_thread(Some(hash), password).await,
        (None, Some(agent_id)) => {
            let hash = anchor_domain::agents::hash_secret(password);
            state.store.agent(agent_id).await?.is_some_and(|a| a.token_hash == hash)
        }
        (None, None) => false,
    };
    password_checked(state, &key, ok).await?;
    if !ok {
        return Err(ApiError::OwnerUnauthorized { message: "the password is wrong".into() });
    }
    Ok(())
}
