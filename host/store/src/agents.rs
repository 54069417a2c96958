//! Agents: registration, credentials, disclosure level, the categories an agent may use.

use anchor_domain::MilliDac;
use anchor_domain::agents::DisclosureLevel;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, sql};
use crate::*;

/// How long an agent found by its token may be used again, unread, by a DD
/// create on this host (`AgentStore::recent_agent_by_token_hash`).
pub const RECENT_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// The most agents kept; past it, they are all let go.
const RECENT_MOST: usize = 16_384;

/// Agents this host found by their token in the last [`RECENT_FOR`]. Every
/// write on this host that changes what a DD create reads of an agent (its
/// token, its owner, its owner's policy) lets them all go once it is done;
/// a read that began before that is not kept (the generation changed), so
/// nothing read before such a write is used after it.
#[derive(Default)]
pub(crate) struct Recent {
    kept: std::sync::Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    generation: u64,
    agents: std::collections::HashMap<[u8; 32], (std::time::Instant, AgentRecord)>,
    /// Records this host's creates stored through a write that checked the
    /// token (by dd_id), beside that token and the payment they reserved:
    /// what a confirmation by the same token may use unread (decision 0088).
    records: std::collections::HashMap<Uuid, (std::time::Instant, [u8; 32], StoredDeclaration, Option<Settling>)>,
}

impl<E: Engine> SqlStore<E> {
    /// The agent read now, remembered unless a write that changes agents
    /// ended since `generation` was taken (or it is not there any more).
    async fn read_and_keep(&self, token_hash: &[u8; 32], generation: u64) -> Result<Option<AgentRecord>> {
        let found = self.agent_by_token_hash(token_hash).await?;
        match &found {
            Some(agent) => self.recent.keep(generation, *token_hash, agent),
            None => self.recent.forget(token_hash),
        }
        Ok(found)
    }
}

impl Recent {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn generation(&self) -> u64 {
        self.kept().generation
    }

    fn get(&self, token_hash: &[u8; 32]) -> (Option<AgentRecord>, u64) {
        let kept = self.kept();
        let found = kept.agents.get(token_hash).filter(|(at, _)| at.elapsed() < RECENT_FOR).map(|(_, agent)| agent.clone());
        (found, kept.generation)
    }

    fn keep(&self, generation: u64, token_hash: [u8; 32], agent: &AgentRecord) {
        let mut kept = self.kept();
        if kept.generation != generation {
            return;
        }
        if kept.agents.len() >= RECENT_MOST {
            kept.agents.clear();
        }
        kept.agents.insert(token_hash, (std::time::Instant::now(), agent.clone()));
    }

    fn forget(&self, token_hash: &[u8; 32]) {
        self.kept().agents.remove(token_hash);
    }

    /// Keeps a record a create stored through a write that checked
    /// `token_hash` (the confirmation's write checks it again).
    pub(crate) fn keep_record(&self, token_hash: [u8; 32], record: &StoredDeclaration, settling: Option<Settling>) {
        let mut kept = self.kept();
        if kept.records.len() >= RECENT_MOST {
            kept.records.clear();
        }
        kept.records.insert(record.declaration.dd_id, (std::time::Instant::now(), token_hash, record.clone(), settling));
    }

    /// The record `dd_id` kept in the last [`RECENT_FOR`] beside the agent
    /// `token_hash` was found to be, when it was stored under that token
    /// (and, if it reserved a payment, when `paid`); taken (a second
    /// confirmation of it reads it).
    pub(crate) fn take_record(
        &self,
        token_hash: &[u8; 32],
        dd_id: Uuid,
        paid: bool,
    ) -> Option<(AgentRecord, StoredDeclaration, Option<Settling>)> {
        let mut kept = self.kept();
        let (at, token, _, settling) = kept.records.get(&dd_id)?;
        if token != token_hash || at.elapsed() >= RECENT_FOR || (settling.is_some() && !paid) {
            return None;
        }
        let agent = kept.agents.get(token_hash).filter(|(at, _)| at.elapsed() < RECENT_FOR).map(|(_, agent)| agent.clone())?;
        let (_, _, record, settling) = kept.records.remove(&dd_id)?;
        Some((agent, record, settling))
    }

    /// Lets every kept agent and record go: called once a write that
    /// changes an agent is done (committed, or failed: either way after it).
    pub(crate) fn forget_all(&self) {
        let mut kept = self.kept();
        kept.generation = kept.generation.wrapping_add(1);
        kept.agents.clear();
        kept.records.clear();
    }
}

