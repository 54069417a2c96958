//! The HTTP API. Each module owns its routes, handlers and response shapes.
//!
//! Reading order: `body` (how bodies are read into their types), `agents` (registration and
//! credentials), `declarations` (DD/EE: create, confirm, read), `pricing`,
//! `account` (Trial and classification), `discovery` (documents about the
//! service itself).

pub mod forwarded;
pub mod observe;
pub mod portal;
pub mod ratelimit;
pub mod receipts;

use std::collections::BTreeMap;

use axum::Router;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get};
use serde_json::json;

use crate::areas;
use crate::error::ApiError;
use crate::listener;
use crate::openapi::Operation;
use crate::state::AppState;

/// The whole application: routes, guidance for GET on POST-only routes, JSON
/// 404 and 405, and the rate limit; `others` (other front ends, such as
/// MCP) get the same layers.
pub fn app(state: AppState, others: Router<AppState>) -> Router {
    /// Per path: its methods, their merged router, and the guide for a GET on it.
    type Route = (Vec<Method>, MethodRouter<AppState>, Option<Guide>);
    let mut by_path: BTreeMap<&'static str, Route> = BTreeMap::new();
    for operation in areas::operations() {
        let entry = by_path.entry(operation.path).or_insert_with(|| (Vec::new(), MethodRouter::new(), None));
        if operation.method == Method::POST {
            entry.2 = Some(Guide::from(&operation));
        }
        entry.0.push(operation.method.clone());
        entry.1 = std::mem::take(&mut entry.1).merge(operation.handler);
    }
    let mut router = Router::new();
    for (path, (methods, mut method_router, guide)) in by_path {
        let has_get = methods.contains(&Method::GET) || guide.is_some();
        if let (false, Some(guide)) = (methods.contains(&Method::GET), guide) {
            method_router = method_router.merge(get(move |axum::extract::State(state): axum::extract::State<AppState>| {
                let guide = guide.clone();
                async move { guide.render(&state.settings.config.public_url) }
            }));
        }
        router = router.route(path, answer_other_methods(method_router, &methods, has_get));
    }
    let limits = state.settings.http;
    if state.settings.metrics_on_api {
        router = router.route("/metrics", get(observe::metrics));
    }
    let router = router
        .merge(portal::router())
        .merge(others)
        .fallback(not_found)
        .layer(axum::middleware::from_fn(no_store_for_credentials))
        .layer(axum::middleware::from_fn_with_state(state.clone(), receipts::sign))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::owner::csrf_origin_guard))
        .layer(axum::middleware::from_fn_with_state(state.clone(), ratelimit::middleware))
        .layer(axum::middleware::from_fn_with_state(state.clone(), forwarded::middleware))
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes));
    listener::guarded(router, limits, BODY_LIMITS)
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe::middleware))
        .with_state(state)
}

/// A response to a request that carried credentials (a bearer token or a
/// cookie) is about its caller: an agent's records, an owner's account, a
/// token. No cache keeps it (`Cache-Control: no-store`), unless the route set
/// a caching rule of its own for public bytes (a log tile).
async fn no_store_for_credentials(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let credentials =
        request.headers().contains_key(axum::http::header::AUTHORIZATION) || request.headers().contains_key(axum::http::header::COOKIE);
    let mut response = next.run(request).await;
    let cache = response.headers().get(axum::http::header::CACHE_CONTROL);
    if credentials && cache.is_none_or(|v| v.as_bytes() == b"private") {
        response.headers_mut().insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    }
    response
}

/// The routes that accept more than the service's own body limit
/// (`--max-body-bytes`): a tool's component upload.
pub const BODY_LIMITS: &[listener::BodyLimit] =
    &[listener::BodyLimit { method: Method::PUT, path: "/v1/tsl/tool/*/component", max: areas::tools::UPLOAD_BODY_LIMIT }];

async fn not_found(uri: axum::http::Uri) -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({
            "error_code": "NOT_FOUND",
            "message": format!("no route {}; GET /openapi.json lists every route", anchor_domain::brief(uri.path())),
        })),
    )
}

/// Completes a path's methods: OPTIONS answers 204 with `Allow`, and any other
/// method 405 JSON `METHOD_NOT_ALLOWED`, with `Allow` too.
pub(crate) fn answer_other_methods(router: MethodRouter<AppState>, methods: &[Method], has_get: bool) -> MethodRouter<AppState> {
    let allow = allow_header(methods, has_get);
    let options_allow = allow.clone();
    router.options(move || async move { (StatusCode::NO_CONTENT, [(axum::http::header::ALLOW, options_allow)]) }).fallback(
        move |method: Method, uri: axum::http::Uri| async move {
            ApiError::Protocol {
                status: StatusCode::METHOD_NOT_ALLOWED,
                code: "METHOD_NOT_ALLOWED",
                message: format!("{} does not accept {method}; it accepts {allow}", anchor_domain::brief(uri.path())),
                allow: Some(allow),
            }
        },
    )
}

/// The `Allow` value of a path: its methods, HEAD with GET, and OPTIONS.
fn allow_header(methods: &[Method], has_get: bool) -> String {
    let mut allowed: Vec<&str> = Vec::new();
    if has_get {
        allowed.extend(["GET", "HEAD"]);
    }
    for method in methods {
        if !allowed.contains(&method.as_str()) {
            allowed.push(method.as_str());
        }
    }
    allowed.push("OPTIONS");
    allowed.join(", ")
}

/// What a GET on a POST-only route answers: how to call it instead.
#[derive(Clone)]
struct Guide {
    path: &'static str,
    summary: &'static str,
    auth: crate::openapi::Auth,
    example: Option<serde_json::Value>,
    paid: bool,
    /// The body's media type.
    media: &'static str,
}

impl Guide {
    fn from(operation: &Operation) -> Guide {
        Guide {
            path: operation.path,
            summary: operation.summary,
            auth: operation.auth,
            example: operation.example.clone(),
            paid: operation.responses.iter().any(|r| r.status == 402),
            media: operation.request_media,
        }
    }

    fn render(&self, base: &str) -> axum::Json<serde_json::Value> {
        let body = self.example.clone().unwrap_or_else(|| json!({}));
        let auth_header = match self.auth {
            crate::openapi::Auth::Agent => " -H 'Authorization: Bearer <auth_token>'",
            crate::openapi::Auth::Owner => " -b 'connect.sid=<session from POST /dap/login>'",
            crate::openapi::Auth::None => "",
        };
        axum::Json(json!({
            "correct_method": "POST",
            "path": self.path,
            "summary": self.summary,
            "how_to_call": {
                "method": "POST",
                "url": format!("{base}{}", self.path),
                "content_type": self.media,
                "authentication": match self.auth {
                    crate::openapi::Auth::Agent => "Authorization: Bearer <auth_token>",
                    crate::openapi::Auth::Owner => "the owner's session cookie connect.sid, set by POST /dap/login",
                    crate::openapi::Auth::None => "none",
                },
                "body_example": body,
            },
            "curl_example": if self.media == "application/json" {
                format!("curl -X POST {base}{}{auth_header} -H 'Content-Type: application/json' -d '{}'", self.path, body)
            } else {
                format!("curl -X POST {base}{}{auth_header} -H 'Content-Type: {}' --data-binary @body", self.path, self.media)
            },
            "payment": if self.paid {
                json!({
                    "protocol": "x402 v2",
                    "note": "Trial DAC pays while it lasts; after that the route answers 402 with a PAYMENT-REQUIRED challenge",
                })
            } else {
                json!({ "note": "free" })
            },
            "documentation": format!("{base}/openapi.json"),
        }))
    }
}
