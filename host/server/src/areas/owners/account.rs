//! The owner's own account: profile, residence, marketing consent, deletion
//! with a grace period, restore, and a data export (`anchor_app::owners::account`).
//! `response_days` equals the grace period for every residence.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use anchor_app::owners::{self, account};
use anchor_domain::owners::{AccountStatus, ContentPolicy, OwnerType, Residence};
use anchor_domain::records::OwnerRecord;

use super::registry::Category;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiQuery, Body};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Named, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/dap/account/me", get(me))
            .tag("DAP Account")
            .summary("The signed-in owner's profile")
            .owner()
            .returns::<Me>(200, "Profile, with this session's CSRF token"),
        op(Method::PUT, "/dap/account/residence", put(residence))
            .tag("DAP Account")
            .summary("Declare or change the country of residence")
            .owner()
            .takes::<ResidenceRequest>(json!({ "residence_country": "EU" }))
            .returns::<ResidenceSet>(200, "Residence updated")
            .error(400, "Not one of the residence values", &["MISSING_FIELD", "INVALID_ENUM"]),
        op(Method::PUT, "/dap/account/marketing-consent", put(marketing))
            .tag("DAP Account")
            .summary("Give or withdraw marketing consent")
            .owner()
            .takes::<MarketingRequest>(json!({ "marketing_agreed": false }))
            .returns::<MarketingSet>(200, "Consent updated")
            .error(400, "marketing_agreed is not a boolean", &["MISSING_FIELD", "INVALID_VALUE"]),
        op(Method::DELETE, "/dap/account", delete(request_deletion))
            .tag("DAP Account")
            .summary("Ask for the account to be erased after a grace period (password confirmed)")
            .owner()
            .takes::<PasswordConfirmation>(json!({ "password": "a long passphrase 7" }))
            .returns::<DeletionStatus>(200, "Deletion scheduled")
            .error(409, "Deletion was already requested", &["DELETION_ALREADY_REQUESTED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::POST, "/dap/account/restore", post(restore))
            .tag("DAP Account")
            .summary("Cancel a pending deletion inside its grace period")
            .owner()
            .returns::<Restored>(200, "Account restored")
            .error(409, "No deletion is pending", &["NOT_PENDING_DELETION"]),
        op(Method::GET, "/dap/account/deletion-status", get(deletion_status))
            .tag("DAP Account")
            .summary("Whether a deletion is pending, and when it takes effect")
            .owner()
            .returns::<DeletionStatus>(200, "Deletion status"),
        op(Method::GET, "/dap/account/export", get(export))
            .tag("DAP Account")
            .summary("Everything kept about the owner account, as JSON or CSV")
            .owner()
            .query::<ExportQuery>()
            .returns::<AccountExport>(200, "Account data (JSON, or CSV with format=csv)")
            .or_media(200, "text/csv")
            .error(400, "format is neither json nor csv", &["INVALID_ENUM"]),
    ]
}

/// An owner's account as it is kept.
#[derive(Serialize, JsonSchema)]
pub struct Profile {
    owner_id: Uuid,
    email: Option<String>,
    created_at: Time,
    owner_type: Named<OwnerType>,
    owner_depth: i32,
    managing_agent_id: Option<Uuid>,
    parent_owner_id: Option<Uuid>,
    residence_country: Option<Named<Residence>>,
    residence_declared_at: Option<Time>,
    residence_updated_at: Option<Time>,
    browser_language: Option<String>,
    timezone: Option<String>,
    content_inclusion_policy: Named<ContentPolicy>,
    terms_agreed_at: Time,
    privacy_agreed_at: Time,
    marketing_agreed_at: Option<Time>,
    terms_version: String,
    privacy_version: String,
    status: Named<AccountStatus>,
    deletion_requested_at: Option<Time>,
    deletion_response_due_at: Option<Time>,
    deleted_at: Option<Time>,
}

