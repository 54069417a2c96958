//! Waiting as a task (MCP's Tasks extension, decision 0071): a confirmed
//! declaration's receipt reaches the integrity level its scope declared
//! (a signed checkpoint, then the witnesses' cosignatures, then a
//! time-stamp) seconds after the confirmation. A client that can hold a
//! task gets one for that wait and polls it, on any host, until the receipt
//! is there.
//!
//! Nothing is stored for a task: its id names the declaration and carries a
//! keyed tag of it and its agent (HMAC-SHA-256 under a key derived from the
//! log key every host shares), so the id is the capability to read that
//! receipt (which holds the record's salt) and any host can check it. Its
//! state is the receipt's, read when asked.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use anchor_domain::declarations::ee::Integrity;
use anchor_verify::Receipt;

use crate::{AppError, AppResult, Services, transparency};

/// The id of a wait for a receipt: `witnessed-<dd_id>-<tag>`.
const PREFIX: &str = "witnessed-";

/// Where a wait stands.
#[derive(Clone, Debug)]
pub enum Waited {
    /// Not yet: the record is not in a signed checkpoint, or its checkpoint
    /// is not yet cosigned (or stamped) as declared.
    Working { declared: Integrity, reached: Option<Integrity> },
    /// The receipt reaches the declared level.
    Reached(Box<Receipt>),
    /// The declared level is beyond what this service reaches (no witnesses,
    /// or no time-stamping authority): the receipt as far as it goes.
    OutOfReach { declared: Integrity, reachable: Integrity, receipt: Option<Box<Receipt>> },
}

/// A wait, as any host reads it.
#[derive(Clone, Debug)]
pub struct TaskState {
    pub dd_id: Uuid,
    /// When the declaration was confirmed (the task's creation).
    pub confirmed_at: DateTime<Utc>,
    pub waited: Waited,
}

fn hmac(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let (mut inner, mut outer) = (Sha256::new(), Sha256::new());
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

fn tag(services: &Services, agent_id: Uuid, dd_id: Uuid) -> AppResult<[u8; 32]> {
    let signer = services.offers.as_ref().ok_or_else(|| AppError::Internal(anyhow::anyhow!("this host holds no log key")))?;
    Ok(hmac(&signer.derived_key("anchor-task-key/1"), format!("anchor-task/1\n{dd_id}\n{agent_id}\n").as_bytes()))
}

fn unknown() -> AppError {
    AppError::not_found("TASK_NOT_FOUND", "no task has this id on this service")
}

/// The id of the wait for `dd_id`'s receipt (its agent's to read).
pub async fn task_id(services: &Services, dd_id: Uuid) -> AppResult<String> {
    let stored = services.store.declaration(dd_id).await?.ok_or_else(unknown)?;
    let tag = tag(services, stored.declaration.agent_id, dd_id)?;
    Ok(format!("{PREFIX}{dd_id}-{}", hex::encode(&tag[..16])))
}

/// Where the wait `task_id` stands; 404 `TASK_NOT_FOUND` for an id this
/// service did not give (or whose declaration is gone).
pub async fn state(services: &Services, task_id: &str) -> AppResult<TaskState> {
    let rest = task_id.strip_prefix(PREFIX).ok_or_else(unknown)?;
    let (dd, given) = rest.rsplit_once('-').ok_or_else(unknown)?;
    let dd_id = Uuid::parse_str(dd).map_err(|_| unknown())?;
    let mut given_tag = [0u8; 16];
    hex::decode_to_slice(given, &mut given_tag).map_err(|_| unknown())?;
    let stored = services.store.declaration(dd_id).await?.ok_or_else(unknown)?;
    let agent_id = stored.declaration.agent_id;
    if !bool::from(tag(services, agent_id, dd_id)?[..16].ct_eq(&given_tag)) {
        return Err(unknown());
    }
    let confirmed_at = stored.confirmed_at.ok_or_else(unknown)?;
    let declared = stored.declaration.ee.scope.integrity;
    let reachable = services.trust.reachable_level();
    let receipt = match transparency::receipt_of(services, stored).await {
        Ok(receipt) => Some(receipt),
        Err(AppError::Conflict { code: "NOT_YET_IN_LOG", .. }) => None,
        Err(error) => return Err(error),
    };
    let reached = receipt.as_ref().and_then(|r| r.integrity_level.as_ref()).and_then(|l| Integrity::parse(&l.reached));
    let waited = match receipt {
        Some(receipt) if receipt.integrity_level.as_ref().is_some_and(|l| l.met) => Waited::Reached(Box::new(receipt)),
        receipt if declared.beyond(reachable) => Waited::OutOfReach { declared, reachable, receipt: receipt.map(Box::new) },
        _ => Waited::Working { declared, reached },
    };
    Ok(TaskState { dd_id, confirmed_at, waited })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_is_hmac_sha256() {
        // RFC 4231, test case 2 takes a short key; here a 32-byte key of
        // 0x0b (case 1's 20 bytes, zero-padded as HMAC pads a short key).
        let mut key = [0u8; 32];
        key[..20].copy_from_slice(&[0x0b; 20]);
        assert_eq!(hex::encode(hmac(&key, b"Hi There")), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    }
}
