//! Compiled components kept on disk, so that a host starting again (or a
//! second host reading the same directory) deserializes a component instead
//! of compiling it: milliseconds instead of a compilation.
//!
//! A file is named by the component's SHA-256 and the engine's compatibility
//! hash (an artifact of one engine configuration or wasmtime version never
//! meets another), written whole under a temporary name and renamed into
//! place, and never rewritten. This module holds the only `unsafe` code of
//! the project: wasmtime's deserialization trusts its input, and each block
//! says why that trust holds here.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of compiled components for one kind of component.
#[derive(Clone, Debug)]
pub struct CompiledCache {
    dir: PathBuf,
}

impl CompiledCache {
    /// The cache in `dir`, created if missing.
    pub fn new(dir: &Path) -> std::io::Result<CompiledCache> {
        std::fs::create_dir_all(dir)?;
        Ok(CompiledCache { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the compiled form of `sha256` lives for `engine`.
    pub fn path(&self, engine: &Engine, sha256: &[u8; 32]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compat = hasher.finish();
        self.dir.join(format!("{}-{compat:016x}.cwasm", hex::encode(sha256)))
    }

    pub fn contains(&self, engine: &Engine, sha256: &[u8; 32]) -> bool {
        self.path(engine, sha256).exists()
    }

    /// The cached component, if there is one that loads (one that does not is
    /// logged and left for [`CompiledCache::compile`] to replace).
    pub fn read(&self, engine: &Engine, sha256: &[u8; 32]) -> Option<Component> {
        let path = self.path(engine, sha256);
        if !path.exists() {
            return None;
        }
        match deserialize_file(engine, &path) {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "a cached compiled component no longer loads; compiling it again");
                None
            }
        }
    }

    /// Compiles `wasm` once: the artifact is written to the cache and
    /// deserialized into the component.
    pub fn compile(&self, engine: &Engine, sha256: &[u8; 32], wasm: &[u8]) -> wasmtime::Result<Component> {
        let compiled = engine.precompile_component(wasm)?;
        self.write(&self.path(engine, sha256), &compiled);
        deserialize(engine, &compiled)
    }

    /// Keeps a component compiled already (from memory).
    pub fn keep(&self, engine: &Engine, sha256: &[u8; 32], component: &Component) {
        let path = self.path(engine, sha256);
        if path.exists() {
            return;
        }
        match component.serialize() {
            Ok(bytes) => self.write(&path, &bytes),
            Err(error) => tracing::warn!(%error, "could not serialize a compiled component"),
        }
    }

    /// Written whole under a unique name, then renamed: a reader never sees
    /// half a file, and a file a loaded component maps is never rewritten.
    fn write(&self, path: &Path, bytes: &[u8]) {
        let partial = path.with_extension(format!("partial-{}", unique_suffix()));
        if let Err(error) = std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, path)) {
            let _ = std::fs::remove_file(&partial);
            tracing::warn!(%error, path = %path.display(), "could not keep a compiled component on disk");
        }
    }

    /// Removes every cached artifact (and leftover partial file) whose
    /// component is not in `keep`; how many it removed.
    pub fn retain(&self, keep: &[[u8; 32]]) -> usize {
        let kept: Vec<String> = keep.iter().map(hex::encode).collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A partial file being written by a compile under way (the two
            // upload lanes compile side by side) is left to its writer.
            let partial = name.contains(".partial-");
            let fresh = || entry.metadata().and_then(|m| m.modified()).is_ok_and(|at| at.elapsed().is_ok_and(|age| age.as_secs() < 60));
            let ours = name.ends_with(".cwasm") || (partial && !fresh());
            // Unlinking a file a loaded component maps is safe: the mapping keeps it.
            if ours && !kept.iter().any(|k| name.starts_with(k.as_str())) && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// Deserializes an artifact this host compiled a moment ago.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `compiled` was produced by `precompile_component` on this very
    // engine in the same call; it never came from outside the process.
    unsafe { Component::deserialize(engine, compiled) }
}

/// Deserializes an artifact from the cache directory.
#[allow(unsafe_code)]
fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the cache directory holds only what this module wrote
    // (complete files, renamed into place, never rewritten: a mapped file is
    // never truncated under a loaded component), named by the component's
    // hash and this engine's compatibility hash; wasmtime also checks the
    // artifact's header against the engine and refuses a mismatch.
    unsafe { Component::deserialize_file(engine, path) }
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("{}-{nanos}", std::process::id())
}
