//! Owner sign-up, sign-in, sign-out and password change; agent-type owners.

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};
use uuid::Uuid;

use anchor_store::{NewOwner, OwnerRecord};

use super::{managed, password_checked, reserve_password_attempt, time};
use crate::error::{ApiError, ApiResult};
use crate::extract::{AuthAgent, JsonBody};
use crate::http::input::Obj;
use crate::openapi::*;
use crate::owner::{self, AuthOwner};
use crate::state::AppState;

/// The versions of the terms and privacy policy an owner agrees to at sign-up.
pub const TERMS_VERSION: &str = "2026-11-01";
pub const PRIVACY_VERSION: &str = "2026-11-01";
/// How deep agent-type owners may nest below a human owner.
pub const MAX_OWNER_DEPTH: i32 = 3;

pub fn operations() -> Vec<Operation> {
    let owner_identity = object(
        &[],
        vec![
            ("owner_id", uuid()),
            ("owner_type", enumeration(&["human", "agent"])),
            ("managing_agent_id", uuid()),
            ("parent_owner_id", uuid()),
            ("owner_depth", integer()),
        ],
    );
    vec![
        op(Method::POST, "/dap/register", post(register))
            .tag("DAP Auth")
            .summary("Create an owner account")
            .request(
                object(
                    &["email", "password", "terms_agreed", "privacy_agreed"],
                    vec![
                        ("email", json!({ "type": "string", "format": "email" })),
                        ("password", doc(string(), "10 to 128 characters, with a letter and a non-letter; not the email")),
                        ("browser_language", string()),
                        ("timezone", string()),
                        ("terms_agreed", doc(boolean(), "Must be true (400 TERMS_REQUIRED)")),
                        ("privacy_agreed", doc(boolean(), "Must be true (400 PRIVACY_REQUIRED)")),
                    ],
                ),
                json!({ "email": "owner@example.com", "password": "a long passphrase 7", "terms_agreed": true, "privacy_agreed": true }),
            )
            .ok(
                201,
                "Registered; sign in with POST /dap/login",
                object(
                    &[],
                    vec![
                        ("owner_id", uuid()),
                        ("email", string()),
                        ("owner_type", string()),
                        ("created_at", datetime()),
                        ("message", string()),
                    ],
                ),
            )
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_VALUE", "TERMS_REQUIRED", "PRIVACY_REQUIRED"])
            .error(409, "The email already has an account", &["EMAIL_ALREADY_REGISTERED"]),
        op(Method::GET, "/dap/register/suggested-country", get(suggested_country))
            .tag("DAP Auth")
            .summary("A residence country guessed from the request, for the sign-up form")
            .ok(
                200,
                "Suggested country",
                object(
                    &[],
                    vec![
                        ("suggested_country", enumeration(RESIDENCES)),
                        ("detection_source", enumeration(&["country_header", "accept_language", "default"])),
                        ("detection_raw", nullable(string())),
                    ],
                ),
            ),
        op(Method::POST, "/dap/auth/agent-login", post(agent_login))
            .tag("DAP Auth")
            .summary("Open an owner session as an agent-type owner, with the agent's token")
            .agent()
            .ok(200, "Session established; the connect.sid cookie is set", owner_identity.clone())
            .error(403, "The agent is not registered as an owner", &["NOT_DAP_OWNER"])
            .error(503, "Agent-type owners are turned off on this service", &["FEATURE_NOT_AVAILABLE"]),
        op(Method::POST, "/dap/owner/register-agent", post(register_agent))
            .tag("DAP Auth")
            .summary("Make a linked agent an owner in its own right (human owners only)")
            .owner()
            .request(object(&["agent_id"], vec![("agent_id", uuid())]), json!({ "agent_id": "00000000-0000-4000-8000-000000000000" }))
            .ok(201, "Agent-type owner created", owner_identity)
            .error(400, "agent_id missing or malformed", &["MISSING_FIELD", "INVALID_UUID"])
            .error(
                403,
                "Not a human owner, too deep, or the agent is not linked to this owner",
                &["HUMAN_OWNER_REQUIRED", "OWNER_DEPTH_EXCEEDED", "NOT_LINKED"],
            )
            .error(409, "The agent is already an owner", &["ALREADY_REGISTERED"])
            .error(503, "Agent-type owners are turned off on this service", &["FEATURE_NOT_AVAILABLE"]),
        op(Method::POST, "/dap/login", post(login))
            .tag("DAP Auth")
            .summary("Sign in with email and password; sets the connect.sid session cookie")
            .request(
                object(&["email", "password"], vec![("email", json!({ "type": "string", "format": "email" })), ("password", string())]),
                json!({ "email": "owner@example.com", "password": "a long passphrase 7" }),
            )
            .ok(
                200,
                "Signed in",
                object(
                    &[],
                    vec![
                        ("message", string()),
                        ("owner_id", uuid()),
                        ("email", string()),
                        ("csrf_token", doc(string(), "Send as X-CSRF-Token on state-changing requests made from a browser")),
                        ("session_expires_at", datetime()),
                    ],
                ),
            )
            .error(401, "Wrong email or password", &["UNAUTHORIZED"])
            .error(429, "Too many failed attempts for this email", &["RATE_LIMITED"]),
        op(Method::POST, "/dap/logout", post(logout))
            .tag("DAP Auth")
            .summary("Sign out: ends the session on the server and clears the cookie")
            .ok(200, "Signed out", object(&[], vec![("message", string())])),
        op(Method::PUT, "/dap/password", put(change_password))
            .tag("DAP Auth")
            .summary("Change the password; every other session of the owner ends")
            .owner()
            .request(
                object(&["current_password", "new_password"], vec![("current_password", string()), ("new_password", string())]),
                json!({ "current_password": "a long passphrase 7", "new_password": "another passphrase 8" }),
            )
            .ok(200, "Password changed", object(&[], vec![("message", string())]))
            .error(400, "The new password breaks the policy", &["MISSING_FIELD", "INVALID_VALUE"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
    ]
}

pub(crate) const RESIDENCES: &[&str] = &["KR", "EU", "UK", "US", "CN", "JP", "OTHER"];

/// A plausible email address, lower-cased.
fn read_email(o: &Obj<'_>) -> ApiResult<String> {
    let email = o.req_str("email")?.trim().to_lowercase();
    let valid = email.len() <= 254
        && !email.chars().any(char::is_whitespace)
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.contains('@') && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
        });
    if !valid {
        return Err(ApiError::bad("INVALID_VALUE", "email must be an email address (name@domain.tld)"));
    }
    Ok(email)
}

