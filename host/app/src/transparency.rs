//! Reading the verifiable log: receipts (a confirmed declaration's inclusion
//! proof to a signed checkpoint), checkpoints, consistency proofs and tiles.
//! Writing it is `log`'s integrator.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::SecondsFormat;
use uuid::Uuid;

use anchor_domain::declarations::ee::Integrity;
use anchor_domain::integrity::canonical_encoding;
use anchor_domain::payments::PaymentStatus;
use anchor_verify::cose::Claims;
use anchor_verify::evidence::{BINDING_FORMAT, EVIDENCE_FORMAT, Evidence, PaymentEvidence, scope_of};
use anchor_verify::{ConsistencyProof, IntegrityLevels, RECEIPT_FORMAT, Receipt};

use crate::receipt_key::ReceiptKey;
use crate::{AppError, AppResult, Services, declarations, log, timestamp, witness};

fn internal(error: anyhow::Error) -> AppError {
    AppError::Internal(error)
}

/// A receipt for one of the agent's confirmed declarations, once a signed
/// checkpoint covers its leaf. It carries the record's salt: owner only.
pub async fn receipt(services: &Services, agent_id: Uuid, dd_id: Uuid) -> AppResult<Receipt> {
    Ok(proven(services, agent_id, dd_id).await?.0)
}

/// The same receipt as a COSE Receipt (RFC 9942, vds 1), signed with `key`:
/// the checkpoint's root (detached) under the receipt key, the issuer this
/// service's public URL, the subject the declaration, the time the
/// checkpoint's. RFC 9942's inclusion path has at least one hash, so the
/// tree must hold two leaves (409 `NOT_YET_IN_LOG` before).
pub async fn cose_receipt(services: &Services, key: &ReceiptKey, agent_id: Uuid, dd_id: Uuid) -> AppResult<Vec<u8>> {
    let (receipt, signed_at, _) = proven(services, agent_id, dd_id).await?;
    cose_of(services, key, &receipt, signed_at, dd_id)
}

fn cose_of(
    services: &Services,
    key: &ReceiptKey,
    receipt: &Receipt,
    signed_at: chrono::DateTime<chrono::Utc>,
    dd_id: Uuid,
) -> AppResult<Vec<u8>> {
    if receipt.tree_size < 2 {
        return Err(AppError::Conflict {
            code: "NOT_YET_IN_LOG",
            message: "a COSE receipt needs a tree of two leaves or more (its inclusion path has at least one hash); the JSON receipt \
                      is ready, the COSE one after the next declaration is integrated"
                .into(),
        });
    }
    let claims = Claims { iss: services.config.public_url.clone(), sub: format!("urn:uuid:{dd_id}"), iat: signed_at.timestamp() };
    anchor_verify::cose::inclusion_receipt(receipt, &key.kid(), &claims, |tbs| key.sign(tbs)).map_err(|e| internal(anyhow::anyhow!("{e}")))
}

