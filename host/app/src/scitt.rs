//! SCITT registration (SCRAPI, decision 0066): a signed statement from an
//! issuer the operator allows becomes a leaf of the same log as the
//! declarations, and gets a COSE receipt (RFC 9942, vds 1) of the same kind.
//!
//! The registration policy, applied before anything is written:
//! - the statement is a COSE_Sign1 of at most [`MAX_STATEMENT_BYTES`],
//!   signed with ES256, with a `kid` and CWT claims (15) naming an issuer
//!   and a subject in its protected header, and its payload attached;
//! - its issuer is one the operator allows (`--scitt-issuer ISS=KEYFILE`),
//!   and one of that issuer's keys, named by the statement's `kid` (the
//!   key's RFC 9679 thumbprint, or the kid its COSE_Key carries), signed it;
//! - its CWT `exp` (4), if it has one, is later than this service's clock,
//!   and its `nbf` (5) not later (one registered while it was valid stays
//!   the same entry).
//!
//! The payload is hashed into the statement's identity and never kept; the
//! log keeps the issuer, the subject, the kid, the payload's content type
//! and size, and the leaf. Registering the same statement again is the
//! same entry.

use std::sync::Arc;

use anchor_ports::StatementEntry;
use anchor_verify::cose::{Claims, EcKey, Inclusion, NamedKey};
use anchor_verify::statement::{Refusal, SignedStatement, parse_statement};

use crate::receipt_key::ReceiptKey;
use crate::{AppError, AppResult, Services, transparency};

/// The largest signed statement registered here. Statements are envelopes
/// of a claim (usually a hash of an artifact), not the artifact.
pub const MAX_STATEMENT_BYTES: usize = 64 * 1024;

/// The error codes registration refuses with; HTTP gives each its SCRAPI title.
pub mod codes {
    /// Not a COSE_Sign1, or a header or claim of the wrong shape.
    pub const MALFORMED: &str = "STATEMENT_MALFORMED";
    /// Signed with another algorithm than ES256.
    pub const BAD_ALGORITHM: &str = "STATEMENT_BAD_ALGORITHM";
    /// The payload is detached.
    pub const PAYLOAD_MISSING: &str = "STATEMENT_PAYLOAD_MISSING";
    /// Outside the registration policy: an issuer not allowed, a key not
    /// the issuer's, a signature that does not verify.
    pub const REJECTED: &str = "STATEMENT_REJECTED";
    /// An entry id that is not 64 hex digits.
    pub const INVALID_LOCATOR: &str = "INVALID_LOCATOR";
    /// No statement registered with this entry id.
    pub const NOT_FOUND: &str = "ENTRY_NOT_FOUND";
    /// Larger than [`super::MAX_STATEMENT_BYTES`].
    pub const TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
}

/// An issuer whose statements this service registers, with its keys.
#[derive(Clone, Debug)]
pub struct Issuer {
    /// The CWT `iss` its statements carry.
    pub iss: String,
    /// Its keys, each with the kid its COSE_Key names, if any.
    pub keys: Vec<NamedKey>,
}

impl Issuer {
    /// The key the statement's `kid` names: its thumbprint, or its own kid.
    fn key(&self, kid: &[u8]) -> Option<&EcKey> {
        self.keys.iter().find(|(own, key)| own.as_deref() == Some(kid) || key.thumbprint().as_slice() == kid).map(|(_, key)| key)
    }
}

/// The issuers the operator allows (none: nothing is registered).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    issuers: Arc<Vec<Issuer>>,
}

impl Registry {
    /// A registry of `issuers`; an issuer named twice is refused.
    pub fn new(issuers: Vec<Issuer>) -> Result<Registry, String> {
        for (i, issuer) in issuers.iter().enumerate() {
            if issuers[..i].iter().any(|other| other.iss == issuer.iss) {
                return Err(format!("the issuer {:?} is named twice; give all its keys in one key set", issuer.iss));
            }
            if issuer.keys.is_empty() {
                return Err(format!("the issuer {:?} has no key", issuer.iss));
            }
        }
        Ok(Registry { issuers: Arc::new(issuers) })
    }

    /// The issuers' names.
    pub fn issuers(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.iss.as_str())
    }

    fn issuer(&self, iss: &str) -> Option<&Issuer> {
        self.issuers.iter().find(|i| i.iss == iss)
    }
}

/// Where a registration stands.
#[derive(Clone, Debug)]
pub enum Registration {
    /// In the log and under a signed checkpoint: its COSE receipt.
    Done { entry_id: [u8; 32], receipt: Vec<u8> },
    /// Accepted, waiting for its index or for a checkpoint over it.
    Pending { entry_id: [u8; 32] },
}

fn refusal(refused: Refusal) -> AppError {
    match refused {
        Refusal::Malformed(why) => AppError::invalid(codes::MALFORMED, why),
        Refusal::BadAlgorithm(why) => AppError::invalid(codes::BAD_ALGORITHM, why),
        Refusal::PayloadMissing(why) => AppError::invalid(codes::PAYLOAD_MISSING, why),
    }
}

