//! The owner's self-classification categories and content-inclusion policy.
//!
//! Categories: an owner's keys sit beside the operator's base categories, and
//! the owner's agents may use both (DD creation accepts exactly those keys). A
//! key may not repeat a base key or another of the owner's keys, active or
//! not: a deactivated key stays reserved, because declarations already
//! recorded with it keep naming it. Deleting deactivates.
//!
//! Policy: `declarations::enforce_policy` applies it at DD create.

use uuid::Uuid;

use anchor_domain::owners::{self, ContentPolicy, DESCRIPTION_MAX, LABEL_MAX};
use anchor_domain::records::{Classification, OwnerClassification, OwnerRecord};

use crate::{AppError, AppResult, Services};

/// The owner's categories (inactive ones too when asked) and the operator's base ones.
pub async fn categories(
    services: &Services,
    owner: &OwnerRecord,
    include_inactive: bool,
) -> AppResult<(Vec<OwnerClassification>, Vec<Classification>)> {
    let mine = services.store.owner_classifications(owner.owner_id, include_inactive).await?;
    let base = services.store.classifications_for_agent(Uuid::nil()).await?.into_iter().filter(|c| c.owner_id.is_none()).collect();
    Ok((mine, base))
}

/// The most categories one owner registers, inactive ones included (each
/// is listed, exported and checked by its agents' declarations).
pub const CATEGORIES_PER_OWNER: i64 = 500;

/// A new category for the owner's agents.
pub async fn add(
    services: &Services,
    owner: &OwnerRecord,
    key: &str,
    label: &str,
    description: Option<&str>,
) -> AppResult<OwnerClassification> {
    owners::check_category_key(key)?;
    owners::check_label("classification_label", label, LABEL_MAX)?;
    if let Some(d) = description {
        owners::check_text("description", d, DESCRIPTION_MAX)?;
    }
    let exists = || AppError::Conflict {
        code: "CLASSIFICATION_KEY_EXISTS",
        message: format!("classification_key {} already exists for this owner (or as a base category)", anchor_domain::brief(key)),
    };
    if services.store.base_classification_exists(key).await? {
        return Err(exists());
    }
    let category = OwnerClassification {
        classification_id: Uuid::new_v4(),
        key: key.to_string(),
        label: label.to_string(),
        description: description.map(str::to_string),
        active: true,
        created_at: services.clock.now(),
    };
    match services.store.insert_classification(owner.owner_id, &category, CATEGORIES_PER_OWNER).await? {
        anchor_ports::CategoryAdded::Added => {}
        anchor_ports::CategoryAdded::Exists => return Err(exists()),
        anchor_ports::CategoryAdded::OwnerGone => return Err(AppError::Unauthenticated { message: "this account was deleted".into() }),
        anchor_ports::CategoryAdded::TooMany => {
            return Err(AppError::Conflict {
                code: "CLASSIFICATION_LIMIT_REACHED",
                message: format!(
                    "an owner registers at most {CATEGORIES_PER_OWNER} categories (inactive ones included); edit or reuse one"
                ),
            });
        }
    }
    Ok(category)
}

fn no_such(id: Uuid) -> AppError {
    AppError::not_found("NOT_FOUND", format!("this owner has no active category {id}"))
}

/// Changes an active category's label or description (the key stays).
pub async fn update(
    services: &Services,
    owner: &OwnerRecord,
    id: Uuid,
    label: Option<&str>,
    description: Option<&str>,
) -> AppResult<OwnerClassification> {
    if let Some(l) = label {
        owners::check_label("classification_label", l, LABEL_MAX)?;
    }
    if let Some(d) = description {
        owners::check_text("description", d, DESCRIPTION_MAX)?;
    }
    services.store.update_classification(owner.owner_id, id, label, description).await?.ok_or_else(|| no_such(id))
}

/// Deactivates a category: agents can no longer use it; its key stays reserved.
pub async fn deactivate(services: &Services, owner: &OwnerRecord, id: Uuid) -> AppResult<()> {
    if !services.store.deactivate_classification(owner.owner_id, id).await? {
        return Err(no_such(id));
    }
    Ok(())
}

/// Sets the policy; it applies to the next declaration of every managed agent.
pub async fn set_policy(services: &Services, owner: &OwnerRecord, policy: ContentPolicy) -> AppResult<()> {
    Ok(services.store.set_owner_policy(owner.owner_id, policy).await?)
}