/// The dispute-evidence bundle of one of the agent's confirmed declarations
/// (decision 0070): its scope as recorded and its receipt (with the COSE
/// receipt when `key` is given and the tree holds two leaves), and for its
/// settled x402 payment the payer's authorization, the offer of its terms,
/// the receipt of its settlement (the one its `PAYMENT-RESPONSE` carried:
/// Ed25519 and the canonical payloads are deterministic) and the service's
/// binding of the settlement to the record, all signed with the log key.
/// The offer is signed again for the terms the payment met, valid until the
/// payer's authorization ends. Owner only: the record carries its salt.
pub async fn evidence(services: &Services, key: Option<&ReceiptKey>, agent_id: Uuid, dd_id: Uuid) -> AppResult<Evidence> {
    let (receipt, signed_at, stored) = proven(services, agent_id, dd_id).await?;
    let cose_receipt = match key {
        Some(key) if receipt.tree_size >= 2 => Some(B64.encode(cose_of(services, key, &receipt, signed_at, dd_id)?)),
        _ => None,
    };
    let mut payments = Vec::new();
    let settled = services.store.payment_for(dd_id).await?.filter(|p| p.status == PaymentStatus::Settled);
    if let (Some(payment), Some(confirmed_at)) = (settled, stored.confirmed_at) {
        let signer = services.offers.as_ref().ok_or_else(|| internal(anyhow::anyhow!("this host signs no offers")))?;
        let transaction = payment.settlement_ref.clone().unwrap_or_default();
        let settled_at =
            payment.history.iter().find(|(status, _, _)| *status == PaymentStatus::Settled).map_or(confirmed_at, |(_, _, at)| *at);
        let issued_at = settled_at.timestamp().max(0) as u64;
        let resource = declarations::payment_resource(services, &stored);
        let authorization: serde_json::Value =
            serde_json::from_str(&payment.payload).map_err(|e| internal(anyhow::anyhow!("a stored payment payload: {e}")))?;
        let valid_before = anchor_x402::authorization(&authorization).map_or(issued_at, |a| a.valid_before.max(0) as u64);
        // The payee as the offer spelled it (the payer's copy of the terms
        // it accepted, checked at the create), so the offer signed again is
        // the one the 402 carried, its validUntil aside.
        let pay_to = authorization["accepted"]["payTo"].as_str().unwrap_or(&payment.pay_to);
        let requirement = anchor_x402::requirement(pay_to, payment.amount_units, 0);
        let jws = |signed: serde_json::Value| signed["signature"].as_str().unwrap_or_default().to_string();
        let offer = jws(anchor_x402::offers::signed_offer(signer.as_ref(), &resource, &requirement, 0, valid_before));
        let settlement_receipt =
            anchor_x402::offers::signed_receipt(signer.as_ref(), &resource, &payment.network, &payment.payer, &transaction, issued_at)
                .signature;
        let (payment_id, amount) = (payment.payment_id.to_string(), payment.amount_units.to_string());
        use anchor_x402::offers::Field;
        let binding = anchor_x402::offers::signed_jws(
            signer.as_ref(),
            &mut [
                ("format", Field::Text(BINDING_FORMAT)),
                ("ddId", Field::Text(&receipt.dd_id)),
                ("integrityHash", Field::Text(&receipt.integrity_hash)),
                ("paymentId", Field::Text(&payment_id)),
                ("network", Field::Text(&payment.network)),
                ("payer", Field::Text(&payment.payer)),
                ("transaction", Field::Text(&transaction)),
                ("amount", Field::Text(&amount)),
                ("settledAt", Field::Int(issued_at)),
            ],
        );
        payments.push(PaymentEvidence {
            payment_id,
            network: payment.network,
            asset: payment.asset,
            payer: payment.payer,
            pay_to: payment.pay_to,
            amount,
            transaction,
            settled_at: settled_at.to_rfc3339_opts(SecondsFormat::Micros, true),
            resource_url: resource,
            authorization,
            offer,
            receipt: settlement_receipt,
            binding,
        });
    }
    Ok(Evidence {
        format: EVIDENCE_FORMAT.into(),
        dd_id: receipt.dd_id.clone(),
        scope: scope_of(&receipt.canonical_record),
        anchored_at: receipt.anchored_at.clone(),
        receipt,
        cose_receipt,
        payments,
    })
}

/// A COSE consistency receipt (RFC 9942, vds 1) from the checkpoint of
/// `from` leaves to the one of `to`, signed with `key`; both checkpoints
/// are in it. 404 `CHECKPOINT_NOT_FOUND` when the log signed no checkpoint
/// of one of the sizes.
pub async fn cose_consistency(services: &Services, key: &ReceiptKey, from: u64, to: u64) -> AppResult<Vec<u8>> {
    if from == 0 || from >= to {
        return Err(AppError::invalid("INVALID_VALUE", format!("a COSE consistency proof joins 0 < from < to; got {from} and {to}")));
    }
    let proof = consistency(services, from, to).await?;
    let checkpoint = |size: u64| async move {
        let size = i64::try_from(size).map_err(|_| AppError::invalid("INVALID_VALUE", "a size past 2^63"))?;
        services.store.checkpoint(size).await?.ok_or_else(|| {
            AppError::not_found(
                "CHECKPOINT_NOT_FOUND",
                format!("the log signed no checkpoint of {size} leaves; use sizes of its checkpoints"),
            )
        })
    };
    let (older, newer) = (checkpoint(from).await?, checkpoint(to).await?);
    let path = proof
        .proof
        .iter()
        .map(|h| B64.decode(h).ok().and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| internal(anyhow::anyhow!("a stored hash is not 32 bytes")))?;
    let (older_note, _) = witness::with_cosignatures(services, &older).await.map_err(internal)?;
    let (newer_note, _) = witness::with_cosignatures(services, &newer).await.map_err(internal)?;
    let claims = Claims {
        iss: services.config.public_url.clone(),
        sub: format!("{}/consistency/{from}/{to}", services.config.public_url),
        iat: newer.published_at.timestamp(),
    };
    anchor_verify::cose::consistency_receipt(from, to, &path, &newer.root, &older_note, &newer_note, &key.kid(), &claims, |tbs| {
        key.sign(tbs)
    })
    .map_err(|e| internal(anyhow::anyhow!("{e}")))
}

