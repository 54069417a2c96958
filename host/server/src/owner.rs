//! Owner authentication for the portal (DAP): passwords, sessions, the
//! `connect.sid` cookie and CSRF protection.
//!
//! - Passwords are hashed with argon2id (the `argon2` crate's defaults:
//!   19 MiB, 2 passes, 1 lane) and stored as PHC strings. The policy: 10 to 128
//!   characters, at least one letter and one character that is not a letter,
//!   and not the account's email.
//! - A session is 32 random bytes; the cookie carries them base64url-encoded
//!   and the database keeps only their SHA-256, with an absolute expiry
//!   (`--dap-session-hours`, 12 by default). Any host sharing the database can
//!   serve any session. The cookie is `HttpOnly; SameSite=Strict; Path=/`, plus
//!   `Secure` when the public URL is `https://`.
//! - CSRF: a state-changing request (POST, PUT, PATCH, DELETE) under `/dap` is
//!   refused with 403 `CSRF_REJECTED` when its `Origin` is not this service's,
//!   or its `Sec-Fetch-Site` says another site sent it. A browser request
//!   (one that carries `Origin` or `Sec-Fetch-Site`) made with a session must
//!   also send `X-CSRF-Token`, a value derived from the session secret and
//!   handed out at login and by `GET /dap/account/me`. Clients that are not
//!   browsers send neither header and need no token: no other site can make
//!   them send a request. SameSite=Strict keeps the cookie off cross-site
//!   requests in the first place.

use std::sync::OnceLock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use anchor_store::OwnerRecord;

use crate::error::ApiError;
use crate::state::AppState;

/// The session cookie's name, as the reference clients expect it.
pub const COOKIE: &str = "connect.sid";
/// The header a browser sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Failed logins per email allowed in [`LOGIN_WINDOW_MINUTES`].
pub const LOGIN_MAX_FAILURES: i64 = 5;
pub const LOGIN_WINDOW_MINUTES: i64 = 15;

/// Password checks (logins and confirmations) per email: 5 in a fixed window of
/// 15 minutes. Each check reserves an attempt before the hash is computed; a
/// right password gives its attempt back, a wrong one keeps it.
pub const PASSWORD_ATTEMPTS: anchor_store::AttemptLimit = anchor_store::AttemptLimit {
    scope: "owner_password",
    window: chrono::TimeDelta::minutes(LOGIN_WINDOW_MINUTES),
    max: LOGIN_MAX_FAILURES,
};
pub const PASSWORD_MIN: usize = 10;
pub const PASSWORD_MAX: usize = 128;

/// Checks the password policy.
pub fn check_password_policy(password: &str, email: Option<&str>) -> Result<(), ApiError> {
    let length = password.chars().count();
    let weak = |why: &str| {
        ApiError::bad(
            "INVALID_VALUE",
            format!(
                "password {why}: use {PASSWORD_MIN} to {PASSWORD_MAX} characters with at least one letter and one character that is not a letter"
            ),
        )
    };
    if length < PASSWORD_MIN {
        return Err(weak("is too short"));
    }
    if length > PASSWORD_MAX {
        return Err(weak("is too long"));
    }
    if !password.chars().any(char::is_alphabetic) || password.chars().all(char::is_alphabetic) {
        return Err(weak("needs letters and non-letters"));
    }
    if email.is_some_and(|e| password.eq_ignore_ascii_case(e)) {
        return Err(weak("must not be the email address"));
    }
    Ok(())
}

/// The argon2id PHC string of `password`.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Ok(Argon2::default().hash_password(password.as_bytes(), &salt).map_err(|e| anyhow::anyhow!("argon2: {e}"))?.to_string())
}

/// True if `password` matches the stored hash. With no stored hash, a fixed
/// hash is checked instead, so an unknown email costs the same time.
pub fn verify_password(stored: Option<&str>, password: &str) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("not-a-password-0").unwrap_or_default());
    let (phc, real) = match stored {
        Some(hash) => (hash, true),
        None => (dummy.as_str(), false),
    };
    let Ok(parsed) = PasswordHash::new(phc) else { return false };
    Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok() && real
}

/// [`hash_password`] on the blocking pool: argon2id takes about 15 ms of one
/// core, which must not stall the async workers serving other requests.
pub async fn hash_password_off_thread(password: &str) -> anyhow::Result<String> {
    let password = password.to_string();
    tokio::task::spawn_blocking(move || hash_password(&password)).await?
}

/// [`verify_password`] on the blocking pool.
pub async fn verify_password_off_thread(stored: Option<&str>, password: &str) -> bool {
    let (stored, password) = (stored.map(str::to_string), password.to_string());
    tokio::task::spawn_blocking(move || verify_password(stored.as_deref(), &password)).await.unwrap_or(false)
}