/// An agent's row with its owner's content-inclusion policy, in one statement.
pub(crate) const AGENT_SELECT: &str = "select a.*, o.content_inclusion_policy as owner_policy from agent a \
     left join owner o on o.owner_id = a.owner_id and o.deleted_at is null";

#[async_trait]
impl<E: Engine> AgentStore for SqlStore<E> {
    async fn insert_agent(&self, agent: &NewAgent) -> Result<()> {
        self.db()
            .execute(
                sql("insert into agent (agent_id, token_hash, recovery_hash, region_code, registered_at, \
             trial_granted_milli, trial_balance_milli, trial_expires_at) values ($1, $2, $3, $4, $5, $6, $6, $7)")
                .bind(agent.agent_id)
                .bind(&agent.token_hash)
                .bind(&agent.recovery_hash)
                .bind(agent.region_code.as_deref())
                .bind(agent.registered_at)
                .bind(agent.trial_granted.milli())
                .bind(agent.trial_expires_at),
            )
            .await?;
        Ok(())
    }

    async fn agent(&self, agent_id: Uuid) -> Result<Option<AgentRecord>> {
        // The nil agent only holds de-identified records (migration 0020):
        // no request may name it, as a target, a beneficiary or a counterparty.
        if agent_id.is_nil() {
            return Ok(None);
        }
        let row = self.db().fetch_optional(sql(format!("{AGENT_SELECT} where a.agent_id = $1")).bind(agent_id)).await?;
        row.as_ref().map(decode_agent).transpose()
    }

    async fn agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.agent(*token_hash).await
        {
            return found;
        }
        let query = || sql(format!("{AGENT_SELECT} where a.token_hash = $1")).bind(token_hash);
        if let Some(found) = self.read_direct(query(), decode_agent) {
            return Ok(found);
        }
        let row = self.db().fetch_optional(query()).await?;
        row.as_ref().map(decode_agent).transpose()
    }

    async fn recent_agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<anchor_ports::FoundAgent>> {
        let (found, generation) = self.recent.get(token_hash);
        if let Some(agent) = found {
            return Ok(Some(anchor_ports::FoundAgent { agent, remembered: true }));
        }
        let found = self.read_and_keep(token_hash, generation).await?;
        Ok(found.map(|agent| anchor_ports::FoundAgent { agent, remembered: false }))
    }

    async fn agent_by_token_hash_again(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>> {
        self.read_and_keep(token_hash, self.recent.generation()).await
    }

    async fn rotate_credentials(
        &self,
        agent_id: Uuid,
        current_token_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
    ) -> Result<bool> {
        self.replace_secrets(agent_id, Proof::Token(current_token_hash), new_token_hash, new_recovery_hash).await
    }

    async fn recover_credentials(
        &self,
        agent_id: Uuid,
        recovery_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
        now: DateTime<Utc>,
        limit: AttemptLimit,
    ) -> Result<Recovery> {
        // The right key is tried first and is never limited: the
        // limit only counts wrong keys, so nobody can lock an agent's
        // holder out by guessing at its (public) agent_id.
        if self.replace_secrets(agent_id, Proof::Recovery(recovery_hash), new_token_hash, new_recovery_hash).await? {
            return Ok(Recovery::Recovered);
        }
        Ok(match self.reserve_attempt(limit, &agent_id.to_string(), now).await? {
            Attempt::Reserved => Recovery::Refused,
            Attempt::Spent { .. } => Recovery::RateLimited,
        })
    }

    async fn set_disclosure_level(&self, agent_id: Uuid, level: DisclosureLevel) -> Result<()> {
        let done =
            self.db().execute(sql("update agent set disclosure_level = $1 where agent_id = $2").bind(level.as_str()).bind(agent_id)).await;
        self.recent.forget_all();
        done?;
        Ok(())
    }

    async fn classifications_for_agent(&self, agent_id: Uuid) -> Result<Vec<Classification>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select classification_id, owner_id, classification_key, classification_label, description \
             from classification c where active = $1 and (owner_id is null \
             or owner_id = (select owner_id from agent where agent_id = $2)) \
             order by owner_id is not null, classification_key")
                .bind(true)
                .bind(agent_id),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Classification {
                    classification_id: row.get("classification_id")?,
                    owner_id: row.get("owner_id")?,
                    key: row.get("classification_key")?,
                    label: row.get("classification_label")?,
                    description: row.get("description")?,
                })
            })
            .collect()
    }
}

