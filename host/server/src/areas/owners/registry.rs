//! The owner's self-classification categories and content-inclusion policy
//! (`anchor_app::owners::registry`).

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, patch, post, put};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use anchor_app::owners::registry;
use anchor_domain::owners::{ContentPolicy, DESCRIPTION_MAX, KEY_MAX, KEY_PATTERN, LABEL_MAX};
use anchor_domain::records::OwnerClassification;

use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, Body};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Named, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/dap/classification", get(list))
            .tag("Classification")
            .summary("The owner's categories (active only unless include_inactive=true), and the operator's base keys")
            .owner()
            .query::<ListQuery>()
            .returns::<Categories>(200, "Categories")
            .error(400, "include_inactive is not true or false", &["INVALID_VALUE"]),
        op(Method::POST, "/dap/classification", post(create))
            .tag("Classification")
            .summary("Add a category for this owner's agents")
            .owner()
            .takes::<NewCategory>(json!({ "classification_key": "vendor_payment", "classification_label": "Vendor payment" }))
            .returns::<Category>(201, "Created")
            .error(400, "Invalid key, label or description", &["MISSING_FIELD", "INVALID_VALUE", "UNKNOWN_FIELD"])
            .error(
                409,
                "The key exists already (this owner's, active or not, or a base key), or the owner has 500 categories already",
                &["CLASSIFICATION_KEY_EXISTS", "CLASSIFICATION_LIMIT_REACHED"],
            ),
        op(Method::PATCH, "/dap/classification/{id}", patch(update))
            .tag("Classification")
            .summary("Change an active category's label or description (the key stays)")
            .owner()
            .path::<Uuid>("id")
            .takes::<CategoryChange>(json!({ "classification_label": "Payment to a vendor" }))
            .returns::<Category>(200, "Updated")
            .error(400, "Invalid label or description", &["INVALID_VALUE", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(404, "No active category of this owner with that id", &["NOT_FOUND"]),
        op(Method::DELETE, "/dap/classification/{id}", delete(deactivate))
            .tag("Classification")
            .summary("Deactivate a category: agents can no longer use it; its key stays reserved")
            .owner()
            .path::<Uuid>("id")
            .returns::<Deactivated>(200, "Deactivated")
            .error(400, "id is not a UUID", &["INVALID_UUID"])
            .error(404, "No active category of this owner with that id", &["NOT_FOUND"]),
        op(Method::GET, "/dap/policy/content-inclusion", get(get_policy))
            .tag("DAP Policy")
            .summary("The content-inclusion policy applied to this owner's agents")
            .owner()
            .returns::<Policy>(200, "Policy"),
        op(Method::PUT, "/dap/policy/content-inclusion", put(put_policy))
            .tag("DAP Policy")
            .summary("Set the content-inclusion policy; it applies to the next declaration of every managed agent")
            .owner()
            .takes::<PolicyRequest>(json!({ "content_inclusion_policy": "always_branch_0" }))
            .returns::<Policy>(200, "Policy updated")
            .error(400, "Not one of the policies", &["MISSING_FIELD", "INVALID_ENUM"]),
    ]
}

/// One of the owner's categories.
#[derive(Serialize, JsonSchema)]
pub struct Category {
    classification_id: Uuid,
    classification_key: String,
    classification_label: String,
    description: Option<String>,
    is_active: bool,
    created_at: Time,
}

impl From<&OwnerClassification> for Category {
    fn from(c: &OwnerClassification) -> Category {
        Category {
            classification_id: c.classification_id,
            classification_key: c.key.clone(),
            classification_label: c.label.clone(),
            description: c.description.clone(),
            is_active: c.active,
            created_at: c.created_at.into(),
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct ListQuery {
    include_inactive: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
struct Categories {
    classifications: Vec<Category>,
    count: usize,
    base_classifications: Vec<BaseCategory>,
}

#[derive(Serialize, JsonSchema)]
struct BaseCategory {
    classification_key: String,
    classification_label: String,
}

async fn list(State(state): State<AppState>, owner: AuthOwner, ApiQuery(query): ApiQuery<ListQuery>) -> ApiResult<Json<Categories>> {
    let (mine, base) = registry::categories(&state.app, &owner.owner, query.include_inactive.unwrap_or(false)).await?;
    Ok(Json(Categories {
        count: mine.len(),
        classifications: mine.iter().map(Category::from).collect(),
        base_classifications: base.into_iter().map(|c| BaseCategory { classification_key: c.key, classification_label: c.label }).collect(),
    }))
}

#[derive(Deserialize, JsonSchema)]
struct NewCategory {
    #[schemars(length(max = KEY_MAX), pattern(KEY_PATTERN))]
    classification_key: String,
    #[schemars(length(max = LABEL_MAX))]
    classification_label: String,
    #[schemars(length(max = DESCRIPTION_MAX))]
    description: Option<String>,
}

async fn create(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<NewCategory>,
) -> ApiResult<(StatusCode, Json<Category>)> {
    let category =
        registry::add(&state.app, &owner.owner, &request.classification_key, &request.classification_label, request.description.as_deref())
            .await?;
    Ok((StatusCode::CREATED, Json(Category::from(&category))))
}

#[derive(Default, Deserialize, JsonSchema)]
struct CategoryChange {
    #[schemars(length(max = LABEL_MAX))]
    classification_label: Option<String>,
    #[schemars(length(max = DESCRIPTION_MAX))]
    description: Option<String>,
}

async fn update(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(id): ApiPath<String>,
    Body(change): Body<Option<CategoryChange>>,
) -> ApiResult<Json<Category>> {
    let id = path_uuid("id", &id)?;
    let change = change.unwrap_or_default();
    let category =
        registry::update(&state.app, &owner.owner, id, change.classification_label.as_deref(), change.description.as_deref()).await?;
    Ok(Json(Category::from(&category)))
}

#[derive(Serialize, JsonSchema)]
struct Deactivated {
    classification_id: Uuid,
    is_active: bool,
}

async fn deactivate(State(state): State<AppState>, owner: AuthOwner, ApiPath(id): ApiPath<String>) -> ApiResult<Json<Deactivated>> {
    let id = path_uuid("id", &id)?;
    registry::deactivate(&state.app, &owner.owner, id).await?;
    Ok(Json(Deactivated { classification_id: id, is_active: false }))
}

#[derive(Serialize, JsonSchema)]
struct Policy {
    content_inclusion_policy: Named<ContentPolicy>,
    valid_values: &'static [&'static str],
    effect: &'static str,
}

impl Policy {
    fn of(policy: ContentPolicy) -> Policy {
        Policy { content_inclusion_policy: Named(policy), valid_values: ContentPolicy::NAMES, effect: policy.effect() }
    }
}

async fn get_policy(owner: AuthOwner) -> Json<Policy> {
    Json(Policy::of(owner.owner.content_inclusion_policy))
}

#[derive(Deserialize, JsonSchema)]
struct PolicyRequest {
    content_inclusion_policy: Named<ContentPolicy>,
}

async fn put_policy(State(state): State<AppState>, owner: AuthOwner, Body(request): Body<PolicyRequest>) -> ApiResult<Json<Policy>> {
    let policy = request.content_inclusion_policy.0;
    registry::set_policy(&state.app, &owner.owner, policy).await?;
    Ok(Json(Policy::of(policy)))
}