fn opt_short(o: &Obj<'_>, name: &str, max: usize) -> ApiResult<Option<String>> {
    match o.opt_str(name)? {
        Some(v) if v.chars().count() > max => Err(ApiError::bad("INVALID_VALUE", format!("{name} is longer than {max} characters"))),
        other => Ok(other.map(str::to_string)),
    }
}

async fn register(State(state): State<AppState>, JsonBody(body): JsonBody) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let o = Obj::new(&body, "", &["email", "password", "browser_language", "timezone", "terms_agreed", "privacy_agreed"])?;
    let email = read_email(&o)?;
    let password = o.req_str("password")?;
    let browser_language = opt_short(&o, "browser_language", 35)?;
    let timezone = opt_short(&o, "timezone", 64)?;
    if o.opt_bool("terms_agreed")? != Some(true) {
        return Err(ApiError::bad("TERMS_REQUIRED", "terms_agreed must be true: the terms of service must be accepted"));
    }
    if o.opt_bool("privacy_agreed")? != Some(true) {
        return Err(ApiError::bad("PRIVACY_REQUIRED", "privacy_agreed must be true: the privacy policy must be accepted"));
    }
    owner::check_password_policy(password, Some(&email))?;
    let hash = owner::hash_password_off_thread(password).await.map_err(ApiError::internal)?;
    let now = state.clock.now();
    let owner = NewOwner {
        owner_id: Uuid::new_v4(),
        email: Some(email.clone()),
        password_hash: Some(hash),
        owner_type: "human".into(),
        managing_agent_id: None,
        parent_owner_id: None,
        owner_depth: 0,
        browser_language,
        timezone,
        residence_country: None,
        terms_version: TERMS_VERSION.into(),
        privacy_version: PRIVACY_VERSION.into(),
        created_at: now,
    };
    if !state.store.insert_owner(&owner).await? {
        return Err(ApiError::conflict("EMAIL_ALREADY_REGISTERED", "this email already has an owner account; sign in instead"));
    }
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({
            "owner_id": owner.owner_id,
            "email": email,
            "owner_type": "human",
            "created_at": time(now),
            "message": "owner account created; sign in with POST /dap/login",
        })),
    ))
}

