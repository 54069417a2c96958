//! Signed statements (RFC 9943), as SCRAPI registers them: what a statement
//! must hold to be registered, and the log leaf that stands for it.
//!
//! A signed statement is a COSE_Sign1 (tagged or not) whose protected
//! header names its algorithm, its key (`kid`) and CWT claims (label 15)
//! with an issuer (1) and a subject (2), and whose payload is attached.
//! The log never keeps the payload: the leaf is the text
//! `anchor-statement/1\nsha256:<hex>\n`, where the hash is SHA-256 of the
//! statement re-encoded as the tagged COSE_Sign1 `18([protected, {},
//! payload, signature])`: the unprotected header is left out (a receipt
//! goes there once the statement is registered, and nothing in it is
//! signed), every other byte string as it came. Any CBOR library rebuilds
//! it: decode, replace the second element by an empty map, encode with
//! definite lengths and the shortest heads, tag 18.

use coset::cbor::value::Value;
use coset::{CborSerializable, CoseSign1, Label, TaggedCborSerializable, iana};
use sha2::{Digest, Sha256};

use crate::cose::{CWT_CLAIMS, EcKey};

/// The first line of a statement's leaf.
pub const STATEMENT_LEAF_FORMAT: &str = "anchor-statement/1";
/// The largest statement this module reads; a registration policy may set less.
pub const MAX_STATEMENT_BYTES: usize = 1 << 20;

/// Why a statement cannot be registered, in SCRAPI's terms.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a COSE_Sign1, or a header or claim of the wrong shape.
    #[error("{0}")]
    Malformed(String),
    /// An algorithm other than ES256.
    #[error("{0}")]
    BadAlgorithm(String),
    /// The payload is detached (nil).
    #[error("{0}")]
    PayloadMissing(String),
}

/// A signed statement, read (its signature not yet checked).
#[derive(Clone, Debug)]
pub struct SignedStatement {
    message: CoseSign1,
    pub issuer: String,
    pub subject: String,
    pub kid: Vec<u8>,
    /// The payload's content type, when the protected header names one.
    pub content_type: Option<String>,
    pub payload_len: usize,
    /// The CWT `exp` (4), in milliseconds since 1970: not to be registered
    /// from then on.
    pub expires_at_ms: Option<i64>,
    /// The CWT `nbf` (5), in milliseconds since 1970: not to be registered
    /// before.
    pub not_before_ms: Option<i64>,
    /// SHA-256 of the statement without its unprotected header: the
    /// statement's identity in the log.
    pub entry_id: [u8; 32],
}

/// The leaf of a registered statement whose entry id is `entry_id`.
pub fn statement_leaf(entry_id: &[u8; 32]) -> Vec<u8> {
    format!("{STATEMENT_LEAF_FORMAT}\nsha256:{}\n", hex::encode(entry_id)).into_bytes()
}

fn malformed(why: impl Into<String>) -> Refusal {
    Refusal::Malformed(why.into())
}

fn numeric_date(name: &str, key: i64) -> Refusal {
    malformed(format!("the CWT claim {name} ({key}) is a NumericDate: seconds since 1970, as a number"))
}

