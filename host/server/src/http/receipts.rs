//! Settlements on the way out: every response that reports one
//! ([`Settled`]) gets its `PAYMENT-RESPONSE` header here, with the signed
//! receipt of x402's `offer-receipt` (decision 0069) when the host signs.

use axum::http::HeaderValue;
use axum::response::Response;

use crate::x402_headers::{Settled, SettledAt};

/// Writes a settled response's `PAYMENT-RESPONSE`
/// ([`crate::x402_headers::settlement_header`]), settled now or when
/// [`SettledAt`] says.
pub async fn sign(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    let Some(Settled(settlement)) = response.extensions_mut().remove::<Settled>() else { return response };
    let at = response.extensions().get::<SettledAt>().map_or_else(|| state.app.clock.now(), |at| at.0);
    let header = crate::x402_headers::settlement_header(&state.app, &settlement, at);
    if let Ok(value) = HeaderValue::from_str(&header) {
        response.headers_mut().insert("payment-response", value);
    }
    response
}