/// A new session secret (what the cookie carries).
pub fn new_session_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn session_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The CSRF token of a session: derived from its secret, so it is never stored.
pub fn csrf_token(secret: &str) -> String {
    hex::encode(Sha256::new().chain_update(b"anchor-csrf/1\n").chain_update(secret.as_bytes()).finalize())
}

/// The `Set-Cookie` value that installs a session.
pub fn session_cookie(secret: &str, max_age_secs: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}={secret}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"))
        .expect("cookie is ASCII")
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")).expect("cookie is ASCII")
}

/// The session secret a request carries, if any.
pub fn cookie_secret(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty() && value.len() <= 128)
}

fn owner_unauthorized(message: &str) -> ApiError {
    ApiError::OwnerUnauthorized { message: message.to_string() }
}

/// The owner whose session cookie came with the request.
pub struct AuthOwner {
    pub owner: OwnerRecord,
    pub session_hash: [u8; 32],
    pub csrf_token: String,
}

fn is_state_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// True when the request carries headers only a browser sends.
fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN) || headers.contains_key("sec-fetch-site")
}

impl FromRequestParts<AppState> for AuthOwner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<AuthOwner, ApiError> {
        let Some(secret) = cookie_secret(&parts.headers) else {
            return Err(owner_unauthorized("sign in first: POST /dap/login sets the connect.sid session cookie"));
        };
        let hash = session_hash(&secret);
        let now = state.clock.now();
        let owner = match state.store.session_owner(&hash, now).await? {
            // An account past its deletion grace period is gone, even before the eraser runs.
            Some(owner) if owner.deletion_response_due_at.is_none_or(|due| due > now) => owner,
            _ => return Err(owner_unauthorized("the session has ended or never existed; sign in again with POST /dap/login")),
        };
        let csrf = csrf_token(&secret);
        if is_state_changing(&parts.method) && from_browser(&parts.headers) {
            let sent = parts.headers.get(CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or_default();
            if !bool::from(sent.ct_eq(csrf.as_bytes())) {
                return Err(ApiError::forbidden(
                    "CSRF_REJECTED",
                    "a browser request that changes state must send the session's X-CSRF-Token header",
                ));
            }
        }
        Ok(AuthOwner { owner, session_hash: hash, csrf_token: csrf })
    }
}

/// Refuses state-changing `/dap` requests sent by another site (see the module
/// documentation).
pub async fn csrf_origin_guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/dap/") && is_state_changing(request.method()) {
        let headers = request.headers();
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if site.is_some_and(|s| s != "same-origin" && s != "none") {
            return refuse("the request came from another site (Sec-Fetch-Site)");
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
            let ours = origin_of(&state.settings.public_url);
            let same_host = origin.split_once("://").is_some_and(|(_, h)| !host.is_empty() && h == host);
            if origin != ours && !same_host {
                return refuse("the request's Origin is not this service");
            }
        }
    }
    next.run(request).await
}

fn refuse(why: &str) -> Response {
    ApiError::forbidden("CSRF_REJECTED", format!("{why}; state-changing portal requests are accepted from this service's own pages only"))
        .into_response()
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", rest.split('/').next().unwrap_or("")),
        None => url.to_string(),
    }
}

/// Whether cookies must be `Secure`: the service is reached over TLS.
pub fn secure_cookies(state: &AppState) -> bool {
    state.settings.public_url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_policy() {
        assert!(check_password_policy("short1", None).is_err());
        assert!(check_password_policy("onlyletterslong", None).is_err());
        assert!(check_password_policy("1234567890123", None).is_err());
        assert!(check_password_policy(&"a1".repeat(65), None).is_err());
        assert!(check_password_policy("a@b.example1", Some("A@B.example1")).is_err());
        assert!(check_password_policy("correct horse 9", Some("x@y.z")).is_ok());
    }

    #[test]
    fn hashes_are_argon2id_and_verify() {
        let hash = hash_password("correct horse 9").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password(Some(&hash), "correct horse 9"));
        assert!(!verify_password(Some(&hash), "correct horse 8"));
        assert!(!verify_password(None, "not-a-password-0"));
    }

    #[test]
    fn cookies_are_secure_over_tls_only() {
        let tls = session_cookie("s3cret", 60, true);
        let plain = session_cookie("s3cret", 60, false);
        assert_eq!(tls.to_str().unwrap(), "connect.sid=s3cret; Path=/; HttpOnly; SameSite=Strict; Max-Age=60; Secure");
        assert!(!plain.to_str().unwrap().contains("Secure"));
        assert!(clear_cookie(true).to_str().unwrap().contains("Max-Age=0; Secure"));
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_ne!(
            csrf_token("a").as_bytes(),
            hex::encode(session_hash("a")).as_bytes(),
            "the CSRF token must not be the stored session hash"
        );
    }

    #[test]
    fn cookie_parsing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; connect.sid=abc; b=2"));
        assert_eq!(cookie_secret(&headers).as_deref(), Some("abc"));
        assert_eq!(origin_of("https://x.example:8443/base"), "https://x.example:8443");
    }
}