/// Reads a signed statement: a COSE_Sign1, ES256, a `kid`, CWT claims with
/// an issuer and a subject (text of 1 to 1,024 bytes, no control
/// characters), an attached payload, and nothing after it. Its `exp` and
/// `nbf` claims, when present, are NumericDates (an integer or a float of
/// seconds); whether they have passed is the registration policy's to say.
pub fn parse_statement(bytes: &[u8]) -> Result<SignedStatement, Refusal> {
    if bytes.len() > MAX_STATEMENT_BYTES {
        return Err(malformed(format!("a signed statement is at most {MAX_STATEMENT_BYTES} bytes")));
    }
    let message = match bytes.first() {
        Some(0xd2) => CoseSign1::from_tagged_slice(bytes),
        _ => CoseSign1::from_slice(bytes),
    }
    .map_err(|e| malformed(format!("the body is not a COSE_Sign1: {e}")))?;
    let header = &message.protected.header;
    match &header.alg {
        Some(coset::RegisteredLabelWithPrivate::Assigned(iana::Algorithm::ES256)) => {}
        Some(other) => {
            return Err(Refusal::BadAlgorithm(format!("the statement is signed with {other:?}; this service accepts ES256 (-7)")));
        }
        None => return Err(Refusal::BadAlgorithm("the protected header names no algorithm; this service accepts ES256 (-7)".into())),
    }
    if message.unprotected.alg.is_some() {
        return Err(malformed("the algorithm belongs in the protected header only"));
    }
    if header.key_id.is_empty() || header.key_id.len() > 256 {
        return Err(malformed("the protected header names no kid (a byte string of 1 to 256 bytes)"));
    }
    let claims = header.rest.iter().find(|(l, _)| *l == Label::Int(CWT_CLAIMS)).map(|(_, v)| v);
    let Some(Value::Map(claims)) = claims else {
        return Err(malformed("the protected header holds no CWT claims (label 15) with an issuer (1) and a subject (2)"));
    };
    let claim = |key: i64, name: &str| -> Result<String, Refusal> {
        match claims.iter().find(|(k, _)| *k == Value::Integer(key.into())).map(|(_, v)| v) {
            Some(Value::Text(text)) if !text.is_empty() && text.len() <= 1024 && !text.chars().any(char::is_control) => Ok(text.clone()),
            Some(_) => Err(malformed(format!("the CWT claim {name} ({key}) is text of 1 to 1024 bytes without control characters"))),
            None => Err(malformed(format!("the CWT claims name no {name} ({key})"))),
        }
    };
    let issuer = claim(1, "iss")?;
    let subject = claim(2, "sub")?;
    let date = |key: i64, name: &str| -> Result<Option<i64>, Refusal> {
        match claims.iter().find(|(k, _)| *k == Value::Integer(key.into())).map(|(_, v)| v) {
            None => Ok(None),
            Some(Value::Integer(seconds)) => {
                i64::try_from(*seconds).map(|seconds| Some(seconds.saturating_mul(1000))).map_err(|_| numeric_date(name, key))
            }
            Some(Value::Float(seconds)) if seconds.is_finite() && seconds.abs() < 1e15 => Ok(Some((seconds * 1000.0).floor() as i64)),
            Some(_) => Err(numeric_date(name, key)),
        }
    };
    let expires_at_ms = date(4, "exp")?;
    let not_before_ms = date(5, "nbf")?;
    let content_type = match &header.content_type {
        Some(coset::ContentType::Text(text)) => Some(text.clone()),
        Some(coset::ContentType::Assigned(format)) => Some(format!("{}", *format as i64)),
        None => None,
    };
    let Some(payload) = &message.payload else {
        return Err(Refusal::PayloadMissing("the statement's payload is detached; register it attached (it is hashed, never kept)".into()));
    };
    let payload_len = payload.len();
    let entry_id = Sha256::digest(normalized(&message)?).into();
    let kid = header.key_id.clone();
    Ok(SignedStatement { message, issuer, subject, kid, content_type, payload_len, expires_at_ms, not_before_ms, entry_id })
}

/// The statement as the tagged COSE_Sign1 with an empty unprotected header.
fn normalized(message: &CoseSign1) -> Result<Vec<u8>, Refusal> {
    let protected = message.protected.original_data.clone().unwrap_or_default();
    let value = Value::Tag(
        18,
        Box::new(Value::Array(vec![
            Value::Bytes(protected),
            Value::Map(Vec::new()),
            Value::Bytes(message.payload.clone().unwrap_or_default()),
            Value::Bytes(message.signature.clone()),
        ])),
    );
    let mut out = Vec::new();
    coset::cbor::ser::into_writer(&value, &mut out).map_err(|e| malformed(format!("re-encoding the statement: {e}")))?;
    Ok(out)
}

impl SignedStatement {
    /// Its leaf in the log.
    pub fn leaf(&self) -> Vec<u8> {
        statement_leaf(&self.entry_id)
    }

    /// Whether `key` signed it (ES256 over its Sig_structure, no external data).
    pub fn signed_by(&self, key: &EcKey) -> bool {
        use p256::ecdsa::signature::Verifier;
        let Ok(verifying) = key.verifying_key() else { return false };
        self.message
            .verify_signature(b"", |signature, signed| {
                let signature = p256::ecdsa::Signature::from_slice(signature).map_err(|_| ())?;
                verifying.verify(signed, &signature).map_err(|_| ())
            })
            .is_ok()
    }
}

