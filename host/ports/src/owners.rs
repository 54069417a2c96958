//! Owners (DAP): accounts, sessions, erasure after the deletion grace period, and owner classification categories.

use anchor_domain::owners::{ContentPolicy, OwnerType, Residence};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{OwnerClassification, OwnerRecord};

/// A new owner account; the password is already hashed.
#[derive(Clone, Debug)]
pub struct NewOwner {
    pub owner_id: Uuid,
    /// Lower-cased; `None` for an agent-type owner.
    pub email: Option<String>,
    pub password_hash: Option<String>,
    pub owner_type: OwnerType,
    pub managing_agent_id: Option<Uuid>,
    pub parent_owner_id: Option<Uuid>,
    pub owner_depth: i32,
    pub browser_language: Option<String>,
    pub timezone: Option<String>,
    pub residence_country: Option<Residence>,
    pub terms_version: String,
    pub privacy_version: String,
    pub created_at: DateTime<Utc>,
}

#[async_trait]
pub trait OwnerStore: Send + Sync {
    /// False when the email (or managing agent) already has an account.
    async fn insert_owner(&self, owner: &NewOwner) -> Result<bool>;
    async fn owner(&self, owner_id: Uuid) -> Result<Option<OwnerRecord>>;
    async fn owner_by_email(&self, email: &str) -> Result<Option<OwnerRecord>>;
    async fn owner_by_managing_agent(&self, agent_id: Uuid) -> Result<Option<OwnerRecord>>;
    /// The agent-type owners `owner_id` registered, oldest first.
    async fn agent_owners_of(&self, owner_id: Uuid) -> Result<Vec<OwnerRecord>>;
    async fn set_owner_password(&self, owner_id: Uuid, password_hash: &str) -> Result<()>;
    async fn set_owner_residence(&self, owner_id: Uuid, country: Residence, now: DateTime<Utc>) -> Result<()>;
    async fn set_owner_marketing(&self, owner_id: Uuid, agreed_at: Option<DateTime<Utc>>) -> Result<()>;
    async fn set_owner_policy(&self, owner_id: Uuid, policy: ContentPolicy) -> Result<()>;
    /// Starts (`Some`) or cancels (`None`) the deletion grace period;
    /// false when it was already started, or not started to cancel (one
    /// of several requests at once wins).
    async fn set_owner_deletion(&self, owner_id: Uuid, requested: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Result<bool>;
    /// Erases owners whose grace period ended before `now`: their agents are
    /// unlinked (and lose the owner's DAB), their sessions, categories and
    /// personal fields are removed; the row stays as a tombstone. Also prunes
    /// expired sessions and attempt windows older than a day. Returns how many
    /// owners were erased.
    async fn erase_due_owners(&self, now: DateTime<Utc>) -> Result<u64>;
    /// Opens a session for the owner if its password hash is still the one
    /// verified (`None`: an owner without a password); false if the
    /// password changed (or the account was deleted) meanwhile, so a
    /// session opened with an old password cannot outlive the change that
    /// ended the others.
    async fn insert_session(
        &self,
        session_hash: &[u8; 32],
        owner_id: Uuid,
        verified_hash: Option<&str>,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<bool>;
    /// The owner of an unexpired session.
    async fn session_owner(&self, session_hash: &[u8; 32], now: DateTime<Utc>) -> Result<Option<OwnerRecord>>;
    async fn delete_session(&self, session_hash: &[u8; 32]) -> Result<()>;
    /// Ends every session of the owner, or every one but `keep`.
    async fn end_owner_sessions(&self, owner_id: Uuid, keep: Option<&[u8; 32]>) -> Result<()>;
    /// The owner a device (a browser the owner signed in from) belongs to.
    async fn device_owner(&self, device_hash: &[u8; 32]) -> Result<Option<Uuid>>;
    /// Remembers a device the owner signed in from; only its most recent
    /// [`DEVICES_KEPT`] are kept.
    async fn remember_device(&self, owner_id: Uuid, device_hash: &[u8; 32], now: DateTime<Utc>) -> Result<()>;
    async fn owner_classifications(&self, owner_id: Uuid, include_inactive: bool) -> Result<Vec<OwnerClassification>>;
    /// True if a base category has this key.
    async fn base_classification_exists(&self, key: &str) -> Result<bool>;
    /// Adds an owner's category, unless its key is taken or the owner has
    /// `max` categories already (active or not, counted under its row's lock).
    async fn insert_classification(&self, owner_id: Uuid, c: &OwnerClassification, max: i64) -> Result<CategoryAdded>;
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

/// What adding an owner's category concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CategoryAdded {
    Added,
    /// The owner has a category with that key already.
    Exists,
    /// The owner has its most categories already.
    TooMany,
    /// The owner was erased (or never was).
    OwnerGone,
}
