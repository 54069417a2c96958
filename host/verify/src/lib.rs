//! Offline verification of anchor receipts. No network, no database: a receipt,
//! the log's public key and, optionally, an earlier checkpoint are enough.
//!
//! What a receipt proves, check by check:
//!
//! 1. **record**: the SHA-256 of the canonical record (`anchor-dd/1` text,
//!    salt included) is the declaration's `integrity_hash`, and the record's
//!    `anchored_at` line is the receipt's anchoring time;
//! 2. **leaf**: the leaf is rebuilt from those two values alone
//!    (`anchor-leaf/1`, see [`leaf_data`]); nothing else enters the public log;
//! 3. **signature**: the checkpoint is a C2SP signed note whose Ed25519
//!    signature verifies under the given key, and its body is a C2SP
//!    `tlog-checkpoint` for the receipt's tree size;
//! 4. **inclusion**: the RFC 6962 inclusion proof leads from the leaf hash at
//!    `leaf_index` to the checkpoint's root;
//! 5. **consistency** (with an earlier checkpoint): the RFC 6962 consistency
//!    proof shows the earlier tree is a prefix of the later one.
//!
//! A verifier trusts the log key and nothing the service says besides what it
//! signed.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use signed_note::{Note, StandardVerifier, VerifierList};
use tlog_tiles::{Checkpoint, Hash};

pub mod cose;
pub mod cosignature;
pub mod evidence;
pub mod statement;
pub mod timestamp;

pub const RECEIPT_FORMAT: &str = "anchor-receipt/1";

/// The most hashes an inclusion proof can hold: a tree of at most 2^64
/// leaves is at most 64 levels deep. A longer proof is refused before any
/// hash is decoded.
pub const MAX_INCLUSION_HASHES: usize = 64;
/// The most hashes a consistency proof between two trees of at most 2^64
/// leaves can hold.
pub const MAX_CONSISTENCY_HASHES: usize = 2 * 64;
/// The largest receipt (or other input) the verifier reads: a real one is
/// a few kilobytes (a record, at most 64 hashes, a checkpoint with its
/// cosignatures, a time-stamp token).
pub const MAX_INPUT_BYTES: u64 = 1 << 20;
pub const LEAF_FORMAT: &str = "anchor-leaf/1";

/// Everything needed to check one declaration against the log, offline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Receipt {
    pub format: String,
    pub dd_id: String,
    /// The `anchor-dd/1` canonical encoding of the record, salt included.
    pub canonical_record: String,
    pub integrity_hash: String,
    pub anchored_at: String,
    pub leaf_index: u64,
    pub tree_size: u64,
    /// Base64 of each 32-byte hash of the RFC 6962 inclusion proof.
    pub inclusion_proof: Vec<String>,
    /// The signed checkpoint (C2SP signed note) the proof leads to, with the
    /// witnesses' cosignature lines after the log's signature when it has any.
    pub checkpoint: String,
    /// Whether `checkpoint` carries the cosignatures of the witness quorum
    /// the service is configured with (false where it has no witnesses, or
    /// until a witnessed checkpoint covers the record).
    #[serde(default, deserialize_with = "null_as_false")]
    #[cfg_attr(feature = "schema", schemars(with = "bool"))]
    pub witnessed: bool,
    /// The witnesses whose cosignatures `checkpoint` carries, by name
    /// (`null` reads as none, as a client that saves receipts may write it).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    #[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))]
    pub cosigned_by: Vec<String>,
    /// An RFC 3161 TimeStampToken (base64 of its DER, a CMS ContentInfo) over
    /// SHA-256 of the checkpoint's note body, when a time-stamping authority
    /// stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_token: Option<String>,
    /// The integrity level the declaration's scope asked for and the one its
    /// receipt reaches now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity_level: Option<IntegrityLevels>,
    /// Hex of the key under which the record's salt commits to the trace id
    /// of the run that made the decision, when the create carried a W3C
    /// traceparent (see [`verify_trace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_key: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
}

fn null_as_false<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(false))
}

