//! Signed receipts of settlements (x402's `offer-receipt`, decision 0069),
//! added to every successful `PAYMENT-RESPONSE` on the way out.

use axum::http::HeaderValue;
use axum::response::Response;
use base64::Engine;

use crate::payment::PaidAt;

/// Adds the signed receipt (x402's `offer-receipt`, decision 0069) to a
/// successful settlement's `PAYMENT-RESPONSE`: who paid, on which network,
/// for which resource (this request's URL, or the one [`PaidAt`] names), by
/// which settlement, when (now, or when [`PaidAt`] says it settled); signed
/// with the log's key, as the offer was.
pub async fn sign(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    let Some(signer) = state.app.offers.as_ref() else { return response };
    let Some(settlement) = response.headers().get("payment-response").and_then(|v| v.to_str().ok()).and_then(|text| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
        serde_json::from_slice::<serde_json::Value>(&bytes).ok()
    }) else {
        return response;
    };
    if settlement["success"] != true {
        return response;
    }
    let paid = response.extensions().get::<PaidAt>().copied();
    let resource = format!("{}{}", state.settings.public_url, paid.map_or(path.as_str(), |p| p.route));
    let text = |key: &str| settlement[key].as_str().unwrap_or_default().to_string();
    let issued_at = paid.map_or_else(|| state.app.clock.now(), |p| p.at).timestamp().max(0) as u64;
    let receipt =
        anchor_x402::offers::signed_receipt(signer.as_ref(), &resource, &text("network"), &text("payer"), &text("transaction"), issued_at);
    let signed = anchor_x402::settle_response(true, &text("transaction"), &text("payer"), None, Some(receipt));
    if let Ok(value) = HeaderValue::from_str(&signed) {
        response.headers_mut().insert("payment-response", value);
    }
    response
}
