//! Dispute evidence (decision 0070): one file that ties a declared scope to
//! the x402 payments made for it, checked offline with the log's key.
//!
//! An `anchor-evidence/1` bundle holds the declaration's record (its scope:
//! DD and EE as declared, and when it was anchored) inside a receipt that
//! proves it is in the signed log, and, for each payment tied to it, the
//! payer's own x402 authorization, the terms the service offered, its
//! receipt of the settlement, and its statement binding that settlement to
//! the record's hash. Four checks, each named when it refuses:
//!
//! 1. **scope**: the record hashes to the receipt's integrity hash, and the
//!    bundle's `scope`, `dd_id` and `anchored_at` are exactly the record's;
//! 2. **proof**: the record's leaf is in a checkpoint signed by the log key
//!    ([`crate::verify_receipt`]); witnesses and a time-stamp are checked
//!    by the caller, as for a receipt;
//! 3. **order**: each settlement's receipt, signed by the log key, was
//!    issued no earlier than the second the scope was anchored in;
//! 4. **payment**: each payment's offer, receipt and binding are signed by
//!    the log key and name the same resource, terms, payer, settlement and
//!    record; the payer's authorization is signed by the payer for exactly
//!    those terms, and settled inside its window; together the payments
//!    are at most the record's amount.
//!
//! What it cannot show: anything about the decision's content (the service
//! never had it), or that the settlement reference is on chain (look it up
//! on the network it names).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{Failure, Receipt, Verified};

pub const EVIDENCE_FORMAT: &str = "anchor-evidence/1";
/// The `format` of the service's statement binding a settlement to a record.
pub const BINDING_FORMAT: &str = "anchor-payment-binding/1";

/// Everything a third party needs to check what a declaration's payments
/// were for, offline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Evidence {
    pub format: String,
    pub dd_id: String,
    /// The declared scope as recorded: every line of the record but its
    /// format and salt, by name (DD and EE fields, amounts, pricing).
    pub scope: BTreeMap<String, String>,
    /// When the scope was anchored (the record's `anchored_at`).
    pub anchored_at: String,
    /// The record and its inclusion proof in a signed checkpoint, with the
    /// witnesses' cosignatures and the time-stamp token when it has them.
    pub receipt: Receipt,
    /// The same proof as a COSE Receipt (RFC 9942), base64, when the log's
    /// tree holds two leaves or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cose_receipt: Option<String>,
    /// The settled x402 payments tied to the declaration (none when Trial
    /// credit or a balance paid it).
    pub payments: Vec<PaymentEvidence>,
}

/// One settled payment and the signatures that tie it to the scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PaymentEvidence {
    pub payment_id: String,
    /// CAIP-2 network and asset contract.
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub pay_to: String,
    /// In the asset's base units (USDC: 1 DAC = 1000).
    pub amount: String,
    /// The settlement reference (the transaction) as the settler gave it.
    pub transaction: String,
    /// When it settled (RFC 3339); the receipt's `issuedAt` is its second.
    pub settled_at: String,
    /// The x402 resource the payment was made at.
    pub resource_url: String,
    /// The payer's x402 PaymentPayload as received: its EIP-3009
    /// authorization and the payer's signature over it.
    #[cfg_attr(feature = "schema", schemars(with = "serde_json::Map<String, Value>"))]
    pub authorization: Value,
    /// x402 `offer-receipt` signed offer of the terms (a compact JWS).
    pub offer: String,
    /// x402 `offer-receipt` signed receipt of the settlement (a compact JWS).
    pub receipt: String,
    /// The service's statement (a compact JWS, [`BINDING_FORMAT`]) that this
    /// settlement paid for the record of this integrity hash.
    pub binding: String,
}

/// The payer's authorization as its own signature establishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorized {
    pub from: String,
    pub to: String,
    /// Base units.
    pub value: i64,
    pub valid_after: i64,
    pub valid_before: i64,
}

/// What a bundle that checks out establishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    pub proof: Verified,
    pub anchored_at: String,
    /// (transaction, payer, amount, settled_at) of each payment.
    pub payments: Vec<(String, String, String, String)>,
}

