//! Owners (DAP): accounts, sessions, erasure after the deletion grace period, and owner classification categories.

use anchor_domain::owners::{ContentPolicy, Residence};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

/// The devices kept per owner: a sign-in from an older one counts as from a new client.
pub const DEVICES_KEPT: i64 = 20;

#[async_trait]
impl<E: Engine> OwnerStore for SqlStore<E> {
    async fn insert_owner(&self, o: &NewOwner) -> Result<bool> {
        let done = self
            .db()
            .execute(
                sql("insert into owner (owner_id, email, password_hash, owner_type, managing_agent_id, parent_owner_id, \
             owner_depth, browser_language, timezone, residence_country, residence_declared_at, \
             terms_agreed_at, privacy_agreed_at, terms_version, privacy_version, created_at) \
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, $12)")
                .bind(o.owner_id)
                .bind(o.email.as_deref())
                .bind(o.password_hash.as_deref())
                .bind(o.owner_type.as_str())
                .bind(o.managing_agent_id)
                .bind(o.parent_owner_id)
                .bind(o.owner_depth)
                .bind(o.browser_language.as_deref())
                .bind(o.timezone.as_deref())
                .bind(o.residence_country.map(Residence::as_str))
                .bind(o.residence_country.as_ref().map(|_| o.created_at))
                .bind(o.created_at)
                .bind(&o.terms_version)
                .bind(&o.privacy_version),
            )
            .await;
        match done {
            Ok(_) => Ok(true),
            Err(e) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn owner(&self, owner_id: Uuid) -> Result<Option<OwnerRecord>> {
        let row = self.db().fetch_optional(sql("select * from owner where owner_id = $1").bind(owner_id)).await?;
        row.as_ref().map(decode_owner).transpose()
    }

    async fn agent_owners_of(&self, owner_id: Uuid) -> Result<Vec<OwnerRecord>> {
        let rows =
            self.db().fetch_all(sql("select * from owner where parent_owner_id = $1 order by created_at, owner_id").bind(owner_id)).await?;
        rows.iter().map(decode_owner).collect()
    }

    async fn owner_by_email(&self, email: &str) -> Result<Option<OwnerRecord>> {
        let row = self.db().fetch_optional(sql("select * from owner where email = $1").bind(email)).await?;
        row.as_ref().map(decode_owner).transpose()
    }

    async fn owner_by_managing_agent(&self, agent_id: Uuid) -> Result<Option<OwnerRecord>> {
        let row = self.db().fetch_optional(sql("select * from owner where managing_agent_id = $1").bind(agent_id)).await?;
        row.as_ref().map(decode_owner).transpose()
    }

    async fn set_owner_password(&self, owner_id: Uuid, password_hash: &str) -> Result<()> {
        self.db().execute(sql("update owner set password_hash = $1 where owner_id = $2").bind(password_hash).bind(owner_id)).await?;
        Ok(())
    }

    async fn set_owner_residence(&self, owner_id: Uuid, country: Residence, now: DateTime<Utc>) -> Result<()> {
        self.db()
            .execute(
                sql("update owner set residence_country = $1, residence_updated_at = $2, \
             residence_declared_at = coalesce(residence_declared_at, $2) where owner_id = $3")
                .bind(country.as_str())
                .bind(now)
                .bind(owner_id),
            )
            .await?;
        Ok(())
    }

    async fn set_owner_marketing(&self, owner_id: Uuid, agreed_at: Option<DateTime<Utc>>) -> Result<()> {
        self.db().execute(sql("update owner set marketing_agreed_at = $1 where owner_id = $2").bind(agreed_at).bind(owner_id)).await?;
        Ok(())
    }

    async fn set_owner_policy(&self, owner_id: Uuid, policy: ContentPolicy) -> Result<()> {
        let done = async {
            self.db()
                .execute(sql("update owner set content_inclusion_policy = $1 where owner_id = $2").bind(policy.as_str()).bind(owner_id))
                .await?;
            Ok(())
        }
        .await;
        // A DD create reads what this changed: no agent read before it is used after it.
        self.recent.forget_all();
        done
    }

    async fn set_owner_deletion(&self, owner_id: Uuid, requested: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Result<bool> {
        // Only from the other state: of two requests at once, one changes it.
        let text = if requested.is_some() {
            "update owner set deletion_requested_at = $1, deletion_response_due_at = $2 \
             where owner_id = $3 and deleted_at is null and deletion_requested_at is null"
        } else {
            "update owner set deletion_requested_at = $1, deletion_response_due_at = $2 \
             where owner_id = $3 and deleted_at is null and deletion_requested_at is not null"
        };
        let changed = self.db().execute(sql(text).bind(requested.map(|r| r.0)).bind(requested.map(|r| r.1)).bind(owner_id)).await?;
        Ok(changed == 1)
    }

    async fn erase_due_owners(&self, now: DateTime<Utc>) -> Result<u64> {
        let done = async {
            let mut tx = self.begin_write().await?;
            let due: Vec<Uuid> = tx
                .scalar_all(
                    sql("select owner_id from owner where deleted_at is null and deletion_response_due_at is not null \
                 and deletion_response_due_at <= $1 order by owner_id")
                    .bind(now),
                )
                .await?;
            let mut erased = 0;
            for owner_id in &due {
                // Erased only if still due when its row is written: a deletion
                // cancelled (or erased by another host) since the read is left alone.
                let tombstoned = tx
                    .execute(
                        sql("update owner set deleted_at = $1, email = null, password_hash = null, browser_language = null, \
                             timezone = null, residence_country = null, marketing_agreed_at = null where owner_id = $2 \
                             and deleted_at is null and deletion_response_due_at is not null and deletion_response_due_at <= $1")
                        .bind(now)
                        .bind(owner_id),
                    )
                    .await?;
                if tombstoned == 0 {
                    continue;
                }
                erased += 1;
                tx.execute(
                    sql("update agent set owner_id = null, linked_at = null, dab_limit_milli = null where owner_id = $1").bind(owner_id),
                )
                .await?;
                // Its human shares of its agents' tool sales end with the links.
                tx.execute(
                    sql("update tsl_human_share set ended_at = $1, end_reason = 'owner_erased' where owner_id = $2 and ended_at is null")
                        .bind(now)
                        .bind(owner_id),
                )
                .await?;
                tx.execute(sql("delete from owner_session where owner_id = $1").bind(owner_id)).await?;
                tx.execute(sql("delete from owner_device where owner_id = $1").bind(owner_id)).await?;
                tx.execute(sql("delete from classification where owner_id = $1").bind(owner_id)).await?;
            }
            tx.execute(sql("delete from owner_session where expires_at <= $1").bind(now)).await?;
            tx.execute(sql("delete from attempt_window where window_start <= $1").bind(now - chrono::Duration::days(1))).await?;
            tx.commit().await?;
            Ok(erased)
        }
        .await;
        // A DD create reads what this changed (a job runs this often: only
        // when it erased one, or failed): no agent read before it is used after it.
        if !matches!(done, Ok(0)) {
            self.recent.forget_all();
        }
        done
    }

    async fn insert_session(
        &self,
        session_hash: &[u8; 32],
        owner_id: Uuid,
        verified_hash: Option<&str>,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<bool> {
        // The owner's row is locked while the session goes in: a password
        // change either commits first (the hash differs, nothing goes in) or
        // waits for this insert, and then ends this session with the others.
        let inserted = self
            .db()
            .execute(
                sql(format!(
                    "insert into owner_session (session_hash, owner_id, created_at, expires_at) \
                     select $1, owner_id, $3, $4 from owner where owner_id = $2 and deleted_at is null \
                     and coalesce(password_hash, '') = coalesce($5, ''){}",
                    self.db.for_update()
                ))
                .bind(session_hash)
                .bind(owner_id)
                .bind(now)
                .bind(expires_at)
                .bind(verified_hash),
            )
            .await?;
        Ok(inserted == 1)
    }

    async fn session_owner(&self, session_hash: &[u8; 32], now: DateTime<Utc>) -> Result<Option<OwnerRecord>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select * from owner where deleted_at is null and owner_id = \
             (select owner_id from owner_session where session_hash = $1 and expires_at > $2)")
                .bind(session_hash)
                .bind(now),
            )
            .await?;
        row.as_ref().map(decode_owner).transpose()
    }

    async fn delete_session(&self, session_hash: &[u8; 32]) -> Result<()> {
        self.db().execute(sql("delete from owner_session where session_hash = $1").bind(session_hash)).await?;
        Ok(())
    }

    async fn end_owner_sessions(&self, owner_id: Uuid, keep: Option<&[u8; 32]>) -> Result<()> {
        let delete = match keep {
            Some(keep) => sql("delete from owner_session where owner_id = $1 and session_hash <> $2").bind(owner_id).bind(keep),
            None => sql("delete from owner_session where owner_id = $1").bind(owner_id),
        };
        self.db().execute(delete).await?;
        Ok(())
    }

    async fn device_owner(&self, device_hash: &[u8; 32]) -> Result<Option<Uuid>> {
        self.db().scalar_optional(sql("select owner_id from owner_device where device_hash = $1").bind(device_hash)).await
    }

    async fn remember_device(&self, owner_id: Uuid, device_hash: &[u8; 32], now: DateTime<Utc>) -> Result<()> {
        let mut tx = self.begin_write().await?;
        tx.execute(
            sql("insert into owner_device (device_hash, owner_id, created_at) select $1, owner_id, $3 from owner \
                 where owner_id = $2 and deleted_at is null on conflict (device_hash) do nothing")
            .bind(device_hash)
            .bind(owner_id)
            .bind(now),
        )
        .await?;
        tx.execute(
            sql("delete from owner_device where owner_id = $1 and device_hash not in \
                 (select device_hash from owner_device where owner_id = $1 order by created_at desc limit $2)")
            .bind(owner_id)
            .bind(DEVICES_KEPT),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn owner_classifications(&self, owner_id: Uuid, include_inactive: bool) -> Result<Vec<OwnerClassification>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select classification_id, classification_key, classification_label, description, active, created_at \
             from classification where owner_id = $1 and (active = $2 or $3) order by classification_key")
                .bind(owner_id)
                .bind(true)
                .bind(include_inactive),
            )
            .await?;
        rows.iter().map(decode_classification).collect()
    }

    async fn base_classification_exists(&self, key: &str) -> Result<bool> {
        let found: Option<i32> = self
            .db()
            .scalar_optional(sql("select 1 from classification where owner_id is null and classification_key = $1").bind(key))
            .await?;
        Ok(found.is_some())
    }

    async fn insert_classification(&self, owner_id: Uuid, c: &OwnerClassification, max: i64) -> Result<CategoryAdded> {
        let mut tx = self.begin_write().await?;
        // An erasure that went first leaves nothing to add to (it deleted the
        // owner's categories under this lock); one that comes after deletes this one too.
        let live: Option<Uuid> = tx
            .scalar_optional(
                sql(format!("select owner_id from owner where owner_id = $1 and deleted_at is null{}", self.db.for_update()))
                    .bind(owner_id),
            )
            .await?;
        if live.is_none() {
            return Ok(CategoryAdded::OwnerGone);
        }
        let row = tx
            .fetch_one(
                sql("select (select count(*) from classification where owner_id = $1) as held, \
                            (select count(*) from classification where owner_id = $1 and classification_key = $2) as same")
                .bind(owner_id)
                .bind(&c.key),
            )
            .await?;
        let (held, same): (i64, i64) = (row.get("held")?, row.get("same")?);
        if same > 0 {
            return Ok(CategoryAdded::Exists);
        }
        if held >= max {
            return Ok(CategoryAdded::TooMany);
        }
        let done = tx
            .execute(
                sql("insert into classification (classification_id, owner_id, classification_key, classification_label, \
             description, active, created_at) values ($1, $2, $3, $4, $5, $6, $7)")
                .bind(c.classification_id)
                .bind(owner_id)
                .bind(&c.key)
                .bind(&c.label)
                .bind(c.description.as_deref())
                .bind(true)
                .bind(c.created_at),
            )
            .await;
        match done {
            Ok(_) => {
                tx.commit().await?;
                Ok(CategoryAdded::Added)
            }
            Err(e) if e.is_unique_violation() => Ok(CategoryAdded::Exists),
            Err(e) => Err(e),
        }
    }

    async fn update_classification(
        &self,
        owner_id: Uuid,
        id: Uuid,
        label: Option<&str>,
        description: Option<&str>,
    ) -> Result<Option<OwnerClassification>> {
        let row = self
            .db()
            .fetch_optional(
                sql("update classification set classification_label = coalesce($1, classification_label), \
             description = coalesce($2, description) \
             where classification_id = $3 and owner_id = $4 and active = $5 \
             returning classification_id, classification_key, classification_label, description, active, created_at")
                .bind(label)
                .bind(description)
                .bind(id)
                .bind(owner_id)
                .bind(true),
            )
            .await?;
        row.as_ref().map(decode_classification).transpose()
    }

    async fn deactivate_classification(&self, owner_id: Uuid, id: Uuid) -> Result<bool> {
        let done = self
            .db()
            .execute(
                sql("update classification set active = $1 where classification_id = $2 and owner_id = $3 and active = $4")
                    .bind(false)
                    .bind(id)
                    .bind(owner_id)
                    .bind(true),
            )
            .await?;
        Ok(done == 1)
    }
}

fn decode_owner(row: &impl Row) -> Result<OwnerRecord> {
    Ok(OwnerRecord {
        owner_id: row.get("owner_id")?,
        email: row.get("email")?,
        password_hash: row.get("password_hash")?,
        owner_type: row.named("owner_type")?,
        managing_agent_id: row.get("managing_agent_id")?,
        parent_owner_id: row.get("parent_owner_id")?,
        owner_depth: row.get("owner_depth")?,
        browser_language: row.get("browser_language")?,
        timezone: row.get("timezone")?,
        residence_country: row.opt_named("residence_country")?,
        residence_declared_at: row.get("residence_declared_at")?,
        residence_updated_at: row.get("residence_updated_at")?,
        content_inclusion_policy: row.named("content_inclusion_policy")?,
        terms_agreed_at: row.get("terms_agreed_at")?,
        privacy_agreed_at: row.get("privacy_agreed_at")?,
        marketing_agreed_at: row.get("marketing_agreed_at")?,
        terms_version: row.get("terms_version")?,
        privacy_version: row.get("privacy_version")?,
        deletion_requested_at: row.get("deletion_requested_at")?,
        deletion_response_due_at: row.get("deletion_response_due_at")?,
        deleted_at: row.get("deleted_at")?,
        created_at: row.get("created_at")?,
    })
}

fn decode_classification(row: &impl Row) -> Result<OwnerClassification> {
    Ok(OwnerClassification {
        classification_id: row.get("classification_id")?,
        key: row.get("classification_key")?,
        label: row.get("classification_label")?,
        description: row.get("description")?,
        active: row.get("active")?,
        created_at: row.get("created_at")?,
    })
}
