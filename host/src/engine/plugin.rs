//! A plugin: one stage's component, compiled, linked and checked against the contract.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, InstancePre};

use super::bindings::{BatchIndices, StageIndices, BATCH_EXPORT, STAGE_EXPORT};
use super::cache::{self, CacheOutcome};
use super::{StageState, WeirEngine};

/// Which shape of the contract a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Contract {
    /// `weir:stage/stage` only: one call per message.
    Typed,
    /// `weir:stage/stage` and the packed `weir:stage/batch` fast path.
    Batch,
}

/// A plugin that cannot be used, naming the stage and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("stage `{stage}`: cannot read plugin {path}: {source}")]
    Read {
        /// Stage name.
        stage: String,
        /// Plugin path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a WebAssembly component implementing the stage contract.
    #[error("stage `{stage}`: plugin {path} {problem}")]
    Invalid {
        /// Stage name.
        stage: String,
        /// Plugin path.
        path: PathBuf,
        /// What is wrong and what was expected.
        problem: String,
    },
}

/// A compiled, linked stage component, ready to instantiate many times.
pub struct Plugin {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// SHA-256 of the component bytes (hex): the plugin's version.
    pub hash: String,
    /// Which contract shape it implements.
    pub contract: Contract,
    /// Whether compiled code came from the cache.
    pub cache: CacheOutcome,
    /// Time to compile or load it.
    pub load_time: Duration,
    pub(crate) pre: InstancePre<StageState>,
    pub(crate) stage_indices: StageIndices,
    pub(crate) batch_indices: Option<BatchIndices>,
    /// What the component imports (interface names).
    pub imports: Vec<String>,
    /// What the component exports (interface names).
    pub exports: Vec<String>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("hash", &self.short_hash())
            .field("contract", &self.contract)
            .finish()
    }
}

/// What kind of wasm binary the bytes are.
fn binary_kind(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(
            "is not a WebAssembly binary (expected a component built for `wasm32-wasip2`)".into(),
        );
    }
    // Core modules have version 1 layer 0; components have layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(format!(
            "is a core WebAssembly module, not a component: build it as a component (e.g. target \
             `wasm32-wasip2`, or wrap a `wasm32-wasi` module with `weir component new`) \
             exporting `{STAGE_EXPORT}`"
        ));
    }
    Ok(())
}

impl Plugin {
    pub(crate) fn load(
        engine: &WeirEngine,
        stage: &str,
        path: &Path,
    ) -> Result<Plugin, PluginError> {
        let invalid = |problem: String| PluginError::Invalid {
            stage: stage.to_owned(),
            path: path.to_owned(),
            problem,
        };
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            stage: stage.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        binary_kind(&bytes).map_err(invalid)?;
        let hash = cache::content_hash(&bytes);
        let started = Instant::now();
        let (component, cache) = cache::load(
            engine.engine(),
            &bytes,
            &hash,
            engine.cache_dir(),
            &if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy() == stage)
            {
                path.display().to_string()
            } else {
                format!("stage `{stage}` ({})", path.display())
            },
        )
        .map_err(|e| invalid(format!("does not compile: {e:#}")))?;
        let load_time = started.elapsed();
        let (imports, exports) = interface_names(engine, &component);
        if !exports.iter().any(|e| e == STAGE_EXPORT) {
            let found = if exports.is_empty() {
                "nothing".to_owned()
            } else {
                exports.join(", ")
            };
            return Err(invalid(format!(
                "is not a Weir stage: it exports {found}, but a stage must export `{STAGE_EXPORT}` \
                 (see wit/weir.wit)"
            )));
        }
        let pre = engine.linker().instantiate_pre(&component).map_err(|e| {
            invalid(format!(
                "needs imports Weir does not provide ({e:#}); a stage may import `weir:stage/log` and WASI 0.2 only"
            ))
        })?;
        let stage_indices = StageIndices::new(&pre)
            .map_err(|e| invalid(format!("has a malformed `{STAGE_EXPORT}` export: {e:#}")))?;
        let batch_indices =
            if exports.iter().any(|e| e == BATCH_EXPORT) {
                Some(BatchIndices::new(&pre).map_err(|e| {
                    invalid(format!("has a malformed `{BATCH_EXPORT}` export: {e:#}"))
                })?)
            } else {
                None
            };
        let contract = if batch_indices.is_some() {
            Contract::Batch
        } else {
            Contract::Typed
        };
        Ok(Plugin {
            path: path.to_owned(),
            hash,
            contract,
            cache,
            load_time,
            pre,
            stage_indices,
            batch_indices,
            imports,
            exports,
        })
    }

    /// The first 12 hex digits of the hash, as shown in logs.
    pub fn short_hash(&self) -> &str {
        &self.hash[..12]
    }
}

fn interface_names(engine: &WeirEngine, component: &Component) -> (Vec<String>, Vec<String>) {
    let ty = component.component_type();
    let imports = ty
        .imports(engine.engine())
        .map(|(n, _)| n.to_owned())
        .collect();
    let exports = ty
        .exports(engine.engine())
        .map(|(n, _)| n.to_owned())
        .collect();
    (imports, exports)
}
