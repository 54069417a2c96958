//! The owner's own account: residence, marketing consent, deletion with a
//! grace period, restore, and an export of everything kept about it.
//!
//! Deletion starts a grace period of `deletion_grace_days` (30). The owner may
//! still sign in and restore the account until it ends. Then the host holding
//! the lease erases it (`jobs`): its agents are unlinked (they keep their
//! records and tokens and lose the owner's DAB, categories and policy),
//! sessions and categories are removed, the personal fields are cleared, and
//! a tombstone row remains.

use chrono::{DateTime, Duration, Utc};

use anchor_domain::owners::Residence;
use anchor_domain::records::{HumanShareRecord, LinkedAgent, OwnerClassification, OwnerRecord};

use crate::{AppError, AppResult, Services};

async fn reload(services: &Services, owner: &OwnerRecord) -> AppResult<OwnerRecord> {
    services.store.owner(owner.owner_id).await?.ok_or_else(|| AppError::not_found("OWNER_NOT_FOUND", "the owner account no longer exists"))
}

/// Declares or changes the country of residence.
pub async fn set_residence(services: &Services, owner: &OwnerRecord, residence: Residence) -> AppResult<OwnerRecord> {
    services.store.set_owner_residence(owner.owner_id, residence, services.clock.now()).await?;
    reload(services, owner).await
}

/// Gives (keeping the first time it was given) or withdraws marketing
/// consent; the time it stands from, if given.
pub async fn set_marketing(services: &Services, owner: &OwnerRecord, agreed: bool) -> AppResult<Option<DateTime<Utc>>> {
    let at = agreed.then(|| owner.marketing_agreed_at.unwrap_or_else(|| services.clock.now()));
    services.store.set_owner_marketing(owner.owner_id, at).await?;
    Ok(at)
}

/// Starts the deletion grace period (password confirmed).
pub async fn request_deletion(services: &Services, owner: &OwnerRecord, password: &str) -> AppResult<OwnerRecord> {
    super::confirm_password(services, owner, password).await?;
    let now = services.clock.now();
    let due = now + Duration::days(services.config.owners.deletion_grace_days);
    // The store starts it only if it is not started (by this request or
    // another at the same time): the state read with the session is not asked.
    if !services.store.set_owner_deletion(owner.owner_id, Some((now, due))).await? {
        return Err(AppError::Conflict {
            code: "DELETION_ALREADY_REQUESTED",
            message: "deletion is already pending; POST /dap/account/restore cancels it".into(),
        });
    }
    reload(services, owner).await
}

/// Cancels a pending deletion inside its grace period.
pub async fn restore(services: &Services, owner: &OwnerRecord) -> AppResult<()> {
    if !services.store.set_owner_deletion(owner.owner_id, None).await? {
        return Err(AppError::Conflict { code: "NOT_PENDING_DELETION", message: "no deletion is pending for this account".into() });
    }
    Ok(())
}

/// Everything kept about an owner account.
#[derive(Clone, Debug)]
pub struct Export {
    pub at: DateTime<Utc>,
    pub agents: Vec<LinkedAgent>,
    pub categories: Vec<OwnerClassification>,
    /// The owner's human shares of its agents' tools, ended ones too.
    pub human_shares: Vec<HumanShareRecord>,
    /// The agent-type owners it registered (POST /dap/owner/register-agent).
    pub agent_owners: Vec<OwnerRecord>,
}

pub async fn export(services: &Services, owner: &OwnerRecord) -> AppResult<Export> {
    Ok(Export {
        at: services.clock.now(),
        agents: services.store.owner_agents(owner.owner_id).await?,
        categories: services.store.owner_classifications(owner.owner_id, true).await?,
        human_shares: services.store.human_shares(owner.owner_id).await?,
        agent_owners: services.store.agent_owners_of(owner.owner_id).await?,
    })
}
