//! COSE receipts of the log (RFC 9942, with the RFC 9162 verifiable data
//! structure, vds 1): the same proof as the JSON receipt, in the envelope
//! SCITT verifiers read.
//!
//! A receipt is a tagged COSE_Sign1 whose payload is detached: it is the
//! Merkle root a verifier recomputes from the leaf and the inclusion path.
//! Its protected header names the algorithm (ES256), the signing key (`kid`,
//! the key's RFC 9679 thumbprint), the verifiable data structure (395: 1)
//! and CWT claims (15: the issuer, the subject and the checkpoint's time).
//! Its unprotected header holds the proof (396: {-1: [bstr .cbor [size,
//! index, path]]}) and, under private labels (below -65536), what carries
//! the integrity level through the envelope:
//!
//! | label | type | what |
//! | --- | --- | --- |
//! | -70001 | tstr | the checkpoint, a C2SP signed note with the witnesses' cosignature lines |
//! | -70002 | bstr | the RFC 3161 token over SHA-256 of that checkpoint's body, when stamped |
//! | -70003 | bstr | the leaf bytes (informative: a verifier rebuilds them) |
//! | -70004 | tstr | the record's canonical encoding (`anchor-dd/1`), as in the JSON receipt |
//! | -70005 | tstr | on a consistency receipt, the older checkpoint |
//!
//! The leaf of a declaration is [`crate::leaf_data`] of its integrity hash
//! and anchoring time: `anchor-leaf/1\n<integrity_hash>\n<anchored_at>\n`.

use coset::cbor::value::Value;
use coset::{CborSerializable, CoseSign1, CoseSign1Builder, HeaderBuilder, Label, TaggedCborSerializable, iana};
use sha2::{Digest, Sha256};

use crate::{Failure, Receipt};

/// The verifiable data structure header (RFC 9942).
pub const VDS: i64 = 395;
/// The verifiable data structure proofs header (RFC 9942).
pub const VDP: i64 = 396;
/// RFC9162_SHA256, the only structure these receipts use.
pub const RFC9162_SHA256: i64 = 1;
/// Inclusion proofs, under [`VDP`].
pub const INCLUSION: i64 = -1;
/// Consistency proofs, under [`VDP`].
pub const CONSISTENCY: i64 = -2;
/// CWT claims in a COSE header (RFC 9597).
pub const CWT_CLAIMS: i64 = 15;
/// Private labels of this service's receipts (see the module's table).
pub const LABEL_CHECKPOINT: i64 = -70001;
pub const LABEL_TIMESTAMP: i64 = -70002;
pub const LABEL_LEAF: i64 = -70003;
pub const LABEL_RECORD: i64 = -70004;
pub const LABEL_OLDER_CHECKPOINT: i64 = -70005;
/// The media type of a COSE receipt (RFC 9943).
pub const RECEIPT_MEDIA_TYPE: &str = "application/scitt-receipt+cose";
/// The most hashes an inclusion path holds (a tree of at most 2^64 leaves).
const MAX_PATH: usize = 64;

fn int(i: i64) -> Value {
    Value::Integer(i.into())
}

fn format(why: impl std::fmt::Display) -> Failure {
    Failure::Format(format!("COSE receipt: {why}"))
}

fn cbor(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    coset::cbor::ser::into_writer(value, &mut out).expect("CBOR into memory");
    out
}

/// A P-256 public key, as a COSE_Key (EC2) names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcKey {
    pub x: [u8; 32],
    pub y: [u8; 32],
}

impl EcKey {
    /// The key of a SEC1 point (uncompressed, 65 bytes).
    pub fn from_sec1(point: &[u8]) -> Result<EcKey, Failure> {
        if point.len() != 65 || point[0] != 4 {
            return Err(format("a P-256 key is an uncompressed point of 65 bytes"));
        }
        Ok(EcKey { x: point[1..33].try_into().expect("32"), y: point[33..].try_into().expect("32") })
    }