/// Reads a bundle from JSON, bounded as every verifier input.
pub fn parse_evidence(json: &[u8]) -> Result<Evidence, Failure> {
    if json.len() as u64 > crate::MAX_INPUT_BYTES {
        return Err(Failure::Format(format!(
            "an evidence bundle is at most {} bytes; this one has {}",
            crate::MAX_INPUT_BYTES,
            json.len()
        )));
    }
    serde_json::from_slice(json).map_err(|e| Failure::Format(format!("the evidence bundle: {e}")))
}

/// The record's lines but its format and salt, by name.
pub fn scope_of(canonical_record: &str) -> BTreeMap<String, String> {
    canonical_record
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once('='))
        .filter(|(name, _)| *name != "salt")
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// The Ed25519 key of a C2SP verifier key (`<name>+<id>+<base64 of 0x01 ‖ key>`).
fn log_public_key(vkey: &str) -> Result<ed25519_dalek::VerifyingKey, Failure> {
    let encoded = vkey.trim().splitn(3, '+').nth(2).ok_or_else(|| Failure::Format("log key: not <name>+<id>+<key>".into()))?;
    let bytes = B64.decode(encoded).map_err(|_| Failure::Format("log key: not base64".into()))?;
    match bytes.split_first() {
        Some((0x01, key)) => {
            let key: [u8; 32] = key.try_into().map_err(|_| Failure::Format("log key: not 32 bytes of Ed25519".into()))?;
            ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|e| Failure::Format(format!("log key: {e}")))
        }
        _ => Err(Failure::Format("log key: not an Ed25519 key (type 0x01)".into())),
    }
}

/// The payload of a compact JWS signed (EdDSA) by `key`.
fn opened(jws: &str, key: &ed25519_dalek::VerifyingKey, what: &str) -> Result<Value, Failure> {
    let bad = |why: &str| Failure::Payment(format!("the {what}: {why}"));
    let parts: Vec<&str> = jws.split('.').collect();
    let [header, payload, signature] = parts.as_slice() else { return Err(bad("not a compact JWS")) };
    let header: Value =
        B64URL.decode(header).ok().and_then(|h| serde_json::from_slice(&h).ok()).ok_or_else(|| bad("its header is not base64url JSON"))?;
    if header["alg"] != "EdDSA" {
        return Err(bad("its alg is not EdDSA"));
    }
    let signature = B64URL.decode(signature).ok().and_then(|s| ed25519_dalek::Signature::from_slice(&s).ok());
    let signature = signature.ok_or_else(|| bad("its signature is not 64 bytes of base64url"))?;
    key.verify_strict(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
        .map_err(|_| bad("its signature does not verify under the log key"))?;
    B64URL.decode(payload).ok().and_then(|p| serde_json::from_slice(&p).ok()).ok_or_else(|| bad("its payload is not base64url JSON"))
}

fn seconds(rfc3339: &str, what: &str, check: fn(String) -> Failure) -> Result<i64, Failure> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.timestamp())
        .map_err(|_| check(format!("{what} {rfc3339:?} is not an RFC 3339 time")))
}

