//! Rendering payments over HTTP: the x402 challenge as a 402 with its
//! `PAYMENT-REQUIRED` header, and display amounts.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use anchor_domain::MilliDac;
/// 402 with the challenge base64-encoded in `PAYMENT-REQUIRED` and copied in the body.
pub fn challenge_response(challenge: anchor_x402::Challenge) -> Response {
    let encoded = base64::engine::general_purpose::STANDARD.encode(serde_json::to_string(&challenge).unwrap_or_default());
    let mut response = (StatusCode::PAYMENT_REQUIRED, axum::Json(challenge)).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("payment-required", value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("PAYMENT-REQUIRED, PAYMENT-RESPONSE"));
    response
}

/// Adds the `PAYMENT-RESPONSE` header of a settlement (reference, payer), if there was one.
pub fn with_settlement(mut response: Response, settlement: Option<&(String, String)>) -> Response {
    if let Some((reference, payer)) = settlement
        && let Ok(value) = HeaderValue::from_str(&anchor_x402::settle_response(true, reference, payer, None))
    {
        response.headers_mut().insert("payment-response", value);
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    }
    response
}

/// An indicative amount in Korean won at a fixed operator rate (1,400 KRW per
/// USD); never stored, never used for settlement.
pub fn approx_krw(amount: MilliDac) -> i64 {
    // milli-DAC are micro-USD: won = micro-USD * 1400 / 1e6, rounded.
    (amount.milli() * 1_400 + 500_000) / 1_000_000
}