/// Reads a receipt from JSON text, naming the field a mistake is in.
pub fn parse_receipt(json: &[u8]) -> Result<Receipt, Failure> {
    if json.len() as u64 > MAX_INPUT_BYTES {
        return Err(Failure::Format(format!("a receipt is at most {MAX_INPUT_BYTES} bytes; this one has {}", json.len())));
    }
    let value: serde_json::Value = serde_json::from_slice(json).map_err(|e| Failure::Format(format!("the receipt is not JSON: {e}")))?;
    let serde_json::Value::Object(fields) = &value else {
        return Err(Failure::Format("the receipt is not a JSON object".into()));
    };
    if let Some(serde_json::Value::Array(proof)) = fields.get("inclusion_proof")
        && proof.len() > MAX_INCLUSION_HASHES
    {
        return Err(Failure::Inclusion(format!(
            "the inclusion proof has {} hashes; a proof in a tree of at most 2^64 leaves has at most {MAX_INCLUSION_HASHES}",
            proof.len()
        )));
    }
    Receipt::deserialize(&value).map_err(|e| {
        // Name the field: serde_json's message alone names a line and column.
        let field =
            fields.iter().find(|(name, field)| Receipt::field_fails(name, field)).map_or_else(String::new, |(name, _)| format!("{name}: "));
        Failure::Format(format!("the receipt's {field}{e}"))
    })
}

impl Receipt {
    /// Whether `value` is not what the receipt's field `name` takes.
    fn field_fails(name: &str, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        let text = matches!(value, Value::String(_));
        match name {
            "format" | "dd_id" | "canonical_record" | "integrity_hash" | "anchored_at" | "checkpoint" => !text,
            "leaf_index" | "tree_size" => !value.is_u64(),
            "inclusion_proof" => !value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "witnessed" => !(value.is_boolean() || value.is_null()),
            "cosigned_by" => !(value.is_null() || value.as_array().is_some_and(|a| a.iter().all(Value::is_string))),
            "timestamp_token" | "trace_key" => !(text || value.is_null()),
            "integrity_level" => !(value.is_object() || value.is_null()),
            _ => false,
        }
    }
}

/// `basic`: inclusion in a checkpoint signed by the log; `enhanced`: in one
/// the witness quorum cosigned; `certifiable`: cosigned and stamped by a
/// time-stamping authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IntegrityLevels {
    /// `ee_integrity_verification_level` as declared.
    pub declared: String,
    /// What this receipt proves now.
    pub reached: String,
    /// Whether `reached` is at least `declared`.
    pub met: bool,
}

/// The public leaf of a record: its integrity hash and anchoring time, nothing more.
///
/// `anchor-leaf/1\n<integrity_hash>\n<anchored_at>\n`, UTF-8. The Merkle leaf
/// hash is SHA-256(0x00 ‖ leaf data), as RFC 6962 defines.
pub fn leaf_data(integrity_hash: &str, anchored_at: &str) -> Vec<u8> {
    format!("{LEAF_FORMAT}\n{integrity_hash}\n{anchored_at}\n").into_bytes()
}

/// Which check failed, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Failure {
    #[error("format: {0}")]
    Format(String),
    #[error("record check failed: {0}")]
    Record(String),
    #[error("leaf check failed: {0}")]
    Leaf(String),
    #[error("signature check failed: {0}")]
    Signature(String),
    #[error("inclusion check failed: {0}")]
    Inclusion(String),
    #[error("consistency check failed: {0}")]
    Consistency(String),
    #[error("witness check failed: {0}")]
    Witness(String),
    #[error("timestamp check failed: {0}")]
    Timestamp(String),
    #[error("trace check failed: {0}")]
    Trace(String),
    #[error("scope check failed: {0}")]
    Scope(String),
    #[error("proof check failed: {0}")]
    Proof(String),
    #[error("order check failed: {0}")]
    Order(String),
    #[error("payment check failed: {0}")]
    Payment(String),
}

impl Failure {
    /// The name of the check: record, leaf, signature, inclusion, consistency,
    /// witness, timestamp, trace, format; for an evidence bundle, scope,
    /// proof, order, payment.
    pub fn check(&self) -> &'static str {
        match self {
            Failure::Format(_) => "format",
            Failure::Record(_) => "record",
            Failure::Leaf(_) => "leaf",
            Failure::Signature(_) => "signature",
            Failure::Inclusion(_) => "inclusion",
            Failure::Consistency(_) => "consistency",
            Failure::Witness(_) => "witness",
            Failure::Timestamp(_) => "timestamp",
            Failure::Trace(_) => "trace",
            Failure::Scope(_) => "scope",
            Failure::Proof(_) => "proof",
            Failure::Order(_) => "order",
            Failure::Payment(_) => "payment",
        }
    }
}

/// What a successful verification established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub origin: String,
    pub tree_size: u64,
    pub root: [u8; 32],
    pub leaf_index: u64,
}