/// Publishes `key` with the keys receipts were signed with (once per host start).
pub async fn publish_receipt_key(services: &Services, key: &ReceiptKey) -> AppResult<()> {
    Ok(services.store.publish_receipt_key(&key.kid(), &key.public().cose_key(), services.clock.now()).await?)
}

/// The COSE Key Set of every key receipts were signed with.
pub async fn receipt_keys(services: &Services) -> AppResult<Vec<anchor_verify::cose::EcKey>> {
    let mut keys = Vec::new();
    for cose_key in services.store.receipt_keys().await? {
        keys.extend(anchor_verify::cose::parse_keys(&cose_key).map_err(|e| internal(anyhow::anyhow!("a stored receipt key: {e}")))?);
    }
    Ok(keys)
}

/// The receipt of a declaration, when the checkpoint it proves inclusion
/// in was signed, and the declaration as stored.
async fn proven(
    services: &Services,
    agent_id: Uuid,
    dd_id: Uuid,
) -> AppResult<(Receipt, chrono::DateTime<chrono::Utc>, anchor_domain::records::StoredDeclaration)> {
    proven_from(services, declarations::owned(services, agent_id, dd_id).await?).await
}

/// The receipt of a declaration already read (and its owner checked).
pub(crate) async fn receipt_of(services: &Services, stored: anchor_domain::records::StoredDeclaration) -> AppResult<Receipt> {
    Ok(proven_from(services, stored).await?.0)
}

async fn proven_from(
    services: &Services,
    stored: anchor_domain::records::StoredDeclaration,
) -> AppResult<(Receipt, chrono::DateTime<chrono::Utc>, anchor_domain::records::StoredDeclaration)> {
    let dd_id = stored.declaration.dd_id;
    let Some(integrity_hash) = stored.integrity_hash.clone() else {
        return Err(AppError::Conflict {
            code: "NOT_CONFIRMED",
            message: "confirm the declaration first; only confirmed declarations enter the log".into(),
        });
    };
    let not_yet = || AppError::Conflict {
        code: "NOT_YET_IN_LOG",
        message: "the declaration is confirmed but not yet in a signed checkpoint; retry in a second".into(),
    };
    let store = services.store.as_ref();
    let (index, _leaf) = store.log_entry_for(dd_id).await?.ok_or_else(not_yet)?;
    let proof = proof_at(services, index).await?.ok_or_else(not_yet)?;
    let is_witnessed = services.trust.witnessing() && proof.cosigned_by.len() >= services.trust.quorum;
    let declared = stored.declaration.ee.scope.integrity;
    let reached = match (is_witnessed, proof.token.is_some()) {
        (true, true) => Integrity::Certifiable,
        (true, false) => Integrity::Enhanced,
        (false, _) => Integrity::Basic,
    };
    let receipt = Receipt {
        format: RECEIPT_FORMAT.into(),
        dd_id: dd_id.to_string(),
        canonical_record: canonical_encoding(&stored.declaration),
        integrity_hash,
        anchored_at: stored.declaration.anchored_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        leaf_index: index as u64,
        tree_size: proof.size,
        inclusion_proof: proof.path.iter().map(|h| B64.encode(h)).collect(),
        checkpoint: proof.note,
        witnessed: is_witnessed,
        cosigned_by: proof.cosigned_by,
        timestamp_token: proof.token.map(|t| B64.encode(&t)),
        integrity_level: Some(IntegrityLevels {
            declared: declared.as_str().to_owned(),
            reached: reached.as_str().to_owned(),
            met: level_rank(reached) >= level_rank(declared),
        }),
        trace_key: stored.declaration.trace_key.map(hex::encode),
    };
    Ok((receipt, proof.signed_at, stored))
}