    /// Its RFC 9679 thumbprint: SHA-256 of the deterministic CBOR of its
    /// required members (kty 2, crv 1, x, y), the receipts' `kid`.
    pub fn thumbprint(&self) -> [u8; 32] {
        let mut bytes = vec![0xa4, 0x01, 0x02, 0x20, 0x01, 0x21, 0x58, 0x20];
        bytes.extend_from_slice(&self.x);
        bytes.extend_from_slice(&[0x22, 0x58, 0x20]);
        bytes.extend_from_slice(&self.y);
        Sha256::digest(&bytes).into()
    }

    /// The COSE_Key (RFC 9052): kty EC2, its kid, alg ES256, crv P-256, x, y.
    pub fn cose_key(&self) -> Vec<u8> {
        cbor(&Value::Map(vec![
            (int(1), int(2)),
            (int(2), Value::Bytes(self.thumbprint().to_vec())),
            (int(3), int(-7)),
            (int(-1), int(1)),
            (int(-2), Value::Bytes(self.x.to_vec())),
            (int(-3), Value::Bytes(self.y.to_vec())),
        ]))
    }

    fn from_value(value: &Value) -> Result<EcKey, Failure> {
        let (kid, key) = EcKey::named_from_value(value)?;
        if let Some(kid) = kid
            && kid != key.thumbprint()
        {
            return Err(format("the key's kid is not its RFC 9679 thumbprint"));
        }
        Ok(key)
    }

    /// A COSE_Key's P-256 key and the kid it names, whatever that kid is.
    fn named_from_value(value: &Value) -> Result<NamedKey, Failure> {
        let Value::Map(members) = value else { return Err(format("a COSE_Key is a map")) };
        let get = |label: i64| members.iter().find(|(k, _)| *k == int(label)).map(|(_, v)| v);
        if get(1) != Some(&int(2)) || get(-1) != Some(&int(1)) {
            return Err(format("only EC2 keys on P-256 (kty 2, crv 1) sign these receipts"));
        }
        let coordinate = |label: i64| match get(label) {
            Some(Value::Bytes(b)) if b.len() == 32 => Ok(<[u8; 32]>::try_from(b.as_slice()).expect("32")),
            _ => Err(format("a P-256 coordinate is 32 bytes")),
        };
        let key = EcKey { x: coordinate(-2)?, y: coordinate(-3)? };
        key.verifying_key()?;
        let kid = match get(2) {
            Some(Value::Bytes(kid)) => Some(kid.clone()),
            Some(_) => return Err(format("a COSE_Key's kid is a byte string")),
            None => None,
        };
        Ok((kid, key))
    }

    pub(crate) fn verifying_key(&self) -> Result<p256::ecdsa::VerifyingKey, Failure> {
        let point = p256::EncodedPoint::from_affine_coordinates(&self.x.into(), &self.y.into(), false);
        p256::ecdsa::VerifyingKey::from_encoded_point(&point).map_err(|_| format("the key is not a point of P-256"))
    }
}

/// A COSE Key Set (a CBOR array of COSE_Key maps) of `keys`.
pub fn key_set(keys: &[EcKey]) -> Vec<u8> {
    let values = keys.iter().map(|k| coset::cbor::de::from_reader(k.cose_key().as_slice()).expect("our own CBOR")).collect::<Vec<Value>>();
    cbor(&Value::Array(values))
}

/// The keys of a COSE Key Set, or of one COSE_Key.
pub fn parse_keys(bytes: &[u8]) -> Result<Vec<EcKey>, Failure> {
    let value: Value = coset::cbor::de::from_reader(bytes).map_err(|e| format(format!("the key set is not CBOR: {e}")))?;
    match &value {
        Value::Array(keys) => keys.iter().map(EcKey::from_value).collect(),
        one => Ok(vec![EcKey::from_value(one)?]),
    }
}

/// A key with the kid its COSE_Key names, if any (any byte string).
pub type NamedKey = (Option<Vec<u8>>, EcKey);

