//! x402 v2, the lowest layer of payments: what a challenge says, how a
//! payment payload is decoded and verified locally, and how it settles.
//!
//! Verification matches the echoed requirement against the one the request
//! gets and checks the EIP-3009 `transferWithAuthorization` it carries
//! (EIP-712 signature, payee, amount, validity window) before any state is
//! touched. Settling comes afterwards, in [`settlement`]: locally (no chain, a
//! deterministic `local:0x…` reference) or through a facilitator.
//!
//! Nothing here knows HTTP frameworks, storage or pricing.

#[cfg(feature = "client")]
pub mod client;
pub mod offers;
pub mod settlement;

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use base64::Engine;
use serde::Serialize;
use serde_json::{Value, json};

/// USDC on Base mainnet, and its network.
pub const USDC_BASE: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
pub const NETWORK: &str = "eip155:8453";

/// What a payment must be to be accepted: one entry of a challenge's `accepts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    pub scheme: &'static str,
    pub network: &'static str,
    /// USDC base units (6 decimals); 1 DAC = 1000.
    pub amount: String,
    pub asset: &'static str,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    pub extra: TokenDomain,
}

/// The EIP-712 domain name and version of the asset, for the signer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenDomain {
    pub name: &'static str,
    pub version: &'static str,
}

impl Requirement {
    /// The requirement as the wire (and a facilitator) carries it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The one payment requirement a challenge accepts: `amount_units` USDC base
/// units to `pay_to`, with an authorization valid `max_timeout_secs`.
pub fn requirement(pay_to: &str, amount_units: i64, max_timeout_secs: u64) -> Requirement {
    Requirement {
        scheme: "exact",
        network: NETWORK,
        amount: amount_units.to_string(),
        asset: USDC_BASE,
        pay_to: pay_to.to_string(),
        max_timeout_seconds: max_timeout_secs,
        extra: TokenDomain { name: "USD Coin", version: "2" },
    }
}

/// The resource a challenge is for.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    #[cfg_attr(feature = "schema", schemars(url))]
    pub url: String,
    pub description: String,
    pub mime_type: &'static str,
}

/// An x402 v2 `PaymentRequired` object: the body of a 402 and, base64-encoded,
/// its `PAYMENT-REQUIRED` header.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "X402Challenge"))]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    #[cfg_attr(feature = "schema", schemars(extend("enum" = [2])))]
    pub x402_version: u8,
    /// Why an earlier payment was refused, or "Payment required".
    pub error: String,
    pub resource: Resource,
    pub accepts: Vec<Requirement>,
    /// `offer-receipt`: the offer of each entry of `accepts`, signed by the
    /// service ([`offers`]), when it signs offers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

/// A challenge for `resource_url`, with `error` set to the reason an earlier
/// payment was refused, if one was.
pub fn challenge(resource_url: &str, description: &str, requirement: Requirement, error: Option<&str>) -> Challenge {
    Challenge {
        x402_version: 2,
        error: error.unwrap_or("Payment required").to_string(),
        resource: Resource { url: resource_url.to_string(), description: description.to_string(), mime_type: "application/json" },
        accepts: vec![requirement],
        extensions: None,
    }
}

sol! {
    /// EIP-3009, as USDC implements it.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The EIP-712 domain of USDC on Base.
pub fn usdc_domain() -> Eip712Domain {
    Eip712Domain {
        name: Some("USD Coin".into()),
        version: Some("2".into()),
        chain_id: Some(U256::from(8453u64)),
        verifying_contract: Some(USDC_BASE.parse().expect("static address")),
        salt: None,
    }
}

/// Why a payment was refused; the strings are the ones the official x402 SDK uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    InvalidVersion,
    NoMatch,
    RecipientMismatch,
    ValueMismatch,
    ValidBefore,
    ValidAfter,
    Signature,
    NonceUsed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidVersion => "invalid_x402_version",
            Reason::NoMatch => "No matching payment requirements",
            Reason::RecipientMismatch => "invalid_exact_evm_recipient_mismatch",
            Reason::ValueMismatch => "invalid_exact_evm_payload_authorization_value_mismatch",
            Reason::ValidBefore => "invalid_exact_evm_payload_authorization_valid_before",
            Reason::ValidAfter => "invalid_exact_evm_payload_authorization_valid_after",
            Reason::Signature => "invalid_exact_evm_signature",
            Reason::NonceUsed => "invalid_exact_evm_nonce_already_used",
        }
    }
}

/// Decodes a payment payload as a header carries it (base64 of a JSON
/// object); `Err` says what is wrong, naming `header`.
pub fn decode_payload(header: &str, text: &str) -> Result<Payload, String> {
    let text = text.trim();
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    let Some(bytes) = engines.iter().find_map(|e| e.decode(text).ok()) else {
        return Err(format!("{header} is not base64"));
    };
    let value = match serde_json::from_slice::<Value>(&bytes) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return Err(format!("{header} does not hold a JSON object")),
        Err(e) => return Err(format!("{header} does not hold JSON: {}", anchor_domain::brief(&e.to_string()))),
    };
    // JSON that parsed is UTF-8 outside its strings too (its structure is ASCII).
    let text = String::from_utf8(bytes).map_err(|_| format!("{header} does not hold UTF-8 JSON"))?;
    Ok(Payload { value, text })
}

