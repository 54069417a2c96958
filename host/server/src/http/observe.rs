//! What every request leaves behind for the operator: a request id, a log
//! span that carries it (so every line a request logs names it), and its
//! count and latency by route template; and `GET /metrics`, which serves
//! those numbers with the rest of the host's.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use anchor_app::metrics::{HttpLabels, RouteLabels};

use crate::state::AppState;

/// The header a request id travels in, both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// The client's request id if it is a short plain token (up to 64 letters,
/// digits, `-`, `_`, `.`), so a log line cannot be forged through it; else a new one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// Names, times and counts one request.
pub async fn middleware(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let span_started = std::time::SystemTime::now();
    // This request's span, when spans are exported: the root of a trace of
    // its own (see `otlp`), which an MCP tool call's span joins.
    let exported = state.spans.as_ref().map(|_| crate::otlp::SpanContext::root());
    if let Some(context) = exported {
        request.extensions_mut().insert(context);
    }
    // The template, never the path itself: ids in paths would make a label per record.
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_string();
    // Any token is a method: the label takes the standard ones, the rest as `other`.
    let method = match *request.method() {
        Method::GET | Method::HEAD | Method::POST | Method::PUT | Method::PATCH | Method::DELETE | Method::OPTIONS => {
            request.method().as_str()
        }
        _ => "other",
    }
    .to_string();
    let id = request_id(request.headers());
    let span = tracing::info_span!("request", request_id = %id, method = %method, route = %route);
    // One pricing generation for the whole request, even across a switch;
    // the body keys its type left out are named in the answer.
    let answered = crate::extract::IGNORED_FIELDS.scope(std::cell::RefCell::new(Vec::new()), async move {
        let mut response = next.run(request).await;
        let ignored = crate::extract::IGNORED_FIELDS.with(|cell| cell.take());
        if !ignored.is_empty()
            && let Ok(value) = HeaderValue::from_str(&crate::extract::ignored_fields_value(&ignored))
        {
            response.headers_mut().insert(crate::extract::IGNORED_FIELDS_HEADER, value);
        }
        response
    });
    let mut response = state.app.schedule.in_one_generation(answered).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    if let (Some(exporter), Some(context)) = (&state.spans, exported) {
        exporter.record(crate::otlp::Span::server(context, span_started, &method, &route, status));
    }
    let metrics = &state.app.metrics;
    metrics.http_seconds.get_or_create(&RouteLabels { route: route.clone(), method: method.clone() }).observe(seconds);
    metrics.http_requests.get_or_create(&HttpLabels { route, method, status }).inc();
    span.in_scope(|| tracing::debug!(status, ms = seconds * 1000.0, "answered"));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// `GET /metrics`: the OpenMetrics text Prometheus scrapes.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let text = anchor_app::metrics::render(&state.app).await;
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

/// The router of a metrics-only listener (`--metrics-listen`).
pub fn metrics_router(state: AppState) -> axum::Router {
    axum::Router::new().route("/metrics", axum::routing::get(metrics)).with_state(state)
}