/// A leaf's proof of inclusion in the checkpoint with the strongest
/// evidence that covers it, and that evidence.
#[derive(Clone, Debug)]
pub struct LeafProof {
    /// The checkpoint's tree size.
    pub size: u64,
    pub path: Vec<[u8; 32]>,
    /// The checkpoint's signed note, with the witnesses' cosignature lines.
    pub note: String,
    /// The witnesses that cosigned it.
    pub cosigned_by: Vec<String>,
    /// The RFC 3161 token over it, when stamped.
    pub token: Option<Vec<u8>>,
    /// When the log signed it.
    pub signed_at: chrono::DateTime<chrono::Utc>,
}

/// The proof of leaf `index`: in the newest time-stamped checkpoint that
/// covers it (stamped only once witnessed, when witnesses are configured),
/// else the newest the witness quorum cosigned, else the newest the log
/// signed; `None` while no signed checkpoint covers it.
pub async fn proof_at(services: &Services, index: i64) -> AppResult<Option<LeafProof>> {
    let store = services.store.as_ref();
    let stamped = timestamp::newest_stamped(services).await.map_err(internal)?.filter(|c| c.size > index);
    let checkpoint = match stamped {
        Some(checkpoint) => checkpoint,
        None => match witness::newest_witnessed(services).await.map_err(internal)?.filter(|c| c.size > index) {
            Some(checkpoint) => checkpoint,
            None => match store.latest_checkpoint().await?.filter(|c| c.size > index) {
                Some(checkpoint) => checkpoint,
                None => return Ok(None),
            },
        },
    };
    let proof = log::inclusion_proof(store, checkpoint.size as u64, index as u64)
        .await
        .map_err(internal)?
        .ok_or_else(|| internal(anyhow::anyhow!("no inclusion proof for leaf {index} in tree {}", checkpoint.size)))?;
    let (note, cosignatures) = witness::with_cosignatures(services, &checkpoint).await.map_err(internal)?;
    let token = timestamp::token_for(services, checkpoint.size).await.map_err(internal)?;
    Ok(Some(LeafProof {
        size: checkpoint.size as u64,
        path: proof.iter().map(|h| h.0).collect(),
        note,
        cosigned_by: cosignatures.iter().map(|c| witness::name_of(&c.witness).to_owned()).collect(),
        token: token.map(|t| t.token),
        signed_at: checkpoint.published_at,
    }))
}

/// The highest integrity level receipts can reach on this instance:
/// enhanced with witnesses of the log, certifiable with a TSA as well.
pub fn reachable_level(services: &Services) -> Integrity {
    services.trust.reachable_level()
}

/// Where a record's proof stands now, for its owner's portal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Integrated into the log and covered by a signed checkpoint.
    pub in_log: bool,
    /// Covered by a checkpoint the witness quorum cosigned.
    pub witnessed: bool,
    /// The witnesses that cosigned that checkpoint.
    pub cosigned_by: Vec<String>,
    /// The TSA's time and URL, when a time-stamped checkpoint covers it.
    pub timestamped: Option<(chrono::DateTime<chrono::Utc>, String)>,
    pub reached: Integrity,
}