impl Profile {
    fn of(owner: &OwnerRecord, now: DateTime<Utc>) -> Profile {
        Profile {
            owner_id: owner.owner_id,
            email: owner.email.clone(),
            created_at: owner.created_at.into(),
            owner_type: Named(owner.owner_type),
            owner_depth: owner.owner_depth,
            managing_agent_id: owner.managing_agent_id,
            parent_owner_id: owner.parent_owner_id,
            residence_country: owner.residence_country.map(Named),
            residence_declared_at: owner.residence_declared_at.map(Time),
            residence_updated_at: owner.residence_updated_at.map(Time),
            browser_language: owner.browser_language.clone(),
            timezone: owner.timezone.clone(),
            content_inclusion_policy: Named(owner.content_inclusion_policy),
            terms_agreed_at: owner.terms_agreed_at.into(),
            privacy_agreed_at: owner.privacy_agreed_at.into(),
            marketing_agreed_at: owner.marketing_agreed_at.map(Time),
            terms_version: owner.terms_version.clone(),
            privacy_version: owner.privacy_version.clone(),
            status: Named(owners::account_status(owner, now)),
            deletion_requested_at: owner.deletion_requested_at.map(Time),
            deletion_response_due_at: owner.deletion_response_due_at.map(Time),
            deleted_at: owner.deleted_at.map(Time),
        }
    }
}

#[derive(Serialize, JsonSchema)]
struct Me {
    #[serde(flatten)]
    profile: Profile,
    /// This session's token for X-CSRF-Token.
    csrf_token: String,
}

async fn me(State(state): State<AppState>, owner: AuthOwner) -> Json<Me> {
    Json(Me { profile: Profile::of(&owner.owner, state.app.clock.now()), csrf_token: owner.csrf_token })
}

#[derive(Deserialize, JsonSchema)]
struct ResidenceRequest {
    residence_country: Named<Residence>,
}

#[derive(Serialize, JsonSchema)]
struct ResidenceSet {
    owner_id: Uuid,
    residence_country: Option<Named<Residence>>,
    residence_updated_at: Option<Time>,
}

async fn residence(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<ResidenceRequest>,
) -> ApiResult<Json<ResidenceSet>> {
    let updated = account::set_residence(&state.app, &owner.owner, request.residence_country.0).await?;
    Ok(Json(ResidenceSet {
        owner_id: updated.owner_id,
        residence_country: updated.residence_country.map(Named),
        residence_updated_at: updated.residence_updated_at.map(Time),
    }))
}

#[derive(Deserialize, JsonSchema)]
struct MarketingRequest {
    marketing_agreed: bool,
}

#[derive(Serialize, JsonSchema)]
struct MarketingSet {
    owner_id: Uuid,
    marketing_agreed_at: Option<Time>,
}

async fn marketing(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<MarketingRequest>,
) -> ApiResult<Json<MarketingSet>> {
    let at = account::set_marketing(&state.app, &owner.owner, request.marketing_agreed).await?;
    Ok(Json(MarketingSet { owner_id: owner.owner.owner_id, marketing_agreed_at: at.map(Time) }))
}

/// A sensitive change, confirmed with the owner's password (an agent-type
/// owner sends its agent's current token instead).
#[derive(Deserialize, JsonSchema)]
struct PasswordConfirmation {
    password: String,
}

#[derive(Serialize, JsonSchema)]
struct DeletionStatus {
    owner_id: Uuid,
    status: Named<AccountStatus>,
    deletion_requested_at: Option<Time>,
    deletion_response_due_at: Option<Time>,
    grace_period_days: i64,
    response_days: i64,
    residence_country: Option<Named<Residence>>,
}

impl DeletionStatus {
    fn of(state: &AppState, owner: &OwnerRecord) -> DeletionStatus {
        let days = state.settings.config.owners.deletion_grace_days;
        DeletionStatus {
            owner_id: owner.owner_id,
            status: Named(owners::account_status(owner, state.app.clock.now())),
            deletion_requested_at: owner.deletion_requested_at.map(Time),
            deletion_response_due_at: owner.deletion_response_due_at.map(Time),
            grace_period_days: days,
            response_days: days,
            residence_country: owner.residence_country.map(Named),
        }
    }
}

async fn request_deletion(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<PasswordConfirmation>,
) -> ApiResult<Json<DeletionStatus>> {
    let updated = account::request_deletion(&state.app, &owner.owner, &request.password).await?;
    Ok(Json(DeletionStatus::of(&state, &updated)))
}

#[derive(Serialize, JsonSchema)]
struct Restored {
    owner_id: Uuid,
    status: Named<AccountStatus>,
}

async fn restore(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<Restored>> {
    account::restore(&state.app, &owner.owner).await?;
    Ok(Json(Restored { owner_id: owner.owner.owner_id, status: Named(AccountStatus::Active) }))
}

async fn deletion_status(State(state): State<AppState>, owner: AuthOwner) -> Json<DeletionStatus> {
    Json(DeletionStatus::of(&state, &owner.owner))
}

#[derive(Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ExportFormat {
    #[default]
    Json,
    Csv,
}

