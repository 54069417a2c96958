//! The verifiable log: integration of confirmed declarations into an RFC 6962
//! Merkle tree, signed C2SP checkpoints, and proofs read back from storage.
//!
//! # What is hashed, what is public
//!
//! A confirmed declaration's `integrity_hash` (salted, over the `anchor-dd/1`
//! canonical record) and its `anchored_at` form the leaf, `anchor-leaf/1`
//! (`anchor_verify::leaf_data`). Leaves, tree hashes, tiles and checkpoints are
//! public; which leaf is which declaration, and each record's salt, are not:
//! only the declaring agent's receipt joins them.
//!
//! # Who integrates
//!
//! Hosts are stateless. Confirm commits the declaration and its pending leaf in
//! one transaction. One host at a time holds the lease (a row in the
//! database, renewed every round of `jobs`, expiring after a few seconds),
//! integrates pending leaves in batches under the tree head's row lock, and
//! publishes a signed checkpoint about once a second when the tree has grown. If it dies,
//! the lease runs out and another host takes over; since every batch plans from
//! the head as stored and writes under its lock, no leaf is lost or duplicated
//! and the tree cannot fork.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anchor_domain::records::{CheckpointRecord, IntegrationPlan, LogState, PendingLeaf};
use anchor_ports::Store;
use signed_note::{Note, StandardSigner};
use tlog_tiles::{Checkpoint, Hash, HashReader};

use anchor_domain::Clock;

/// The log's identity: its origin (the key name) and signing key.
pub struct LogKey {
    pub origin: String,
    pub vkey: String,
    skey: String,
}

impl std::fmt::Debug for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogKey").field("origin", &self.origin).field("vkey", &self.vkey).finish_non_exhaustive()
    }
}

impl LogKey {
    /// Reads a signer key (`PRIVATE+KEY+<origin>+<id>+<base64>`).
    pub fn from_skey(skey: &str) -> anyhow::Result<LogKey> {
        let signer = StandardSigner::new(skey.trim()).map_err(|e| anyhow::anyhow!("log signing key: {e}"))?;
        let parts: Vec<&str> = skey.trim().splitn(5, '+').collect();
        let origin = parts.get(2).copied().unwrap_or_default().to_string();
        let seed = anchor_verify_seed(parts.get(4).copied().unwrap_or_default())?;
        let (_, vkey) = anchor_verify::signing_key_from_seed(&origin, &seed);
        drop(signer);
        Ok(LogKey { origin, vkey, skey: skey.trim().to_string() })
    }

    /// A new key for `origin`.
    pub fn generate(origin: &str) -> anyhow::Result<LogKey> {
        let mut seed = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
        let (skey, _) = anchor_verify::signing_key_from_seed(origin, &seed);
        LogKey::from_skey(&skey)
    }

    /// The key in `file`, or a new one written there (mode 0600) and announced once.
    pub fn load_or_create(file: &Path, origin: &str) -> anyhow::Result<LogKey> {
        if let Ok(text) = std::fs::read_to_string(file) {
            return LogKey::from_skey(&text);
        }
        let key = LogKey::generate(origin)?;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        write_private(file, &key.skey)?;
        tracing::info!(file = %file.display(), public_key = %key.vkey, "created the log signing key; publish its public key to verifiers");
        Ok(key)
    }

    /// The key's 32 secret bytes (for the x402 offer signer).
    pub(crate) fn seed(&self) -> anyhow::Result<[u8; 32]> {
        anchor_verify_seed(self.skey.splitn(5, '+').nth(4).unwrap_or_default())
    }

    /// Signs a checkpoint body as a C2SP signed note.
    pub fn sign(&self, size: u64, root: [u8; 32]) -> anyhow::Result<String> {
        let body = Checkpoint::new(&self.origin, size, Hash(root), "").map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut note = Note::new(&body.to_bytes(), &[]).map_err(|e| anyhow::anyhow!("{e}"))?;
        let signer = StandardSigner::new(&self.skey).map_err(|e| anyhow::anyhow!("{e}"))?;
        note.add_sigs(&[&signer]).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(String::from_utf8(note.to_bytes())?)
    }
}

