//! The rate limit as a layer: counts each request against its client's
//! window (`crate::ratelimit::RateLimiter`), answers 429 past the limit, and
//! adds the IETF `RateLimit-*` headers to every response. The probes
//! (`/health`, `/ready`) are not counted: a balancer's health checks share
//! its address with the traffic it forwards, and a client spending that
//! budget must not take every host out of the balancer. A 429 closes its
//! connection, so a client over its limit cannot hold kept-alive slots with
//! cheap refusals.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn middleware(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if matches!(request.uri().path(), "/health" | "/ready") {
        return next.run(request).await;
    }
    // One client is an IPv4 address or an IPv6 /64, as for connections.
    let client = crate::listener::client_key(
        request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip()).unwrap_or(IpAddr::from([127, 0, 0, 1])),
    );
    let verdict = state.limiter.check(client, state.app.clock.now().timestamp());
    let cose = crate::error::speaks_cose(request.headers());
    let mut response = if verdict.allowed {
        next.run(request).await
    } else {
        state.app.metrics.rate_limited.inc();
        let mut refused = ApiError::TooManyRequests {
            message: format!(
                "more than {} requests in {} seconds from this client; retry after {} seconds",
                state.settings.rate_limit, state.settings.rate_window_secs, verdict.reset_secs
            ),
            retry_after_secs: verdict.reset_secs,
        }
        .into_response();
        refused.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
        // A COSE client (SCRAPI) reads refusals as concise problem details.
        if cose { crate::error::concise_problem(refused, |_| None).await } else { refused }
    };
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("ratelimit-limit", state.settings.rate_limit.to_string());
    set("ratelimit-remaining", verdict.remaining.to_string());
    set("ratelimit-reset", verdict.reset_secs.to_string());
    set("ratelimit-policy", format!("{};w={}", state.settings.rate_limit, state.settings.rate_window_secs));
    response
}
