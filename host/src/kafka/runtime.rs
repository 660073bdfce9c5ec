//! Assembling and running a pipeline with a Kafka source, and its shutdown.
//!
//! Shutdown (SIGTERM/SIGINT, a stage `fail`, `stop_at_end`): the controller stops fetching
//! and tells every driver to stop (draining what is queued unless a stage failed) → drivers
//! finish and exit → the producers flush under the remaining `drain_timeout` → the final
//! synchronous commit of what is done → the consumer leaves the group → the exit report.
//! Whatever was not acknowledged by then is not committed and replays on restart.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::Consumer;

use super::controller::{self, Controller, ControllerOptions};
use super::driver::{self, DriverSetup};
use super::output::{Delivered, DeliveryContext, KafkaProducer, Outputs, Target};
use crate::chain::{Chain, StageStats};
use crate::config::{KafkaSink, PipelineConfig, SinkConfig, SourceConfig};
use crate::metrics::Metrics;
use crate::pipeline::{start, wait_bounded, Prepared, RunOptions, StartError, Started};
use crate::reload::Reloader;
use crate::report::{ExitState, KafkaReport, RunReport, StageReport};
use crate::sink::LineSink;

fn producer(
    sink: &KafkaSink,
    delivered: Arc<Delivered>,
    produced: prometheus::IntCounter,
) -> Result<Arc<KafkaProducer>, StartError> {
    let cfg = super::client::producer_config(sink);
    KafkaProducer::from_config_and_context(
        &cfg,
        DeliveryContext {
            delivered,
            produced,
        },
    )
    .map(Arc::new)
    .map_err(|e| StartError::Kafka(format!("kafka producer for `{}`: {e}", sink.topic)))
}

/// A destination, and what reached it.
struct Destination {
    target: Target,
    /// Broker acknowledgements (Kafka).
    acked: Arc<Delivered>,
    /// The line sink (local).
    line: Option<Arc<Mutex<LineSink>>>,
}

impl Destination {
    fn count(&self) -> u64 {
        match &self.line {
            Some(l) => l.lock().unwrap_or_else(|p| p.into_inner()).written,
            None => self.acked.ok.load(Ordering::Relaxed),
        }
    }
}

fn target(
    cfg: Option<&SinkConfig>,
    producers: &mut Vec<Arc<KafkaProducer>>,
    produced: prometheus::IntCounter,
) -> Result<Destination, StartError> {
    let delivered = Arc::new(Delivered::default());
    let (target, acked, line) = match cfg {
        Some(SinkConfig::Kafka(k)) => {
            let p = producer(k, delivered.clone(), produced)?;
            producers.push(p.clone());
            (
                Target::Kafka {
                    producer: p,
                    topic: k.topic.as_str().into(),
                },
                delivered,
                None,
            )
        }
        Some(other) => {
            let s = Arc::new(Mutex::new(LineSink::open(other)?));
            (Target::Line(s.clone()), delivered, Some(s))
        }
        None => {
            let s = Arc::new(Mutex::new(LineSink::discard()));
            (Target::Line(s.clone()), delivered, Some(s))
        }
    };
    Ok(Destination {
        target,
        acked,
        line,
    })
}

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

