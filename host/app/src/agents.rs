//! Agents: registration, credential rotation and recovery, disclosure level.
//!
//! Secrets are made here and returned once; the store keeps only their hashes.

use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::agents::{
    DisclosureLevel, RECOVERY_ATTEMPTS, RECOVERY_PREFIX, RECOVERY_WINDOW_MINUTES, TOKEN_PREFIX, TRIAL_DAYS, format_secret, hash_secret,
};
use anchor_domain::records::{AgentRecord, AttemptLimit, Classification};
use anchor_ports::{NewAgent, Recovery};

use crate::{AppError, AppResult, Services};

/// A new pair of secrets, in the clear: shown to the agent once.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub agent_id: Uuid,
    pub token: String,
    pub recovery_key: String,
    pub at: DateTime<Utc>,
}

impl Credentials {
    fn new(agent_id: Uuid, at: DateTime<Utc>) -> Credentials {
        Credentials { agent_id, token: new_secret(TOKEN_PREFIX), recovery_key: new_secret(RECOVERY_PREFIX), at }
    }
}

fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format_secret(prefix, &bytes)
}

/// A registered agent: its secrets and its Trial.
#[derive(Clone, Debug)]
pub struct Registered {
    pub credentials: Credentials,
    /// The Trial credit granted, and when it expires.
    pub trial_granted: MilliDac,
    pub trial_expires_at: DateTime<Utc>,
}

/// The agent whose current token `token` is, if any. Tokens are looked up by
/// their SHA-256, so the lookup's timing depends on the hash, not on the
/// token; the stored hash is then compared in constant time.
pub async fn authenticate(services: &Services, token: &str) -> AppResult<Option<AgentRecord>> {
    let Some(hash) = token_hash(token) else { return Ok(None) };
    let agent = services.store.agent_by_token_hash(&hash).await?;
    Ok(agent.filter(|a| holds(a, &hash)))
}

/// The agent whose current token `token` is, for a DD create: possibly as
/// this host found it by that token lately (`FoundAgent::remembered`), which
/// the create then uses only for a write that checks the token again
/// (`declarations::create`; decision 0086).
pub async fn authenticate_for_create(services: &Services, token: &str) -> AppResult<Option<anchor_ports::FoundAgent>> {
    let Some(hash) = token_hash(token) else { return Ok(None) };
    let found = services.store.recent_agent_by_token_hash(&hash).await?;
    Ok(found.filter(|found| holds(&found.agent, &hash)))
}

/// The agent `remembered` names, read afresh by the token it was found by:
/// `None` if that is no longer its token.
pub(crate) async fn read_again(services: &Services, remembered: &AgentRecord) -> AppResult<Option<AgentRecord>> {
    let hash = remembered.token_hash;
    let agent = services.store.agent_by_token_hash_again(&hash).await?;
    Ok(agent.filter(|a| a.agent_id == remembered.agent_id && holds(a, &hash)))
}

/// The hash a token is looked up by; `None` for what cannot be a token.
pub(crate) fn token_hash(token: &str) -> Option<[u8; 32]> {
    anchor_domain::agents::has_secret_shape(TOKEN_PREFIX, token).then(|| hash_secret(token))
}

/// Whether the agent found under `hash` holds it, compared in constant time.
pub(crate) fn holds(agent: &AgentRecord, hash: &[u8; 32]) -> bool {
    bool::from(subtle::ConstantTimeEq::ct_eq(&agent.token_hash[..], &hash[..]))
}

/// Registers a new agent with its Trial grant.
pub async fn register(services: &Services, region_code: Option<&str>) -> AppResult<Registered> {
    if let Some(code) = region_code
        && !anchor_domain::agents::REGION_CODES.contains(&code)
    {
        let known = anchor_domain::agents::REGION_CODES.join(", ");
        return Err(AppError::invalid("INVALID_ENUM", format!("region_code must be one of {known}; got {}", anchor_domain::brief(code))));
    }
    let now = services.clock.now();
    let credentials = Credentials::new(Uuid::new_v4(), now);
    let agent = NewAgent {
        agent_id: credentials.agent_id,
        token_hash: hash_secret(&credentials.token),
        recovery_hash: hash_secret(&credentials.recovery_key),
        region_code: region_code.map(str::to_string),
        registered_at: now,
        trial_granted: services.config.trial_grant,
        trial_expires_at: now + Duration::days(TRIAL_DAYS),
    };
    services.store.insert_agent(&agent).await?;
    Ok(Registered { credentials, trial_granted: agent.trial_granted, trial_expires_at: agent.trial_expires_at })
}

/// What a rotation concluded.
#[derive(Clone, Debug)]
pub enum Rotated {
    Done(Credentials),
    /// A concurrent rotation or recovery replaced the token first: the one
    /// presented no longer works.
    TokenReplaced,
}

