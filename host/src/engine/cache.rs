//! The compiled-component cache: serialized code on disk, keyed on the component's content hash,
//! the wasmtime version and the engine configuration.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

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

/// How long a compile runs before the user is told that it is compiling (a Python or
/// JavaScript runtime takes seconds; a small Rust or C stage is done long before).
const SAY_COMPILING_AFTER: Duration = Duration::from_secs(1);

/// Loads a component from the cache in `dir`, or compiles it and stores it there.
/// A cache that cannot be read or written only costs a compile; it is never an error.
/// `what` names the component in the message a long compile logs.
pub fn load(
    engine: &Engine,
    bytes: &[u8],
    hash: &str,
    dir: Option<&Path>,
    what: &str,
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let Some(dir) = dir else {
        return Ok((compile(engine, bytes, what, None)?, CacheOutcome::Miss));
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
    let component = compile(engine, bytes, what, Some(dir))?;
    if let Err(e) = store(&component, dir, &file) {
        tracing::warn!(dir = %dir.display(), "cannot write compiled cache: {e}");
    }
    Ok((component, CacheOutcome::Miss))
}

/// Compiles `bytes`, saying so on the log when it takes longer than [`SAY_COMPILING_AFTER`]
/// (so the first start of a large component is not silence) and how long it took.
fn compile(
    engine: &Engine,
    bytes: &[u8],
    what: &str,
    cache: Option<&Path>,
) -> wasmtime::Result<Component> {
    let started = Instant::now();
    let (done, waiting) = mpsc::channel::<()>();
    let size = format!("{:.1} MiB", bytes.len() as f64 / f64::from(1 << 20));
    let later = match cache {
        Some(dir) => format!(
            "later starts load it from the cache in {} in milliseconds",
            dir.display()
        ),
        None => "no cache folder is set, so every start compiles it".to_owned(),
    };
    let (name, note) = (what.to_owned(), later.clone());
    let watcher = std::thread::Builder::new()
        .name("weir-compile-note".into())
        .spawn(move || {
            if waiting.recv_timeout(SAY_COMPILING_AFTER) == Err(RecvTimeoutError::Timeout) {
                tracing::info!("compiling {name} ({size}) to native code; {note}");
            }
        });
    let component = Component::new(engine, bytes);
    drop(done);
    if let Ok(w) = watcher {
        let _ = w.join();
    }
    let took = started.elapsed();
    if took >= SAY_COMPILING_AFTER && component.is_ok() {
        tracing::info!("compiled {what} in {:.1} s", took.as_secs_f64());
    }
    component
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