/// The standing of each of `dd_ids` (those in the log; the others are absent).
/// A few reads whatever their number: the leaf indexes, the newest signed,
/// witnessed and time-stamped checkpoints.
pub async fn standings(services: &Services, dd_ids: &[Uuid]) -> AppResult<std::collections::HashMap<Uuid, Standing>> {
    let store = services.store.as_ref();
    let indexes = store.log_indexes(dd_ids).await?;
    if indexes.is_empty() {
        return Ok(Default::default());
    }
    let signed = store.latest_checkpoint().await?.map_or(0, |c| c.size);
    let (witnessed, cosigned_by) = match witness::newest_witnessed(services).await.map_err(internal)? {
        Some(checkpoint) => {
            let (_, cosignatures) = witness::with_cosignatures(services, &checkpoint).await.map_err(internal)?;
            (checkpoint.size, cosignatures.iter().map(|c| witness::name_of(&c.witness).to_owned()).collect())
        }
        None => (0, Vec::new()),
    };
    let stamped = match timestamp::newest_stamped(services).await.map_err(internal)? {
        Some(checkpoint) => timestamp::token_for(services, checkpoint.size).await.map_err(internal)?.map(|t| (checkpoint.size, t)),
        None => None,
    };
    Ok(indexes
        .into_iter()
        .map(|(dd_id, index)| {
            let is_witnessed = index < witnessed;
            let timestamped = stamped.as_ref().filter(|(size, _)| index < *size).map(|(_, t)| (t.gen_time, t.tsa.clone()));
            let reached = match (is_witnessed, timestamped.is_some()) {
                (true, true) => Integrity::Certifiable,
                (true, false) => Integrity::Enhanced,
                (false, _) => Integrity::Basic,
            };
            let standing = Standing {
                in_log: index < signed,
                witnessed: is_witnessed,
                cosigned_by: if is_witnessed { cosigned_by.clone() } else { Vec::new() },
                timestamped,
                reached,
            };
            (dd_id, standing)
        })
        .collect())
}

/// The integrity levels in order: basic < enhanced < certifiable.
pub fn level_rank(level: Integrity) -> u8 {
    level.rank()
}

/// The latest signed checkpoint (a C2SP signed note), once one exists.
pub async fn latest_checkpoint(services: &Services) -> AppResult<String> {
    match services.store.latest_checkpoint().await? {
        Some(c) => Ok(witness::with_cosignatures(services, &c).await.map_err(internal)?.0),
        None => Err(AppError::not_found("NOT_FOUND", "no checkpoint has been published yet: the log is empty")),
    }
}

/// The checkpoint published for tree size `size`.
pub async fn checkpoint(services: &Services, size: i64) -> AppResult<String> {
    match services.store.checkpoint(size).await? {
        Some(c) => Ok(witness::with_cosignatures(services, &c).await.map_err(internal)?.0),
        None => Err(AppError::not_found("NOT_FOUND", format!("no checkpoint was published for size {size}"))),
    }
}

/// An RFC 6962 consistency proof from tree size `from` to `to`.
pub async fn consistency(services: &Services, from: u64, to: u64) -> AppResult<ConsistencyProof> {
    let current = services.store.log_state().await?.size as u64;
    if from > to || to > current {
        return Err(AppError::invalid("INVALID_VALUE", format!("need from <= to <= {current} (the current tree size)")));
    }
    let proof = if from == to || from == 0 {
        Vec::new()
    } else {
        log::consistency_proof(services.store.as_ref(), to, from)
            .await
            .map_err(internal)?
            .ok_or_else(|| internal(anyhow::anyhow!("no consistency proof {from} -> {to}")))?
    };
    Ok(ConsistencyProof { from_size: from, to_size: to, proof: proof.iter().map(|h| B64.encode(h.0)).collect() })
}

/// A C2SP tlog-tiles hash tile, or an entry bundle (`entries`), once the tree
/// covers all of it; `None` otherwise.
pub async fn tile(services: &Services, tile: tlog_tiles::Tile, entries: bool) -> AppResult<Option<Vec<u8>>> {
    let size = services.store.log_state().await?.size as u64;
    // A tile exists once the tree covers all of it: W hashes at level 8L, each
    // standing for 2^(8L) leaves.
    let Some(span) = 1u64.checked_shl(8 * u32::from(tile.level())) else { return Ok(None) };
    let covered =
        tile.level_index().checked_mul(256).and_then(|n| n.checked_add(u64::from(tile.width()))).and_then(|n| n.checked_mul(span));
    if covered.is_none_or(|covered| covered > size) {
        return Ok(None);
    }
    if !entries {
        return log::tile_data(services.store.as_ref(), tile).await.map_err(internal);
    }
    let first = (tile.level_index() * 256) as i64;
    let leaves = services.store.log_entries(first, i64::from(tile.width())).await?;
    if leaves.len() != tile.width() as usize {
        return Ok(None);
    }
    let mut bundle = Vec::new();
    for leaf in leaves {
        bundle.extend_from_slice(&(leaf.len() as u16).to_be_bytes());
        bundle.extend_from_slice(&leaf);
    }
    Ok(Some(bundle))
}
