//! The one runtime: any [`Source`] through the chain to any [`Sink`], with any reject path.
//!
//! ```text
//! main ──────────── start-up (signals, engine, plugins), builds the parts, waits, reports
//!  ├─ weir-controller  owns the source: poll → lanes (bounded, one per partition), rebalances
//!  │                   (revoke = drain barrier), completions → watermarks, hold/pause,
//!  │                   commit tick, end of input, shutdown
//!  ├─ weir-driver-N    own lanes + own stage instances: lane → batch → chain → sinks
//!  ├─ sink threads     (Kafka: librdkafka's delivery reports settle per-offset tickets)
//!  ├─ weir-source      (JSONL: the line reader)
//!  ├─ weir-reload      hot swap and rollouts: watch plugin files, SIGHUP, admin requests
//!  ├─ weir-metrics     /metrics, /healthz, /readyz, /stages (when `runtime.metrics` is set)
//!  └─ weir-progress    a progress line on a terminal
//! ```
//!
//! An offset is done when everything it became is durable (acknowledged by the broker, or
//! written and flushed), or it became nothing. The controller commits, per partition, the
//! offset below which everything is done ([`watermark`]). Every assignment of a partition
//! gets a new generation; a completion from an older one is ignored.

mod controller;
mod deliver;
mod driver;
mod flow;
mod lanes;
mod logged;
mod progress;
mod startup;
pub mod watermark;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::controller::ControllerOutcome;
pub use self::driver::{DriverError, TxnSetup, OPENS_AT_ONCE};
pub use self::lanes::{ControllerOptions, RuntimeError};
pub use self::startup::{engine_for, prepare, Prepared, StartError};

use self::controller::Controller;
use self::deliver::Outputs;
use self::driver::DriverSetup;
use self::lanes::Core;
use self::startup::{start, wait_bounded, Started};
use crate::chain::{Chain, StageStats};
use crate::config::{
    BatchConfig, Delivery, KafkaSink as KafkaSinkConfig, KafkaSource as KafkaSourceConfig,
    PipelineConfig, SinkConfig, SourceConfig,
};
use crate::metrics::Metrics;
use crate::reload::Reloader;
use crate::report::{ExitState, RunReport, StageReport, TransactionCounts};
use crate::sink::transactional::KafkaTransactions;
use crate::sink::{line::LineSink, Changelog, Role, Sink};
use crate::source::kafka::KafkaSource;
use crate::source::Source;

/// Options that are not in the YAML.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where to write the JSON report (overrides `runtime.report`).
    pub report: Option<PathBuf>,
    /// Show a progress line (only ever on a terminal).
    pub progress: bool,
}

/// What a run is made of: what [`run`] builds from the YAML, or what a test builds itself.
pub struct Parts {
    /// Where messages come from.
    pub source: Box<dyn Source>,
    /// Where messages that pass the chain go.
    pub sink: Arc<dyn Sink>,
    /// Where rejected messages go.
    pub rejects: Arc<dyn Sink>,
    /// One chain per driver thread.
    pub chains: Vec<Chain>,
    /// The core each driver is pinned to (`None`: not pinned); as many as `chains`.
    pub cores: Vec<Option<usize>>,
    /// Batch limits.
    pub batch: BatchConfig,
    /// Controller knobs.
    pub options: ControllerOptions,
    /// Where everything reports.
    pub metrics: Arc<Metrics>,
    /// Set to stop (drain what was read, commit, end).
    pub stop: Arc<AtomicBool>,
    /// Exactly-once delivery: per-partition transactions the drivers commit (the sinks put
    /// each lane's records in its partition's transaction); `None`: at-least-once.
    pub transactions: Option<TxnSetup>,
    /// Where stateful stages' writes are made durable and restored from (Kafka sources);
    /// `None`: state is local (the store under `runtime.state_dir` is all there is).
    pub changelog: Option<Arc<dyn Changelog>>,
}

/// What a run did.
#[derive(Debug)]
pub struct RunOutcome {
    /// The controller's account.
    pub controller: ControllerOutcome,
    /// Per stage, summed over the drivers.
    pub stages: Vec<StageReport>,
    /// Records the sink delivered.
    pub written: u64,
    /// Records the reject path delivered.
    pub rejected: u64,
}

