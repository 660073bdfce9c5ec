//! A running pipeline: the threads, the batch loop, signals and the run report.
//!
//! ```text
//! main ── loads plugins, instantiates, starts threads, waits, writes the report
//!  ├─ weir-source   reads JSONL into a bounded queue (blocks when full: backpressure)
//!  ├─ weir-driver   queue → batch (count, bytes, linger) → swap check → chain → sinks
//!  ├─ weir-reload   file watcher + SIGHUP → compile, check, publish new plugin versions
//!  ├─ weir-signals  SIGINT/SIGTERM → stop reading, drain; SIGHUP → reload
//!  └─ weir-epoch    advances the wasm epoch (stage deadlines)
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::chain::{Chain, Failure, Rejected};
use crate::config::{BatchConfig, PipelineConfig};
use crate::engine::{InstanceError, PluginError, StageSpec, WeirEngine};
use crate::message::{Envelope, Lane};
use crate::reload::{ReloadRequest, Reloader, StageSlot};
use crate::report::{ExitState, RunReport, StageReport};
use crate::sink::LineSink;
use crate::source::{self, SourceItem};
use crate::watermark::Watermark;

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
    Source(#[from] source::SourceError),
    /// A sink cannot be opened.
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// A Kafka client could not be created, or the pipeline shape is not supported.
    #[error("{0}")]
    Kafka(String),
    /// The metrics listener could not start.
    #[error("{0}")]
    Metrics(String),
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
    let mut slots = Vec::new();
    for s in &cfg.stages {
        let plugin = engine.load_plugin(&s.name, &s.plugin)?;
        tracing::info!(stage = %s.name, plugin = plugin.short_hash(), contract = ?plugin.contract,
            cache = ?plugin.cache, load_ms = plugin.load_time.as_millis() as u64, "plugin loaded");
        slots.push(Arc::new(StageSlot::new(
            Arc::new(StageSpec::from(s)),
            s.plugin.clone(),
            Arc::new(plugin),
        )));
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

/// Options that are not in the YAML.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where to write the JSON report (overrides `runtime.report`).
    pub report: Option<PathBuf>,
}

/// Runs the pipeline to the end of its source, a signal, or a failure.
pub fn run(cfg: &PipelineConfig, opts: &RunOptions) -> Result<RunReport, StartError> {
    if matches!(cfg.source, crate::config::SourceConfig::Kafka(_)) {
        return crate::kafka::runtime::run(cfg, opts);
    }
    for (what, s) in [("sink", Some(&cfg.sink)), ("reject", cfg.reject.as_ref())] {
        if matches!(s, Some(crate::config::SinkConfig::Kafka(_))) {
            return Err(StartError::Kafka(format!(
                "`{what}: kafka` needs a Kafka source (a local source's offsets cannot wait for broker acknowledgements yet)"
            )));
        }
    }
    let Started {
        started,
        stop,
        reload_channel,
        signals,
        prepared: Prepared {
            engine,
            slots,
            chain,
        },
    } = start(cfg)?;
    let mut sink = LineSink::open(&cfg.sink)?;
    let mut rejects = match &cfg.reject {
        Some(r) => LineSink::open(r)?,
        None => LineSink::discard(),
    };
    let reloader = Reloader::start(
        engine.clone(),
        slots.clone(),
        cfg.runtime.watch_plugins,
        reload_channel,
        None,
    );
    let lane = source::lane(&cfg.source);
    let (tx, rx) = crossbeam_channel::bounded(cfg.batch.max_messages.saturating_mul(4).max(64));
    source::start(&cfg.source, tx, stop.clone())?;
    tracing::info!(pipeline = %cfg.name, stages = slots.len(), "pipeline running");

    let batch_cfg = cfg.batch.clone();
    let driver_stop = stop.clone();
    let driver = std::thread::Builder::new()
        .name("weir-driver".into())
        .spawn(move || {
            let mut d = Driver {
                chain,
                lane,
                sink: &mut sink,
                rejects: &mut rejects,
                stats: DriverStats::default(),
                watermark: Watermark::new(0, 0),
                offsets: Vec::new(),
            };
            let result = d.run(&rx, &batch_cfg, &driver_stop);
            let stats = std::mem::take(&mut d.stats);
            let done = d.watermark.committable();
            let chain_stats = d.chain.stats();
            let flushed = sink.flush().and_then(|()| rejects.flush());
            DriverOutcome {
                result,
                flushed,
                stats,
                done,
                chain_stats,
                written: sink.written,
                rejected: rejects.written,
            }
        })
        .expect("spawning the driver");

    // Wait for the driver; after a stop signal, give the drain `drain_timeout`.
    wait_bounded(
        &driver,
        &stop,
        cfg.runtime.drain_timeout,
        "stopping anyway (nothing past the last handled message counts as done)",
    );
    let DriverOutcome {
        result,
        flushed,
        stats,
        done,
        chain_stats,
        written,
        rejected,
    } = driver.join().expect("driver thread panicked");
    drop(signals);
    let reloads = reloader.finish();

    let interrupted = stop.load(Ordering::Relaxed);
    let (mut state, failure, mut error) = match result {
        Ok(None) if interrupted => (ExitState::Interrupted, None, None),
        Ok(None) => (ExitState::Completed, None, None),
        Ok(Some(f)) => (ExitState::Failed, Some(f), None),
        Err(e) => (ExitState::Failed, None, Some(e)),
    };
    if let Err(e) = flushed {
        state = ExitState::Failed;
        error = Some(e.to_string());
    }
    let report = RunReport {
        pipeline: cfg.name.clone(),
        state,
        duration_ms: started.elapsed().as_millis() as u64,
        read: stats.read,
        malformed: stats.malformed,
        written,
        rejected,
        done_through_offset: (done > 0).then(|| done - 1),
        stages: chain_stats
            .into_iter()
            .map(|st| StageReport {
                name: st.name.to_string(),
                plugin: st.plugin,
                contract: if st.batch { "batch" } else { "typed" },
                counts: st.counts,
                sandbox: st.sandbox,
            })
            .collect(),
        reloads,
        failure,
        error,
        kafka: None,
    };
    if let Some(path) = opts.report.as_ref().or(cfg.runtime.report.as_ref()) {
        report.write(path);
    }
    Ok(report)
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
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|e| {
            StartError::Engine(crate::engine::EngineError::new(format!(
                "cannot install signal handlers: {e}"
            )))
        })?;
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

/// What the driver thread hands back when it ends.
struct DriverOutcome {
    result: Result<Option<Failure>, String>,
    flushed: Result<(), crate::sink::SinkError>,
    stats: DriverStats,
    /// The watermark: every offset below it was fully handled.
    done: i64,
    chain_stats: Vec<crate::chain::StageStats>,
    written: u64,
    rejected: u64,
}

#[derive(Default)]
struct DriverStats {
    read: u64,
    malformed: u64,
}

struct Driver<'s> {
    chain: Chain,
    lane: Lane,
    sink: &'s mut LineSink,
    rejects: &'s mut LineSink,
    stats: DriverStats,
    /// What is fully handled: the same tracker the Kafka commits will use.
    watermark: Watermark,
    /// The source offsets of the batch in the chain (a reused buffer).
    offsets: Vec<i64>,
}