/// The keys of a COSE Key Set, or of one COSE_Key, each with the kid its
/// COSE_Key names, as an issuer's keys come.
pub fn parse_named_keys(bytes: &[u8]) -> Result<Vec<NamedKey>, Failure> {
    let value: Value = coset::cbor::de::from_reader(bytes).map_err(|e| format(format!("the key set is not CBOR: {e}")))?;
    match &value {
        Value::Array(keys) => keys.iter().map(EcKey::named_from_value).collect(),
        one => Ok(vec![EcKey::named_from_value(one)?]),
    }
}

/// Concise problem details (RFC 9290) in CBOR: {-1: title, -2: detail}, as
/// SCRAPI answers a refusal.
pub fn problem(title: &str, detail: &str) -> Vec<u8> {
    cbor(&Value::Map(vec![(int(-1), Value::Text(title.to_owned())), (int(-2), Value::Text(detail.to_owned()))]))
}

/// [`problem`] with this service's `error_code` as a custom entry (a text key, as RFC 9290 allows).
pub fn coded_problem(title: &str, detail: &str, code: &str) -> Vec<u8> {
    cbor(&Value::Map(vec![
        (int(-1), Value::Text(title.to_owned())),
        (int(-2), Value::Text(detail.to_owned())),
        (Value::Text("error_code".into()), Value::Text(code.to_owned())),
    ]))
}

/// Who issued a receipt, about what, and when its checkpoint was signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    /// Seconds since the epoch.
    pub iat: i64,
}

fn protected(kid: &[u8; 32], claims: &Claims) -> coset::Header {
    HeaderBuilder::new()
        .algorithm(iana::Algorithm::ES256)
        .key_id(kid.to_vec())
        .value(
            CWT_CLAIMS,
            Value::Map(vec![
                (int(1), Value::Text(claims.iss.clone())),
                (int(2), Value::Text(claims.sub.clone())),
                (int(6), int(claims.iat)),
            ]),
        )
        .value(VDS, int(RFC9162_SHA256))
        .build()
}

fn decode_hashes(encoded: &[String]) -> Result<Vec<[u8; 32]>, Failure> {
    use base64::Engine;
    encoded
        .iter()
        .map(|h| {
            let bytes = base64::engine::general_purpose::STANDARD.decode(h).map_err(|_| format("a proof hash is not base64"))?;
            <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| format("a proof hash is not 32 bytes"))
        })
        .collect()
}