/// EU member states, which share one residence value.
const EU: &[&str] = &[
    "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT",
    "RO", "SK", "SI", "ES", "SE",
];

fn residence_of(country: &str) -> &'static str {
    match country.to_ascii_uppercase().as_str() {
        "KR" => "KR",
        "US" => "US",
        "CN" => "CN",
        "JP" => "JP",
        "GB" | "UK" => "UK",
        c if EU.contains(&c) => "EU",
        _ => "OTHER",
    }
}

/// From a country header set by a proxy (`CF-IPCountry`, `X-Country-Code`), else
/// the region of the first `Accept-Language` tag, else OTHER. This service
/// looks up no IP address.
async fn suggested_country(headers: HeaderMap) -> axum::Json<Value> {
    let header_country = ["cf-ipcountry", "x-country-code"]
        .iter()
        .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| v.len() == 2));
    if let Some(country) = header_country {
        return axum::Json(
            json!({ "suggested_country": residence_of(country), "detection_source": "country_header", "detection_raw": country }),
        );
    }
    let language = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let first = language.split(',').next().unwrap_or("").split(';').next().unwrap_or("").trim();
    let region = first.split(['-', '_']).nth(1).filter(|r| r.len() == 2);
    let guess = match (region, first.split(['-', '_']).next().unwrap_or("")) {
        (Some(region), _) => Some(residence_of(region)),
        (None, "ko") => Some("KR"),
        (None, "ja") => Some("JP"),
        (None, "zh") => Some("CN"),
        _ => None,
    };
    match guess {
        Some(country) => axum::Json(json!({ "suggested_country": country, "detection_source": "accept_language", "detection_raw": first })),
        None => axum::Json(json!({ "suggested_country": "OTHER", "detection_source": "default", "detection_raw": Value::Null })),
    }
}

