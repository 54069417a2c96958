//! The owner portal's web page, at `/portal`: one HTML page, a script and a
//! stylesheet compiled into the binary. The page talks to the `/dap` API with
//! the session cookie; it loads nothing from other origins, and its content
//! security policy forbids it to.

use axum::Router;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::state::AppState;

const INDEX: &str = include_str!("../portal/index.html");
const SCRIPT: &str = include_str!("../portal/app.js");
const STYLE: &str = include_str!("../portal/app.css");
const TERMS: &str = include_str!("../portal/terms.html");
const PRIVACY: &str = include_str!("../portal/privacy.html");

/// Only this origin's scripts, styles and API; no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn router() -> Router<AppState> {
    let page = |router| super::answer_other_methods(router, &[Method::GET], true);
    Router::new()
        .route("/portal", page(get(|| async { Redirect::permanent("/portal/") })))
        .route("/portal/", page(get(|| async { asset(INDEX, "text/html; charset=utf-8") })))
        .route("/portal/app.js", page(get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") })))
        .route("/portal/app.css", page(get(|| async { asset(STYLE, "text/css; charset=utf-8") })))
        .route("/portal/terms", page(get(|| async { asset(TERMS, "text/html; charset=utf-8") })))
        .route("/portal/privacy", page(get(|| async { asset(PRIVACY, "text/html; charset=utf-8") })))
        // The owner API's bare prefix: people type it looking for the portal.
        .route("/dap", page(get(|| async { Redirect::to("/portal/") })))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