pub(crate) fn decode_agent(row: &impl Row) -> Result<AgentRecord> {
    decode_agent_as(row, false)
}

/// The agent's columns read beside a declaration's (`d.*`), under the names
/// [`AGENT_BESIDE`] gives them; `agent_id` is the declaration's own.
pub(crate) const AGENT_BESIDE: &str = "a.token_hash as a_token_hash, a.region_code as a_region_code, \
     a.disclosure_level as a_disclosure_level, a.registered_at as a_registered_at, \
     a.trial_granted_milli as a_trial_granted_milli, a.trial_balance_milli as a_trial_balance_milli, \
     a.trial_expires_at as a_trial_expires_at, o.content_inclusion_policy as owner_policy";

/// The agent's row joined to a declaration's `d`, with its owner's policy
/// (what [`AGENT_BESIDE`] selects).
pub(crate) const AGENT_BESIDE_JOIN: &str = "join agent a on a.agent_id = d.agent_id \
     left join owner o on o.owner_id = a.owner_id and o.deleted_at is null";

/// An agent from its own columns, or (`beside`) from [`AGENT_BESIDE`]'s.
pub(crate) fn decode_agent_as(row: &impl Row, beside: bool) -> Result<AgentRecord> {
    macro_rules! column {
        ($name:literal) => {
            if beside { concat!("a_", $name) } else { $name }
        };
    }
    Ok(AgentRecord {
        agent_id: row.get("agent_id")?,
        token_hash: hash32("token_hash", row.get(column!("token_hash"))?)?,
        region_code: row.get(column!("region_code"))?,
        disclosure_level: row.named(column!("disclosure_level"))?,
        registered_at: row.get(column!("registered_at"))?,
        trial_granted: MilliDac(row.get(column!("trial_granted_milli"))?),
        trial_balance: MilliDac(row.get(column!("trial_balance_milli"))?),
        trial_expires_at: row.get(column!("trial_expires_at"))?,
        owner_policy: row.opt_named("owner_policy")?,
    })
}

/// The secret that allows replacing an agent's secrets.
enum Proof<'a> {
    Token(&'a [u8; 32]),
    Recovery(&'a [u8; 32]),
}

impl<E: Engine> SqlStore<E> {
    /// Replaces both secrets if the agent still holds the proof, in one statement.
    async fn replace_secrets(
        &self,
        agent_id: Uuid,
        proof: Proof<'_>,
        new_token_hash: &[u8; 32],
        new_recovery_hash: &[u8; 32],
    ) -> Result<bool> {
        let (column, hash) = match proof {
            Proof::Token(hash) => ("token_hash", hash),
            Proof::Recovery(hash) => ("recovery_hash", hash),
        };
        let done = self
            .db()
            .execute(
                sql(format!("update agent set token_hash = $1, recovery_hash = $2 where agent_id = $3 and {column} = $4"))
                    .bind(new_token_hash)
                    .bind(new_recovery_hash)
                    .bind(agent_id)
                    .bind(hash),
            )
            .await;
        self.recent.forget_all();
        Ok(done? == 1)
    }
}

/// Debits Trial by `amount` if it holds that much and has not expired; the
/// balance left, or `None`. The debit and its condition are one statement:
/// concurrent debits cannot take the balance below zero.
/// Why Trial could not pay: the agent's balance, and whether its Trial has
/// expired (read after `debit_trial` refused, in the same transaction).
pub(crate) async fn trial_shortfall<X: Exec>(tx: &mut X, agent_id: Uuid, now: DateTime<Utc>) -> Result<(MilliDac, bool)> {
    let row = tx.fetch_one(sql("select trial_balance_milli, trial_expires_at from agent where agent_id = $1").bind(agent_id)).await?;
    let expires: DateTime<Utc> = row.get("trial_expires_at")?;
    Ok((MilliDac(row.get("trial_balance_milli")?), expires <= now))
}

pub(crate) async fn debit_trial<X: Exec>(tx: &mut X, agent_id: Uuid, amount: MilliDac, now: DateTime<Utc>) -> Result<Option<i64>> {
    tx.scalar_optional(
        sql("update agent set trial_balance_milli = trial_balance_milli - $1 \
             where agent_id = $2 and trial_balance_milli >= $1 and trial_expires_at > $3 \
             returning trial_balance_milli")
        .bind(amount.milli())
        .bind(agent_id)
        .bind(now),
    )
    .await
}
