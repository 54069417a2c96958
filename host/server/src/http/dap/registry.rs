//! The owner's self-classification categories and content-inclusion policy.
//!
//! Categories: an owner's keys sit beside the operator's base categories, and
//! the owner's agents may use both (`GET /v1/classification`, and DD creation
//! accepts exactly those keys). A key may not repeat a base key or another of
//! the owner's keys, active or not: a deactivated key stays reserved, because
//! declarations already recorded with it keep naming it. Deleting deactivates.
//!
//! Policy: `anchor_app::declarations::enforce_policy` applies it at DD create.

use crate::extract::{ApiPath, ApiQuery};
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, patch};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use anchor_store::OwnerClassification;

use super::time;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::http::input::{Obj, path_uuid};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;

pub const KEY_PATTERN: &str = "^[a-z][a-z0-9_]*$";
pub const KEY_MAX: usize = 100;
pub const LABEL_MAX: usize = 200;
pub const DESCRIPTION_MAX: usize = 1000;
pub const POLICIES: &[&str] = &["agent_choice", "always_branch_0", "always_branch_1"];

pub fn operations() -> Vec<Operation> {
    let category = object(
        &[],
        vec![
            ("classification_id", uuid()),
            ("classification_key", string()),
            ("classification_label", string()),
            ("description", nullable(string())),
            ("is_active", boolean()),
            ("created_at", datetime()),
        ],
    );
    let policy =
        object(&[], vec![("content_inclusion_policy", enumeration(POLICIES)), ("valid_values", array(string())), ("effect", string())]);
    vec![
        op(Method::GET, "/dap/classification", get(list))
            .tag("Classification")
            .summary("The owner's categories (active only unless include_inactive=true), and the operator's base keys")
            .owner()
            .query_param("include_inactive", boolean())
            .ok(
                200,
                "Categories",
                object(
                    &[],
                    vec![
                        ("classifications", array(category.clone())),
                        ("count", integer()),
                        (
                            "base_classifications",
                            array(object(&[], vec![("classification_key", string()), ("classification_label", string())])),
                        ),
                    ],
                ),
            )
            .error(400, "include_inactive is not true or false", &["INVALID_VALUE"]),
        op(Method::POST, "/dap/classification", axum::routing::post(create))
            .tag("Classification")
            .summary("Add a category for this owner's agents")
            .owner()
            .request(
                object(
                    &["classification_key", "classification_label"],
                    vec![
                        ("classification_key", json!({ "type": "string", "maxLength": KEY_MAX, "pattern": KEY_PATTERN })),
                        ("classification_label", json!({ "type": "string", "maxLength": LABEL_MAX })),
                        ("description", json!({ "type": "string", "maxLength": DESCRIPTION_MAX })),
                    ],
                ),
                json!({ "classification_key": "vendor_payment", "classification_label": "Vendor payment" }),
            )
            .ok(201, "Created", category.clone())
            .error(400, "Invalid key, label or description", &["MISSING_FIELD", "INVALID_VALUE", "UNKNOWN_FIELD"])
            .error(409, "The key exists already (this owner's, active or not, or a base key)", &["CLASSIFICATION_KEY_EXISTS"]),
        op(Method::PATCH, "/dap/classification/{id}", patch(update))
            .tag("Classification")
            .summary("Change an active category's label or description (the key stays)")
            .owner()
            .path_param("id", uuid())
            .request(
                object(
                    &[],
                    vec![
                        ("classification_label", json!({ "type": "string", "maxLength": LABEL_MAX })),
                        ("description", json!({ "type": "string", "maxLength": DESCRIPTION_MAX })),
                    ],
                ),
                json!({ "classification_label": "Payment to a vendor" }),
            )
            .ok(200, "Updated", category.clone())
            .error(400, "Invalid label or description", &["INVALID_VALUE", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(404, "No active category of this owner with that id", &["NOT_FOUND"]),
        op(Method::DELETE, "/dap/classification/{id}", axum::routing::delete(deactivate))
            .tag("Classification")
            .summary("Deactivate a category: agents can no longer use it; its key stays reserved")
            .owner()
            .path_param("id", uuid())
            .ok(200, "Deactivated", object(&[], vec![("classification_id", uuid()), ("is_active", boolean())]))
            .error(404, "No active category of this owner with that id", &["NOT_FOUND"]),
        op(Method::GET, "/dap/policy/content-inclusion", get(get_policy))
            .tag("DAP Policy")
            .summary("The content-inclusion policy applied to this owner's agents")
            .owner()
            .ok(200, "Policy", policy.clone()),
        op(Method::PUT, "/dap/policy/content-inclusion", axum::routing::put(put_policy))
            .tag("DAP Policy")
            .summary("Set the content-inclusion policy; it applies to the next declaration of every managed agent")
            .owner()
            .request(
                object(&["content_inclusion_policy"], vec![("content_inclusion_policy", enumeration(POLICIES))]),
                json!({ "content_inclusion_policy": "always_branch_0" }),
            )
            .ok(200, "Policy updated", policy)
            .error(400, "Not one of the policies", &["MISSING_FIELD", "INVALID_ENUM"]),
    ]
}

pub(crate) fn category_json(c: &OwnerClassification) -> Value {
    json!({
        "classification_id": c.classification_id,
        "classification_key": c.key,
        "classification_label": c.label,
        "description": c.description,
        "is_active": c.active,
        "created_at": time(c.created_at),
    })
}

#[derive(Deserialize)]
struct ListQuery {
    include_inactive: Option<String>,
}

async fn list(State(state): State<AppState>, auth: AuthOwner, ApiQuery(q): ApiQuery<ListQuery>) -> ApiResult<axum::Json<Value>> {
    let include_inactive = match q.include_inactive.as_deref() {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") => true,
        Some(other) => {
            return Err(ApiError::bad(
                "INVALID_VALUE",
                format!("include_inactive must be true or false; got {}", anchor_domain::brief(other)),
            ));
        }
    };
    let mine = state.store.owner_classifications(auth.owner.owner_id, include_inactive).await?;
    let base: Vec<Value> = state
        .store
        .classifications_for_agent(Uuid::nil())
        .await?
        .iter()
        .filter(|c| c.owner_id.is_none())
        .map(|c| json!({ "classification_key": c.key, "classification_label": c.label }))
        .collect();
    Ok(axum::Json(json!({
        "classifications": mine.iter().map(category_json).collect::<Vec<_>>(),
        "count": mine.len(),
        "base_classifications": base,
    })))
}

fn check_text(name: &str, value: &str, max: usize) -> ApiResult<()> {
    if value.trim().is_empty() {
        return Err(ApiError::bad("INVALID_VALUE", format!("{name} must not be empty")));
    }
    if value.chars().count() > max {
        return Err(ApiError::bad("INVALID_VALUE", format!("{name} is longer than {max} characters")));
    }
    Ok(())
}

fn check_key(key: &str) -> ApiResult<()> {
    let mut chars = key.chars();
    let shaped =
        chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !shaped || key.len() > KEY_MAX {
        return Err(ApiError::bad(
            "INVALID_VALUE",
            format!("classification_key must match {KEY_PATTERN} and have at most {KEY_MAX} characters; got {}", anchor_domain::brief(key)),
        ));
    }
    Ok(())
}

async fn create(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let o = Obj::new(&body, "", &["classification_key", "classification_label", "description"])?;
    let key = o.req_str("classification_key")?;
    let label = o.req_str("classification_label")?;
    let description = o.opt_str("description")?;
    check_key(key)?;
    check_text("classification_label", label, LABEL_MAX)?;
    if let Some(d) = description {
        check_text("description", d, DESCRIPTION_MAX)?;
    }
    let exists = || {
        ApiError::conflict(
            "CLASSIFICATION_KEY_EXISTS",
            format!("classification_key {} already exists for this owner (or as a base category)", anchor_domain::brief(key)),
        )
    };
    if state.store.base_classification_exists(key).await? {
        return Err(exists());
    }
    let category = OwnerClassification {
        classification_id: Uuid::new_v4(),
        key: key.to_string(),
        label: label.to_string(),
        description: description.map(str::to_string),
        active: true,
        created_at: state.clock.now(),
    };
    if !state.store.insert_classification(auth.owner.owner_id, &category).await? {
        return Err(exists());
    }
    Ok((StatusCode::CREATED, axum::Json(category_json(&category))))
}

async fn update(
    State(state): State<AppState>,
    auth: AuthOwner,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<axum::Json<Value>> {
    let id = path_uuid("id", &id)?;
    let body = if body.is_null() { json!({}) } else { body };
    let o = Obj::new(&body, "", &["classification_label", "description"])?;
    let label = o.opt_str("classification_label")?;
    let description = o.opt_str("description")?;
    if let Some(l) = label {
        check_text("classification_label", l, LABEL_MAX)?;
    }
    if let Some(d) = description {
        check_text("description", d, DESCRIPTION_MAX)?;
    }
    state
        .store
        .update_classification(auth.owner.owner_id, id, label, description)
        .await?
        .map(|c| axum::Json(category_json(&c)))
        .ok_or_else(|| ApiError::not_found("NOT_FOUND", format!("this owner has no active category {id}")))
}

async fn deactivate(State(state): State<AppState>, auth: AuthOwner, ApiPath(id): ApiPath<String>) -> ApiResult<axum::Json<Value>> {
    let id = path_uuid("id", &id)?;
    if !state.store.deactivate_classification(auth.owner.owner_id, id).await? {
        return Err(ApiError::not_found("NOT_FOUND", format!("this owner has no active category {id}")));
    }
    Ok(axum::Json(json!({ "classification_id": id, "is_active": false })))
}

fn effect(policy: &str) -> &'static str {
    match policy {
        "always_branch_0" => {
            "declarations must use content_inclusion_flag 0 and no template; others are refused with 403 CONTENT_INCLUSION_POLICY"
        }
        "always_branch_1" => {
            "declarations must use content_inclusion_flag 1 with a template; others are refused with 403 CONTENT_INCLUSION_POLICY"
        }
        _ => "each agent chooses content_inclusion_flag per declaration",
    }
}

fn policy_json(policy: &str) -> Value {
    json!({ "content_inclusion_policy": policy, "valid_values": POLICIES, "effect": effect(policy) })
}

async fn get_policy(auth: AuthOwner) -> axum::Json<Value> {
    axum::Json(policy_json(&auth.owner.content_inclusion_policy))
}

async fn put_policy(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["content_inclusion_policy"])?;
    let policy = o.req_str("content_inclusion_policy")?;
    if !POLICIES.contains(&policy) {
        return Err(ApiError::bad(
            "INVALID_ENUM",
            format!("content_inclusion_policy must be one of {}; got {}", POLICIES.join(", "), anchor_domain::brief(policy)),
        ));
    }
    state.store.set_owner_policy(auth.owner.owner_id, policy).await?;
    Ok(axum::Json(policy_json(policy)))
}