/// Applies the registration policy to `statement` and registers it: its
/// receipt when a signed checkpoint covers it already (a statement
/// registered before), else pending.
pub async fn register(services: &Services, key: &ReceiptKey, statement: &[u8]) -> AppResult<Registration> {
    if statement.len() > MAX_STATEMENT_BYTES {
        return Err(AppError::invalid(codes::TOO_LARGE, format!("a signed statement is at most {MAX_STATEMENT_BYTES} bytes here")));
    }
    let read = parse_statement(statement).map_err(refusal)?;
    check_signer(&services.scitt, &read)?;
    let now = services.clock.now().timestamp_millis();
    let seconds = |ms: i64| ms as f64 / 1000.0;
    let outside = match (read.expires_at_ms, read.not_before_ms) {
        (Some(exp), _) if exp <= now => {
            Some(format!("the statement expired (its CWT exp is {}, this service's clock {})", seconds(exp), seconds(now)))
        }
        (_, Some(nbf)) if nbf > now => {
            Some(format!("the statement is not valid yet (its CWT nbf is {}, this service's clock {})", seconds(nbf), seconds(now)))
        }
        _ => None,
    };
    if let Some(why) = outside {
        // Registered while it was valid: still the same entry.
        if services.store.statement_entry(&read.entry_id).await?.is_some() {
            return entry_status(services, key, &read.entry_id).await;
        }
        return Err(AppError::invalid(codes::REJECTED, why));
    }
    let entry = StatementEntry {
        entry_id: read.entry_id,
        issuer: read.issuer.clone(),
        subject: read.subject.clone(),
        kid: read.kid.clone(),
        content_type: read.content_type.clone(),
        payload_bytes: read.payload_len as i64,
        leaf_data: read.leaf(),
        registered_at: services.clock.now(),
        leaf_index: None,
    };
    if services.store.register_statement(&entry).await? {
        return Ok(Registration::Pending { entry_id: read.entry_id });
    }
    entry_status(services, key, &read.entry_id).await
}

fn check_signer(registry: &Registry, statement: &SignedStatement) -> AppResult<()> {
    let rejected = |why: String| AppError::invalid(codes::REJECTED, why);
    let issuer = registry.issuer(&statement.issuer).ok_or_else(|| {
        rejected(format!(
            "the issuer {} is not one this service registers statements of (its operator allows {})",
            anchor_domain::brief(&statement.issuer),
            if registry.issuers.is_empty() { "none".to_owned() } else { format!("{} issuers", registry.issuers.len()) }
        ))
    })?;
    let key = issuer.key(&statement.kid).ok_or_else(|| rejected("the statement's kid names none of its issuer's keys".into()))?;
    if !statement.signed_by(key) {
        return Err(rejected("the statement's signature does not verify under the key its kid names".into()));
    }
    Ok(())
}

/// Reads an entry id: 64 hex digits.
pub fn entry_id(text: &str) -> AppResult<[u8; 32]> {
    let mut id = [0u8; 32];
    match hex::decode_to_slice(text, &mut id) {
        Ok(()) if text.len() == 64 => Ok(id),
        _ => Err(AppError::invalid(codes::INVALID_LOCATOR, "an entry id is the 64 hex digits of a statement's SHA-256")),
    }
}

/// A registered statement's receipt, or that it is still pending; 404 when
/// nothing was registered under `entry_id`.
pub async fn entry_status(services: &Services, key: &ReceiptKey, entry_id: &[u8; 32]) -> AppResult<Registration> {
    let entry = services.store.statement_entry(entry_id).await?.ok_or_else(|| {
        AppError::not_found(codes::NOT_FOUND, format!("no statement with entry id {} is registered here", hex::encode(entry_id)))
    })?;
    let pending = Registration::Pending { entry_id: *entry_id };
    let Some(index) = entry.leaf_index else { return Ok(pending) };
    let Some(proof) = transparency::proof_at(services, index).await? else { return Ok(pending) };
    // RFC 9942's inclusion path has at least one hash: a tree of one leaf waits for a second.
    if proof.path.is_empty() {
        return Ok(pending);
    }
    let claims = Claims { iss: services.config.public_url.clone(), sub: entry.subject.clone(), iat: proof.signed_at.timestamp() };
    let inclusion = Inclusion {
        leaf: entry.leaf_data,
        index: index as u64,
        size: proof.size,
        path: proof.path,
        checkpoint: proof.note,
        timestamp_token: proof.token,
        record: None,
    };
    let receipt = anchor_verify::cose::leaf_receipt(&inclusion, &key.kid(), &claims, |tbs| key.sign(tbs))
        .map_err(|e| AppError::Internal(anyhow::anyhow!("a statement's receipt: {e}")))?;
    Ok(Registration::Done { entry_id: *entry_id, receipt })
}

/// An issuer's keys from a COSE_Key or a COSE Key Set (CBOR), as pycose and
/// most COSE libraries write them.
pub fn issuer_keys(bytes: &[u8]) -> Result<Vec<NamedKey>, String> {
    anchor_verify::cose::parse_named_keys(bytes).map_err(|e| e.to_string())
}