/// Runs `parts` until the source ends (`stop_at_end`), `stop` is set, a stage fails or
/// something breaks.
pub fn run_parts(parts: Parts) -> RunOutcome {
    let Parts {
        source,
        sink,
        rejects,
        chains,
        cores,
        batch,
        options,
        metrics,
        stop,
        transactions,
        changelog,
    } = parts;
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let outputs = Outputs {
        sink: sink.clone(),
        rejects: rejects.clone(),
        done: done_tx,
        changelog: changelog.clone(),
    };
    let keep_originals = rejects.acknowledges_later();
    let state = chains
        .first()
        .map(Chain::state)
        .filter(|s| !s.is_empty())
        .map(Arc::new);
    if let (Some(s), Some(log)) = (&state, &changelog) {
        // The stores are caches of their changelogs (synced at close, not per commit; the
        // checkpoints follow the acknowledged records), and the changelog gets each key's
        // last write per commit: in the transaction (exactly-once) or just before the
        // offsets commit (at-least-once, `logged`).
        s.set_cache_of_changelog(log.acks());
    }
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let mut controls = Vec::new();
    let mut drivers = Vec::new();
    let cores = cores.into_iter().chain(std::iter::repeat(None));
    for (index, (chain, core)) in chains.into_iter().zip(cores).enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        controls.push(tx);
        drivers.push(driver::spawn(DriverSetup {
            index,
            keep_originals: keep_originals && chain.len() > 1,
            chain,
            outputs: outputs.clone(),
            batch: batch.clone(),
            control: rx,
            events: events_tx.clone(),
            metrics: metrics.clone(),
            core,
            transactions: transactions.clone(),
            state: state.clone(),
        }));
    }
    drop((outputs, events_tx));
    let backstop = options.drain_timeout + Duration::from_secs(10);
    let controller = Controller {
        source,
        core: Core::new(controls, done_rx, options, metrics)
            .with_state(state.clone())
            .with_changelog(
                changelog
                    .clone()
                    .filter(|_| transactions.is_none() && state.is_some()),
            ),
        events: events_rx,
        sinks: vec![sink.clone(), rejects.clone()],
        stop: stop.clone(),
        fenced: std::collections::HashMap::new(),
        shutting_down: false,
    };
    let ctl = std::thread::Builder::new()
        .name("weir-controller".into())
        .spawn(move || controller.run())
        .expect("spawning the controller");
    // The controller bounds its own drain; this is the backstop if a client hangs.
    wait_bounded(
        &ctl,
        &stop,
        backstop,
        "exiting (nothing uncommitted is lost: it replays)",
    );
    let controller = ctl.join().expect("controller thread panicked");
    let per_driver: Vec<Vec<StageStats>> = drivers
        .into_iter()
        .map(|d| d.join().expect("driver thread panicked"))
        .collect();
    RunOutcome {
        controller,
        stages: merge(per_driver),
        written: sink.delivered(),
        rejected: rejects.delivered(),
    }
}

/// Stateful stages on a Kafka source keep their changelogs on its cluster (created when
/// missing); on a local source their state is the store alone.
fn changelog_for(
    cfg: &PipelineConfig,
    chains: &[Chain],
    txns: Option<Arc<KafkaTransactions>>,
    (fatal, metrics): (Arc<crate::kafka::fatal::FatalSlot>, &Metrics),
) -> Result<Option<Arc<dyn Changelog>>, StartError> {
    let crate::config::SourceConfig::Kafka(src) = &cfg.source else {
        return Ok(None);
    };
    let Some(state) = chains.first().map(Chain::state).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let topics = state.changelog_topics();
    crate::sink::changelog::KafkaChangelog::ensure_topics(src, &topics)
        .map_err(StartError::Changelog)?;
    let queued = crate::kafka::queued::Queued::of(metrics, "changelog");
    let c = crate::sink::changelog::KafkaChangelog::open(src, txns, fatal, Some(queued))?;
    Ok(Some(Arc::new(c)))
}

/// The cores drivers are pinned to.
fn cores(cfg: &PipelineConfig) -> Vec<Option<usize>> {
    let n = cfg.runtime.drivers;
    if let Some(c) = &cfg.runtime.cores {
        return c.iter().take(n).map(|&c| Some(c)).collect();
    }
    if !cfg.runtime.pin {
        return vec![None; n];
    }
    let ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    (0..n)
        .map(|i| (!ids.is_empty()).then(|| ids[i % ids.len()]))
        .collect()
}