fn anchor_verify_seed(encoded: &str) -> anyhow::Result<[u8; 32]> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded)?;
    match bytes.split_first() {
        Some((0x01, seed)) if seed.len() == 32 => Ok(seed.try_into().expect("32 bytes")),
        _ => anyhow::bail!("log signing key: not an Ed25519 key"),
    }
}

#[cfg(unix)]
pub(crate) fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(file)?;
    f.write_all(text.as_bytes())
}

#[cfg(not(unix))]
pub(crate) fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(file, text)
}

// ---- reading stored hashes for tlog computations ----

/// A `HashReader` over hashes already fetched; notes the ones it lacked.
struct Fetched<'a> {
    hashes: &'a HashMap<u64, Hash>,
    missing: RefCell<Vec<u64>>,
}

impl HashReader for Fetched<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        let mut out = Vec::with_capacity(indexes.len());
        for index in indexes {
            match self.hashes.get(index) {
                Some(hash) => out.push(*hash),
                None => {
                    self.missing.borrow_mut().push(*index);
                    out.push(Hash([0; 32]));
                }
            }
        }
        Ok(out)
    }
}

/// Runs a tlog computation over stored hashes, fetching what it reads: the
/// computation runs again until it needed nothing it did not have, so its
/// result only ever comes from stored hashes.
pub async fn with_stored_hashes<T>(
    store: &dyn Store,
    f: impl Fn(&dyn HashReader) -> Result<T, tlog_tiles::Error>,
) -> anyhow::Result<Option<T>> {
    let mut hashes: HashMap<u64, Hash> = HashMap::new();
    for _ in 0..16 {
        let reader = Fetched { hashes: &hashes, missing: RefCell::new(Vec::new()) };
        let result = f(&reader);
        let missing = reader.missing.into_inner();
        if missing.is_empty() {
            return Ok(result.ok());
        }
        let wanted: Vec<i64> = missing.iter().map(|i| *i as i64).collect();
        let found = store.log_hashes(&wanted).await?;
        if found.is_empty() {
            return Ok(None);
        }
        let before = hashes.len();
        hashes.extend(found.into_iter().map(|(i, h)| (i as u64, Hash(h))));
        if hashes.len() == before || missing.iter().any(|i| !hashes.contains_key(i)) {
            return Ok(None);
        }
    }
    Ok(None)
}

struct DynReader<'a>(&'a dyn HashReader);

impl HashReader for DynReader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        self.0.read_hashes(indexes)
    }
}

/// An inclusion proof for leaf `index` in the tree of `size`.
pub async fn inclusion_proof(store: &dyn Store, size: u64, index: u64) -> anyhow::Result<Option<Vec<Hash>>> {
    with_stored_hashes(store, |r| tlog_tiles::prove_record(size, index, &DynReader(r))).await
}

/// A consistency proof from `from` to `to`.
pub async fn consistency_proof(store: &dyn Store, to: u64, from: u64) -> anyhow::Result<Option<Vec<Hash>>> {
    with_stored_hashes(store, |r| tlog_tiles::prove_tree(to, from, &DynReader(r))).await
}

/// The bytes of a hash tile.
pub async fn tile_data(store: &dyn Store, tile: tlog_tiles::Tile) -> anyhow::Result<Option<Vec<u8>>> {
    with_stored_hashes(store, |r| tile.read_data(&DynReader(r))).await
}

// ---- integration ----

struct MapReader<'a>(&'a HashMap<u64, Hash>);

impl HashReader for MapReader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes.iter().map(|i| self.0.get(i).copied().ok_or(tlog_tiles::Error::IndexesNotInTree)).collect()
    }
}