/// Runs the pipeline until a signal, a failure, or (with `stop_at_end`) the end of its topics.
pub fn run(cfg: &PipelineConfig, opts: &RunOptions) -> Result<RunReport, StartError> {
    let SourceConfig::Kafka(src) = &cfg.source else {
        unreachable!("the Kafka runtime runs Kafka sources")
    };
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
    for s in &slots {
        let (_, p) = s.current();
        metrics
            .plugin_info
            .with_label_values(&[&s.spec.name, p.short_hash()])
            .set(1);
    }
    if let Some(addr) = &cfg.runtime.metrics {
        crate::metrics::serve(addr, metrics.clone()).map_err(StartError::Metrics)?;
    }

    let mut producers = Vec::new();
    let produced = |d: &str| metrics.produced.with_label_values(&[d]);
    let sink = target(Some(&cfg.sink), &mut producers, produced("sink"))?;
    let rejects = target(cfg.reject.as_ref(), &mut producers, produced("dlq"))?;
    let dlq_is_kafka = matches!(rejects.target, Target::Kafka { .. });
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let outputs = Outputs {
        sink: sink.target.clone(),
        rejects: rejects.target.clone(),
        done: done_tx,
    };
    let reloader = Reloader::start(
        engine.clone(),
        slots.clone(),
        cfg.runtime.watch_plugins,
        reload_channel,
        Some(metrics.clone()),
    );

    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let mut controls = Vec::new();
    let mut setups = Vec::new();
    for (index, (chain, core)) in chains.into_iter().zip(cores(cfg)).enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        controls.push(tx);
        setups.push(DriverSetup {
            index,
            keep_originals: dlq_is_kafka && chain.len() > 1,
            chain,
            outputs: outputs.clone(),
            batch: cfg.batch.clone(),
            control: rx,
            events: events_tx.clone(),
            metrics: metrics.clone(),
            core,
        });
    }
    drop(outputs);
    let copts = ControllerOptions {
        lane_capacity: cfg.batch.max_messages.saturating_mul(4).max(64),
        max_in_flight: cfg.runtime.max_in_flight.bytes(),
        hold: Duration::from_millis(500),
        revoke_timeout: src.revoke_timeout,
        commit_interval: src.commit_interval,
        stop_at_end: src.stop_at_end,
        drain_timeout: cfg.runtime.drain_timeout,
        start_latest: src.start == crate::config::StartFrom::Latest,
    };
    let consumer = controller::consumer(
        &super::client::consumer_config(src),
        controls,
        done_rx,
        producers,
        copts,
        metrics.clone(),
    )
    .map_err(|e| StartError::Kafka(format!("kafka consumer for group `{}`: {e}", src.group)))?;
    let topics: Vec<&str> = src.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|e| StartError::Kafka(format!("subscribing to {}: {e}", topics.join(","))))?;
    let drivers: Vec<_> = setups.into_iter().map(driver::spawn).collect();
    drop(events_tx);
    tracing::info!(pipeline = %cfg.name, stages = slots.len(), drivers = drivers.len(),
        topics = %src.topics.join(","), group = %src.group, "pipeline running on Kafka");

    let ctl = std::thread::Builder::new()
        .name("weir-controller".into())
        .spawn({
            let stop = stop.clone();
            move || {
                Controller {
                    consumer,
                    events: events_rx,
                    stop,
                }
                .run()
            }
        })
        .expect("spawning the controller");
    // The controller bounds its own drain; this is the backstop if librdkafka hangs.
    wait_bounded(
        &ctl,
        &stop,
        cfg.runtime.drain_timeout + Duration::from_secs(10),
        "exiting (nothing uncommitted is lost: it replays)",
    );
    let outcome = ctl.join().expect("controller thread panicked");
    let per_driver: Vec<Vec<StageStats>> = drivers
        .into_iter()
        .map(|d| d.join().expect("driver thread panicked"))
        .collect();
    drop(signals);
    let reloads = reloader.finish();
    let interrupted = stop.load(Ordering::Relaxed);
    let state = if outcome.failure.is_some() || outcome.error.is_some() {
        ExitState::Failed
    } else if interrupted {
        ExitState::Interrupted
    } else {
        ExitState::Completed
    };
    let report = RunReport {
        pipeline: cfg.name.clone(),
        state,
        duration_ms: started.elapsed().as_millis() as u64,
        read: outcome.read,
        malformed: 0,
        written: sink.count(),
        rejected: rejects.count(),
        done_through_offset: None,
        stages: merge(per_driver),
        reloads,
        failure: outcome.failure,
        error: outcome.error,
        kafka: Some(KafkaReport {
            committed: outcome.committed,
            rebalances: outcome.rebalances,
            stale_completions: outcome.stale,
            reached_end: outcome.reached_end,
            consuming_ms: outcome.consuming.as_secs_f64() * 1e3,
            batches: metrics.batch_size.get_sample_count(),
        }),
    };
    if let Some(path) = opts.report.as_ref().or(cfg.runtime.report.as_ref()) {
        report.write(path);
    }
    Ok(report)
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
