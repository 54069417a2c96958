//! The unpaid case: an x402 v2 `PaymentRequired` challenge.
//!
//! This is the seam the x402 payment flow plugs into. Today a request that Trial
//! cannot pay is answered with the challenge; verifying and settling a
//! `PAYMENT-SIGNATURE` comes with external payments.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use alloy_primitives::keccak256;
use anchor_domain::MilliDac;
use anchor_store::PaymentRecord;

use crate::state::Settings;

/// USDC on Base mainnet, and its EIP-712 domain.
pub const USDC_BASE: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
pub const NETWORK: &str = "eip155:8453";
/// How long an externally paid declaration may wait for its confirmation.
pub const PAYMENT_WINDOW_SECS: u64 = 30 * 60;
/// `maxTimeoutSeconds` of a DD create challenge: the authorization must outlive
/// the confirmation window, plus five minutes for settlement.
pub const DD_CREATE_MAX_TIMEOUT_SECS: u64 = PAYMENT_WINDOW_SECS + 5 * 60;

/// Builds the challenge for `amount` on `path`.
pub fn challenge(settings: &Settings, path: &str, description: &str, amount: MilliDac, max_timeout_secs: u64) -> Value {
    json!({
        "x402Version": 2,
        "error": "Payment required",
        "resource": {
            "url": format!("{}{}", settings.public_url, path),
            "description": description,
            "mimeType": "application/json",
        },
        "accepts": [{
            "scheme": "exact",
            "network": NETWORK,
            "amount": amount.usdc_base_units().to_string(),
            "asset": USDC_BASE,
            "payTo": settings.pay_to,
            "maxTimeoutSeconds": max_timeout_secs,
            "extra": { "name": "USD Coin", "version": "2" },
        }],
    })
}

/// 402 with the challenge base64-encoded in `PAYMENT-REQUIRED` and copied in the body.
pub fn challenge_response(challenge: Value) -> Response {
    let encoded = base64::engine::general_purpose::STANDARD.encode(challenge.to_string());
    let mut response = (StatusCode::PAYMENT_REQUIRED, axum::Json(challenge)).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("payment-required", value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("PAYMENT-REQUIRED, PAYMENT-RESPONSE"));
    response
}

/// An indicative amount in Korean won at a fixed operator rate (1,400 KRW per
/// USD); never stored, never used for settlement.
pub fn approx_krw(amount: MilliDac) -> i64 {
    // milli-DAC are micro-USD: won = micro-USD * 1400 / 1e6, rounded.
    (amount.milli() * 1_400 + 500_000) / 1_000_000
}

/// The deterministic reference of a local settlement: keccak-256 over the
/// payment's identity (network, asset, payer, payment id).
pub fn local_settlement_reference(payment: &PaymentRecord) -> String {
    let identity = format!("{}|{}|{}|{}", payment.network, payment.asset, payment.payer, payment.payment_id);
    format!("local:{}", keccak256(identity.as_bytes()))
}

/// The budget period containing `now`: the calendar month, in UTC.
pub fn dab_period(now: chrono::DateTime<chrono::Utc>) -> (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) {
    use chrono::{Datelike, TimeZone};
    let start = chrono::Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0).single().unwrap_or(now);
    let end = start.checked_add_months(chrono::Months::new(1)).unwrap_or(start);
    (start, end)
}

/// The refusal when a payment would pass the agent's DAB.
pub fn dab_reached(limit: MilliDac, spent: MilliDac, amount: MilliDac, resets: chrono::DateTime<chrono::Utc>) -> crate::error::ApiError {
    crate::error::ApiError::forbidden(
        "DAB_LIMIT_REACHED",
        format!(
            "this payment of {amount} DAC would pass the agent's DAB of {limit} DAC per month ({spent} DAC spent externally this month); \
             the budget resets at {}; Trial-covered work is not affected",
            resets.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
    )
}

/// USDC base units as a JSON number of USDC (six decimals), for display.
pub fn usdc_json(units: i64) -> serde_json::Value {
    let text = format!("{}.{:06}", units / 1_000_000, units % 1_000_000);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null)
}
