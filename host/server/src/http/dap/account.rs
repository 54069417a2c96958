//! The owner's own account: profile, residence, marketing consent, deletion
//! with a grace period, restore, and a data export.
//!
//! Deletion: `DELETE /dap/account` (password confirmed) starts a grace period
//! of `deletion_grace_days` (30). The owner may still sign in and restore the
//! account until it ends. Then the account is erased by the host holding the
//! log lease: its agents are unlinked (they keep their records and tokens and
//! lose the owner's DAB, categories and policy), sessions and categories are
//! removed, the personal fields are cleared, and a tombstone row remains.
//! `response_days` equals the grace period for every residence.

use crate::extract::ApiQuery;
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use anchor_store::OwnerRecord;

use super::auth::RESIDENCES;
use super::{account_status, time};
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::http::input::Obj;
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/dap/account/me", get(me)).tag("DAP Account").summary("The signed-in owner's profile").owner().ok(
            200,
            "Profile",
            profile_schema(),
        ),
        op(Method::PUT, "/dap/account/residence", put(residence))
            .tag("DAP Account")
            .summary("Declare or change the country of residence")
            .owner()
            .request(
                object(&["residence_country"], vec![("residence_country", enumeration(RESIDENCES))]),
                json!({ "residence_country": "EU" }),
            )
            .ok(
                200,
                "Residence updated",
                object(&[], vec![("owner_id", uuid()), ("residence_country", string()), ("residence_updated_at", datetime())]),
            )
            .error(400, "Not one of the residence values", &["MISSING_FIELD", "INVALID_ENUM"]),
        op(Method::PUT, "/dap/account/marketing-consent", put(marketing))
            .tag("DAP Account")
            .summary("Give or withdraw marketing consent")
            .owner()
            .request(object(&["marketing_agreed"], vec![("marketing_agreed", boolean())]), json!({ "marketing_agreed": false }))
            .ok(200, "Consent updated", object(&[], vec![("owner_id", uuid()), ("marketing_agreed_at", nullable(datetime()))]))
            .error(400, "marketing_agreed is not a boolean", &["MISSING_FIELD", "INVALID_VALUE"]),
        op(Method::DELETE, "/dap/account", delete(request_deletion))
            .tag("DAP Account")
            .summary("Ask for the account to be erased after a grace period (password confirmed)")
            .owner()
            .request(object(&["password"], vec![("password", string())]), json!({ "password": "a long passphrase 7" }))
            .ok(200, "Deletion scheduled", deletion_schema())
            .error(409, "Deletion was already requested", &["DELETION_ALREADY_REQUESTED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
        op(Method::POST, "/dap/account/restore", post(restore))
            .tag("DAP Account")
            .summary("Cancel a pending deletion inside its grace period")
            .owner()
            .ok(200, "Account restored", object(&[], vec![("owner_id", uuid()), ("status", string())]))
            .error(409, "No deletion is pending", &["NOT_PENDING_DELETION"]),
        op(Method::GET, "/dap/account/deletion-status", get(deletion_status))
            .tag("DAP Account")
            .summary("Whether a deletion is pending, and when it takes effect")
            .owner()
            .ok(200, "Deletion status", deletion_schema()),
        op(Method::GET, "/dap/account/export", get(export))
            .tag("DAP Account")
            .summary("Everything kept about the owner account, as JSON or CSV")
            .owner()
            .query_param("format", json!({ "type": "string", "enum": ["json", "csv"], "default": "json" }))
            .ok(
                200,
                "Account data (JSON, or CSV with format=csv)",
                object(
                    &[],
                    vec![
                        ("exported_at", datetime()),
                        ("account", profile_schema()),
                        (
                            "agents",
                            array(object(
                                &[],
                                vec![("agent_id", uuid()), ("linked_at", datetime()), ("budget_limit_dac", nullable(number()))],
                            )),
                        ),
                        ("classifications", array(object(&[], vec![]))),
                    ],
                ),
            )
            .or_media(200, "text/csv")
            .error(400, "format is neither json nor csv", &["INVALID_ENUM"]),
    ]
}

