//! Start-up: signal handlers first, then the engine, every plugin and the first chain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::chain::Chain;
use crate::config::PipelineConfig;
use crate::engine::{InstanceError, PluginError, StageSpec, WeirEngine};
use crate::reload::ReloadRequest;
use crate::rollout::{RolloutError, StageSlot};

/// The pipeline could not start (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The engine could not be built.
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    /// A plugin is missing or not a stage.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A stage would not instantiate or `init`.
    #[error(transparent)]
    Instance(#[from] InstanceError),
    /// The source cannot be opened.
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    /// A sink cannot be opened.
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// The metrics listener could not start.
    #[error(transparent)]
    Metrics(#[from] crate::admin::ListenError),
    /// `runtime.admin_token_env` names a variable that is not set.
    #[error("runtime.admin_token_env: environment variable `{0}` is not set (or empty); the admin API needs its token")]
    AdminToken(String),
    /// A stage's `rollout.candidate` does not load, instantiate or `init`.
    #[error("stage `{stage}`: rollout.candidate refused: {reason}")]
    Candidate {
        /// The stage.
        stage: String,
        /// Why.
        reason: String,
    },
    /// The signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// A stage's state store cannot be opened (not writable, locked by another process).
    #[error(transparent)]
    State(#[from] crate::state::StoreError),
    /// Stateful stages' changelog topics cannot be created or read.
    #[error("state: {0}")]
    Changelog(String),
    /// A schema-registry codec cannot be set up (a registry that cannot be reached, a
    /// subject without the schema, an unreadable schema file).
    #[error("{0}")]
    Schema(String),
    /// A start-up check against the Kafka cluster failed (before any stage was called).
    #[error("start-up check: {0}")]
    Kafka(crate::kafka::fatal::ClientFailure),
}

/// Everything loaded and instantiated, ready to run (also what `weir check` builds).
pub struct Prepared {
    /// The engine.
    pub engine: WeirEngine,
    /// One slot per stage, in order.
    pub slots: Vec<Arc<StageSlot>>,
    /// The chain for the driver thread.
    pub chain: Chain,
}

/// The engine every stage fits in.
pub fn engine_for(cfg: &PipelineConfig) -> Result<WeirEngine, StartError> {
    let max_memory = cfg
        .stages
        .iter()
        .map(|s| s.limits.memory.bytes())
        .max()
        .unwrap_or(0);
    let cache = cfg
        .runtime
        .cache_dir
        .clone()
        .or_else(crate::engine::default_cache_dir);
    Ok(WeirEngine::new(max_memory, cache)?)
}

/// Loads every plugin and instantiates the chain (calling each stage's `init`).
pub fn prepare(cfg: &PipelineConfig) -> Result<Prepared, StartError> {
    let engine = engine_for(cfg)?;
    let state = crate::state::StateRegistry::open(cfg)?;
    let mut slots = Vec::new();
    for s in &cfg.stages {
        let plugin = engine.load_plugin(&s.name, &s.plugin)?;
        tracing::info!(stage = %s.name, plugin = plugin.short_hash(), contract = ?plugin.contract,
            cache = ?plugin.cache, load_ms = plugin.load_time.as_millis() as u64, "plugin loaded");
        let mut spec = StageSpec::from(s);
        spec.state = state.as_ref().and_then(|r| r.stage(&s.name));
        let slot = Arc::new(StageSlot::new(
            Arc::new(spec),
            s.plugin.clone(),
            s.rollout.clone(),
            Arc::new(plugin),
        ));
        if let Some(path) = &s.rollout.candidate {
            let candidate =
                engine
                    .load_plugin(&s.name, path)
                    .map_err(|e| StartError::Candidate {
                        stage: s.name.clone(),
                        reason: e.to_string(),
                    })?;
            let candidate = Arc::new(candidate);
            let refused = |reason: String| StartError::Candidate {
                stage: s.name.clone(),
                reason,
            };
            crate::engine::StageInstance::new(&engine, slot.spec.clone(), candidate.clone())
                .map_err(|e| refused(e.to_string()))?;
            slot.start_rollout(candidate, s.rollout.clone(), "start")
                .map_err(|e: RolloutError| refused(e.to_string()))?;
        }
        slots.push(slot);
    }
    let chain = Chain::new(&engine, &slots)?;
    Ok(Prepared {
        engine,
        slots,
        chain,
    })
}

/// What every run starts with.
pub(crate) struct Started {
    /// When the run started.
    pub started: Instant,
    /// Set by SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// Reload requests (SIGHUP sends on it; the reloader serves it).
    pub reload_channel: (
        crossbeam_channel::Sender<ReloadRequest>,
        Receiver<ReloadRequest>,
    ),
    /// The signal thread, closed on drop.
    pub signals: SignalGuard,
    /// Engine, slots and the first chain.
    pub prepared: Prepared,
}

/// Installs the signal handlers first (a SIGHUP or SIGTERM during start-up must not kill the
/// process), then loads and instantiates the chain.
pub(crate) fn start(cfg: &PipelineConfig) -> Result<Started, StartError> {
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let reload_channel = crossbeam_channel::unbounded();
    let signals = start_signals(stop.clone(), reload_channel.0.clone())?;
    let prepared = prepare(cfg)?;
    Ok(Started {
        started,
        stop,
        reload_channel,
        signals,
        prepared,
    })
}

/// Waits for `handle` to finish. Once `stop` is set it gets `limit`; past that the process
/// exits 1, logging `why`.
pub(crate) fn wait_bounded<T>(
    handle: &std::thread::JoinHandle<T>,
    stop: &AtomicBool,
    limit: Duration,
    why: &str,
) {
    let mut stop_seen: Option<Instant> = None;
    while !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(5));
        if stop.load(Ordering::Relaxed) {
            let t = *stop_seen.get_or_insert_with(Instant::now);
            if t.elapsed() > limit {
                tracing::error!(
                    "did not stop within {}; {why}",
                    humantime::format_duration(limit)
                );
                std::process::exit(1);
            }
        }
    }
}

pub(crate) struct SignalGuard(signal_hook::iterator::Handle);

impl Drop for SignalGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// SIGINT/SIGTERM set `stop` (a second one exits at once); SIGHUP reloads every plugin.
pub(crate) fn start_signals(
    stop: Arc<AtomicBool>,
    reload: crossbeam_channel::Sender<ReloadRequest>,
) -> Result<SignalGuard, StartError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(StartError::Signals)?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                match sig {
                    SIGHUP => {
                        tracing::info!("SIGHUP: reloading every plugin");
                        let _ = reload.send(ReloadRequest::All);
                    }
                    _ if stop.swap(true, Ordering::SeqCst) => {
                        tracing::warn!("second stop signal: exiting without draining");
                        std::process::exit(130);
                    }
                    _ => tracing::info!("stop signal: draining what was read, then stopping"),
                }
            }
        })
        .expect("spawning the signal thread");
    Ok(SignalGuard(handle))
}
