//! Rendering payments over HTTP: the x402 challenge as a 402 with its
//! `PAYMENT-REQUIRED` header, and display amounts.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use anchor_app::charge::Settlement;
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

/// A settlement a response reports, if there was one: its
/// `PAYMENT-RESPONSE` header, with the signed receipt, is written on the
/// way out (the HTTP stack's receipts layer), for every paid route alike.
pub fn with_settlement(mut response: Response, settlement: Option<&Settlement>) -> Response {
    if let Some(settlement) = settlement {
        response.extensions_mut().insert(Settled(settlement.clone()));
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    }
    response
}

/// A settlement a response reports (see [`with_settlement`]).
#[derive(Clone, Debug)]
pub struct Settled(pub Settlement);

/// The x402 `SettlementResponse` of `settlement`, settled at `at`, with the
/// receipt signed with the log's key (x402's `offer-receipt`, decision
/// 0069) when the host signs: who paid, on which network, for the resource
/// the payment's 402 named, by which settlement, when.
pub fn settlement_response(app: &anchor_app::Services, settlement: &Settlement, at: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    anchor_x402::settlement_response(true, &settlement.reference, &settlement.payer, None, receipt(app, settlement, at))
}

/// [`settlement_response`] as its `PAYMENT-RESPONSE` header value (base64
/// of its JSON), written straight from the settlement.
pub fn settlement_header(app: &anchor_app::Services, settlement: &Settlement, at: chrono::DateTime<chrono::Utc>) -> String {
    anchor_x402::settle_response(true, &settlement.reference, &settlement.payer, None, receipt(app, settlement, at))
}

fn receipt(
    app: &anchor_app::Services,
    settlement: &Settlement,
    at: chrono::DateTime<chrono::Utc>,
) -> Option<anchor_x402::offers::SignedReceipt> {
    app.offers.as_ref().map(|signer| {
        anchor_x402::offers::signed_receipt(
            signer.as_ref(),
            &settlement.resource,
            anchor_x402::NETWORK,
            &settlement.payer,
            &settlement.reference,
            at.timestamp().max(0) as u64,
        )
    })
}

/// When a settlement a response reports settled, where that is not the
/// moment it is answered (a confirm settles with its confirmation): the
/// receipt says that time, so it can be signed again, the same, in the
/// declaration's evidence bundle.
#[derive(Clone, Copy, Debug)]
pub struct SettledAt(pub chrono::DateTime<chrono::Utc>);

/// The rate the local-currency (Korean won) estimates use: the operator's,
/// dated and sourced (`--fiat-rate FILE`), or, when none is configured, the
/// service's fixed indicative rate, said to be that. Never stored, never used
/// for settlement: payments are in USDC at 1 DAC = 0.001 USD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiatRate {
    /// Won per US dollar, in thousandths (1400000 is 1,400).
    pub krw_per_usd_milli: i64,
    /// When the rate was taken: the operator's date, or the day the fixed
    /// indicative rate was last set ([`FIXED_RATE_AS_OF`]).
    pub as_of: chrono::DateTime<chrono::Utc>,
    /// Where it came from.
    pub source: String,
}

/// The day the fixed indicative rate (1,400 won per dollar) was last set.
pub const FIXED_RATE_AS_OF: &str = "2026-11-01T00:00:00Z";

impl Default for FiatRate {
    fn default() -> FiatRate {
        FiatRate {
            krw_per_usd_milli: 1_400_000,
            as_of: chrono::DateTime::parse_from_rfc3339(FIXED_RATE_AS_OF).expect("a constant RFC 3339 time").to_utc(),
            source: "a fixed indicative rate of this service, set on the date given (no market rate is configured; the operator \
                     sets one with --fiat-rate)"
                .into(),
        }
    }
}