/// The controller knobs a pipeline YAML sets.
pub fn controller_options(cfg: &PipelineConfig) -> ControllerOptions {
    let kafka = match &cfg.source {
        crate::config::SourceConfig::Kafka(k) => Some(k),
        _ => None,
    };
    ControllerOptions {
        lane_capacity: cfg.batch.max_messages.saturating_mul(4).max(64),
        max_in_flight: cfg.runtime.max_in_flight.bytes(),
        hold: Duration::from_millis(500),
        revoke_timeout: kafka.map_or(Duration::from_secs(10), |k| k.revoke_timeout),
        commit_interval: kafka.map_or(Duration::from_millis(500), |k| k.commit_interval),
        stop_at_end: cfg.source.stops_at_end(),
        drain_timeout: cfg.runtime.drain_timeout,
        transactional: cfg.delivery == Delivery::ExactlyOnce,
        fenced_hold: kafka.map_or(crate::config::DEFAULT_SESSION, |k| k.session_timeout())
            + Duration::from_secs(5),
    }
}

/// Runs the pipeline a YAML describes until its source ends (`stop_at_end`), a signal, or a
/// failure. A pipeline that does not start (a stage's `init` refused its config, a plugin is
/// missing, the cluster refused the credentials…) still writes its report, with the error.
pub fn run(cfg: &PipelineConfig, opts: &RunOptions) -> Result<RunReport, StartError> {
    let started = Instant::now();
    let result = start_and_run(cfg, opts);
    if let Err(e) = &result {
        if let Some(path) = opts.report.as_ref().or(cfg.runtime.report.as_ref()) {
            let kind = match e {
                StartError::Kafka(f) => Some(f.kind),
                _ => None,
            };
            RunReport::not_started(&cfg.name, started.elapsed(), e.to_string(), kind).write(path);
        }
    }
    result
}