#[derive(Deserialize, JsonSchema)]
struct ExportQuery {
    #[schemars(extend("default" = "json"))]
    format: Option<ExportFormat>,
}

#[derive(Serialize, JsonSchema)]
struct AccountExport {
    exported_at: Time,
    account: Profile,
    agents: Vec<ExportedAgent>,
    classifications: Vec<Category>,
    /// The human shares of the owner's agents' tools, ended ones too.
    human_shares: Vec<super::tsl::HumanShareView>,
    /// The agent-type owners this owner registered (POST /dap/owner/register-agent).
    agent_owners: Vec<ExportedAgentOwner>,
}

#[derive(Serialize, JsonSchema)]
struct ExportedAgentOwner {
    owner_id: Uuid,
    /// The agent it signs in as.
    agent_id: Option<Uuid>,
    status: Named<AccountStatus>,
    created_at: Time,
}

#[derive(Serialize, JsonSchema)]
struct ExportedAgent {
    agent_id: Uuid,
    linked_at: Option<Time>,
    /// The owner-set DAB, if any.
    budget_limit_dac: Option<Dac>,
}

async fn export(State(state): State<AppState>, owner: AuthOwner, ApiQuery(query): ApiQuery<ExportQuery>) -> ApiResult<Response> {
    let export = account::export(&state.app, &owner.owner).await?;
    let document = AccountExport {
        exported_at: export.at.into(),
        account: Profile::of(&owner.owner, export.at),
        agents: export
            .agents
            .iter()
            .map(|a| ExportedAgent { agent_id: a.agent.agent_id, linked_at: a.linked_at.map(Time), budget_limit_dac: a.dab_limit.map(Dac) })
            .collect(),
        classifications: export.categories.iter().map(Category::from).collect(),
        human_shares: export.human_shares.iter().map(super::tsl::HumanShareView::from).collect(),
        agent_owners: export
            .agent_owners
            .iter()
            .map(|o| ExportedAgentOwner {
                owner_id: o.owner_id,
                agent_id: o.managing_agent_id,
                status: Named(owners::account_status(o, export.at)),
                created_at: Time(o.created_at),
            })
            .collect(),
    };
    match query.format.unwrap_or_default() {
        ExportFormat::Json => Ok(Json(document).into_response()),
        ExportFormat::Csv => {
            let value = serde_json::to_value(&document).map_err(ApiError::internal)?;
            Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], export_csv(&value)).into_response())
        }
    }
}

/// The JSON export as `section,field,value` rows, every value of it: a
/// list's items are numbered from 1 (`agent,1.budget_limit_dac,250`), a
/// nested object's fields are joined with dots, null is empty.
fn export_csv(document: &serde_json::Value) -> String {
    fn rows(section: &str, field: &str, value: &serde_json::Value, csv: &mut String) {
        use serde_json::Value;
        let join = |name: &str| if field.is_empty() { name.to_string() } else { format!("{field}.{name}") };
        match value {
            Value::Object(map) => map.iter().for_each(|(name, v)| rows(section, &join(name), v, csv)),
            Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| rows(section, &join(&(i + 1).to_string()), v, csv)),
            Value::String(text) => csv.push_str(&format!("{section},{},{}\n", cell(field), cell(text))),
            Value::Null => csv.push_str(&format!("{section},{},\n", cell(field))),
            number_or_bool => csv.push_str(&format!("{section},{},{number_or_bool}\n", cell(field))),
        }
    }
    let mut csv = String::from("section,field,value\n");
    for (name, value) in document.as_object().into_iter().flatten() {
        let section = match name.as_str() {
            "exported_at" => "export",
            "agents" => "agent",
            "classifications" => "classification",
            "human_shares" => "human_share",
            "agent_owners" => "agent_owner",
            other => other,
        };
        let field = if section == "export" { name.as_str() } else { "" };
        rows(section, field, value, &mut csv);
    }
    csv
}

/// One CSV cell of text: quoted when it holds a comma, a quote or a line
/// break; one a spreadsheet would read as a formula (`=`, `+`, `-` or `@`
/// first, after any blanks, or a tab, carriage return or line feed first)
/// starts with an apostrophe.
fn cell(text: &str) -> String {
    let formula = text.trim_start().starts_with(['=', '+', '-', '@']) || text.starts_with(['\t', '\r', '\n']);
    let text = if formula { format!("'{text}") } else { text.to_string() };
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text }
}