/// Opens a signed checkpoint under `vkey` (a C2SP verifier key,
/// `<name>+<id>+<base64 key>`) and returns its body.
pub fn open_checkpoint(note: &str, vkey: &str) -> Result<Checkpoint, Failure> {
    let verifier = StandardVerifier::new(vkey).map_err(|e| Failure::Format(format!("log key: {e}")))?;
    let note = Note::from_bytes(note.as_bytes()).map_err(|e| Failure::Signature(format!("not a signed note: {e}")))?;
    note.verify(&VerifierList::new(vec![Box::new(verifier)]))
        .map_err(|e| Failure::Signature(format!("the checkpoint is not signed by this key: {e}")))?;
    Checkpoint::from_bytes(note.text()).map_err(|e| Failure::Signature(format!("not a tlog-checkpoint: {e}")))
}

fn hashes(encoded: &[String], check: fn(String) -> Failure) -> Result<Vec<Hash>, Failure> {
    encoded
        .iter()
        .map(|h| {
            let bytes = B64.decode(h).map_err(|_| check(format!("{h:?} is not base64")))?;
            let array: [u8; 32] = bytes.try_into().map_err(|_| check(format!("{h:?} is not 32 bytes")))?;
            Ok(Hash(array))
        })
        .collect()
}

/// Runs checks 1 to 4 on a receipt.
pub fn verify_receipt(receipt: &Receipt, vkey: &str) -> Result<Verified, Failure> {
    if receipt.format != RECEIPT_FORMAT {
        return Err(Failure::Format(format!("unknown receipt format {:?}", receipt.format)));
    }
    // 1. record
    let recomputed = format!("sha256:{}", hex::encode(Sha256::digest(receipt.canonical_record.as_bytes())));
    if recomputed != receipt.integrity_hash {
        return Err(Failure::Record(format!("the record hashes to {recomputed}, not {}", receipt.integrity_hash)));
    }
    if !receipt.canonical_record.starts_with("anchor-dd/1\n") {
        return Err(Failure::Record("the record is not an anchor-dd/1 encoding".into()));
    }
    let anchored_line = format!("\nanchored_at={}\n", receipt.anchored_at);
    if !receipt.canonical_record.contains(&anchored_line) {
        return Err(Failure::Record("the record's anchored_at is not the receipt's".into()));
    }
    if !receipt.canonical_record.contains(&format!("\ndd_id={}\n", receipt.dd_id)) {
        return Err(Failure::Record("the record's dd_id is not the receipt's".into()));
    }
    // 2. leaf
    let leaf = tlog_tiles::record_hash(&leaf_data(&receipt.integrity_hash, &receipt.anchored_at));
    // 3. signature
    let checkpoint = open_checkpoint(&receipt.checkpoint, vkey)?;
    if checkpoint.size() != receipt.tree_size {
        return Err(Failure::Signature(format!(
            "the signed checkpoint is for size {}, the receipt says {}",
            checkpoint.size(),
            receipt.tree_size
        )));
    }
    if receipt.leaf_index >= receipt.tree_size {
        return Err(Failure::Inclusion(format!("leaf {} is outside a tree of {}", receipt.leaf_index, receipt.tree_size)));
    }
    // 4. inclusion
    if receipt.inclusion_proof.len() > MAX_INCLUSION_HASHES {
        return Err(Failure::Inclusion(format!(
            "the inclusion proof has {} hashes; at most {MAX_INCLUSION_HASHES} lead to any root",
            receipt.inclusion_proof.len()
        )));
    }
    let proof = hashes(&receipt.inclusion_proof, Failure::Inclusion)?;
    tlog_tiles::check_record(&proof, receipt.tree_size, *checkpoint.hash(), receipt.leaf_index, leaf)
        .map_err(|e| Failure::Inclusion(format!("the proof does not lead from this leaf to the signed root: {e}")))?;
    Ok(Verified {
        origin: checkpoint.origin().to_string(),
        tree_size: checkpoint.size(),
        root: checkpoint.hash().0,
        leaf_index: receipt.leaf_index,
    })
}

