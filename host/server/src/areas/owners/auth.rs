//! Owner sign-up, sign-in, sign-out and password change; agent-type owners.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use anchor_app::owners::auth::{self, SignUp};
use anchor_app::owners::sessions::{self, Session};
use anchor_domain::owners::{OwnerType, Residence};
use anchor_domain::records::OwnerRecord;

use super::Message;
use crate::error::ApiResult;
use crate::extract::{AuthAgent, Body, Client};
use crate::openapi::*;
use crate::owner::{self, AuthOwner};
use crate::state::AppState;
use crate::wire::{Id, Named, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/dap/register", post(register))
            .tag("DAP Auth")
            .summary("Create an owner account")
            .takes::<RegisterRequest>(
                json!({ "email": "owner@example.com", "password": "a long passphrase 7", "terms_agreed": true, "privacy_agreed": true }),
            )
            .returns::<Registered>(201, "Registered; sign in with POST /dap/login")
            .error(400, "Invalid input", &["MISSING_FIELD", "INVALID_VALUE", "TERMS_REQUIRED", "PRIVACY_REQUIRED"])
            .error(409, "The email already has an account", &["EMAIL_ALREADY_REGISTERED"]),
        op(Method::GET, "/dap/register/suggested-country", get(suggested_country))
            .tag("DAP Auth")
            .summary("A residence country guessed from the request, for the sign-up form")
            .returns::<SuggestedCountry>(200, "Suggested country"),
        op(Method::POST, "/dap/auth/agent-login", post(agent_login))
            .tag("DAP Auth")
            .summary("Open an owner session as an agent-type owner, with the agent's token")
            .agent()
            .returns::<SessionOpened<OwnerIdentity>>(200, "Session established; the connect.sid cookie is set")
            .error(403, "The agent is not registered as an owner", &["NOT_DAP_OWNER"])
            .error(503, "Agent-type owners are turned off on this service", &["FEATURE_NOT_AVAILABLE"]),
        op(Method::POST, "/dap/owner/register-agent", post(register_agent))
            .tag("DAP Auth")
            .summary("Make a linked agent an owner in its own right (human owners only)")
            .owner()
            .takes::<AgentRequest>(json!({ "agent_id": "00000000-0000-4000-8000-000000000000" }))
            .returns::<OwnerIdentity>(201, "Agent-type owner created")
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
            .takes::<LoginRequest>(json!({ "email": "owner@example.com", "password": "a long passphrase 7" }))
            .returns::<SessionOpened<SignedIn>>(200, "Signed in")
            .error(401, "Wrong email or password", &["UNAUTHORIZED"])
            .error(403, "A browser request from another site", &["CSRF_REJECTED"])
            .error(
                429,
                "Too many failed attempts for this email from this client (5 in 15 minutes, 20 in a day), from this client over every \
                 email (30 in 15 minutes), or for this email over every client (100 in 15 minutes); Retry-After says when",
                &["RATE_LIMITED"],
            ),
        op(Method::POST, "/dap/logout", post(logout))
            .tag("DAP Auth")
            .summary("Sign out: ends the session on the server and clears the cookie")
            .returns::<Message>(200, "Signed out"),
        op(Method::PUT, "/dap/password", put(change_password))
            .tag("DAP Auth")
            .summary("Change the password; every other session of the owner ends")
            .owner()
            .takes::<PasswordRequest>(json!({ "current_password": "a long passphrase 7", "new_password": "another passphrase 8" }))
            .returns::<Message>(200, "Password changed")
            .error(400, "The new password breaks the policy", &["MISSING_FIELD", "INVALID_VALUE"])
            .error(403, "Agent-type owners have no password", &["HUMAN_OWNER_REQUIRED"])
            .error(429, "Too many failed attempts", &["RATE_LIMITED"]),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct RegisterRequest {
    #[schemars(email)]
    email: String,
    /// 10 to 128 characters, with a letter and a non-letter; not the email.
    password: String,
    browser_language: Option<String>,
    timezone: Option<String>,
    /// Must be true (400 TERMS_REQUIRED).
    #[schemars(required)]
    terms_agreed: Option<bool>,
    /// Must be true (400 PRIVACY_REQUIRED).
    #[schemars(required)]
    privacy_agreed: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
struct Registered {
    owner_id: Uuid,
    email: String,
    owner_type: Named<OwnerType>,
    created_at: Time,
    message: &'static str,
}

async fn register(State(state): State<AppState>, Body(request): Body<RegisterRequest>) -> ApiResult<(StatusCode, Json<Registered>)> {
    let owner = auth::sign_up(
        &state.app,
        SignUp {
            email: request.email,
            password: request.password,
            browser_language: request.browser_language,
            timezone: request.timezone,
            terms_agreed: request.terms_agreed == Some(true),
            privacy_agreed: request.privacy_agreed == Some(true),
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Registered {
            owner_id: owner.owner_id,
            email: owner.email.unwrap_or_default(),
            owner_type: Named(owner.owner_type),
            created_at: owner.created_at.into(),
            message: "owner account created; sign in with POST /dap/login",
        }),
    ))
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum DetectionSource {
    CountryHeader,
    AcceptLanguage,
    Default,
}

#[derive(Serialize, JsonSchema)]
struct SuggestedCountry {
    suggested_country: Named<Residence>,
    detection_source: DetectionSource,
    detection_raw: Option<String>,
}

/// From a country header set by a proxy (`CF-IPCountry`, `X-Country-Code`), else
/// the region of the first `Accept-Language` tag, else OTHER. This service
/// looks up no IP address.
async fn suggested_country(headers: HeaderMap) -> Json<SuggestedCountry> {
    let header_country = ["cf-ipcountry", "x-country-code"]
        .iter()
        .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| v.len() == 2));
    if let Some(country) = header_country {
        return Json(SuggestedCountry {
            suggested_country: Named(Residence::of_country(country)),
            detection_source: DetectionSource::CountryHeader,
            detection_raw: Some(country.to_string()),
        });
    }
    let language = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let first = language.split(',').next().unwrap_or("").split(';').next().unwrap_or("").trim();
    let region = first.split(['-', '_']).nth(1).filter(|r| r.len() == 2);
    let guess = match (region, first.split(['-', '_']).next().unwrap_or("")) {
        (Some(region), _) => Some(Residence::of_country(region)),
        (None, "ko") => Some(Residence::Kr),
        (None, "ja") => Some(Residence::Jp),
        (None, "zh") => Some(Residence::Cn),
        _ => None,
    };
    Json(match guess {
        Some(residence) => SuggestedCountry {
            suggested_country: Named(residence),
            detection_source: DetectionSource::AcceptLanguage,
            detection_raw: Some(first.to_string()),
        },
        None => {
            SuggestedCountry { suggested_country: Named(Residence::Other), detection_source: DetectionSource::Default, detection_raw: None }
        }
    })
}

