//! The rate limit as a layer: counts each request against its client's
//! window (`crate::ratelimit::RateLimiter`), answers 429 past the limit, and
//! adds the IETF `RateLimit-*` headers to every response.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn middleware(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // One client is an IPv4 address or an IPv6 /64, as for connections.
    let client = crate::listener::client_key(
        request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip()).unwrap_or(IpAddr::from([127, 0, 0, 1])),
    );
    let verdict = state.limiter.check(client, state.app.clock.now().timestamp());
    let mut response = if verdict.allowed {
        next.run(request).await
    } else {
        state.app.metrics.rate_limited.inc();
        ApiError::TooManyRequests {
            message: format!(
                "more than {} requests in {} seconds from this client; retry after {} seconds",
                state.settings.rate_limit, state.settings.rate_window_secs, verdict.reset_secs
            ),
            retry_after_secs: verdict.reset_secs,
        }
        .into_response()
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