fn same_address(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Runs the four checks; `payer` reads an x402 PaymentPayload's
/// authorization, its payer's signature checked (EIP-3009 over EIP-712).
pub fn verify_evidence(
    evidence: &Evidence,
    vkey: &str,
    payer: impl Fn(&Value) -> Result<Authorized, String>,
) -> Result<Established, Failure> {
    if evidence.format != EVIDENCE_FORMAT {
        return Err(Failure::Format(format!("unknown evidence format {:?}", evidence.format)));
    }
    let key = log_public_key(vkey)?;
    let receipt = &evidence.receipt;
    // 1. scope
    let record = &receipt.canonical_record;
    let recomputed = format!("sha256:{}", hex::encode(Sha256::digest(record.as_bytes())));
    if recomputed != receipt.integrity_hash {
        return Err(Failure::Scope(format!("the record hashes to {recomputed}, not {}", receipt.integrity_hash)));
    }
    let recorded = scope_of(record);
    if recorded != evidence.scope {
        let differs = recorded
            .keys()
            .chain(evidence.scope.keys())
            .find(|name| recorded.get(*name) != evidence.scope.get(*name))
            .cloned()
            .unwrap_or_default();
        return Err(Failure::Scope(format!("the bundle's scope is not the record's: {differs} differs")));
    }
    if recorded.get("dd_id") != Some(&evidence.dd_id) || receipt.dd_id != evidence.dd_id {
        return Err(Failure::Scope(format!("the record is of {:?}, the bundle of {}", recorded.get("dd_id"), evidence.dd_id)));
    }
    if recorded.get("anchored_at") != Some(&evidence.anchored_at) || receipt.anchored_at != evidence.anchored_at {
        return Err(Failure::Scope("the bundle's anchored_at is not the record's".into()));
    }
    // 2. proof
    let proof = crate::verify_receipt(receipt, vkey).map_err(|failure| Failure::Proof(format!("{} check: {failure}", failure.check())))?;
    // 3. order
    let anchored = seconds(&evidence.anchored_at, "anchored_at", Failure::Scope)?;
    let mut receipts = Vec::new();
    for payment in &evidence.payments {
        let signed = opened(&payment.receipt, &key, "settlement receipt")?;
        let issued = signed["issuedAt"].as_i64().ok_or_else(|| Failure::Payment("the settlement receipt has no issuedAt".into()))?;
        if issued < anchored {
            return Err(Failure::Order(format!(
                "payment {} settled at {issued} (Unix seconds), before the scope was anchored at {}",
                payment.transaction, evidence.anchored_at
            )));
        }
        receipts.push(signed);
    }
    // 4. payment
    let mut total: i64 = 0;
    let mut payments = Vec::new();
    for (payment, signed_receipt) in evidence.payments.iter().zip(receipts) {
        let failed = |why: String| Failure::Payment(format!("payment {}: {why}", payment.transaction));
        let offer = opened(&payment.offer, &key, "offer")?;
        let binding = opened(&payment.binding, &key, "binding")?;
        let text = |value: &Value, name: &str| value[name].as_str().map(str::to_string).unwrap_or_default();
        if text(&offer, "resourceUrl") != payment.resource_url || text(&signed_receipt, "resourceUrl") != payment.resource_url {
            return Err(failed("the offer and the receipt are not both for its resource".into()));
        }
        if text(&offer, "network") != payment.network || text(&signed_receipt, "network") != payment.network {
            return Err(failed("the offer and the receipt are not both on its network".into()));
        }
        if !same_address(&text(&offer, "asset"), &payment.asset)
            || !same_address(&text(&offer, "payTo"), &payment.pay_to)
            || text(&offer, "amount") != payment.amount
        {
            return Err(failed("the offered terms (asset, payee, amount) are not the payment's".into()));
        }
        if !same_address(&text(&signed_receipt, "payer"), &payment.payer) || text(&signed_receipt, "transaction") != payment.transaction {
            return Err(failed("the receipt names another payer or settlement".into()));
        }
        let settled = seconds(&payment.settled_at, "settled_at", Failure::Payment)?;
        if signed_receipt["issuedAt"].as_i64() != Some(settled) {
            return Err(failed("the receipt was not issued when the payment settled".into()));
        }
        let bound = [
            ("format", BINDING_FORMAT),
            ("ddId", evidence.dd_id.as_str()),
            ("integrityHash", receipt.integrity_hash.as_str()),
            ("paymentId", payment.payment_id.as_str()),
            ("network", payment.network.as_str()),
            ("transaction", payment.transaction.as_str()),
            ("amount", payment.amount.as_str()),
        ];
        if let Some((name, _)) = bound.iter().find(|(name, value)| text(&binding, name) != *value) {
            return Err(failed(format!("the service's binding does not tie this settlement to this record ({name})")));
        }
        if !same_address(&text(&binding, "payer"), &payment.payer) || binding["settledAt"].as_i64() != Some(settled) {
            return Err(failed("the service's binding names another payer or time".into()));
        }
        let authorized = payer(&payment.authorization).map_err(|why| failed(format!("the payer's authorization: {why}")))?;
        let amount: i64 = payment.amount.parse().map_err(|_| failed(format!("amount {:?} is not a whole number", payment.amount)))?;
        if !same_address(&authorized.from, &payment.payer) || !same_address(&authorized.to, &payment.pay_to) || authorized.value != amount {
            return Err(failed("the payer signed another payer, payee or amount than the payment's".into()));
        }
        if settled < authorized.valid_after || settled >= authorized.valid_before {
            return Err(failed("it settled outside the window the payer authorized".into()));
        }
        total = total.checked_add(amount).ok_or_else(|| failed("the amounts overflow".into()))?;
        payments.push((payment.transaction.clone(), payment.payer.clone(), payment.amount.clone(), payment.settled_at.clone()));
    }
    let declared: i64 = recorded.get("dac_amount_milli").and_then(|a| a.parse().ok()).unwrap_or(0);
    if total > declared {
        return Err(Failure::Payment(format!(
            "the payments total {total} base units, more than the record's {declared} milli-DAC (1 milli-DAC is 1 base unit)"
        )));
    }
    Ok(Established { proof, anchored_at: evidence.anchored_at.clone(), payments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer;

    const SEED: [u8; 32] = [9; 32];

    fn jws(payload: &Value) -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&SEED);
        let input = format!("{}.{}", B64URL.encode(r#"{"alg":"EdDSA","kid":"did:web:h#log-key"}"#), B64URL.encode(payload.to_string()));
        format!("{input}.{}", B64URL.encode(key.sign(input.as_bytes()).to_bytes()))
    }

    /// A one-leaf log holding a record anchored at 1,800,000,000 and a
    /// payment of 150 units settled ten seconds later.
    fn bundle() -> (Evidence, String) {
        let (skey, vkey) = crate::signing_key_from_seed("example.org/log", &SEED);
        let anchored_at = "2027-01-15T08:00:00.250000Z";
        let record = format!("anchor-dd/1\nsalt={}\ndd_id=d1\nanchored_at={anchored_at}\ndac_amount_milli=150\n", "ab".repeat(32));
        let integrity_hash = format!("sha256:{}", hex::encode(Sha256::digest(record.as_bytes())));
        let leaf = crate::leaf_data(&integrity_hash, anchored_at);
        let root = crate::root_of(std::slice::from_ref(&leaf)).unwrap();
        let checkpoint = {
            let body = format!("example.org/log\n1\n{}\n", B64.encode(root));
            let signer = signed_note::StandardSigner::new(&skey).unwrap();
            let mut note = signed_note::Note::new(body.as_bytes(), &[]).unwrap();
            note.add_sigs(&[&signer]).unwrap();
            String::from_utf8(note.to_bytes()).unwrap()
        };
        let receipt = Receipt {
            format: crate::RECEIPT_FORMAT.into(),
            dd_id: "d1".into(),
            canonical_record: record.clone(),
            integrity_hash: integrity_hash.clone(),
            anchored_at: anchored_at.into(),
            leaf_index: 0,
            tree_size: 1,
            inclusion_proof: Vec::new(),
            checkpoint,
            witnessed: false,
            cosigned_by: Vec::new(),
            timestamp_token: None,
            integrity_level: None,
            trace_key: None,
        };
        let settled = 1_800_000_010i64;
        let resource = "https://h/v1/dd/create";
        let payment = PaymentEvidence {
            payment_id: "p1".into(),
            network: "eip155:8453".into(),
            asset: "0xA".into(),
            payer: "0xPayer".into(),
            pay_to: "0xPayee".into(),
            amount: "150".into(),
            transaction: "0xtx".into(),
            settled_at: "2027-01-15T08:00:10.900000Z".into(),
            resource_url: resource.into(),
            authorization: serde_json::json!({ "from": "0xpayer", "to": "0xpayee", "value": 150 }),
            offer: jws(&serde_json::json!({
                "version": 1, "resourceUrl": resource, "scheme": "exact", "network": "eip155:8453", "asset": "0xa",
                "payTo": "0xpayee", "amount": "150", "validUntil": settled + 60,
            })),
            receipt: jws(&serde_json::json!({
                "version": 1, "network": "eip155:8453", "resourceUrl": resource, "payer": "0xpayer", "issuedAt": settled,
                "transaction": "0xtx",
            })),
            binding: jws(&serde_json::json!({
                "format": BINDING_FORMAT, "ddId": "d1", "integrityHash": integrity_hash, "paymentId": "p1",
                "network": "eip155:8453", "payer": "0xpayer", "transaction": "0xtx", "amount": "150", "settledAt": settled,
            })),
        };
        let evidence = Evidence {
            format: EVIDENCE_FORMAT.into(),
            dd_id: "d1".into(),
            scope: scope_of(&record),
            anchored_at: anchored_at.into(),
            receipt,
            cose_receipt: None,
            payments: vec![payment],
        };
        (evidence, vkey)
    }

    /// Reads the test's stand-in authorization (the payer's signature is
    /// the x402 crate's to check; here, its fields).
    fn payer(value: &Value) -> Result<Authorized, String> {
        Ok(Authorized {
            from: value["from"].as_str().ok_or("no from")?.into(),
            to: value["to"].as_str().ok_or("no to")?.into(),
            value: value["value"].as_i64().ok_or("no value")?,
            valid_after: 0,
            valid_before: 1_800_000_060,
        })
    }

    fn refused(evidence: &Evidence, vkey: &str) -> &'static str {
        verify_evidence(evidence, vkey, payer).map(|_| ()).unwrap_err().check()
    }

    #[test]
    fn a_whole_bundle_checks_out() {
        let (evidence, vkey) = bundle();
        let established = verify_evidence(&evidence, &vkey, payer).unwrap();
        assert_eq!(established.payments, vec![("0xtx".into(), "0xPayer".into(), "150".into(), "2027-01-15T08:00:10.900000Z".into())]);
        let json = serde_json::to_vec(&evidence).unwrap();
        assert_eq!(parse_evidence(&json).unwrap(), evidence);
    }

    #[test]
    fn each_tampering_is_refused_by_its_check() {
        let (evidence, vkey) = bundle();
        let mut scope = evidence.clone();
        scope.scope.insert("dac_amount_milli".into(), "1500".into());
        assert_eq!(refused(&scope, &vkey), "scope");
        let mut record = evidence.clone();
        record.receipt.canonical_record = record.receipt.canonical_record.replace("=150", "=1500");
        assert_eq!(refused(&record, &vkey), "scope");
        let mut proof = evidence.clone();
        proof.receipt.leaf_index = 1;
        assert_eq!(refused(&proof, &vkey), "proof");
        let mut order = evidence.clone();
        order.payments[0].receipt = jws(&serde_json::json!({
            "version": 1, "network": "eip155:8453", "resourceUrl": "https://h/v1/dd/create", "payer": "0xpayer",
            "issuedAt": 1_799_999_990, "transaction": "0xtx",
        }));
        assert_eq!(refused(&order, &vkey), "order");
        for tamper in [
            |p: &mut PaymentEvidence| p.amount = "149".into(),
            |p: &mut PaymentEvidence| p.transaction = "0xother".into(),
            |p: &mut PaymentEvidence| p.payer = "0xsomeone".into(),
            |p: &mut PaymentEvidence| p.settled_at = "2027-01-15T08:00:11Z".into(),
            |p: &mut PaymentEvidence| p.authorization["value"] = 151.into(),
            |p: &mut PaymentEvidence| p.binding = p.offer.clone(),
            |p: &mut PaymentEvidence| p.offer = format!("{}x", p.offer),
        ] {
            let mut payment = evidence.clone();
            tamper(&mut payment.payments[0]);
            assert_eq!(refused(&payment, &vkey), "payment", "{:?}", payment.payments[0]);
        }
        let mut over = evidence.clone();
        over.payments.push(over.payments[0].clone());
        assert_eq!(refused(&over, &vkey), "payment");
        let (_, other_key) = crate::signing_key_from_seed("example.org/log", &[8; 32]);
        assert_eq!(refused(&evidence, &other_key), "proof");
    }
}
