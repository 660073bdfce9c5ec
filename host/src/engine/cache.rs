//! The compiled-component cache: serialized code on disk, keyed on the component's content hash,
//! the wasmtime version and the engine configuration.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The wasmtime version compiled code is for (pinned exactly in the workspace manifest).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Whether a component came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Loaded from a serialized file.
    Hit,
    /// Compiled now (and stored, when a cache folder is usable).
    Miss,
}

/// Content hash (SHA-256, hex) of a component's bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The default cache folder: `$WEIR_CACHE_DIR`, `$XDG_CACHE_HOME/weir` or `~/.cache/weir`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WEIR_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("weir"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("weir"))
}

fn cache_file(engine: &Engine, dir: &Path, hash: &str) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let engine_key = format!("{:016x}", h.finish());
    dir.join(format!(
        "{}-wasmtime{}-{engine_key}.cwasm",
        &hash[..32],
        WASMTIME_VERSION
    ))
}

/// Loads a component from the cache in `dir`, or compiles it and stores it there.
/// A cache that cannot be read or written only costs a compile; it is never an error.
pub fn load(
    engine: &Engine,
    bytes: &[u8],
    hash: &str,
    dir: Option<&Path>,
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, CacheOutcome::Miss));
    };
    let file = cache_file(engine, dir, hash);
    if file.exists() {
        match deserialize(engine, &file) {
            Ok(c) => return Ok((c, CacheOutcome::Hit)),
            Err(e) => {
                tracing::warn!(file = %file.display(), "compiled cache entry unusable, recompiling: {e}")
            }
        }
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(&component, dir, &file) {
        tracing::warn!(dir = %dir.display(), "cannot write compiled cache: {e}");
    }
    Ok((component, CacheOutcome::Miss))
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file is one this cache wrote with `Component::serialize` (written to a
    // temporary name and renamed into place, so never partial), named after the content hash,
    // the wasmtime version and the engine's compatibility hash; wasmtime itself also checks
    // the version and engine settings recorded in the file and refuses a mismatch.
    unsafe { Component::deserialize_file(engine, file) }
}

fn store(component: &Component, dir: &Path, file: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}