/// A signed statement of `payload` by `iss` about `sub`: a tagged
/// COSE_Sign1 signed with ES256 by `sign` (the 64-byte r||s over the bytes
/// it is given) under `kid`, with the content type when given.
pub fn sign_statement(
    iss: &str,
    sub: &str,
    content_type: Option<&str>,
    payload: &[u8],
    kid: &[u8],
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<Vec<u8>, crate::Failure> {
    let mut protected = coset::HeaderBuilder::new().algorithm(iana::Algorithm::ES256).key_id(kid.to_vec()).value(
        CWT_CLAIMS,
        Value::Map(vec![(Value::Integer(1.into()), Value::Text(iss.to_owned())), (Value::Integer(2.into()), Value::Text(sub.to_owned()))]),
    );
    if let Some(content_type) = content_type {
        protected = protected.content_type(content_type.to_owned());
    }
    let message = coset::CoseSign1Builder::new().protected(protected.build()).payload(payload.to_vec()).create_signature(b"", sign).build();
    message.to_tagged_vec().map_err(|e| crate::Failure::Format(format!("a signed statement: {e}")))
}

/// Checks a COSE receipt of a registered statement, offline: the
/// statement's leaf is rebuilt from `statement` (its bytes as registered, or
/// with a receipt in its unprotected header), the receipt's path leads from
/// it to a root one of `receipt_keys` signed, and the checkpoint the receipt
/// carries is signed by the log key `vkey` for that very root and size.
pub fn verify_statement_receipt(
    receipt: &crate::cose::CoseReceipt,
    statement: &[u8],
    receipt_keys: &[EcKey],
    vkey: &str,
) -> Result<crate::Verified, crate::Failure> {
    use crate::Failure;
    let read = parse_statement(statement).map_err(|e| Failure::Record(format!("the signed statement: {e}")))?;
    let leaf = read.leaf();
    if receipt.leaf.as_ref().is_some_and(|carried| *carried != leaf) {
        return Err(Failure::Leaf("the receipt's leaf is not this statement's".into()));
    }
    let root = receipt.verify(&leaf, receipt_keys)?;
    let note = receipt.checkpoint.as_deref().ok_or_else(|| Failure::Format("the receipt carries no checkpoint (-70001)".into()))?;
    let checkpoint = crate::open_checkpoint(note, vkey)?;
    if checkpoint.size() != receipt.tree_size || checkpoint.hash().0 != root {
        return Err(Failure::Signature(format!(
            "the log's checkpoint is for size {} and another root than the receipt's tree of {}",
            checkpoint.size(),
            receipt.tree_size
        )));
    }
    Ok(crate::Verified { origin: checkpoint.origin().to_string(), tree_size: checkpoint.size(), root, leaf_index: receipt.leaf_index })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coset::{CoseSign1Builder, HeaderBuilder};
    use p256::ecdsa::signature::Signer;

    fn key() -> (p256::ecdsa::SigningKey, EcKey) {
        let signing = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let point = signing.verifying_key().to_encoded_point(false);
        (signing.clone(), EcKey::from_sec1(point.as_bytes()).unwrap())
    }

    fn statement(alg: iana::Algorithm, claims: Option<Vec<(Value, Value)>>, payload: Option<&[u8]>) -> Vec<u8> {
        let (signing, _) = key();
        let mut protected = HeaderBuilder::new().algorithm(alg).key_id(b"issuer-key-1".to_vec()).content_type("application/json".into());
        if let Some(claims) = claims {
            protected = protected.value(CWT_CLAIMS, Value::Map(claims));
        }
        let mut builder =
            CoseSign1Builder::new().protected(protected.build()).unprotected(HeaderBuilder::new().value(394, Value::Array(vec![])).build());
        if let Some(payload) = payload {
            builder = builder.payload(payload.to_vec());
        }
        let message = builder
            .create_signature(b"", |data| {
                let signature: p256::ecdsa::Signature = signing.sign(data);
                signature.to_bytes().to_vec()
            })
            .build();
        message.to_tagged_vec().unwrap()
    }

    fn claims() -> Vec<(Value, Value)> {
        vec![
            (Value::Integer(1.into()), Value::Text("https://issuer.example".into())),
            (Value::Integer(2.into()), Value::Text("pkg:demo@1".into())),
        ]
    }

    #[test]
    fn a_statement_is_read_and_its_identity_ignores_the_unprotected_header() {
        let bytes = statement(iana::Algorithm::ES256, Some(claims()), Some(b"{\"a\":1}"));
        let read = parse_statement(&bytes).unwrap();
        assert_eq!((read.issuer.as_str(), read.subject.as_str(), read.payload_len), ("https://issuer.example", "pkg:demo@1", 7));
        assert_eq!(read.content_type.as_deref(), Some("application/json"));
        assert!(read.signed_by(&key().1));
        // The same statement with another unprotected header has the same identity.
        let mut message = CoseSign1::from_tagged_slice(&bytes).unwrap();
        message.unprotected = HeaderBuilder::new().value(-70001, Value::Text("x".into())).build();
        let again = parse_statement(&message.clone().to_tagged_vec().unwrap()).unwrap();
        assert_eq!(again.entry_id, read.entry_id);
        // Untagged too.
        assert_eq!(parse_statement(&message.to_vec().unwrap()).unwrap().entry_id, read.entry_id);
        let leaf = String::from_utf8(read.leaf()).unwrap();
        assert!(leaf.starts_with("anchor-statement/1\nsha256:") && leaf.ends_with('\n') && leaf.len() == 19 + 7 + 64 + 1, "{leaf:?}");
    }

    #[test]
    fn a_changed_payload_or_another_key_fails_the_signature() {
        let bytes = statement(iana::Algorithm::ES256, Some(claims()), Some(b"payload"));
        let mut message = CoseSign1::from_tagged_slice(&bytes).unwrap();
        message.payload = Some(b"PAYLOAD".to_vec());
        let changed = parse_statement(&message.to_tagged_vec().unwrap()).unwrap();
        assert!(!changed.signed_by(&key().1));
        let other = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
        let other = EcKey::from_sec1(other.verifying_key().to_encoded_point(false).as_bytes()).unwrap();
        assert!(!parse_statement(&bytes).unwrap().signed_by(&other));
    }

    #[test]
    fn statements_outside_the_policy_are_refused_by_kind() {
        assert!(matches!(parse_statement(b"not cbor"), Err(Refusal::Malformed(_))));
        assert!(matches!(parse_statement(&[]), Err(Refusal::Malformed(_))));
        let eddsa = statement(iana::Algorithm::EdDSA, Some(claims()), Some(b"x"));
        assert!(matches!(parse_statement(&eddsa), Err(Refusal::BadAlgorithm(_))));
        assert!(matches!(parse_statement(&statement(iana::Algorithm::ES256, None, Some(b"x"))), Err(Refusal::Malformed(_))));
        let no_sub = vec![claims().remove(0)];
        assert!(matches!(parse_statement(&statement(iana::Algorithm::ES256, Some(no_sub), Some(b"x"))), Err(Refusal::Malformed(_))));
        let nul = vec![(Value::Integer(1.into()), Value::Text("a\0b".into())), claims().remove(1)];
        assert!(matches!(parse_statement(&statement(iana::Algorithm::ES256, Some(nul), Some(b"x"))), Err(Refusal::Malformed(_))));
        assert!(matches!(parse_statement(&statement(iana::Algorithm::ES256, Some(claims()), None)), Err(Refusal::PayloadMissing(_))));
        let mut trailing = statement(iana::Algorithm::ES256, Some(claims()), Some(b"x"));
        trailing.push(0);
        assert!(matches!(parse_statement(&trailing), Err(Refusal::Malformed(_))));
    }

    #[test]
    fn its_validity_dates_are_read_as_numeric_dates() {
        let dated = |exp: Value, nbf: Value| {
            let mut dated = claims();
            dated.push((Value::Integer(4.into()), exp));
            dated.push((Value::Integer(5.into()), nbf));
            parse_statement(&statement(iana::Algorithm::ES256, Some(dated), Some(b"x")))
        };
        let read = dated(Value::Integer(1_900_000_000.into()), Value::Float(1_700_000_000.75)).unwrap();
        assert_eq!((read.expires_at_ms, read.not_before_ms), (Some(1_900_000_000_000), Some(1_700_000_000_750)));
        let undated = parse_statement(&statement(iana::Algorithm::ES256, Some(claims()), Some(b"x"))).unwrap();
        assert_eq!((undated.expires_at_ms, undated.not_before_ms), (None, None));
        for (exp, nbf) in [
            (Value::Text("2030-01-01".into()), Value::Integer(0.into())),
            (Value::Integer(0.into()), Value::Float(f64::NAN)),
            (Value::Integer(u64::MAX.into()), Value::Integer(0.into())),
            (Value::Float(1e300), Value::Integer(0.into())),
        ] {
            assert!(matches!(dated(exp.clone(), nbf.clone()), Err(Refusal::Malformed(_))), "{exp:?} {nbf:?}");
        }
    }
}
