//! Owner authentication over HTTP: the `connect.sid` cookie, the session
//! extractor and CSRF protection. Passwords and sessions themselves are
//! `anchor_app::owners` (`password`, `sessions`).
//!
//! - The cookie carries the session secret, `HttpOnly; SameSite=Strict;
//!   Path=/`, plus `Secure` when the public URL is `https://`.
//! - CSRF: a state-changing request (POST, PUT, PATCH, DELETE) under `/dap` is
//!   refused with 403 `CSRF_REJECTED` when its `Origin` is not this service's,
//!   or its `Sec-Fetch-Site` says another site sent it. A browser request
//!   (one that carries `Origin` or any `Sec-Fetch-*` header) made with a session must
//!   also send `X-CSRF-Token`, a value derived from the session secret and
//!   handed out at login and by `GET /dap/account/me`. Clients that are not
//!   browsers send neither header and need no token: no other site can make
//!   them send a request; a token they send anyway must be the session's.
//!   SameSite=Strict keeps the cookie off cross-site requests in the first
//!   place.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use anchor_app::owners::sessions;
use anchor_domain::records::OwnerRecord;

use crate::error::ApiError;
use crate::state::AppState;

/// The session cookie's name, as the reference clients expect it.
pub const COOKIE: &str = "connect.sid";
/// The header a browser sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

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
    cookie_value(headers, COOKIE)
}

/// The cookie that marks a browser the owner signed in from (decision
/// 0064): sent back only to the sign-in route, for a year.
pub const DEVICE_COOKIE: &str = "anchor.device";

/// The `Set-Cookie` value that keeps a device secret.
pub fn device_cookie(secret: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{DEVICE_COOKIE}={secret}; Path=/dap/login; HttpOnly; SameSite=Strict; Max-Age=31536000{secure}"))
        .expect("cookie is ASCII")
}

/// The value of the cookie `name` a request carries, if any (at most 128 characters).
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty() && value.len() <= 128)
}

fn owner_unauthorized(message: &str) -> ApiError {
    ApiError::App(anchor_app::AppError::Unauthenticated { message: message.to_string() })
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

/// True when the request carries headers only a browser sends: `Origin`,
/// or any of the fetch metadata (`Sec-Fetch-Site`, `-Mode`, `-Dest`, `-User`).
fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN) || headers.keys().any(|name| name.as_str().starts_with("sec-fetch-"))
}

impl FromRequestParts<AppState> for AuthOwner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<AuthOwner, ApiError> {
        let Some(secret) = cookie_secret(&parts.headers) else {
            return Err(owner_unauthorized("sign in first: POST /dap/login sets the connect.sid session cookie"));
        };
        let Some(owner) = sessions::owner_of(&state.app, &secret).await? else {
            return Err(owner_unauthorized("the session has ended or never existed; sign in again with POST /dap/login"));
        };
        let csrf = sessions::csrf_token(&secret);
        // A token sent is checked even where none is needed: a wrong one is
        // a mistake (or a guess) the client should hear of.
        let sent = parts.headers.get(CSRF_HEADER);
        if is_state_changing(&parts.method) && (from_browser(&parts.headers) || sent.is_some()) {
            let sent = sent.map(HeaderValue::as_bytes).unwrap_or_default();
            if !bool::from(sent.ct_eq(csrf.as_bytes())) {
                return Err(ApiError::forbidden(
                    "CSRF_REJECTED",
                    "a browser request that changes state must send the session's X-CSRF-Token header",
                ));
            }
        }
        Ok(AuthOwner { owner, session_hash: sessions::session_hash(&secret), csrf_token: csrf })
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
            let ours = origin_of(&state.settings.config.public_url);
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
    state.settings.config.public_url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_secure_over_tls_only() {
        let tls = session_cookie("s3cret", 60, true);
        let plain = session_cookie("s3cret", 60, false);
        assert_eq!(tls.to_str().unwrap(), "connect.sid=s3cret; Path=/; HttpOnly; SameSite=Strict; Max-Age=60; Secure");
        assert!(!plain.to_str().unwrap().contains("Secure"));
        assert!(clear_cookie(true).to_str().unwrap().contains("Max-Age=0; Secure"));
    }

    #[test]
    fn cookie_parsing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; connect.sid=abc; b=2"));
        assert_eq!(cookie_secret(&headers).as_deref(), Some("abc"));
        assert_eq!(origin_of("https://x.example:8443/base"), "https://x.example:8443");
    }
}