/// The trace link check: the record's salt is
/// SHA-256(`anchor-trace/1\n` ‖ trace key ‖ trace id), so the decision was
/// anchored as part of the run whose trace id is `trace_id` (32 hex digits,
/// or a whole `traceparent` value). Run it after [`verify_receipt`], which
/// ties the record, salt included, to the log. It proves nothing about the
/// trace's spans or the decision's content: only that whoever declared the
/// record knew this trace id when it was anchored.
pub fn verify_trace(receipt: &Receipt, trace_id: &str) -> Result<(), Failure> {
    let given = trace_id.trim();
    let id_hex = match given.split('-').collect::<Vec<_>>().as_slice() {
        [_, trace, _, _, ..] => trace.to_string(),
        _ => given.to_string(),
    };
    let mut id = [0u8; 16];
    if id_hex.len() != 32 || hex::decode_to_slice(&id_hex, &mut id).is_err() || id == [0; 16] {
        return Err(Failure::Format(format!(
            "the trace id {:?} is not 32 hex digits (not all zero) or a traceparent",
            given.chars().take(80).collect::<String>()
        )));
    }
    let Some(key_hex) = &receipt.trace_key else {
        return Err(Failure::Trace("the receipt carries no trace_key: the record was not linked to a trace when it was created (a COSE receipt never carries it: check the JSON receipt)".into()));
    };
    let mut key = [0u8; 32];
    hex::decode_to_slice(key_hex, &mut key).map_err(|_| Failure::Format("the receipt's trace_key is not 64 hex digits".into()))?;
    let salt_hex = receipt
        .canonical_record
        .lines()
        .nth(1)
        .and_then(|line| line.strip_prefix("salt="))
        .ok_or_else(|| Failure::Record("the record has no salt line after its format line".into()))?;
    let mut salt = [0u8; 32];
    hex::decode_to_slice(salt_hex, &mut salt).map_err(|_| Failure::Record("the record's salt is not 64 hex digits".into()))?;
    let mut hash = Sha256::new();
    hash.update(b"anchor-trace/1\n");
    hash.update(key);
    hash.update(id);
    if <[u8; 32]>::from(hash.finalize()) != salt {
        return Err(Failure::Trace(format!(
            "the record's salt does not commit to trace {} under the receipt's trace_key",
            hex::encode(id)
        )));
    }
    Ok(())
}

/// A consistency proof between two tree sizes, as the service serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConsistencyProof {
    pub from_size: u64,
    pub to_size: u64,
    /// Base64 of each 32-byte hash.
    pub proof: Vec<String>,
}

/// Check 5: `older` (signed) is a prefix of `newer` (signed), by `proof`.
pub fn verify_consistency(older: &str, newer: &str, proof: &ConsistencyProof, vkey: &str) -> Result<(), Failure> {
    let old = open_checkpoint(older, vkey)?;
    let new = open_checkpoint(newer, vkey)?;
    if old.origin() != new.origin() {
        return Err(Failure::Consistency(format!("checkpoints of two logs: {} and {}", old.origin(), new.origin())));
    }
    if (old.size(), new.size()) != (proof.from_size, proof.to_size) {
        return Err(Failure::Consistency(format!(
            "the proof is for {} -> {}, the checkpoints are {} -> {}",
            proof.from_size,
            proof.to_size,
            old.size(),
            new.size()
        )));
    }
    if old.size() > new.size() {
        return Err(Failure::Consistency("the earlier checkpoint is larger than the later one".into()));
    }
    if old.size() == new.size() {
        return if old.hash() == new.hash() {
            Ok(())
        } else {
            Err(Failure::Consistency("two different roots for one size: the log forked".into()))
        };
    }
    if proof.proof.len() > MAX_CONSISTENCY_HASHES {
        return Err(Failure::Consistency(format!(
            "the consistency proof has {} hashes; at most {MAX_CONSISTENCY_HASHES} join two trees",
            proof.proof.len()
        )));
    }
    let hashes = hashes(&proof.proof, Failure::Consistency)?;
    tlog_tiles::check_tree(&hashes, new.size(), *new.hash(), old.size(), *old.hash())
        .map_err(|e| Failure::Consistency(format!("the earlier tree is not a prefix of the later one: {e}")))
}

/// A signer key (`PRIVATE+KEY+<name>+<id>+<base64>`) and its verifier key for
/// `name`, from 32 secret bytes.
pub fn signing_key_from_seed(name: &str, seed: &[u8; 32]) -> (String, String) {
    let signing = ed25519_dalek::SigningKey::from_bytes(seed);
    let vkey = signed_note::new_ed25519_verifier_key(name, &signing.verifying_key());
    let public = [&[0x01u8][..], signing.verifying_key().as_bytes()].concat();
    let private = [&[0x01u8][..], seed.as_slice()].concat();
    let skey = format!("PRIVATE+KEY+{name}+{:08x}+{}", signed_note::key_id(name, &public), B64.encode(private));
    (skey, vkey)
}

/// Splits a C2SP entry bundle (each entry a big-endian u16 length and its bytes).
pub fn parse_entry_bundle(bundle: &[u8]) -> Result<Vec<Vec<u8>>, Failure> {
    let mut entries = Vec::new();
    let mut rest = bundle;
    while !rest.is_empty() {
        if rest.len() < 2 {
            return Err(Failure::Format("truncated entry bundle".into()));
        }
        let len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        if rest.len() < 2 + len {
            return Err(Failure::Format("truncated entry bundle".into()));
        }
        entries.push(rest[2..2 + len].to_vec());
        rest = &rest[2 + len..];
    }
    Ok(entries)
}

