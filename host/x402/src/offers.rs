//! Signed offers and receipts, as x402's `offer-receipt` extension defines
//! them: the terms of a 402 (resource, scheme, network, asset, payee,
//! amount, how long they hold) and, after settlement, who paid for what,
//! each in a JWS (compact serialization) over the RFC 8785 canonical JSON of
//! its payload, with the signer named by `kid`.
//!
//! This module builds payloads and assembles signatures; the key and its
//! name are the caller's ([`Signer`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use serde::Serialize;
use serde_json::{Value, json};

use crate::Requirement;

/// The extension's key in `extensions` of a challenge or a settlement.
pub const EXTENSION: &str = "offer-receipt";
/// The version of the offer and receipt payloads.
pub const PAYLOAD_VERSION: u64 = 1;

/// Who signs: a key's name (a DID URL) and its signature.
pub trait Signer: Send + Sync {
    /// The JWS `kid`: a DID URL a verifier resolves to the public key.
    fn kid(&self) -> &str;
    /// The JWS `alg` of [`Signer::sign`].
    fn alg(&self) -> &'static str;
    /// The signature over the JWS signing input.
    fn sign(&self, input: &[u8]) -> Vec<u8>;
}

/// A payload field: text or a whole number.
pub enum Field<'a> {
    Text(&'a str),
    Int(u64),
}

/// RFC 8785 canonical JSON of a flat object of text and whole numbers: keys
/// in order (ASCII here, so their UTF-16 order is their byte order), no
/// whitespace, strings escaped as JSON requires and nothing more.
fn canonical(fields: &mut [(&str, Field<'_>)]) -> String {
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (n, (key, value)) in fields.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_string(&mut out, key);
        out.push(':');
        match value {
            Field::Text(text) => json_string(&mut out, text),
            Field::Int(number) => out.push_str(&number.to_string()),
        }
    }
    out.push('}');
    out
}

/// `text` as a JSON string, written onto `out`.
fn json_string(out: &mut String, text: &str) {
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// A compact JWS of `payload` (its canonical JSON) by `signer`.
fn jws(signer: &dyn Signer, payload: &str) -> String {
    let header = canonical(&mut [("alg", Field::Text(signer.alg())), ("kid", Field::Text(signer.kid()))]);
    let input = format!("{}.{}", B64URL.encode(header), B64URL.encode(payload));
    let signature = signer.sign(input.as_bytes());
    format!("{input}.{}", B64URL.encode(signature))
}

/// A compact JWS by `signer` of the canonical JSON of `fields` (a flat
/// object of ASCII keys), for statements of the service's own beside the
/// extension's offers and receipts.
pub fn signed_jws(signer: &dyn Signer, fields: &mut [(&str, Field<'_>)]) -> String {
    jws(signer, &canonical(fields))
}

/// The canonical offer payload of `requirement` for `resource_url`, valid
/// until `valid_until` (Unix seconds).
pub fn offer_payload(resource_url: &str, requirement: &Requirement, valid_until: u64) -> String {
    canonical(&mut [
        ("version", Field::Int(PAYLOAD_VERSION)),
        ("resourceUrl", Field::Text(resource_url)),
        ("scheme", Field::Text(requirement.scheme)),
        ("network", Field::Text(requirement.network)),
        ("asset", Field::Text(requirement.asset)),
        ("payTo", Field::Text(&requirement.pay_to)),
        ("amount", Field::Text(&requirement.amount)),
        ("validUntil", Field::Int(valid_until)),
    ])
}

/// A signed offer of `accepts[accept_index]`.
pub fn signed_offer(signer: &dyn Signer, resource_url: &str, requirement: &Requirement, accept_index: usize, valid_until: u64) -> Value {
    json!({
        "format": "jws",
        "acceptIndex": accept_index,
        "signature": jws(signer, &offer_payload(resource_url, requirement, valid_until)),
    })
}

/// The canonical receipt payload: `payer` paid for `resource_url` on
/// `network`, settled as `transaction`, said at `issued_at` (Unix seconds).
pub fn receipt_payload(resource_url: &str, network: &str, payer: &str, transaction: &str, issued_at: u64) -> String {
    let mut fields = vec![
        ("version", Field::Int(PAYLOAD_VERSION)),
        ("network", Field::Text(network)),
        ("resourceUrl", Field::Text(resource_url)),
        ("payer", Field::Text(payer)),
        ("issuedAt", Field::Int(issued_at)),
    ];
    if !transaction.is_empty() {
        fields.push(("transaction", Field::Text(transaction)));
    }
    canonical(&mut fields)
}

/// A signed receipt.
pub fn signed_receipt(
    signer: &dyn Signer,
    resource_url: &str,
    network: &str,
    payer: &str,
    transaction: &str,
    issued_at: u64,
) -> SignedReceipt {
    SignedReceipt { format: "jws", signature: jws(signer, &receipt_payload(resource_url, network, payer, transaction, issued_at)) }
}

/// A signed receipt as a settlement carries it: `{"format": "jws", "signature": …}`.
#[derive(Clone, Debug, Serialize)]
pub struct SignedReceipt {
    pub format: &'static str,
    pub signature: String,
}

/// A settlement's `extensions` holding its signed receipt: the extension's
/// entry, `info.receipt` and the entry's schema (written out without a JSON
/// tree).
#[derive(Serialize)]
pub struct ReceiptExtensions {
    #[serde(rename = "offer-receipt")]
    entry: ReceiptEntry,
}

#[derive(Serialize)]
struct ReceiptEntry {
    info: ReceiptInfo,
    schema: &'static serde_json::value::RawValue,
}

#[derive(Serialize)]
struct ReceiptInfo {
    receipt: SignedReceipt,
}

impl ReceiptExtensions {
    pub fn of(receipt: SignedReceipt) -> ReceiptExtensions {
        ReceiptExtensions { entry: ReceiptEntry { info: ReceiptInfo { receipt }, schema: receipt_schema() } }
    }
}

/// The receipt entry's JSON schema, the same for every receipt: written once.
fn receipt_schema() -> &'static serde_json::value::RawValue {
    static SCHEMA: std::sync::LazyLock<Box<serde_json::value::RawValue>> =
        std::sync::LazyLock::new(|| serde_json::value::to_raw_value(&receipt_schema_value()).expect("a JSON schema written as JSON"));
    &SCHEMA
}

fn receipt_schema_value() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": { "receipt": signed_schema(false) },
        "required": ["receipt"],
    })
}

