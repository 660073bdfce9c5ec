//! The wasm engine: one wasmtime `Engine` (pooling allocator, epoch interruption), the linker
//! with the host imports, the compiled-component cache, plugins and stage instances.

pub mod bindings;
mod cache;
mod instance;
pub mod kv;
mod plugin;
mod state;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy,
};

pub use cache::{content_hash, default_dir as default_cache_dir, CacheOutcome};
pub use instance::{InstanceError, SandboxStats, StageInstance, StageSpec, Verdict};
pub use plugin::{Contract, Plugin, PluginError};
pub use state::{MemoryLimitExceeded, StageState};

/// How often the epoch advances; deadlines are whole ticks of this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The environment variable that turns on a profiler for stage code: `perfmap` (writes
/// `/tmp/perf-PID.map`, so `perf report` names the guest's functions) or `jitdump` (for
/// `perf inject --jit`). Unset or anything else: no profiler.
pub const PROFILER_ENV: &str = "WEIR_WASM_PROFILER";

/// The profiler named by [`PROFILER_ENV`].
fn profiler_from_env() -> ProfilingStrategy {
    match std::env::var(PROFILER_ENV).as_deref() {
        Ok("perfmap") => ProfilingStrategy::PerfMap,
        Ok("jitdump") => ProfilingStrategy::JitDump,
        _ => ProfilingStrategy::None,
    }
}

/// The engine shared by every stage of a process.
#[derive(Clone)]
pub struct WeirEngine {
    engine: Engine,
    linker: Arc<Linker<StageState>>,
    cache_dir: Option<PathBuf>,
}

/// The engine could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the wasm engine: {0}")]
pub struct EngineError(String);

impl EngineError {
    /// An engine error with this text.
    pub fn new(text: String) -> Self {
        EngineError(text)
    }
}

impl WeirEngine {
    /// An engine whose instances may hold up to `max_memory` bytes of linear memory each,
    /// caching compiled components in `cache_dir`.
    pub fn new(max_memory: usize, cache_dir: Option<PathBuf>) -> Result<Self, EngineError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(256)
            .total_core_instances(2048)
            .total_memories(512)
            .total_tables(512)
            .max_memories_per_component(64)
            .max_tables_per_component(64)
            .max_memory_size(max_memory.max(16 << 20))
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20);
        let mut cfg = Config::new();
        cfg.wasm_component_model(true)
            .epoch_interruption(true)
            .profiler(profiler_from_env())
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&cfg).map_err(|e| EngineError(e.to_string()))?;
        let mut linker = Linker::<StageState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| EngineError(e.to_string()))?;
        bindings::weir::stage::log::add_to_linker::<StageState, HasSelf<StageState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| EngineError(e.to_string()))?;
        bindings::weir::stage::types::add_to_linker::<StageState, HasSelf<StageState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| EngineError(e.to_string()))?;
        kv::add_to_linker(&mut linker).map_err(|e| EngineError(e.to_string()))?;
        start_ticker(&engine);
        Ok(WeirEngine {
            engine,
            linker: Arc::new(linker),
            cache_dir,
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Loads (from cache or by compiling) the component at `path` for stage `stage`.
    pub fn load_plugin(&self, stage: &str, path: &Path) -> Result<Plugin, PluginError> {
        Plugin::load(self, stage, path)
    }

    pub(crate) fn linker(&self) -> &Linker<StageState> {
        &self.linker
    }

    pub(crate) fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }
}

/// Advances the epoch every [`EPOCH_TICK`] while the engine lives.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("weir-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(e) => e.increment_epoch(),
                None => return,
            }
        })
        .expect("spawning the epoch ticker");
}
