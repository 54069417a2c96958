//! Checking a database copy before trusting it: a backup just taken, or a
//! database restored from one (either engine).
//!
//! Three checks: the copy opens; the migrations it records are exactly the
//! ones this build carries (same versions, same checksums); and its log
//! holds up, recomputed from the leaves alone: every stored checkpoint's
//! root is the RFC 6962 root of the first `size` leaves, its signed note
//! names that size and root, and (given the log's public key) its signature
//! verifies; the stored head is the root of all leaves.

use anchor_domain::schema::Fit;
use anchor_ports::Store;
use anyhow::{Context, bail};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub migrations: usize,
    pub leaves: i64,
    pub checkpoints: usize,
    /// Whether checkpoint signatures were checked (a key was known).
    pub signatures: bool,
}

/// The right edge of an RFC 6962 tree: the roots of its complete subtrees,
/// largest first, each with its height. Memory stays logarithmic in the size.
#[derive(Default)]
struct Frontier {
    size: u64,
    edge: Vec<(u32, [u8; 32])>,
}

fn leaf_hash(data: &[u8]) -> [u8; 32] {
    Sha256::new().chain_update([0u8]).chain_update(data).finalize().into()
}

fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    Sha256::new().chain_update([1u8]).chain_update(left).chain_update(right).finalize().into()
}

impl Frontier {
    fn push(&mut self, leaf: &[u8]) {
        let mut node = (0, leaf_hash(leaf));
        while let Some(&(height, left)) = self.edge.last() {
            if height != node.0 {
                break;
            }
            self.edge.pop();
            node = (height + 1, node_hash(&left, &node.1));
        }
        self.edge.push(node);
        self.size += 1;
    }

    /// The root of the tree so far (the empty tree's is the hash of nothing).
    fn root(&self) -> [u8; 32] {
        let mut iter = self.edge.iter().rev();
        let Some(&(_, mut root)) = iter.next() else { return Sha256::digest([]).into() };
        for (_, left) in iter {
            root = node_hash(left, &root);
        }
        root
    }
}

/// The size and root a checkpoint note's text states (its second and third lines).
fn note_body(note: &str) -> anyhow::Result<(u64, [u8; 32])> {
    let mut lines = note.lines();
    let _origin = lines.next().context("the note is empty")?;
    let size: u64 = lines.next().context("the note has no size")?.trim().parse().context("the note's size is not a number")?;
    let root = base64::engine::general_purpose::STANDARD.decode(lines.next().context("the note has no root")?.trim())?;
    Ok((size, root.try_into().map_err(|_| anyhow::anyhow!("the note's root is not 32 bytes"))?))
}

/// Runs the checks on `store` against the migrations `expected`; `vkey` is
/// the log's public key, if known.
pub async fn check(store: &dyn Store, expected: &[(i64, Vec<u8>)], vkey: Option<&str>) -> anyhow::Result<Checked> {
    store.ping().await.context("the database does not answer")?;
    let (migrations, _) = check_migrations(store, expected).await?;
    let state = store.log_state().await?;
    let mut frontier = Frontier::default();
    let mut checkpoints = 0;
    let mut after = 0;
    loop {
        let batch = store.checkpoints_after(after, 500).await?;
        let Some(last) = batch.last() else { break };
        after = last.size;
        for checkpoint in &batch {
            if checkpoint.size > state.size {
                bail!("checkpoint {} is larger than the log ({} leaves)", checkpoint.size, state.size);
            }
            grow(store, &mut frontier, checkpoint.size as u64).await?;
            if frontier.root() != checkpoint.root {
                bail!("checkpoint {}: its stored root is not the root of the first {} leaves", checkpoint.size, checkpoint.size);
            }
            let (size, root) = match vkey {
                Some(vkey) => {
                    let opened = anchor_verify::open_checkpoint(&checkpoint.note, vkey)
                        .map_err(|e| anyhow::anyhow!("checkpoint {}: {e}", checkpoint.size))?;
                    (opened.size(), opened.hash().0)
                }
                None => note_body(&checkpoint.note).with_context(|| format!("checkpoint {}", checkpoint.size))?,
            };
            if (size, root) != (checkpoint.size as u64, checkpoint.root) {
                bail!("checkpoint {}: its signed note states another tree", checkpoint.size);
            }
            checkpoints += 1;
        }
    }
    grow(store, &mut frontier, state.size as u64).await?;
    if frontier.root() != state.root {
        bail!("the log's head is not the root of its {} leaves", state.size);
    }
    // The right edge is what integration grows the tree from.
    if frontier.edge.iter().map(|(_, hash)| *hash).collect::<Vec<_>>() != state.edge {
        bail!("the log's stored right edge is not that of its {} leaves", state.size);
    }
    Ok(Checked { migrations, leaves: state.size, checkpoints, signatures: vkey.is_some() })
}

/// Whether the migrations `store` records fit this build's `expected` ones
/// (versions and checksums, none half-applied), newer ones being allowed
/// where the database's rules say this build runs beside them (decision
/// 0067); how many are recorded, and how they fit.
pub async fn check_migrations(store: &dyn Store, expected: &[(i64, Vec<u8>)]) -> anyhow::Result<(usize, Fit)> {
    let recorded = store.applied_migrations().await.context("reading the migrations the database records")?;
    let newer = anchor_domain::schema::unknown(|v| expected.iter().any(|(carried, _)| *carried == v), recorded.iter().map(|r| r.0));
    let rules = if !newer.is_empty() { store.migration_rules().await.context("reading the migrations' rules")? } else { Vec::new() };
    let fit = anchor_domain::schema::fit(expected, &recorded, &rules).map_err(anyhow::Error::msg)?;
    Ok((recorded.len(), fit))
}

/// Adds leaves to `frontier` until it holds `size`; a missing leaf fails.
async fn grow(store: &dyn Store, frontier: &mut Frontier, size: u64) -> anyhow::Result<()> {
    while frontier.size < size {
        let count = (size - frontier.size).min(1000);
        let leaves = store.log_entries(frontier.size as i64, count as i64).await?;
        if leaves.len() as u64 != count {
            bail!("the log misses leaves between {} and {}", frontier.size, frontier.size + count);
        }
        for leaf in &leaves {
            frontier.push(leaf);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frontier's root is the RFC 6962 root the verifier computes, at every size.
    #[test]
    fn the_frontier_agrees_with_the_verifier() {
        let leaves: Vec<Vec<u8>> = (0..70u32).map(|i| format!("leaf {i}").into_bytes()).collect();
        let mut frontier = Frontier::default();
        for n in 1..=leaves.len() {
            frontier.push(&leaves[n - 1]);
            assert_eq!(frontier.root(), anchor_verify::root_of(&leaves[..n]).unwrap(), "size {n}");
        }
    }
}