fn profile_schema() -> Value {
    object(
        &[],
        vec![
            ("owner_id", uuid()),
            ("email", json!({ "type": "string", "format": "email" })),
            ("created_at", datetime()),
            ("owner_type", string()),
            ("owner_depth", integer()),
            ("managing_agent_id", nullable(uuid())),
            ("parent_owner_id", nullable(uuid())),
            ("residence_country", nullable(string())),
            ("residence_declared_at", nullable(datetime())),
            ("residence_updated_at", nullable(datetime())),
            ("browser_language", nullable(string())),
            ("timezone", nullable(string())),
            ("content_inclusion_policy", string()),
            ("terms_agreed_at", datetime()),
            ("privacy_agreed_at", datetime()),
            ("marketing_agreed_at", nullable(datetime())),
            ("terms_version", string()),
            ("privacy_version", string()),
            ("status", enumeration(&["active", "pending_deletion"])),
            ("deletion_requested_at", nullable(datetime())),
            ("deletion_response_due_at", nullable(datetime())),
            ("deleted_at", nullable(datetime())),
            ("csrf_token", doc(string(), "This session's token for X-CSRF-Token")),
        ],
    )
}

fn deletion_schema() -> Value {
    object(
        &[],
        vec![
            ("owner_id", uuid()),
            ("status", string()),
            ("deletion_requested_at", nullable(datetime())),
            ("deletion_response_due_at", nullable(datetime())),
            ("grace_period_days", integer()),
            ("response_days", integer()),
            ("residence_country", nullable(string())),
        ],
    )
}

pub(crate) fn profile(owner: &OwnerRecord, now: chrono::DateTime<chrono::Utc>) -> Value {
    json!({
        "owner_id": owner.owner_id,
        "email": owner.email,
        "created_at": time(owner.created_at),
        "owner_type": owner.owner_type,
        "owner_depth": owner.owner_depth,
        "managing_agent_id": owner.managing_agent_id,
        "parent_owner_id": owner.parent_owner_id,
        "residence_country": owner.residence_country,
        "residence_declared_at": owner.residence_declared_at.map(time),
        "residence_updated_at": owner.residence_updated_at.map(time),
        "browser_language": owner.browser_language,
        "timezone": owner.timezone,
        "content_inclusion_policy": owner.content_inclusion_policy,
        "terms_agreed_at": time(owner.terms_agreed_at),
        "privacy_agreed_at": time(owner.privacy_agreed_at),
        "marketing_agreed_at": owner.marketing_agreed_at.map(time),
        "terms_version": owner.terms_version,
        "privacy_version": owner.privacy_version,
        "status": account_status(owner, now),
        "deletion_requested_at": owner.deletion_requested_at.map(time),
        "deletion_response_due_at": owner.deletion_response_due_at.map(time),
        "deleted_at": owner.deleted_at.map(time),
    })
}

async fn me(State(state): State<AppState>, auth: AuthOwner) -> axum::Json<Value> {
    let mut body = profile(&auth.owner, state.clock.now());
    body["csrf_token"] = json!(auth.csrf_token);
    axum::Json(body)
}

async fn reload(state: &AppState, auth: &AuthOwner) -> ApiResult<OwnerRecord> {
    state
        .store
        .owner(auth.owner.owner_id)
        .await?
        .ok_or_else(|| ApiError::not_found("OWNER_NOT_FOUND", "the owner account no longer exists"))
}

async fn residence(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["residence_country"])?;
    let country = o.req_str("residence_country")?;
    if !RESIDENCES.contains(&country) {
        return Err(ApiError::bad(
            "INVALID_ENUM",
            format!("residence_country must be one of {}; got {}", RESIDENCES.join(", "), anchor_domain::brief(country)),
        ));
    }
    state.store.set_owner_residence(auth.owner.owner_id, country, state.clock.now()).await?;
    let owner = reload(&state, &auth).await?;
    Ok(axum::Json(json!({
        "owner_id": owner.owner_id,
        "residence_country": owner.residence_country,
        "residence_updated_at": owner.residence_updated_at.map(time),
    })))
}