/// The extension's entry in a challenge's `extensions`: the signed offers.
pub fn offers_extension(offers: Vec<Value>) -> Value {
    json!({
        "info": { "offers": offers },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": { "offers": { "type": "array", "items": signed_schema(true) } },
            "required": ["offers"],
        },
    })
}

fn signed_schema(offer: bool) -> Value {
    let mut properties = json!({ "format": { "const": "jws" }, "signature": { "type": "string" } });
    if offer {
        properties["acceptIndex"] = json!({ "type": "integer", "minimum": 0 });
    }
    json!({ "type": "object", "properties": properties, "required": ["format", "signature"] })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Signer for Fixed {
        fn kid(&self) -> &str {
            "did:web:127.0.0.1%3A8080#log-key"
        }
        fn alg(&self) -> &'static str {
            "EdDSA"
        }
        fn sign(&self, input: &[u8]) -> Vec<u8> {
            input.iter().rev().take(4).copied().collect()
        }
    }

    #[test]
    fn payloads_are_canonical_json() {
        let requirement = crate::requirement("0x209693Bc6afc0C5328bA36FaF03C514EF312287C", 147_500, 300);
        let offer = offer_payload("http://h/v1/dd/create", &requirement, 1_780_000_300);
        assert_eq!(
            offer,
            "{\"amount\":\"147500\",\"asset\":\"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913\",\"network\":\"eip155:8453\",\
             \"payTo\":\"0x209693Bc6afc0C5328bA36FaF03C514EF312287C\",\"resourceUrl\":\"http://h/v1/dd/create\",\"scheme\":\"exact\",\
             \"validUntil\":1780000300,\"version\":1}"
        );
        let receipt = receipt_payload("http://h/\"q\"", "eip155:8453", "0xab", "", 7);
        assert_eq!(
            receipt,
            "{\"issuedAt\":7,\"network\":\"eip155:8453\",\"payer\":\"0xab\",\"resourceUrl\":\"http://h/\\\"q\\\"\",\"version\":1}"
        );
        assert!(receipt_payload("u", "n", "p", "local:0x01", 7).contains(",\"transaction\":\"local:0x01\","));
    }

    #[test]
    fn a_jws_carries_its_header_payload_and_signature() {
        let requirement = crate::requirement("0x209693Bc6afc0C5328bA36FaF03C514EF312287C", 1, 300);
        let offer = signed_offer(&Fixed, "http://h/r", &requirement, 0, 9);
        assert_eq!((offer["format"].as_str(), offer["acceptIndex"].as_u64()), (Some("jws"), Some(0)));
        let parts: Vec<&str> = offer["signature"].as_str().unwrap().split('.').collect();
        assert_eq!(parts.len(), 3);
        let header = String::from_utf8(B64URL.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header, "{\"alg\":\"EdDSA\",\"kid\":\"did:web:127.0.0.1%3A8080#log-key\"}");
        assert_eq!(String::from_utf8(B64URL.decode(parts[1]).unwrap()).unwrap(), offer_payload("http://h/r", &requirement, 9));
        let input = format!("{}.{}", parts[0], parts[1]);
        assert_eq!(B64URL.decode(parts[2]).unwrap(), Fixed.sign(input.as_bytes()));
        assert_eq!(offers_extension(vec![offer.clone()])["info"]["offers"][0], offer);
    }

    #[test]
    fn a_settlement_carries_its_receipt_and_the_receipt_schema() {
        let receipt = || Some(signed_receipt(&Fixed, "http://h/r", "eip155:8453", "0xab", "local:0x01", 7));
        let header = crate::settle_response(true, "local:0x01", "0xab", None, receipt());
        let written: Value = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap();
        // The header carries the object MCP's _meta does, keys in x402's order.
        assert_eq!(written, crate::settlement_response(true, "local:0x01", "0xab", None, receipt()));
        let keys: Vec<&String> = written.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["success", "transaction", "network", "payer", "extensions"]);
        let entry = &written["extensions"][EXTENSION];
        assert_eq!(entry["info"]["receipt"]["format"], "jws");
        let signature = entry["info"]["receipt"]["signature"].as_str().unwrap();
        let payload = B64URL.decode(signature.split('.').nth(1).unwrap()).unwrap();
        assert_eq!(String::from_utf8(payload).unwrap(), receipt_payload("http://h/r", "eip155:8453", "0xab", "local:0x01", 7));
        assert_eq!(entry["schema"]["properties"]["receipt"]["required"], json!(["format", "signature"]));
        assert_eq!(entry["schema"]["required"], json!(["receipt"]));
        // A refusal names its reason and carries no transaction, nor receipt.
        let refused = crate::settlement_response(false, "local:0x01", "0xab", Some("insufficient_funds"), None);
        assert_eq!(
            refused,
            json!({"success": false, "transaction": "", "network": "eip155:8453", "payer": "0xab", "errorReason": "insufficient_funds"})
        );
    }
}
