//! Settlements on the way out: every response that reports one
//! ([`Settled`]) gets its `PAYMENT-RESPONSE` header here, with the signed
//! receipt of x402's `offer-receipt` (decision 0069) when the host signs.

use axum::http::HeaderValue;
use axum::response::Response;

use crate::payment::{PaidAt, Settled};

/// Writes a settled response's `PAYMENT-RESPONSE`: who paid, on which
/// network, by which settlement, and the signed receipt of it, for which
/// resource (this request's URL, or the one [`PaidAt`] names) and when (now,
/// or when [`PaidAt`] says it settled); signed with the log's key, as the
/// offer was.
pub async fn sign(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    let Some(settled) = response.extensions_mut().remove::<Settled>() else { return response };
    let receipt = state.app.offers.as_ref().map(|signer| {
        let paid = response.extensions().get::<PaidAt>().copied();
        let resource = format!("{}{}", state.settings.public_url, paid.map_or(path.as_str(), |p| p.route));
        let issued_at = paid.map_or_else(|| state.app.clock.now(), |p| p.at).timestamp().max(0) as u64;
        anchor_x402::offers::signed_receipt(signer.as_ref(), &resource, anchor_x402::NETWORK, &settled.payer, &settled.reference, issued_at)
    });
    let header = anchor_x402::settle_response(true, &settled.reference, &settled.payer, None, receipt);
    if let Ok(value) = HeaderValue::from_str(&header) {
        response.headers_mut().insert("payment-response", value);
    }
    response
}
