//! The owner portal's storage (DAP): owners, sessions, attempt limits, linked
//! agents, owner DABs, owner classification categories and the content-
//! inclusion policy. Like the core store, one SQL body serves both engines
//! (`dap_impl!`), and every check that must not race is part of the statement
//! that writes.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{AgentRecord, Result};

/// A new owner account; the password is already hashed.
#[derive(Clone, Debug)]
pub struct NewOwner {
    pub owner_id: Uuid,
    /// Lower-cased; `None` for an agent-type owner.
    pub email: Option<String>,
    pub password_hash: Option<String>,
    pub owner_type: String,
    pub managing_agent_id: Option<Uuid>,
    pub parent_owner_id: Option<Uuid>,
    pub owner_depth: i32,
    pub browser_language: Option<String>,
    pub timezone: Option<String>,
    pub residence_country: Option<String>,
    pub terms_version: String,
    pub privacy_version: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    pub owner_id: Uuid,
    pub email: Option<String>,
    pub password_hash: Option<String>,
    pub owner_type: String,
    pub managing_agent_id: Option<Uuid>,
    pub parent_owner_id: Option<Uuid>,
    pub owner_depth: i32,
    pub browser_language: Option<String>,
    pub timezone: Option<String>,
    pub residence_country: Option<String>,
    pub residence_declared_at: Option<DateTime<Utc>>,
    pub residence_updated_at: Option<DateTime<Utc>>,
    pub content_inclusion_policy: String,
    pub terms_agreed_at: DateTime<Utc>,
    pub privacy_agreed_at: DateTime<Utc>,
    pub marketing_agreed_at: Option<DateTime<Utc>>,
    pub terms_version: String,
    pub privacy_version: String,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub deletion_response_due_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// An agent as its owner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedAgent {
    pub agent: AgentRecord,
    pub linked_at: Option<DateTime<Utc>>,
    /// The owner-set DAB, if any.
    pub dab_limit: Option<MilliDac>,
}

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
}

/// An owner's category, with its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerClassification {
    pub classification_id: Uuid,
    pub key: String,
    pub label: String,
    pub description: Option<String>,
    pub active: bool,
    pub created_at: DateTime<Utc>,
}

/// How many declarations an agent has on record and what they cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: i64,
    pub dac: MilliDac,
    /// Payment rows (base fee, and premium when there is one) that settled.
    pub settled_rows: i64,
}