async fn marketing(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["marketing_agreed"])?;
    let agreed = o.opt_bool("marketing_agreed")?.ok_or_else(|| o.missing("marketing_agreed"))?;
    let at = agreed.then(|| auth.owner.marketing_agreed_at.unwrap_or_else(|| state.clock.now()));
    state.store.set_owner_marketing(auth.owner.owner_id, at).await?;
    Ok(axum::Json(json!({ "owner_id": auth.owner.owner_id, "marketing_agreed_at": at.map(time) })))
}

fn deletion_view(state: &AppState, owner: &OwnerRecord) -> Value {
    let days = state.settings.dap.deletion_grace_days;
    json!({
        "owner_id": owner.owner_id,
        "status": account_status(owner, state.clock.now()),
        "deletion_requested_at": owner.deletion_requested_at.map(time),
        "deletion_response_due_at": owner.deletion_response_due_at.map(time),
        "grace_period_days": days,
        "response_days": days,
        "residence_country": owner.residence_country,
    })
}

async fn request_deletion(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["password"])?;
    let password = o.req_str("password")?;
    super::confirm_password(&state, &auth.owner, password).await?;
    if auth.owner.deletion_requested_at.is_some() {
        return Err(ApiError::conflict("DELETION_ALREADY_REQUESTED", "deletion is already pending; POST /dap/account/restore cancels it"));
    }
    let now = state.clock.now();
    let due = now + chrono::Duration::days(state.settings.dap.deletion_grace_days);
    state.store.set_owner_deletion(auth.owner.owner_id, Some((now, due))).await?;
    Ok(axum::Json(deletion_view(&state, &reload(&state, &auth).await?)))
}

async fn restore(State(state): State<AppState>, auth: AuthOwner) -> ApiResult<axum::Json<Value>> {
    if auth.owner.deletion_requested_at.is_none() {
        return Err(ApiError::conflict("NOT_PENDING_DELETION", "no deletion is pending for this account"));
    }
    state.store.set_owner_deletion(auth.owner.owner_id, None).await?;
    Ok(axum::Json(json!({ "owner_id": auth.owner.owner_id, "status": "active" })))
}

async fn deletion_status(State(state): State<AppState>, auth: AuthOwner) -> axum::Json<Value> {
    axum::Json(deletion_view(&state, &auth.owner))
}

#[derive(Deserialize)]
struct ExportQuery {
    format: Option<String>,
}

async fn export(State(state): State<AppState>, auth: AuthOwner, ApiQuery(q): ApiQuery<ExportQuery>) -> ApiResult<Response> {
    let now = state.clock.now();
    let account = profile(&auth.owner, now);
    let agents = state.store.owner_agents(auth.owner.owner_id).await?;
    let categories = state.store.owner_classifications(auth.owner.owner_id, true).await?;
    match q.format.as_deref().unwrap_or("json") {
        "json" => Ok(axum::Json(json!({
            "exported_at": time(now),
            "account": account,
            "agents": agents.iter().map(|a| json!({
                "agent_id": a.agent.agent_id,
                "linked_at": a.linked_at.map(time),
                "budget_limit_dac": a.dab_limit.map(|l| l.to_json_number()),
            })).collect::<Vec<_>>(),
            "classifications": categories.iter().map(super::registry::category_json).collect::<Vec<_>>(),
        }))
        .into_response()),
        "csv" => {
            // section,field,value; values are quoted when they hold a comma or a quote.
            let quote = |v: &str| {
                if v.contains([',', '"', '\n']) { format!("\"{}\"", v.replace('"', "\"\"")) } else { v.to_string() }
            };
            let mut csv = String::from("section,field,value\n");
            if let Value::Object(map) = &account {
                for (field, value) in map {
                    let text = match value {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    csv.push_str(&format!("account,{field},{}\n", quote(&text)));
                }
            }
            for a in &agents {
                csv.push_str(&format!("agent,{},{}\n", a.agent.agent_id, a.linked_at.map(time).unwrap_or_default()));
            }
            for c in &categories {
                csv.push_str(&format!("classification,{},{}\n", quote(&c.key), quote(&c.label)));
            }
            Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], csv).into_response())
        }
        other => Err(ApiError::bad("INVALID_ENUM", format!("format must be json or csv; got {}", anchor_domain::brief(other)))),
    }
}