/// Starts a session for `owner` and answers `body` with its cookie.
async fn with_session(state: &AppState, owner: &OwnerRecord, status: StatusCode, mut body: Value) -> ApiResult<Response> {
    let secret = owner::new_session_secret();
    let now = state.clock.now();
    let expires = now + state.settings.dap.session_ttl;
    state.store.insert_session(&owner::session_hash(&secret), owner.owner_id, now, expires).await?;
    body["csrf_token"] = json!(owner::csrf_token(&secret));
    body["session_expires_at"] = json!(time(expires));
    let mut response = (status, axum::Json(body)).into_response();
    let cookie = owner::session_cookie(&secret, state.settings.dap.session_ttl.num_seconds(), owner::secure_cookies(state));
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn login(State(state): State<AppState>, JsonBody(body): JsonBody) -> ApiResult<Response> {
    let o = Obj::new(&body, "", &["email", "password"])?;
    let email = o.req_str("email")?.trim().to_lowercase();
    let password = o.req_str("password")?;
    reserve_password_attempt(&state, &email).await?;
    let now = state.clock.now();
    let owner = state.store.owner_by_email(&email).await?;
    // The hash is checked even for an unknown email, so timing does not tell which emails exist.
    let verified = owner::verify_password_off_thread(owner.as_ref().and_then(|o| o.password_hash.as_deref()), password).await;
    let owner = owner.filter(|owner| verified && super::account_status(owner, now) != "deleted");
    password_checked(&state, &email, owner.is_some()).await?;
    let Some(owner) = owner else {
        return Err(ApiError::OwnerUnauthorized { message: "email or password is wrong".into() });
    };
    with_session(&state, &owner, StatusCode::OK, json!({ "message": "signed in", "owner_id": owner.owner_id, "email": owner.email })).await
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(secret) = owner::cookie_secret(&headers) {
        state.store.delete_session(&owner::session_hash(&secret)).await?;
    }
    let mut response = axum::Json(json!({ "message": "signed out" })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, owner::clear_cookie(owner::secure_cookies(&state)));
    Ok(response)
}

async fn change_password(State(state): State<AppState>, auth: AuthOwner, JsonBody(body): JsonBody) -> ApiResult<axum::Json<Value>> {
    let o = Obj::new(&body, "", &["current_password", "new_password"])?;
    let current = o.req_str("current_password")?;
    let new = o.req_str("new_password")?;
    if auth.owner.password_hash.is_none() {
        return Err(ApiError::forbidden("HUMAN_OWNER_REQUIRED", "agent-type owners sign in with their agent's token and have no password"));
    }
    super::confirm_password(&state, &auth.owner, current).await?;
    owner::check_password_policy(new, auth.owner.email.as_deref())?;
    let hash = owner::hash_password_off_thread(new).await.map_err(ApiError::internal)?;
    state.store.set_owner_password(auth.owner.owner_id, &hash).await?;
    state.store.delete_other_sessions(auth.owner.owner_id, &auth.session_hash).await?;
    Ok(axum::Json(json!({ "message": "password changed; other sessions were signed out" })))
}

fn feature_check(state: &AppState) -> ApiResult<()> {
    if state.settings.dap.agent_owners {
        Ok(())
    } else {
        Err(ApiError::unavailable("FEATURE_NOT_AVAILABLE", "agent-type owners are turned off on this service"))
    }
}

fn identity(owner: &OwnerRecord) -> Value {
    json!({
        "owner_id": owner.owner_id,
        "owner_type": owner.owner_type,
        "managing_agent_id": owner.managing_agent_id,
        "parent_owner_id": owner.parent_owner_id,
        "owner_depth": owner.owner_depth,
    })
}

async fn agent_login(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Response> {
    feature_check(&state)?;
    let owner = match state.store.owner_by_managing_agent(agent.agent_id).await? {
        Some(owner) if super::account_status(&owner, state.clock.now()) != "deleted" => owner,
        _ => {
            return Err(ApiError::forbidden(
                "NOT_DAP_OWNER",
                "this agent is not an owner; a human owner makes it one with POST /dap/owner/register-agent",
            ));
        }
    };
    with_session(&state, &owner, StatusCode::OK, identity(&owner)).await
}

async fn register_agent(
    State(state): State<AppState>,
    auth: AuthOwner,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    feature_check(&state)?;
    let o = Obj::new(&body, "", &["agent_id"])?;
    let agent_id = o.req_uuid("agent_id")?;
    if auth.owner.owner_type != "human" {
        return Err(ApiError::forbidden("HUMAN_OWNER_REQUIRED", "only a human owner registers agent-type owners"));
    }
    if auth.owner.owner_depth + 1 > MAX_OWNER_DEPTH {
        return Err(ApiError::forbidden("OWNER_DEPTH_EXCEEDED", format!("owners nest at most {MAX_OWNER_DEPTH} levels deep")));
    }
    managed(&state, &auth.owner, agent_id).await?;
    let new = NewOwner {
        owner_id: Uuid::new_v4(),
        email: None,
        password_hash: None,
        owner_type: "agent".into(),
        managing_agent_id: Some(agent_id),
        parent_owner_id: Some(auth.owner.owner_id),
        owner_depth: auth.owner.owner_depth + 1,
        browser_language: None,
        timezone: None,
        residence_country: auth.owner.residence_country.clone(),
        terms_version: auth.owner.terms_version.clone(),
        privacy_version: auth.owner.privacy_version.clone(),
        created_at: state.clock.now(),
    };
    if !state.store.insert_owner(&new).await? {
        return Err(ApiError::conflict("ALREADY_REGISTERED", format!("agent {agent_id} is already an owner")));
    }
    let owner = state.store.owner(new.owner_id).await?.ok_or_else(|| ApiError::internal(anyhow::anyhow!("owner vanished")))?;
    Ok((StatusCode::CREATED, axum::Json(identity(&owner))))
}