/// An answer that opened a session: its body, the session's CSRF token and
/// expiry; the cookie is set alongside.
#[derive(Serialize, JsonSchema)]
struct SessionOpened<T> {
    #[serde(flatten)]
    body: T,
    /// Send as X-CSRF-Token on state-changing requests made from a browser.
    csrf_token: String,
    session_expires_at: Time,
}

fn with_session<T: Serialize>(state: &AppState, session: Session, body: T) -> Response {
    let answer = SessionOpened { body, csrf_token: session.csrf_token, session_expires_at: session.expires_at.into() };
    let mut response = Json(answer).into_response();
    let ttl = state.settings.config.owners.session_ttl.num_seconds();
    response.headers_mut().insert(header::SET_COOKIE, owner::session_cookie(&session.secret, ttl, owner::secure_cookies(state)));
    response.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    response
}

#[derive(Deserialize, JsonSchema)]
struct LoginRequest {
    #[schemars(email)]
    email: String,
    password: String,
}

#[derive(Serialize, JsonSchema)]
struct SignedIn {
    message: &'static str,
    owner_id: Uuid,
    email: Option<String>,
}

async fn login(
    State(state): State<AppState>,
    Client(client): Client,
    headers: HeaderMap,
    Body(request): Body<LoginRequest>,
) -> ApiResult<Response> {
    let device = owner::cookie_value(&headers, owner::DEVICE_COOKIE);
    let (owner, session, new_device) =
        auth::sign_in(&state.app, &request.email, &request.password, &client.to_string(), device.as_deref()).await?;
    let mut response = with_session(&state, session, SignedIn { message: "signed in", owner_id: owner.owner_id, email: owner.email });
    if let Some(device) = new_device {
        response.headers_mut().append(header::SET_COOKIE, owner::device_cookie(&device, owner::secure_cookies(&state)));
    }
    Ok(response)
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(secret) = owner::cookie_secret(&headers) {
        sessions::close(&state.app, &secret).await?;
    }
    let mut response = Json(Message { message: "signed out" }).into_response();
    response.headers_mut().insert(header::SET_COOKIE, owner::clear_cookie(owner::secure_cookies(&state)));
    Ok(response)
}

#[derive(Deserialize, JsonSchema)]
struct PasswordRequest {
    current_password: String,
    new_password: String,
}

async fn change_password(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<PasswordRequest>,
) -> ApiResult<Json<Message>> {
    auth::change_password(&state.app, &owner.owner, &owner.session_hash, &request.current_password, &request.new_password).await?;
    Ok(Json(Message { message: "password changed; other sessions were signed out" }))
}

/// Who an owner is in the hierarchy of owners.
#[derive(Serialize, JsonSchema)]
struct OwnerIdentity {
    owner_id: Uuid,
    owner_type: Named<OwnerType>,
    managing_agent_id: Option<Uuid>,
    parent_owner_id: Option<Uuid>,
    owner_depth: i32,
}

impl From<&OwnerRecord> for OwnerIdentity {
    fn from(owner: &OwnerRecord) -> OwnerIdentity {
        OwnerIdentity {
            owner_id: owner.owner_id,
            owner_type: Named(owner.owner_type),
            managing_agent_id: owner.managing_agent_id,
            parent_owner_id: owner.parent_owner_id,
            owner_depth: owner.owner_depth,
        }
    }
}

async fn agent_login(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Response> {
    let (owner, session) = auth::agent_sign_in(&state.app, &agent).await?;
    Ok(with_session(&state, session, OwnerIdentity::from(&owner)))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct AgentRequest {
    pub agent_id: Id,
}

async fn register_agent(
    State(state): State<AppState>,
    owner: AuthOwner,
    Body(request): Body<AgentRequest>,
) -> ApiResult<(StatusCode, Json<OwnerIdentity>)> {
    let promoted = auth::promote_agent(&state.app, &owner.owner, request.agent_id.0).await?;
    Ok((StatusCode::CREATED, Json(OwnerIdentity::from(&promoted))))
}