/// The COSE inclusion receipt of `receipt` (a JSON receipt's content),
/// signed by `sign` (ES256: the 64-byte r||s of the signature over the
/// bytes it is given) under `kid`.
pub fn inclusion_receipt(
    receipt: &Receipt,
    kid: &[u8; 32],
    claims: &Claims,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<Vec<u8>, Failure> {
    use base64::Engine;
    let token = match &receipt.timestamp_token {
        Some(token) => {
            Some(base64::engine::general_purpose::STANDARD.decode(token).map_err(|_| format("the time-stamp token is not base64"))?)
        }
        None => None,
    };
    let inclusion = Inclusion {
        leaf: crate::leaf_data(&receipt.integrity_hash, &receipt.anchored_at),
        index: receipt.leaf_index,
        size: receipt.tree_size,
        path: decode_hashes(&receipt.inclusion_proof)?,
        checkpoint: receipt.checkpoint.clone(),
        timestamp_token: token,
        record: Some(receipt.canonical_record.clone()),
    };
    leaf_receipt(&inclusion, kid, claims, sign)
}

/// One leaf's proof of inclusion in a signed checkpoint, and what travels
/// with it in a receipt.
#[derive(Clone, Debug)]
pub struct Inclusion {
    /// The leaf's bytes (the Merkle leaf hash is SHA-256(0x00 || leaf)).
    pub leaf: Vec<u8>,
    pub index: u64,
    pub size: u64,
    pub path: Vec<[u8; 32]>,
    /// The checkpoint's signed note, with the witnesses' cosignature lines.
    pub checkpoint: String,
    /// The RFC 3161 token over that checkpoint's body, when stamped.
    pub timestamp_token: Option<Vec<u8>>,
    /// A declaration's canonical record (none for a signed statement).
    pub record: Option<String>,
}

/// The COSE inclusion receipt of any leaf of the log, signed by `sign`
/// under `kid`.
pub fn leaf_receipt(
    inclusion: &Inclusion,
    kid: &[u8; 32],
    claims: &Claims,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<Vec<u8>, Failure> {
    if inclusion.path.is_empty() {
        return Err(Failure::Inclusion("an RFC 9942 inclusion proof has at least one hash: the tree needs two leaves".into()));
    }
    let root = root_from_inclusion(tlog_tiles::record_hash(&inclusion.leaf).0, inclusion.index, inclusion.size, &inclusion.path)?;
    let proof = cbor(&Value::Array(vec![
        int(inclusion.size as i64),
        int(inclusion.index as i64),
        Value::Array(inclusion.path.iter().map(|h| Value::Bytes(h.to_vec())).collect()),
    ]));
    let mut unprotected = HeaderBuilder::new()
        .value(VDP, Value::Map(vec![(int(INCLUSION), Value::Array(vec![Value::Bytes(proof)]))]))
        .value(LABEL_CHECKPOINT, Value::Text(inclusion.checkpoint.clone()));
    if let Some(token) = &inclusion.timestamp_token {
        unprotected = unprotected.value(LABEL_TIMESTAMP, Value::Bytes(token.clone()));
    }
    unprotected = unprotected.value(LABEL_LEAF, Value::Bytes(inclusion.leaf.clone()));
    if let Some(record) = &inclusion.record {
        unprotected = unprotected.value(LABEL_RECORD, Value::Text(record.clone()));
    }
    let message = CoseSign1Builder::new()
        .protected(protected(kid, claims))
        .unprotected(unprotected.build())
        .create_detached_signature(&root, b"", sign)
        .build();
    message.to_tagged_vec().map_err(format)
}

/// The COSE consistency receipt from the tree of `from` leaves to the one
/// of `to`: its payload is the newer root, its proof [from, to, path].
#[allow(clippy::too_many_arguments)]
pub fn consistency_receipt(
    from: u64,
    to: u64,
    path: &[[u8; 32]],
    new_root: &[u8; 32],
    older_note: &str,
    newer_note: &str,
    kid: &[u8; 32],
    claims: &Claims,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<Vec<u8>, Failure> {
    if from == 0 || from >= to || path.is_empty() {
        return Err(Failure::Consistency("an RFC 9942 consistency proof joins two trees of 0 < from < to leaves".into()));
    }
    let proof =
        cbor(&Value::Array(vec![int(from as i64), int(to as i64), Value::Array(path.iter().map(|h| Value::Bytes(h.to_vec())).collect())]));
    let unprotected = HeaderBuilder::new()
        .value(VDP, Value::Map(vec![(int(CONSISTENCY), Value::Array(vec![Value::Bytes(proof)]))]))
        .value(LABEL_CHECKPOINT, Value::Text(newer_note.to_owned()))
        .value(LABEL_OLDER_CHECKPOINT, Value::Text(older_note.to_owned()))
        .build();
    let message = CoseSign1Builder::new()
        .protected(protected(kid, claims))
        .unprotected(unprotected)
        .create_detached_signature(new_root, b"", sign)
        .build();
    message.to_tagged_vec().map_err(format)
}

/// RFC 9162 §2.1.3.2: the root an inclusion path leads to from `leaf_hash`.
pub fn root_from_inclusion(leaf_hash: [u8; 32], index: u64, size: u64, path: &[[u8; 32]]) -> Result<[u8; 32], Failure> {
    if index >= size {
        return Err(Failure::Inclusion(format!("leaf {index} is outside a tree of {size}")));
    }
    if path.len() > MAX_PATH {
        return Err(Failure::Inclusion(format!("an inclusion path of {} hashes leads to no tree", path.len())));
    }
    let node = |left: &[u8; 32], right: &[u8; 32]| -> [u8; 32] {
        Sha256::new().chain_update([1u8]).chain_update(left).chain_update(right).finalize().into()
    };
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = leaf_hash;
    for p in path {
        if sn == 0 {
            return Err(Failure::Inclusion("the path is longer than the tree is deep".into()));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(Failure::Inclusion("the path is shorter than the tree is deep".into()));
    }
    Ok(r)
}

/// A COSE receipt, read: its message and what its headers carry.
#[derive(Clone, Debug)]
pub struct CoseReceipt {
    message: CoseSign1,
    pub kid: Vec<u8>,
    pub claims: Claims,
    pub tree_size: u64,
    pub leaf_index: u64,
    pub path: Vec<[u8; 32]>,
    pub checkpoint: Option<String>,
    pub timestamp_token: Option<Vec<u8>>,
    pub leaf: Option<Vec<u8>>,
    pub canonical_record: Option<String>,
}

/// Reads a COSE inclusion receipt, refusing any shape RFC 9942 does not
/// allow: untagged, with a payload, alg/kid/vds outside the protected
/// header, another structure than vds 1, not exactly one inclusion proof,
/// trailing bytes, hashes of another size.
pub fn parse_receipt(bytes: &[u8]) -> Result<CoseReceipt, Failure> {
    if bytes.len() as u64 > crate::MAX_INPUT_BYTES {
        return Err(format(format!("a receipt is at most {} bytes", crate::MAX_INPUT_BYTES)));
    }
    let message = CoseSign1::from_tagged_slice(bytes).map_err(|e| format(format!("not a tagged COSE_Sign1: {e}")))?;
    if message.payload.is_some() {
        return Err(format("the payload must be detached (the root a verifier computes)"));
    }
    let header = &message.protected.header;
    if header.alg != Some(coset::RegisteredLabelWithPrivate::Assigned(iana::Algorithm::ES256)) {
        return Err(format("the protected header's alg must be ES256 (-7)"));
    }
    if header.key_id.is_empty() {
        return Err(format("the protected header names no kid"));
    }
    let protected_value = |label: i64| header.rest.iter().find(|(l, _)| *l == Label::Int(label)).map(|(_, v)| v);
    if protected_value(VDS) != Some(&int(RFC9162_SHA256)) {
        return Err(format("the protected header's vds (395) must be 1, RFC9162_SHA256"));
    }
    let unprotected = &message.unprotected;
    if unprotected.alg.is_some() || !unprotected.key_id.is_empty() || unprotected.rest.iter().any(|(l, _)| *l == Label::Int(VDS)) {
        return Err(format("alg, kid and vds belong in the protected header only"));
    }
    let claims = match protected_value(CWT_CLAIMS) {
        Some(Value::Map(members)) => {
            let get = |k: i64| members.iter().find(|(key, _)| *key == int(k)).map(|(_, v)| v);
            Claims {
                iss: match get(1) {
                    Some(Value::Text(t)) => t.clone(),
                    _ => return Err(format("the CWT claims name no issuer")),
                },
                sub: match get(2) {
                    Some(Value::Text(t)) => t.clone(),
                    _ => String::new(),
                },
                iat: match get(6) {
                    Some(Value::Integer(i)) => i64::try_from(*i).map_err(|_| format("iat is out of range"))?,
                    _ => 0,
                },
            }
        }
        _ => return Err(format("the protected header has no CWT claims (15)")),
    };
    let unprotected_value = |label: i64| unprotected.rest.iter().find(|(l, _)| *l == Label::Int(label)).map(|(_, v)| v);
    let proofs = match unprotected_value(VDP) {
        Some(Value::Map(proofs)) => proofs.iter().find(|(k, _)| *k == int(INCLUSION)).map(|(_, v)| v),
        _ => None,
    };
    let proof = match proofs {
        Some(Value::Array(one)) if one.len() == 1 => match &one[0] {
            Value::Bytes(bytes) => bytes.clone(),
            _ => return Err(format("an inclusion proof is a byte string")),
        },
        _ => return Err(format("the receipt holds exactly one inclusion proof (396 / -1)")),
    };
    let proof = Value::from_slice(&proof).map_err(|e| format(format!("the inclusion proof is not CBOR: {e}")))?;
    let Value::Array(parts) = proof else { return Err(format("an inclusion proof is [tree_size, leaf_index, path]")) };
    let [Value::Integer(size), Value::Integer(index), Value::Array(hashes)] = parts.as_slice() else {
        return Err(format("an inclusion proof is [tree_size, leaf_index, path]"));
    };
    if hashes.len() > MAX_PATH {
        return Err(Failure::Inclusion(format!("the inclusion path has {} hashes; at most {MAX_PATH} lead to any root", hashes.len())));
    }
    let path = hashes
        .iter()
        .map(|h| match h {
            Value::Bytes(b) if b.len() == 32 => Ok(<[u8; 32]>::try_from(b.as_slice()).expect("32")),
            _ => Err(format("a path hash is 32 bytes")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let text = |label: i64| match unprotected_value(label) {
        Some(Value::Text(t)) => Some(t.clone()),
        _ => None,
    };
    let bytes_of = |label: i64| match unprotected_value(label) {
        Some(Value::Bytes(b)) => Some(b.clone()),
        _ => None,
    };
    Ok(CoseReceipt {
        kid: header.key_id.clone(),
        claims,
        tree_size: u64::try_from(*size).map_err(|_| format("tree_size is out of range"))?,
        leaf_index: u64::try_from(*index).map_err(|_| format("leaf_index is out of range"))?,
        path,
        checkpoint: text(LABEL_CHECKPOINT),
        timestamp_token: bytes_of(LABEL_TIMESTAMP),
        leaf: bytes_of(LABEL_LEAF),
        canonical_record: text(LABEL_RECORD),
        message,
    })
}

impl CoseReceipt {
    /// Checks the receipt against `leaf` (the entry's leaf bytes) and the
    /// keys a verifier trusts: the key its kid names (whose thumbprint the
    /// kid must be) signed the root the path leads to. Returns that root.
    pub fn verify(&self, leaf: &[u8], keys: &[EcKey]) -> Result<[u8; 32], Failure> {
        use p256::ecdsa::signature::Verifier;
        let key = keys
            .iter()
            .find(|k| k.thumbprint().as_slice() == self.kid.as_slice())
            .ok_or_else(|| Failure::Signature("no trusted receipt key has this receipt's kid".into()))?;
        let root = root_from_inclusion(tlog_tiles::record_hash(leaf).0, self.leaf_index, self.tree_size, &self.path)?;
        let verifying = key.verifying_key()?;
        self.message
            .verify_detached_signature(&root, b"", |signature, signed| {
                let signature = p256::ecdsa::Signature::from_slice(signature).map_err(|_| ())?;
                verifying.verify(signed, &signature).map_err(|_| ())
            })
            .map_err(|()| Failure::Signature("the receipt's signature does not verify over the root its path leads to".into()))?;
        Ok(root)
    }

    /// The JSON receipt holding the same proof, for the checks both formats
    /// share (record, leaf, the log's signed checkpoint, witnesses, time
    /// stamp); `None` when the receipt carries no record or checkpoint.
    pub fn as_json_receipt(&self) -> Option<Receipt> {
        use base64::Engine;
        let record = self.canonical_record.as_ref()?;
        let field = |name: &str| record.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).map(str::to_owned);
        let integrity_hash = format!("sha256:{}", hex::encode(Sha256::digest(record.as_bytes())));
        Some(Receipt {
            format: crate::RECEIPT_FORMAT.into(),
            dd_id: field("dd_id")?,
            canonical_record: record.clone(),
            integrity_hash,
            anchored_at: field("anchored_at")?,
            leaf_index: self.leaf_index,
            tree_size: self.tree_size,
            inclusion_proof: self.path.iter().map(|h| base64::engine::general_purpose::STANDARD.encode(h)).collect(),
            checkpoint: self.checkpoint.clone()?,
            witnessed: false,
            cosigned_by: Vec::new(),
            timestamp_token: self.timestamp_token.as_ref().map(|t| base64::engine::general_purpose::STANDARD.encode(t)),
            integrity_level: None,
            trace_key: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use p256::ecdsa::signature::Signer;
    use tlog_tiles::{Hash, HashReader};

    /// RFC 9679's own example key and thumbprint.
    #[test]
    fn a_thumbprint_is_rfc_9679s() {
        let key = EcKey {
            x: hex::decode("65eda5a12577c2bae829437fe338701a10aaa375e1bb5b5de108de439c08551d").unwrap().try_into().unwrap(),
            y: hex::decode("1e52ed75701163f7f9e40ddf9f341b3dc9ba860af7e0ca7ca7e9eecd0084d19c").unwrap().try_into().unwrap(),
        };
        assert_eq!(hex::encode(key.thumbprint()), "496bd8afadf307e5b08c64b0421bf9dc01528a344a43bda88fadd1669da253ec");
        assert_eq!(parse_keys(&key_set(std::slice::from_ref(&key))).unwrap(), vec![key.clone()]);
        assert_eq!(parse_keys(&key.cose_key()).unwrap(), vec![key]);
    }

    struct Memory(std::collections::HashMap<u64, Hash>);
    impl HashReader for Memory {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
            indexes.iter().map(|i| self.0.get(i).copied().ok_or(tlog_tiles::Error::IndexesNotInTree)).collect()
        }
    }

    /// A tree of `leaves`: its stored hashes.
    fn tree(leaves: &[Vec<u8>]) -> Memory {
        let mut memory = Memory(std::collections::HashMap::new());
        for (n, leaf) in leaves.iter().enumerate() {
            let stored = tlog_tiles::stored_hashes(n as u64, leaf, &memory).unwrap();
            let first = tlog_tiles::stored_hash_index(0, n as u64);
            for (k, hash) in stored.into_iter().enumerate() {
                memory.0.insert(first + k as u64, hash);
            }
        }
        memory
    }

    /// The path RFC 9162 gives is the one tlog (Go's checksum-database
    /// algorithms) proves, for every leaf of trees of 2 to 33 leaves.
    #[test]
    fn the_path_leads_to_the_root_tlog_computes() {
        let leaves: Vec<Vec<u8>> = (0..33).map(|i| format!("leaf {i}").into_bytes()).collect();
        let memory = tree(&leaves);
        for size in 2..=33u64 {
            let root = tlog_tiles::tree_hash(size, &memory).unwrap();
            for index in 0..size {
                let proof = tlog_tiles::prove_record(size, index, &memory).unwrap();
                let path: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
                let leaf = tlog_tiles::record_hash(&leaves[index as usize]).0;
                assert_eq!(root_from_inclusion(leaf, index, size, &path).unwrap(), root.0, "{index} of {size}");
                if !path.is_empty() {
                    assert!(root_from_inclusion(leaf, index, size, &path[1..]).ok() != Some(root.0));
                }
            }
        }
    }

    fn signing_key() -> p256::ecdsa::SigningKey {
        p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap()
    }

    fn public(key: &p256::ecdsa::SigningKey) -> EcKey {
        EcKey::from_sec1(key.verifying_key().to_encoded_point(false).as_bytes()).unwrap()
    }

    /// A JSON receipt of leaf 3 in a tree of 5, whose record is made up.
    fn receipt() -> Receipt {
        let record = "anchor-dd/1\ndd_id=0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b\nanchored_at=2026-11-28T10:00:00.000000Z\n".to_string();
        let integrity_hash = format!("sha256:{}", hex::encode(Sha256::digest(record.as_bytes())));
        let mut leaves: Vec<Vec<u8>> = (0..5).map(|i| format!("other {i}").into_bytes()).collect();
        leaves[3] = crate::leaf_data(&integrity_hash, "2026-11-28T10:00:00.000000Z");
        let memory = tree(&leaves);
        let proof = tlog_tiles::prove_record(5, 3, &memory).unwrap();
        Receipt {
            format: crate::RECEIPT_FORMAT.into(),
            dd_id: "0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b".into(),
            canonical_record: record,
            integrity_hash,
            anchored_at: "2026-11-28T10:00:00.000000Z".into(),
            leaf_index: 3,
            tree_size: 5,
            inclusion_proof: proof.iter().map(|h| base64::engine::general_purpose::STANDARD.encode(h.0)).collect(),
            checkpoint: "test.example/log\n5\nAAAA\n\n— test.example/log sig\n".into(),
            witnessed: false,
            cosigned_by: Vec::new(),
            timestamp_token: None,
            integrity_level: None,
            trace_key: None,
        }
    }

    fn signed(receipt: &Receipt) -> Vec<u8> {
        let key = signing_key();
        let claims = Claims { iss: "https://anchor.example".into(), sub: "urn:uuid:0196b1a2".into(), iat: 1_780_000_000 };
        inclusion_receipt(receipt, &public(&key).thumbprint(), &claims, |tbs| {
            let signature: p256::ecdsa::Signature = key.sign(tbs);
            signature.to_bytes().to_vec()
        })
        .unwrap()
    }

    #[test]
    fn a_receipt_verifies_and_every_tampering_is_refused() {
        let receipt = receipt();
        let bytes = signed(&receipt);
        let keys = vec![public(&signing_key())];
        let leaf = crate::leaf_data(&receipt.integrity_hash, &receipt.anchored_at);
        let read = parse_receipt(&bytes).unwrap();
        assert_eq!((read.tree_size, read.leaf_index), (5, 3));
        assert_eq!(read.claims.iss, "https://anchor.example");
        read.verify(&leaf, &keys).expect("verifies");
        assert_eq!(read.as_json_receipt().unwrap().integrity_hash, receipt.integrity_hash);
        // Another leaf, another key, another path, another size: refused.
        assert!(read.verify(b"another leaf", &keys).is_err());
        let stranger = public(&p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap());
        assert!(read.verify(&leaf, &[stranger]).is_err());
        let mut bent = receipt.clone();
        bent.inclusion_proof.swap(0, 1);
        assert!(parse_receipt(&signed_with_proof_of(&receipt, &bent)).unwrap().verify(&leaf, &keys).is_err());
        // A flipped byte anywhere in the signature or the protected header.
        let signature_at = bytes.len() - 10;
        let mut flipped = bytes.clone();
        flipped[signature_at] ^= 1;
        assert!(parse_receipt(&flipped).is_ok_and(|r| r.verify(&leaf, &keys).is_err()));
        let header_at = bytes.windows(7).position(|w| w == b"anchor.").unwrap();
        let mut renamed = bytes.clone();
        renamed[header_at] = b'b';
        assert!(parse_receipt(&renamed).is_ok_and(|r| r.verify(&leaf, &keys).is_err()));
        // A payload attached, or no tag: not a receipt.
        let mut message = CoseSign1::from_tagged_slice(&bytes).unwrap();
        message.payload = Some(vec![0; 32]);
        assert!(parse_receipt(&message.clone().to_tagged_vec().unwrap()).is_err());
        message.payload = None;
        assert!(parse_receipt(&message.to_vec().unwrap()).is_err());
    }

    /// The receipt of `receipt` signed over the path of `proof_from`.
    fn signed_with_proof_of(receipt: &Receipt, proof_from: &Receipt) -> Vec<u8> {
        let key = signing_key();
        let claims = Claims { iss: "https://anchor.example".into(), sub: "s".into(), iat: 0 };
        // Sign the honest receipt, then swap its proof for the bent one.
        let honest = inclusion_receipt(receipt, &public(&key).thumbprint(), &claims, |tbs| {
            let signature: p256::ecdsa::Signature = key.sign(tbs);
            signature.to_bytes().to_vec()
        })
        .unwrap();
        let mut message = CoseSign1::from_tagged_slice(&honest).unwrap();
        let path = decode_hashes(&proof_from.inclusion_proof).unwrap();
        let proof = cbor(&Value::Array(vec![
            int(receipt.tree_size as i64),
            int(receipt.leaf_index as i64),
            Value::Array(path.iter().map(|h| Value::Bytes(h.to_vec())).collect()),
        ]));
        for (label, value) in message.unprotected.rest.iter_mut() {
            if *label == Label::Int(VDP) {
                *value = Value::Map(vec![(int(INCLUSION), Value::Array(vec![Value::Bytes(proof.clone())]))]);
            }
        }
        message.to_tagged_vec().unwrap()
    }
}