struct Memory(std::collections::HashMap<u64, Hash>);

impl tlog_tiles::HashReader for Memory {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes.iter().map(|i| self.0.get(i).copied().ok_or(tlog_tiles::Error::IndexesNotInTree)).collect()
    }
}

/// The RFC 6962 root of `leaves` (leaf data, in index order).
pub fn root_of(leaves: &[Vec<u8>]) -> Result<[u8; 32], Failure> {
    let mut memory = Memory(std::collections::HashMap::new());
    for (n, leaf) in leaves.iter().enumerate() {
        let n = n as u64;
        let stored = tlog_tiles::stored_hashes(n, leaf, &memory).map_err(|e| Failure::Leaf(e.to_string()))?;
        let first = tlog_tiles::stored_hash_index(0, n);
        for (k, hash) in stored.into_iter().enumerate() {
            memory.0.insert(first + k as u64, hash);
        }
    }
    Ok(tlog_tiles::tree_hash(leaves.len() as u64, &memory).map_err(|e| Failure::Leaf(e.to_string()))?.0)
}

/// Audit: every leaf of a signed tree, recomputed from the published entries,
/// must hash to the signed root.
pub fn verify_entries(leaves: &[Vec<u8>], checkpoint_note: &str, vkey: &str) -> Result<(), Failure> {
    let checkpoint = open_checkpoint(checkpoint_note, vkey)?;
    if leaves.len() as u64 != checkpoint.size() {
        return Err(Failure::Leaf(format!("{} entries for a tree of {}", leaves.len(), checkpoint.size())));
    }
    if root_of(leaves)? != checkpoint.hash().0 {
        return Err(Failure::Leaf("the published entries do not hash to the signed root".into()));
    }
    Ok(())
}

#[cfg(test)]
mod trace_tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    /// A receipt whose record's salt commits to TRACE under the key [5; 32],
    /// as the documented formula gives it.
    fn linked() -> Receipt {
        let key = [5u8; 32];
        let mut salt = Sha256::new();
        salt.update(b"anchor-trace/1\n");
        salt.update(key);
        salt.update(hex::decode(TRACE).unwrap());
        let record = format!("anchor-dd/1\nsalt={}\ndd_id=x\n", hex::encode(salt.finalize()));
        Receipt {
            format: RECEIPT_FORMAT.into(),
            dd_id: "x".into(),
            integrity_hash: format!("sha256:{}", hex::encode(Sha256::digest(record.as_bytes()))),
            canonical_record: record,
            anchored_at: String::new(),
            leaf_index: 0,
            tree_size: 1,
            inclusion_proof: Vec::new(),
            checkpoint: String::new(),
            witnessed: false,
            cosigned_by: Vec::new(),
            timestamp_token: None,
            integrity_level: None,
            trace_key: Some(hex::encode(key)),
        }
    }

    #[test]
    fn the_trace_check_confirms_the_linked_trace_only() {
        let receipt = linked();
        assert_eq!(verify_trace(&receipt, TRACE), Ok(()));
        assert_eq!(verify_trace(&receipt, &format!("00-{TRACE}-00f067aa0ba902b7-01")), Ok(()));
        let other = verify_trace(&receipt, "4bf92f3577b34da6a3ce929d0e0e4737").unwrap_err();
        assert_eq!(other.check(), "trace", "{other}");
        let mut rekeyed = linked();
        rekeyed.trace_key = Some(hex::encode([6u8; 32]));
        assert_eq!(verify_trace(&rekeyed, TRACE).unwrap_err().check(), "trace");
        let mut unlinked = linked();
        unlinked.trace_key = None;
        assert!(verify_trace(&unlinked, TRACE).unwrap_err().to_string().contains("no trace_key"));
        for bad in ["", "zz", &"0".repeat(32), &TRACE[..31]] {
            assert_eq!(verify_trace(&receipt, bad).unwrap_err().check(), "format", "{bad:?}");
        }
    }

    #[test]
    fn a_receipt_with_a_trace_key_reads_back() {
        let receipt = linked();
        let json = serde_json::to_vec(&receipt).unwrap();
        assert_eq!(parse_receipt(&json).unwrap(), receipt);
        let mut value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        value["trace_key"] = serde_json::json!(7);
        let refused = parse_receipt(&serde_json::to_vec(&value).unwrap()).unwrap_err();
        assert!(refused.to_string().contains("trace_key"), "{refused}");
    }
}