fn start_and_run(cfg: &PipelineConfig, opts: &RunOptions) -> Result<RunReport, StartError> {
    // The cluster first: a wrong password or a missing topic is an error before any stage
    // is loaded or called.
    if crate::kafka::preflight::applies(cfg) {
        let mode = crate::kafka::preflight::Mode::Run;
        crate::kafka::preflight::run(cfg, cfg.runtime.connect_timeout, mode, &mut |l| {
            tracing::info!("start-up check: {l}");
        })
        .map_err(StartError::Kafka)?;
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
    let mut chains = vec![chain];
    for _ in 1..cfg.runtime.drivers {
        chains.push(Chain::new(&engine, &slots)?);
    }
    let metrics = Metrics::new();
    let codecs = crate::schema::Codecs::from_config(cfg, &metrics).map_err(StartError::Schema)?;
    let chains: Vec<Chain> = chains
        .into_iter()
        .map(|c| c.with_codecs(codecs.clone()))
        .collect();
    crate::rollout::publish_plugin_info(&slots, &metrics);
    for s in &slots {
        s.attach_metrics(metrics.clone());
    }
    if let Some(addr) = &cfg.runtime.metrics {
        let token = match &cfg.runtime.admin_token_env {
            Some(name) => Some(
                std::env::var(name)
                    .ok()
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| StartError::AdminToken(name.clone()))?,
            ),
            None => None,
        };
        crate::admin::serve(
            addr,
            crate::admin::Admin {
                metrics: metrics.clone(),
                slots: slots.clone(),
                reload: reload_channel.0.clone(),
                token,
            },
        )?;
    }
    let fatal = Arc::new(crate::kafka::fatal::FatalSlot::default());
    let fatal_for_changelog = fatal.clone();
    let mut txns_for_changelog = None;
    let (source, sink, rejects, transactions) = match exactly_once(cfg) {
        Some((k, sink, dlq)) => {
            let source = KafkaSource::open(k, metrics.clone(), fatal.clone())?;
            let txns = Arc::new(KafkaTransactions::new(
                sink,
                dlq,
                &k.group,
                source.group_slot(),
                &metrics,
                fatal.clone(),
            ));
            let rejects: Arc<dyn Sink> = match dlq {
                Some(_) => txns.sink(Role::Rejects),
                None => Arc::new(LineSink::discard()),
            };
            txns_for_changelog = Some(txns.clone());
            let setup = TxnSetup {
                api: txns.clone(),
                interval: k.commit_interval,
                max_bytes: k.transaction_max_bytes.bytes(),
            };
            let source: Box<dyn Source> = Box::new(source);
            let sink: Arc<dyn Sink> = txns.sink(Role::Sink);
            (source, sink, rejects, Some(setup))
        }
        None => {
            let sink = cfg.sink.build(Role::Sink, &metrics, fatal.clone())?;
            let rejects: Arc<dyn Sink> = match &cfg.reject {
                Some(r) => r.build(Role::Rejects, &metrics, fatal.clone())?,
                None => Arc::new(LineSink::discard()),
            };
            (
                cfg.source.build(metrics.clone(), fatal)?,
                sink,
                rejects,
                None,
            )
        }
    };
    let changelog = changelog_for(
        cfg,
        &chains,
        txns_for_changelog,
        (fatal_for_changelog, &metrics),
    )?;
    let reloader = Reloader::start(
        engine.clone(),
        slots.clone(),
        cfg.runtime.watch_plugins,
        reload_channel,
        metrics.clone(),
    );
    tracing::info!(pipeline = %cfg.name, stages = slots.len(), drivers = chains.len(),
        source = %cfg.source.describe(), "pipeline running");
    let progress = opts
        .progress
        .then(|| progress::Progress::start(metrics.clone(), sink.clone(), rejects.clone()))
        .flatten();
    let outcome = run_parts(Parts {
        source,
        sink,
        rejects,
        chains,
        cores: cores(cfg),
        batch: cfg.batch.clone(),
        options: controller_options(cfg),
        metrics: metrics.clone(),
        stop: stop.clone(),
        transactions,
        changelog,
    });
    drop(progress);
    drop(signals);
    let reloads = reloader.finish();
    let c = &outcome.controller;
    let state = if c.failure.is_some() || c.error.is_some() {
        ExitState::Failed
    } else if stop.load(Ordering::Relaxed) {
        ExitState::Interrupted
    } else {
        ExitState::Completed
    };
    let report = RunReport {
        pipeline: cfg.name.clone(),
        state,
        duration_ms: started.elapsed().as_millis() as u64,
        read: c.read,
        malformed: c.malformed,
        written: outcome.written,
        rejected: outcome.rejected,
        committed: c.committed.clone(),
        rebalances: matches!(cfg.source, SourceConfig::Kafka(_)).then_some(c.rebalances),
        transactions: (cfg.delivery == Delivery::ExactlyOnce).then(|| TransactionCounts {
            committed: metrics.transactions.with_label_values(&["committed"]).get(),
            aborted: metrics.transactions.with_label_values(&["aborted"]).get(),
        }),
        stale_completions: c.stale,
        reached_end: c.reached_end,
        consuming_ms: c.consuming.as_secs_f64() * 1e3,
        consuming_cpu_ms: c.consuming_cpu.as_secs_f64() * 1e3,
        batches: metrics.batch_size.get_sample_count(),
        stages: outcome.stages,
        reloads,
        rollouts: crate::rollout::unfinished(&slots),
        failure: outcome.controller.failure,
        error_kind: outcome
            .controller
            .error
            .as_ref()
            .and_then(|e| e.client_failure())
            .map(|f| f.kind),
        error: outcome.controller.error.map(|e| e.to_string()),
    };
    if let Some(path) = opts.report.as_ref().or(cfg.runtime.report.as_ref()) {
        report.write(path);
    }
    Ok(report)
}

/// With `delivery: exactly-once` (checked when the YAML was loaded): the Kafka source, sink
/// and dead-letter configs.
fn exactly_once(
    cfg: &PipelineConfig,
) -> Option<(
    &KafkaSourceConfig,
    &KafkaSinkConfig,
    Option<&KafkaSinkConfig>,
)> {
    if cfg.delivery != Delivery::ExactlyOnce {
        return None;
    }
    let (SourceConfig::Kafka(k), SinkConfig::Kafka(sink)) = (&cfg.source, &cfg.sink) else {
        return None;
    };
    let dlq = match &cfg.reject {
        Some(SinkConfig::Kafka(d)) => Some(d),
        _ => None,
    };
    Some((k, sink, dlq))
}

/// One report line per stage, summed over the drivers.
fn merge(per_driver: Vec<Vec<StageStats>>) -> Vec<StageReport> {
    let mut out: Vec<StageReport> = Vec::new();
    for stats in per_driver {
        for (i, st) in stats.into_iter().enumerate() {
            match out.get_mut(i) {
                Some(r) => {
                    r.counts += &st.counts;
                    r.sandbox += &st.sandbox;
                }
                None => out.push(StageReport {
                    name: st.name.to_string(),
                    plugin: st.plugin,
                    contract: if st.batch { "batch" } else { "typed" },
                    counts: st.counts,
                    sandbox: st.sandbox,
                }),
            }
        }
    }
    out
}