/// A payment payload as offered: read (`value`), and the JSON text it was
/// read from (`text`), which is what a payment records, so it is never
/// written out again.
#[derive(Clone, Debug)]
pub struct Payload {
    pub value: Value,
    pub text: String,
}

/// A payload made here rather than received (a caller of the application
/// itself): its text is its JSON written out.
impl From<Value> for Payload {
    fn from(value: Value) -> Payload {
        Payload { text: value.to_string(), value }
    }
}

/// A payment whose authorization checked out.
#[derive(Clone, Debug)]
pub struct Verified {
    pub payer: String,
    pub nonce: String,
    pub amount_units: i64,
    pub pay_to: String,
    pub valid_after: i64,
    pub valid_before: i64,
}

fn same_address(a: &Value, b: &Value) -> bool {
    match (a.as_str().and_then(|s| s.parse::<Address>().ok()), b.as_str().and_then(|s| s.parse::<Address>().ok())) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn number(value: &Value) -> Option<U256> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().map(U256::from),
        _ => None,
    }
}

/// Checks `payload` against `requirement` (this request's one `accepts` entry)
/// at unix time `now`.
pub fn verify(payload: &Value, requirement: &Value, now: i64) -> Result<Verified, Reason> {
    if payload["x402Version"] != json!(2) {
        return Err(Reason::InvalidVersion);
    }
    let accepted = &payload["accepted"];
    let exact = ["scheme", "network", "amount", "maxTimeoutSeconds"].iter().all(|k| accepted[*k] == requirement[*k]);
    let addresses = same_address(&accepted["asset"], &requirement["asset"]) && same_address(&accepted["payTo"], &requirement["payTo"]);
    let extra =
        accepted["extra"]["name"] == requirement["extra"]["name"] && accepted["extra"]["version"] == requirement["extra"]["version"];
    if !(exact && addresses && extra) {
        return Err(Reason::NoMatch);
    }
    let auth = &payload["payload"]["authorization"];
    let parse_address = |v: &Value| v.as_str().and_then(|s| s.parse::<Address>().ok());
    let (Some(from), Some(to)) = (parse_address(&auth["from"]), parse_address(&auth["to"])) else {
        return Err(Reason::Signature);
    };
    let pay_to: Address = requirement["payTo"].as_str().and_then(|s| s.parse().ok()).ok_or(Reason::NoMatch)?;
    if to != pay_to {
        return Err(Reason::RecipientMismatch);
    }
    let amount = number(&requirement["amount"]).ok_or(Reason::NoMatch)?;
    let value = number(&auth["value"]).ok_or(Reason::ValueMismatch)?;
    if value != amount {
        return Err(Reason::ValueMismatch);
    }
    let valid_after = number(&auth["validAfter"]).and_then(|v| i64::try_from(v).ok()).ok_or(Reason::ValidAfter)?;
    let valid_before = number(&auth["validBefore"]).and_then(|v| i64::try_from(v).ok()).ok_or(Reason::ValidBefore)?;
    let max_timeout = requirement["maxTimeoutSeconds"].as_i64().unwrap_or(60);
    if valid_before < now + 6 || valid_before > now + max_timeout + 60 {
        return Err(Reason::ValidBefore);
    }
    if valid_after > now {
        return Err(Reason::ValidAfter);
    }
    let nonce = signed_by_payer(payload, from, to, value, valid_after, valid_before)?;
    Ok(Verified {
        payer: format!("{from:#x}"),
        nonce: format!("{nonce:#x}"),
        amount_units: i64::try_from(amount).map_err(|_| Reason::ValueMismatch)?,
        pay_to: format!("{pay_to:#x}"),
        valid_after,
        valid_before,
    })
}

/// Whether the payload's EIP-3009 authorization of `value` from `from` to
/// `to` in the window is signed by `from` (a low-s signature, as on chain);
/// its nonce if it is.
fn signed_by_payer(payload: &Value, from: Address, to: Address, value: U256, valid_after: i64, valid_before: i64) -> Result<B256, Reason> {
    let nonce: B256 = payload["payload"]["authorization"]["nonce"].as_str().and_then(|s| s.parse().ok()).ok_or(Reason::Signature)?;
    let message = TransferWithAuthorization {
        from,
        to,
        value,
        validAfter: U256::from(valid_after as u64),
        validBefore: U256::from(valid_before as u64),
        nonce,
    };
    let signing_hash = message.eip712_signing_hash(&usdc_domain());
    let signature = payload["payload"]["signature"]
        .as_str()
        .and_then(|s| alloy_primitives::hex::decode(s).ok())
        .filter(|bytes| bytes.len() == 65)
        .ok_or(Reason::Signature)?;
    let parity = match signature[64] {
        27 | 0 => false,
        28 | 1 => true,
        _ => return Err(Reason::Signature),
    };
    let signature = Signature::from_bytes_and_parity(&signature[..64], parity);
    // High-s signatures are malleable copies of low-s ones: refused, as on chain.
    if signature.normalize_s().is_some() {
        return Err(Reason::Signature);
    }
    let recovered = signature.recover_address_from_prehash(&signing_hash).map_err(|_| Reason::Signature)?;
    if recovered != from {
        return Err(Reason::Signature);
    }
    Ok(nonce)
}