/// Replaces both secrets of the authenticated agent; `agent_id` must name it.
pub async fn rotate(services: &Services, agent: &AgentRecord, agent_id: Uuid) -> AppResult<Rotated> {
    if agent_id != agent.agent_id {
        return Err(AppError::forbidden("FORBIDDEN", "agent_id must be the agent the bearer token belongs to"));
    }
    // The token is an agent-type owner's password: its portal sessions end
    // with it (before, so that no answer gives a new token while they last).
    end_owner_sessions(services, agent.agent_id).await?;
    let credentials = Credentials::new(agent.agent_id, services.clock.now());
    let rotated = services
        .store
        .rotate_credentials(agent.agent_id, &agent.token_hash, &hash_secret(&credentials.token), &hash_secret(&credentials.recovery_key))
        .await?;
    Ok(if rotated { Rotated::Done(credentials) } else { Rotated::TokenReplaced })
}

/// What a recovery attempt concluded.
#[derive(Clone, Debug)]
pub enum Recovered {
    Done(Credentials),
    /// Wrong agent_id or wrong key: the caller cannot tell which.
    Refused,
    /// Too many wrong keys for this agent_id in the window.
    RateLimited {
        retry_after_secs: u64,
    },
}

/// The limit on wrong recovery keys per agent_id.
pub const RECOVERY_LIMIT: AttemptLimit =
    AttemptLimit { scope: "agent_recovery", window: Duration::minutes(RECOVERY_WINDOW_MINUTES), max: RECOVERY_ATTEMPTS };

/// Replaces both secrets of `agent_id` if `recovery_key` is its key.
pub async fn recover(services: &Services, agent_id: Uuid, recovery_key: &str) -> AppResult<Recovered> {
    let now = services.clock.now();
    let credentials = Credentials::new(agent_id, now);
    let outcome = services
        .store
        .recover_credentials(
            agent_id,
            &hash_secret(recovery_key),
            &hash_secret(&credentials.token),
            &hash_secret(&credentials.recovery_key),
            now,
            RECOVERY_LIMIT,
        )
        .await?;
    Ok(match outcome {
        Recovery::Recovered => {
            // The new token is the answer's, whatever happens here: a
            // failure to end the sessions is logged, not answered.
            if let Err(error) = end_owner_sessions(services, agent_id).await {
                tracing::error!(%agent_id, error = %error, "a recovered agent's owner sessions could not be ended");
            }
            Recovered::Done(credentials)
        }
        Recovery::Refused => Recovered::Refused,
        Recovery::RateLimited => Recovered::RateLimited { retry_after_secs: (RECOVERY_WINDOW_MINUTES * 60) as u64 },
    })
}

/// Ends every portal session of the agent-type owner `agent_id` acts for,
/// if it is one (signed in with the token being replaced).
async fn end_owner_sessions(services: &Services, agent_id: Uuid) -> AppResult<()> {
    if let Some(owner) = services.store.owner_by_managing_agent(agent_id).await? {
        services.store.end_owner_sessions(owner.owner_id, None).await?;
    }
    Ok(())
}

/// Sets how much of the agent's record ARA may show to others.
pub async fn set_disclosure(services: &Services, agent_id: Uuid, level: DisclosureLevel) -> AppResult<()> {
    services.store.set_disclosure_level(agent_id, level).await?;
    Ok(())
}

/// An agent's Trial DAC at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trial {
    /// Something is left and the period has not ended.
    pub active: bool,
    /// What Trial can still pay (nothing once expired).
    pub remaining: MilliDac,
    pub expires_at: DateTime<Utc>,
    /// Whole days left, rounded up.
    pub days_remaining: i64,
    pub used: MilliDac,
    pub granted: MilliDac,
}

/// The agent's Trial now.
pub fn trial(services: &Services, agent: &AgentRecord) -> Trial {
    let now = services.clock.now();
    let running = agent.trial_expires_at > now;
    let seconds_left = (agent.trial_expires_at - now).num_seconds().max(0);
    Trial {
        active: running && agent.trial_balance > MilliDac::ZERO,
        remaining: if running { agent.trial_balance } else { MilliDac::ZERO },
        expires_at: agent.trial_expires_at,
        days_remaining: (seconds_left + 86_399) / 86_400,
        used: agent.trial_granted - agent.trial_balance,
        granted: agent.trial_granted,
    }
}

/// The self-classification keys the agent may use: the operator's base
/// categories, then its owner's.
pub async fn classifications(services: &Services, agent_id: Uuid) -> AppResult<Vec<Classification>> {
    Ok(services.store.classifications_for_agent(agent_id).await?)
}