impl Driver<'_> {
    /// The batch loop. `Ok(Some)` when a stage failed; `Err` when a sink, the source or an
    /// instance rebuild broke.
    fn run(
        &mut self,
        rx: &Receiver<SourceItem>,
        cfg: &BatchConfig,
        stop: &AtomicBool,
    ) -> Result<Option<Failure>, String> {
        let mut batch: Vec<Envelope> = Vec::with_capacity(cfg.max_messages);
        let mut malformed: Vec<Rejected> = Vec::new();
        loop {
            let ended = self.fill(rx, cfg, stop, &mut batch, &mut malformed)?;
            if !batch.is_empty() {
                self.offsets.clear();
                self.offsets.extend(batch.iter().map(|e| e.offset));
                self.chain.swap_if_published();
                let out = self
                    .chain
                    .run(&self.lane, std::mem::take(&mut batch))
                    .map_err(|e| e.to_string())?;
                self.sink.write(&out.outputs).map_err(|e| e.to_string())?;
                self.rejects
                    .write_rejects(&self.lane, &out.rejects)
                    .map_err(|e| e.to_string())?;
                // The local sinks acknowledge by returning: written, rejected or filtered is
                // done. Nothing at or after a failed message is.
                let fail_at = out.failure.as_ref().map_or(i64::MAX, |f| f.offset);
                let g = self.watermark.generation();
                for &o in &self.offsets {
                    let r = match o.cmp(&fail_at) {
                        std::cmp::Ordering::Less => self.watermark.complete(g, o),
                        std::cmp::Ordering::Equal => self.watermark.fail(g, o),
                        std::cmp::Ordering::Greater => Ok(()),
                    };
                    r.map_err(|e| e.to_string())?;
                }
                if let Some(f) = out.failure {
                    tracing::error!(stage = %f.stage, offset = f.offset, "stage failed: {}; stopping", f.reason);
                    return Ok(Some(f));
                }
            }
            if !malformed.is_empty() {
                self.rejects
                    .write_rejects(&self.lane, &malformed)
                    .map_err(|e| e.to_string())?;
                let g = self.watermark.generation();
                for r in malformed.drain(..) {
                    self.watermark
                        .complete(g, r.env.offset)
                        .map_err(|e| e.to_string())?;
                }
            }
            self.sink.flush().map_err(|e| e.to_string())?;
            self.rejects.flush().map_err(|e| e.to_string())?;
            if ended {
                return Ok(None);
            }
        }
    }

    /// Fills `batch` up to count/bytes limits or the linger time. True at end of input.
    fn fill(
        &mut self,
        rx: &Receiver<SourceItem>,
        cfg: &BatchConfig,
        stop: &AtomicBool,
        batch: &mut Vec<Envelope>,
        malformed: &mut Vec<Rejected>,
    ) -> Result<bool, String> {
        let mut bytes = 0usize;
        let mut deadline: Option<Instant> = None;
        while batch.len() < cfg.max_messages && bytes < cfg.max_bytes.bytes() {
            let item = match deadline {
                None => match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(item) => item,
                    // Stopping: the reader may sit in a blocking read (stdin); what it queued is drained.
                    Err(RecvTimeoutError::Timeout) if stop.load(Ordering::Relaxed) => {
                        return Ok(true)
                    }
                    Err(RecvTimeoutError::Timeout) if batch.is_empty() && malformed.is_empty() => {
                        continue
                    }
                    Err(RecvTimeoutError::Timeout) => return Ok(false),
                    Err(RecvTimeoutError::Disconnected) => return Ok(true),
                },
                Some(d) => match rx.recv_deadline(d) {
                    Ok(item) => item,
                    Err(RecvTimeoutError::Timeout) => return Ok(false),
                    Err(RecvTimeoutError::Disconnected) => return Ok(true),
                },
            };
            deadline.get_or_insert_with(|| Instant::now() + cfg.linger);
            match item {
                SourceItem::Message(env) => {
                    self.stats.read += 1;
                    self.watermark
                        .track(env.offset)
                        .map_err(|e| e.to_string())?;
                    bytes += env.msg.byte_len();
                    batch.push(env);
                }
                SourceItem::Malformed {
                    offset,
                    reason,
                    line,
                } => {
                    self.stats.malformed += 1;
                    self.watermark.track(offset).map_err(|e| e.to_string())?;
                    malformed.push(Rejected {
                        env: Envelope {
                            offset,
                            msg: source::malformed_message(line),
                        },
                        stage: "source".into(),
                        plugin: String::new(),
                        reason,
                    });
                    // Keep order with the reject path simple: a malformed line ends the batch.
                    return Ok(false);
                }
                SourceItem::Error(e) => return Err(e),
            }
        }
        Ok(false)
    }
}
