//! The client behind a load balancer. Every connection a balancer makes
//! comes from its own address, so behind one (HAProxy with `option
//! forwardfor`) each request would count against one shared client. When
//! the peer is a proxy the operator trusts (`--trusted-proxies`), the
//! client is the nearest address in `X-Forwarded-For` that is not one of
//! them; the request's `ConnectInfo` then carries it, for the rate limit
//! and every per-client count after it. A peer that is not trusted is the
//! client, whatever it claims.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;

/// Replaces the peer address a request carries with its forwarded client,
/// when the peer is a trusted proxy.
pub async fn middleware(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let proxies = &state.settings.trusted_proxies;
    if !proxies.is_empty()
        && let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>().copied()
    {
        let forwarded = request.headers().get_all("x-forwarded-for").iter().filter_map(|value| value.to_str().ok()).collect::<Vec<_>>();
        let client = proxies.client(peer.ip(), forwarded.into_iter());
        if client != peer.ip() {
            request.extensions_mut().insert(ConnectInfo(SocketAddr::new(client, 0)));
        }
    }
    next.run(request).await
}