#[async_trait]
pub trait DapStore: Send + Sync {
    /// False when the email (or managing agent) already has an account.
    async fn insert_owner(&self, owner: &NewOwner) -> Result<bool>;
    async fn owner(&self, owner_id: Uuid) -> Result<Option<OwnerRecord>>;
    async fn owner_by_email(&self, email: &str) -> Result<Option<OwnerRecord>>;
    async fn owner_by_managing_agent(&self, agent_id: Uuid) -> Result<Option<OwnerRecord>>;
    async fn set_owner_password(&self, owner_id: Uuid, password_hash: &str) -> Result<()>;
    async fn set_owner_residence(&self, owner_id: Uuid, country: &str, now: DateTime<Utc>) -> Result<()>;
    async fn set_owner_marketing(&self, owner_id: Uuid, agreed_at: Option<DateTime<Utc>>) -> Result<()>;
    async fn set_owner_policy(&self, owner_id: Uuid, policy: &str) -> Result<()>;
    /// Starts (`Some`) or cancels (`None`) the deletion grace period.
    async fn set_owner_deletion(&self, owner_id: Uuid, requested: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Result<()>;
    /// Erases owners whose grace period ended before `now`: their agents are
    /// unlinked (and lose the owner's DAB), their sessions, categories and
    /// personal fields are removed; the row stays as a tombstone. Also prunes
    /// expired sessions and attempt windows older than a day. Returns how many
    /// owners were erased.
    async fn erase_due_owners(&self, now: DateTime<Utc>) -> Result<u64>;

    async fn insert_session(&self, session_hash: &[u8; 32], owner_id: Uuid, now: DateTime<Utc>, expires_at: DateTime<Utc>) -> Result<()>;
    /// The owner of an unexpired session.
    async fn session_owner(&self, session_hash: &[u8; 32], now: DateTime<Utc>) -> Result<Option<OwnerRecord>>;
    async fn delete_session(&self, session_hash: &[u8; 32]) -> Result<()>;
    /// Ends every session of the owner but `keep`.
    async fn delete_other_sessions(&self, owner_id: Uuid, keep: &[u8; 32]) -> Result<()>;

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
    /// Unlinks the agent from the owner and drops the owner-set DAB; false if
    /// the owner does not manage it.
    async fn unlink_agent(&self, agent_id: Uuid, owner_id: Uuid) -> Result<bool>;
    /// The owner's agents, oldest link first.
    async fn owner_agents(&self, owner_id: Uuid) -> Result<Vec<LinkedAgent>>;
    /// The agent, if the owner manages it.
    async fn managed_agent(&self, owner_id: Uuid, agent_id: Uuid) -> Result<Option<LinkedAgent>>;
    /// Sets or clears the owner-set DAB; false if the owner does not manage the agent.
    async fn set_agent_dab(&self, agent_id: Uuid, owner_id: Uuid, limit: Option<MilliDac>) -> Result<bool>;
    /// The content-inclusion policy of the agent's owner (`None`: no owner).
    async fn agent_policy(&self, agent_id: Uuid) -> Result<Option<String>>;
    /// Declarations on record (not released or failed) anchored in `[from, to)`.
    async fn declaration_totals(&self, agent_id: Uuid, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Result<Totals>;

    async fn owner_classifications(&self, owner_id: Uuid, include_inactive: bool) -> Result<Vec<OwnerClassification>>;
    /// True if a base category has this key.
    async fn base_classification_exists(&self, key: &str) -> Result<bool>;
    /// False if the owner already has a category with this key (active or not).
    async fn insert_classification(&self, owner_id: Uuid, c: &OwnerClassification) -> Result<bool>;
    /// Updates an active category's label and description (each when `Some`).
    async fn update_classification(
        &self,
        owner_id: Uuid,
        id: Uuid,
        label: Option<&str>,
        description: Option<&str>,
    ) -> Result<Option<OwnerClassification>>;
    /// Deactivates an active category; false if none.
    async fn deactivate_classification(&self, owner_id: Uuid, id: Uuid) -> Result<bool>;
}

/// The columns of `owner`, in the order `decode_owner` reads them.
macro_rules! owner_columns {
    () => {
        "owner_id, email, password_hash, owner_type, managing_agent_id, parent_owner_id, owner_depth, \
         browser_language, timezone, residence_country, residence_declared_at, residence_updated_at, \
         content_inclusion_policy, terms_agreed_at, privacy_agreed_at, marketing_agreed_at, terms_version, \
         privacy_version, deletion_requested_at, deletion_response_due_at, deleted_at, created_at"
    };
}
pub(crate) use owner_columns;

/// Implements `DapStore` for `$store`; `$begin` opens a write transaction.
macro_rules! dap_impl {
    ($store:ident, $db:ty, $begin:literal) => {
        mod dap_impl {
            use super::$store;
            use anchor_domain::MilliDac;
            use async_trait::async_trait;
            use chrono::{DateTime, Utc};
            use sqlx::Row;
            use uuid::Uuid;

            use crate::dap::*;
            use crate::imp::agent_columns;
            use crate::Result;

            type DbRow = <$db as sqlx::Database>::Row;

            fn decode_owner(row: &DbRow) -> Result<OwnerRecord> {
                Ok(OwnerRecord {
                    owner_id: row.try_get("owner_id")?,
                    email: row.try_get("email")?,
                    password_hash: row.try_get("password_hash")?,
                    owner_type: row.try_get("owner_type")?,
                    managing_agent_id: row.try_get("managing_agent_id")?,
                    parent_owner_id: row.try_get("parent_owner_id")?,
                    owner_depth: row.try_get("owner_depth")?,
                    browser_language: row.try_get("browser_language")?,
                    timezone: row.try_get("timezone")?,
                    residence_country: row.try_get("residence_country")?,
                    residence_declared_at: row.try_get("residence_declared_at")?,
                    residence_updated_at: row.try_get("residence_updated_at")?,
                    content_inclusion_policy: row.try_get("content_inclusion_policy")?,
                    terms_agreed_at: row.try_get("terms_agreed_at")?,
                    privacy_agreed_at: row.try_get("privacy_agreed_at")?,
                    marketing_agreed_at: row.try_get("marketing_agreed_at")?,
                    terms_version: row.try_get("terms_version")?,
                    privacy_version: row.try_get("privacy_version")?,
                    deletion_requested_at: row.try_get("deletion_requested_at")?,
                    deletion_response_due_at: row.try_get("deletion_response_due_at")?,
                    deleted_at: row.try_get("deleted_at")?,
                    created_at: row.try_get("created_at")?,
                })
            }

            fn decode_classification(row: &DbRow) -> Result<OwnerClassification> {
                Ok(OwnerClassification {
                    classification_id: row.try_get("classification_id")?,
                    key: row.try_get("classification_key")?,
                    label: row.try_get("classification_label")?,
                    description: row.try_get("description")?,
                    active: row.try_get("active")?,
                    created_at: row.try_get("created_at")?,
                })
            }

            fn decode_linked(row: &DbRow) -> Result<LinkedAgent> {
                Ok(LinkedAgent {
                    agent: super::decode_agent(row)?,
                    linked_at: row.try_get("linked_at")?,
                    dab_limit: row.try_get::<Option<i64>, _>("dab_limit_milli")?.map(MilliDac),
                })
            }

            fn is_unique_violation(error: &sqlx::Error) -> bool {
                matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
            }

            #[async_trait]
            impl DapStore for $store {
                async fn insert_owner(&self, o: &NewOwner) -> Result<bool> {
                    let done = sqlx::query(
                        "insert into owner (owner_id, email, password_hash, owner_type, managing_agent_id, parent_owner_id, \
                         owner_depth, browser_language, timezone, residence_country, residence_declared_at, \
                         terms_agreed_at, privacy_agreed_at, terms_version, privacy_version, created_at) \
                         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, $12)",
                    )
                    .bind(o.owner_id)
                    .bind(o.email.as_deref())
                    .bind(o.password_hash.as_deref())
                    .bind(&o.owner_type)
                    .bind(o.managing_agent_id)
                    .bind(o.parent_owner_id)
                    .bind(o.owner_depth)
                    .bind(o.browser_language.as_deref())
                    .bind(o.timezone.as_deref())
                    .bind(o.residence_country.as_deref())
                    .bind(o.residence_country.as_ref().map(|_| o.created_at))
                    .bind(o.created_at)
                    .bind(&o.terms_version)
                    .bind(&o.privacy_version)
                    .execute(&self.pool)
                    .await;
                    match done {
                        Ok(_) => Ok(true),
                        Err(e) if is_unique_violation(&e) => Ok(false),
                        Err(e) => Err(e.into()),
                    }
                }

                async fn owner(&self, owner_id: Uuid) -> Result<Option<OwnerRecord>> {
                    let row = sqlx::query(concat!("select ", owner_columns!(), " from owner where owner_id = $1"))
                        .bind(owner_id)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(decode_owner).transpose()
                }

                async fn owner_by_email(&self, email: &str) -> Result<Option<OwnerRecord>> {
                    let row = sqlx::query(concat!("select ", owner_columns!(), " from owner where email = $1"))
                        .bind(email)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(decode_owner).transpose()
                }

                async fn owner_by_managing_agent(&self, agent_id: Uuid) -> Result<Option<OwnerRecord>> {
                    let row = sqlx::query(concat!("select ", owner_columns!(), " from owner where managing_agent_id = $1"))
                        .bind(agent_id)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(decode_owner).transpose()
                }

                async fn set_owner_password(&self, owner_id: Uuid, password_hash: &str) -> Result<()> {
                    sqlx::query("update owner set password_hash = $1 where owner_id = $2")
                        .bind(password_hash)
                        .bind(owner_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn set_owner_residence(&self, owner_id: Uuid, country: &str, now: DateTime<Utc>) -> Result<()> {
                    sqlx::query(
                        "update owner set residence_country = $1, residence_updated_at = $2, \
                         residence_declared_at = coalesce(residence_declared_at, $2) where owner_id = $3",
                    )
                    .bind(country)
                    .bind(now)
                    .bind(owner_id)
                    .execute(&self.pool)
                    .await?;
                    Ok(())
                }

                async fn set_owner_marketing(&self, owner_id: Uuid, agreed_at: Option<DateTime<Utc>>) -> Result<()> {
                    sqlx::query("update owner set marketing_agreed_at = $1 where owner_id = $2")
                        .bind(agreed_at)
                        .bind(owner_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn set_owner_policy(&self, owner_id: Uuid, policy: &str) -> Result<()> {
                    sqlx::query("update owner set content_inclusion_policy = $1 where owner_id = $2")
                        .bind(policy)
                        .bind(owner_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn set_owner_deletion(&self, owner_id: Uuid, requested: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Result<()> {
                    sqlx::query("update owner set deletion_requested_at = $1, deletion_response_due_at = $2 where owner_id = $3 and deleted_at is null")
                        .bind(requested.map(|r| r.0))
                        .bind(requested.map(|r| r.1))
                        .bind(owner_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn erase_due_owners(&self, now: DateTime<Utc>) -> Result<u64> {
                    let mut tx = self.pool.begin_with($begin).await?;
                    let due: Vec<Uuid> = sqlx::query_scalar(
                        "select owner_id from owner where deleted_at is null and deletion_response_due_at is not null \
                         and deletion_response_due_at <= $1",
                    )
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                    for owner_id in &due {
                        sqlx::query("update agent set owner_id = null, linked_at = null, dab_limit_milli = null where owner_id = $1")
                            .bind(owner_id)
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query("delete from owner_session where owner_id = $1").bind(owner_id).execute(&mut *tx).await?;
                        sqlx::query("delete from classification where owner_id = $1").bind(owner_id).execute(&mut *tx).await?;
                        sqlx::query(
                            "update owner set deleted_at = $1, email = null, password_hash = null, browser_language = null, \
                             timezone = null, residence_country = null, marketing_agreed_at = null where owner_id = $2",
                        )
                        .bind(now)
                        .bind(owner_id)
                        .execute(&mut *tx)
                        .await?;
                    }
                    sqlx::query("delete from owner_session where expires_at <= $1").bind(now).execute(&mut *tx).await?;
                    sqlx::query("delete from attempt_window where window_start <= $1")
                        .bind(now - chrono::Duration::days(1))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(due.len() as u64)
                }

                async fn insert_session(&self, session_hash: &[u8; 32], owner_id: Uuid, now: DateTime<Utc>, expires_at: DateTime<Utc>) -> Result<()> {
                    sqlx::query("insert into owner_session (session_hash, owner_id, created_at, expires_at) values ($1, $2, $3, $4)")
                        .bind(session_hash.to_vec())
                        .bind(owner_id)
                        .bind(now)
                        .bind(expires_at)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn session_owner(&self, session_hash: &[u8; 32], now: DateTime<Utc>) -> Result<Option<OwnerRecord>> {
                    let row = sqlx::query(concat!(
                        "select ", owner_columns!(), " from owner where deleted_at is null and owner_id = \
                         (select owner_id from owner_session where session_hash = $1 and expires_at > $2)"
                    ))
                    .bind(session_hash.to_vec())
                    .bind(now)
                    .fetch_optional(&self.pool)
                    .await?;
                    row.as_ref().map(decode_owner).transpose()
                }

                async fn delete_session(&self, session_hash: &[u8; 32]) -> Result<()> {
                    sqlx::query("delete from owner_session where session_hash = $1")
                        .bind(session_hash.to_vec())
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn delete_other_sessions(&self, owner_id: Uuid, keep: &[u8; 32]) -> Result<()> {
                    sqlx::query("delete from owner_session where owner_id = $1 and session_hash <> $2")
                        .bind(owner_id)
                        .bind(keep.to_vec())
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn link_agent(
                    &self,
                    agent_id: Uuid,
                    owner_id: Uuid,
                    token_hash: &[u8; 32],
                    new_token_hash: &[u8; 32],
                    now: DateTime<Utc>,
                    max_agents: i64,
                ) -> Result<Link> {
                    let mut tx = self.pool.begin_with($begin).await?;
                    // The owner row is the lock that serialises this owner's links.
                    sqlx::query("update owner set owner_depth = owner_depth where owner_id = $1")
                        .bind(owner_id)
                        .execute(&mut *tx)
                        .await?;
                    let current: Option<(Option<Uuid>, Vec<u8>)> =
                        sqlx::query_as("select owner_id, token_hash from agent where agent_id = $1")
                            .bind(agent_id)
                            .fetch_optional(&mut *tx)
                            .await?;
                    let Some((current_owner, stored)) = current else { return Ok(Link::WrongToken) };
                    // Hashes of 256-bit secrets: comparing them leaks nothing about a token.
                    if stored.as_slice() != token_hash.as_slice() {
                        return Ok(Link::WrongToken);
                    }
                    match current_owner {
                        Some(other) if other != owner_id => return Ok(Link::LinkedElsewhere),
                        Some(_) => {}
                        None => {
                            let count: i64 = sqlx::query_scalar("select count(*) from agent where owner_id = $1")
                                .bind(owner_id)
                                .fetch_one(&mut *tx)
                                .await?;
                            if count >= max_agents {
                                return Ok(Link::TooMany);
                            }
                        }
                    }
                    let linked_at: Option<DateTime<Utc>> = sqlx::query_scalar(
                        "update agent set owner_id = $1, token_hash = $2, linked_at = coalesce(linked_at, $3) \
                         where agent_id = $4 and token_hash = $5 and (owner_id is null or owner_id = $1) returning linked_at",
                    )
                    .bind(owner_id)
                    .bind(new_token_hash.to_vec())
                    .bind(now)
                    .bind(agent_id)
                    .bind(token_hash.to_vec())
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(linked_at) = linked_at else { return Ok(Link::WrongToken) };
                    tx.commit().await?;
                    Ok(Link::Linked { linked_at })
                }

                async fn unlink_agent(&self, agent_id: Uuid, owner_id: Uuid) -> Result<bool> {
                    let done = sqlx::query(
                        "update agent set owner_id = null, linked_at = null, dab_limit_milli = null where agent_id = $1 and owner_id = $2",
                    )
                    .bind(agent_id)
                    .bind(owner_id)
                    .execute(&self.pool)
                    .await?;
                    Ok(done.rows_affected() == 1)
                }

                async fn owner_agents(&self, owner_id: Uuid) -> Result<Vec<LinkedAgent>> {
                    let rows = sqlx::query(concat!(
                        "select ", agent_columns!(), ", linked_at, dab_limit_milli from agent where owner_id = $1 \
                         order by linked_at, agent_id"
                    ))
                    .bind(owner_id)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter().map(decode_linked).collect()
                }

                async fn managed_agent(&self, owner_id: Uuid, agent_id: Uuid) -> Result<Option<LinkedAgent>> {
                    let row = sqlx::query(concat!(
                        "select ", agent_columns!(), ", linked_at, dab_limit_milli from agent where owner_id = $1 and agent_id = $2"
                    ))
                    .bind(owner_id)
                    .bind(agent_id)
                    .fetch_optional(&self.pool)
                    .await?;
                    row.as_ref().map(decode_linked).transpose()
                }

                async fn set_agent_dab(&self, agent_id: Uuid, owner_id: Uuid, limit: Option<MilliDac>) -> Result<bool> {
                    let done = sqlx::query("update agent set dab_limit_milli = $1 where agent_id = $2 and owner_id = $3")
                        .bind(limit.map(|l| l.milli()))
                        .bind(agent_id)
                        .bind(owner_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(done.rows_affected() == 1)
                }

                async fn agent_policy(&self, agent_id: Uuid) -> Result<Option<String>> {
                    Ok(sqlx::query_scalar(
                        "select o.content_inclusion_policy from agent a join owner o on o.owner_id = a.owner_id \
                         where a.agent_id = $1 and o.deleted_at is null",
                    )
                    .bind(agent_id)
                    .fetch_optional(&self.pool)
                    .await?)
                }

                async fn declaration_totals(&self, agent_id: Uuid, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Result<Totals> {
                    let row = sqlx::query(
                        "select count(*) as n, cast(coalesce(sum(dac_amount_milli), 0) as bigint) as dac, \
                         cast(coalesce(sum(case when settlement_status = 'settled' then \
                         (case when dac_amount_milli > base_fee_milli then 2 else 1 end) else 0 end), 0) as bigint) as settled \
                         from declaration \
                         where agent_id = $1 and settlement_status not in ('released', 'failed') \
                         and ($2 is null or anchored_at >= $2) and ($3 is null or anchored_at < $3)",
                    )
                    .bind(agent_id)
                    .bind(from)
                    .bind(to)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(Totals { count: row.try_get("n")?, dac: MilliDac(row.try_get("dac")?), settled_rows: row.try_get("settled")? })
                }

                async fn owner_classifications(&self, owner_id: Uuid, include_inactive: bool) -> Result<Vec<OwnerClassification>> {
                    let rows = sqlx::query(
                        "select classification_id, classification_key, classification_label, description, active, created_at \
                         from classification where owner_id = $1 and (active = $2 or $3) order by classification_key",
                    )
                    .bind(owner_id)
                    .bind(true)
                    .bind(include_inactive)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter().map(decode_classification).collect()
                }

                async fn base_classification_exists(&self, key: &str) -> Result<bool> {
                    let found: Option<i32> = sqlx::query_scalar("select 1 from classification where owner_id is null and classification_key = $1")
                        .bind(key)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(found.is_some())
                }

                async fn insert_classification(&self, owner_id: Uuid, c: &OwnerClassification) -> Result<bool> {
                    let done = sqlx::query(
                        "insert into classification (classification_id, owner_id, classification_key, classification_label, \
                         description, active, created_at) values ($1, $2, $3, $4, $5, $6, $7)",
                    )
                    .bind(c.classification_id)
                    .bind(owner_id)
                    .bind(&c.key)
                    .bind(&c.label)
                    .bind(c.description.as_deref())
                    .bind(true)
                    .bind(c.created_at)
                    .execute(&self.pool)
                    .await;
                    match done {
                        Ok(_) => Ok(true),
                        Err(e) if is_unique_violation(&e) => Ok(false),
                        Err(e) => Err(e.into()),
                    }
                }

                async fn update_classification(
                    &self,
                    owner_id: Uuid,
                    id: Uuid,
                    label: Option<&str>,
                    description: Option<&str>,
                ) -> Result<Option<OwnerClassification>> {
                    let row = sqlx::query(
                        "update classification set classification_label = coalesce($1, classification_label), \
                         description = coalesce($2, description) \
                         where classification_id = $3 and owner_id = $4 and active = $5 \
                         returning classification_id, classification_key, classification_label, description, active, created_at",
                    )
                    .bind(label)
                    .bind(description)
                    .bind(id)
                    .bind(owner_id)
                    .bind(true)
                    .fetch_optional(&self.pool)
                    .await?;
                    row.as_ref().map(decode_classification).transpose()
                }

                async fn deactivate_classification(&self, owner_id: Uuid, id: Uuid) -> Result<bool> {
                    let done = sqlx::query(
                        "update classification set active = $1 where classification_id = $2 and owner_id = $3 and active = $4",
                    )
                    .bind(false)
                    .bind(id)
                    .bind(owner_id)
                    .bind(true)
                    .execute(&self.pool)
                    .await?;
                    Ok(done.rows_affected() == 1)
                }
            }
        }
    };
}
pub(crate) use dap_impl;