/// Plans the integration of `batch` onto `state`: indices, new stored hashes,
/// new root and right edge. Pure: it reads only what it is given.
pub fn plan(state: &LogState, batch: &[PendingLeaf]) -> Result<IntegrationPlan, String> {
    let size = u64::try_from(state.size).map_err(|_| "negative tree size".to_string())?;
    let edge_indexes = tlog_tiles::sub_tree_index(0, size, Vec::new());
    if edge_indexes.len() != state.edge.len() {
        return Err(format!("the stored right edge has {} hashes, a tree of {size} needs {}", state.edge.len(), edge_indexes.len()));
    }
    let mut hashes: HashMap<u64, Hash> = edge_indexes.iter().copied().zip(state.edge.iter().map(|h| Hash(*h))).collect();
    if tlog_tiles::tree_hash(size, &MapReader(&hashes)).map_err(|e| e.to_string())?.0 != state.root {
        return Err("the stored right edge does not hash to the stored root".into());
    }
    let mut entries = Vec::with_capacity(batch.len());
    let mut written = Vec::new();
    for (offset, leaf) in batch.iter().enumerate() {
        let index = size + offset as u64;
        let new = tlog_tiles::stored_hashes(index, &leaf.leaf_data, &MapReader(&hashes)).map_err(|e| e.to_string())?;
        let first = tlog_tiles::stored_hash_index(0, index);
        for (k, hash) in new.into_iter().enumerate() {
            hashes.insert(first + k as u64, hash);
            written.push(((first + k as u64) as i64, hash.0));
        }
        entries.push((index as i64, leaf.owner, leaf.leaf_data.clone()));
    }
    let new_size = size + batch.len() as u64;
    let root = tlog_tiles::tree_hash(new_size, &MapReader(&hashes)).map_err(|e| e.to_string())?;
    let edge = tlog_tiles::sub_tree_index(0, new_size, Vec::new())
        .iter()
        .map(|i| hashes.get(i).map(|h| h.0).ok_or_else(|| format!("edge hash {i} missing")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IntegrationPlan { entries, hashes: written, state: LogState { size: new_size as i64, root: root.0, edge } })
}

/// Integrates the leaves pending as it begins (in batches of `batch`) and publishes
/// a checkpoint if the tree grew and the last one is older than
/// `checkpoint_every`. A backlog is drained a checkpoint interval at a time,
/// so that receipts keep coming while it drains (the next round goes on
/// with it). The caller holds the lease (`jobs`). Returns the published
/// checkpoint, if any.
pub async fn integrate(
    store: &dyn Store,
    key: &LogKey,
    clock: &dyn Clock,
    batch: i64,
    checkpoint_every: Duration,
    last_published: &mut Option<std::time::Instant>,
) -> anyhow::Result<Option<CheckpointRecord>> {
    let draining = std::time::Instant::now();
    // The head as this round found it, then as each batch left it.
    let mut state = store.log_state().await?;
    while let Some(after) = store.integrate_log(batch, clock.now(), &plan).await? {
        let taken = after.size - state.size;
        state = after;
        // Short of a batch: it took every leaf pending when it began. Those
        // confirmed since wait for the next round, a round's worth in one
        // transaction, instead of being chased a few leaves at a time.
        if taken < batch || draining.elapsed() >= checkpoint_every {
            break;
        }
    }
    let latest = store.latest_checkpoint().await?;
    let published_size = latest.as_ref().map_or(0, |c| c.size);
    let due = last_published.is_none_or(|at| at.elapsed() >= checkpoint_every);
    if state.size <= published_size || !due {
        return Ok(None);
    }
    // Never sign a head that does not extend the last signed one.
    if let Some(previous) = &latest {
        let proof = consistency_proof(store, state.size as u64, previous.size as u64)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no consistency proof from {} to {}", previous.size, state.size))?;
        tlog_tiles::check_tree(&proof, state.size as u64, Hash(state.root), previous.size as u64, Hash(previous.root))
            .map_err(|e| anyhow::anyhow!("refusing to sign size {}: not consistent with checkpoint {}: {e}", state.size, previous.size))?;
    }
    let note = key.sign(state.size as u64, state.root)?;
    let checkpoint = CheckpointRecord { size: state.size, root: state.root, note, published_at: clock.now() };
    store.insert_checkpoint(&checkpoint).await?;
    *last_published = Some(std::time::Instant::now());
    Ok(Some(checkpoint))
}