impl FiatRate {
    /// Reads `{"krw_per_usd": 1391.25, "as_of": "2026-11-20T00:00:00Z", "source": "…"}`.
    pub fn from_json(text: &str) -> anyhow::Result<FiatRate> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            krw_per_usd: serde_json::Number,
            as_of: String,
            source: String,
        }
        let file: File = serde_json::from_str(text).map_err(|e| anyhow::anyhow!("the fiat rate file: {e}"))?;
        let rate = file.krw_per_usd.to_string();
        let (whole, frac) = rate.split_once('.').unwrap_or((&rate, ""));
        let exact = |whole: &str, frac: &str| -> Option<i64> {
            whole.parse::<i64>().ok()?.checked_mul(1000)?.checked_add(format!("{frac:0<3}").parse::<i64>().ok()?)
        };
        let milli = (frac.len() <= 3 && !rate.contains(['e', 'E', '-']))
            .then(|| exact(whole, frac))
            .flatten()
            .filter(|m| (1..=100_000_000_000).contains(m))
            .ok_or_else(|| anyhow::anyhow!("krw_per_usd must be a positive number with at most three decimals; got {rate}"))?;
        let as_of = anchor_domain::dates::parse_instant(&file.as_of)
            .ok_or_else(|| anyhow::anyhow!("as_of must be an RFC 3339 time; got {}", file.as_of))?;
        if file.source.trim().is_empty() || file.source.chars().count() > 200 {
            anyhow::bail!("source must say where the rate comes from, in at most 200 characters");
        }
        Ok(FiatRate { krw_per_usd_milli: milli, as_of, source: file.source })
    }

    /// An indicative amount in won of `amount`, rounded.
    pub fn krw(&self, amount: MilliDac) -> i64 {
        // milli-DAC are micro-USD: won = micro-USD * rate-milli / 1e9, rounded.
        ((i128::from(amount.milli()) * i128::from(self.krw_per_usd_milli) + 500_000_000) / 1_000_000_000) as i64
    }

    /// The rate as an exact decimal text (`1391.25`).
    pub fn text(&self) -> String {
        let text = format!("{}.{:03}", self.krw_per_usd_milli / 1000, self.krw_per_usd_milli % 1000);
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_rate_is_exact_dated_and_sourced() {
        let rate =
            FiatRate::from_json(r#"{"krw_per_usd": 1391.25, "as_of": "2026-11-20T00:00:00Z", "source": "the operator's bank, 20 Nov"}"#)
                .unwrap();
        assert_eq!(rate.krw_per_usd_milli, 1_391_250);
        assert_eq!(rate.text(), "1391.25");
        assert_eq!(rate.as_of.to_rfc3339(), "2026-11-20T00:00:00+00:00");
        // 157.5 DAC = 0.1575 USD = 219.12 KRW, rounded to 219.
        assert_eq!(rate.krw(MilliDac(157_500)), 219);
        for bad in [
            r#"{"krw_per_usd": -1, "as_of": "2026-11-20T00:00:00Z", "source": "x"}"#,
            r#"{"krw_per_usd": 1e3, "as_of": "2026-11-20T00:00:00Z", "source": "x"}"#,
            r#"{"krw_per_usd": 1391.2555, "as_of": "2026-11-20T00:00:00Z", "source": "x"}"#,
            r#"{"krw_per_usd": 1391, "as_of": "yesterday", "source": "x"}"#,
            r#"{"krw_per_usd": 1391, "as_of": "2026-11-20T00:00:00Z", "source": " "}"#,
            r#"{"krw_per_usd": 1391, "source": "x"}"#,
        ] {
            assert!(FiatRate::from_json(bad).is_err(), "{bad}");
        }
        let fixed = FiatRate::default();
        assert_eq!(fixed.as_of.to_rfc3339(), "2026-11-01T00:00:00+00:00", "the fixed rate says when it was set");
        assert!(fixed.source.starts_with("a fixed indicative rate"), "and that it is not a market rate");
        assert_eq!(fixed.krw(MilliDac(10_000)), 14);
    }
}