/// What a stored payment's authorization says, its payer's signature
/// checked and nothing else (no requirement, no clock): for a verifier that
/// reads the payment later, offline ([`Verified::amount_units`] is its
/// `value`, [`Verified::pay_to`] its `to`).
pub fn authorization(payload: &Value) -> Result<Verified, Reason> {
    let auth = &payload["payload"]["authorization"];
    let parse_address = |v: &Value| v.as_str().and_then(|s| s.parse::<Address>().ok());
    let (Some(from), Some(to)) = (parse_address(&auth["from"]), parse_address(&auth["to"])) else {
        return Err(Reason::Signature);
    };
    let value = number(&auth["value"]).ok_or(Reason::ValueMismatch)?;
    let valid_after = number(&auth["validAfter"]).and_then(|v| i64::try_from(v).ok()).ok_or(Reason::ValidAfter)?;
    let valid_before = number(&auth["validBefore"]).and_then(|v| i64::try_from(v).ok()).ok_or(Reason::ValidBefore)?;
    let nonce = signed_by_payer(payload, from, to, value, valid_after, valid_before)?;
    Ok(Verified {
        payer: format!("{from:#x}"),
        nonce: format!("{nonce:#x}"),
        amount_units: i64::try_from(value).map_err(|_| Reason::ValueMismatch)?,
        pay_to: format!("{to:#x}"),
        valid_after,
        valid_before,
    })
}

/// The `PAYMENT-RESPONSE` header value for a settlement, with its signed
/// receipt ([`offers::signed_receipt`]) when there is one.
pub fn settle_response(success: bool, reference: &str, payer: &str, error: Option<&str>, receipt: Option<offers::SignedReceipt>) -> String {
    let body = SettlementResponse::new(success, reference, payer, error, receipt);
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_string(&body).unwrap_or_default())
}

/// The x402 `SettlementResponse` object (what `PAYMENT-RESPONSE` carries in
/// base64, and MCP's `x402/payment-response` as it is), with its signed
/// receipt ([`offers::signed_receipt`]) when there is one.
pub fn settlement_response(
    success: bool,
    reference: &str,
    payer: &str,
    error: Option<&str>,
    receipt: Option<offers::SignedReceipt>,
) -> Value {
    serde_json::to_value(SettlementResponse::new(success, reference, payer, error, receipt)).unwrap_or(Value::Null)
}

/// An x402 `SettlementResponse`, written out as it is (no JSON tree built
/// on the way to a header).
#[derive(Serialize)]
pub struct SettlementResponse<'a> {
    success: bool,
    transaction: &'a str,
    network: &'static str,
    payer: &'a str,
    #[serde(rename = "errorReason", skip_serializing_if = "Option::is_none")]
    error_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions: Option<offers::ReceiptExtensions>,
}

impl<'a> SettlementResponse<'a> {
    pub fn new(
        success: bool,
        reference: &'a str,
        payer: &'a str,
        error: Option<&'a str>,
        receipt: Option<offers::SignedReceipt>,
    ) -> SettlementResponse<'a> {
        SettlementResponse {
            success,
            transaction: if success { reference } else { "" },
            network: NETWORK,
            payer,
            error_reason: error,
            extensions: receipt.map(offers::ReceiptExtensions::of),
        }
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::keccak256;

    use super::*;

    #[test]
    fn usdc_domain_and_type_hash_are_the_ones_on_chain() {
        assert_eq!(format!("{:#x}", usdc_domain().hash_struct()), "0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f");
        assert_eq!(
            format!("{:#x}", keccak256(TransferWithAuthorization::eip712_encode_type().as_bytes())),
            "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
        );
    }

    #[test]
    fn a_payload_keeps_the_text_it_was_read_from() {
        let text = "{ \"x402Version\": 2, \"payload\": {\"nonce\": \"\\u00e9\"} }";
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
        let payload = decode_payload("PAYMENT-SIGNATURE", &format!(" {encoded} ")).unwrap();
        assert_eq!(payload.text, text);
        assert_eq!(payload.value["payload"]["nonce"], "\u{e9}");
        assert_eq!(serde_json::from_str::<Value>(&payload.text).unwrap(), payload.value);
        let not_object = base64::engine::general_purpose::STANDARD.encode("[1]");
        assert_eq!(decode_payload("X", &not_object).unwrap_err(), "X does not hold a JSON object");
        let bad_utf8 = base64::engine::general_purpose::STANDARD.encode(b"{\"a\": \"\xff\"}");
        assert!(decode_payload("X", &bad_utf8).unwrap_err().starts_with("X does not hold JSON"));
    }
}
