//! Prometheus metrics. A leaf: the rest of Weir reports into it; it depends on nothing of
//! Weir's. The listener that serves them is [`crate::admin`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every metric Weir exports.
pub struct Metrics {
    /// The registry they are in.
    pub registry: Registry,
    /// Per-stage messages by outcome (`keep`, `next`, `dropped`, `reject`, `fail`).
    pub stage_messages: IntCounterVec,
    /// Per-stage traps (any kind).
    pub stage_traps: IntCounterVec,
    /// Per-stage calls stopped by the deadline.
    pub stage_timeouts: IntCounterVec,
    /// Per-stage time for one batch.
    pub stage_seconds: HistogramVec,
    /// Messages per batch.
    pub batch_size: prometheus::Histogram,
    /// Messages read from the source.
    pub consumed: IntCounter,
    /// Message bytes read and not yet fully handled.
    pub in_flight_bytes: IntGauge,
    /// Partitions not read because of backpressure (held or paused).
    pub paused_partitions: IntGauge,
    /// Per owned partition: 0 reading, 1 held (the controller is not taking messages), 2
    /// paused. Removed when the partition is released.
    pub partition_state: IntGaugeVec,
    /// The byte budget `weir_in_flight_bytes` is held under (`runtime.max_in_flight`).
    pub in_flight_budget: IntGauge,
    /// Unix time the process started, in seconds.
    pub start_time: IntGauge,
    /// 1 once the pipeline is consuming (as `/readyz`), else 0.
    pub ready_gauge: IntGauge,
    /// Flow-control actions: `hold` (stop taking messages, librdkafka keeps its prefetch),
    /// `pause` and `resume` (per partition).
    pub flow_control: IntCounterVec,
    /// Per partition: committed offset.
    pub committed_offset: IntGaugeVec,
    /// Per partition: end offset minus committed offset.
    pub consumer_lag: IntGaugeVec,
    /// Per topic: partitions whose group's committed offset has stood still while input waits
    /// (the group watch, `source.kafka.stalled_after`).
    pub partitions_stalled: IntGaugeVec,
    /// Rebalance callbacks by kind (`assign`, `revoke`, `error`).
    pub rebalances: IntCounterVec,
    /// Offset commits by result (`ok`, `error`).
    pub commits: IntCounterVec,
    /// Plugin reloads by stage and result (`published`, `rollout`, `refused`, `unchanged`).
    pub reloads: IntCounterVec,
    /// Running plugin version per stage (value 1).
    pub plugin_info: IntGaugeVec,
    /// Per stage: 0 no rollout, 1 a shadow rollout, 2 a canary rollout in progress.
    pub rollout_state: IntGaugeVec,
    /// Rollout decisions by stage, decision (`promote`, `rollback`) and reason.
    pub rollout_decisions: IntCounterVec,
    /// Shadow comparisons by stage and result (`agree`, `differ_kind`, `differ_value`, ...).
    pub shadow_outcomes: IntCounterVec,
    /// Records acknowledged by the broker, by destination (`sink`, `dlq`).
    pub produced: IntCounterVec,
    /// Completions from an older assignment generation, ignored.
    pub stale_completions: IntCounter,
    /// Kafka transactions (`delivery: exactly-once`) by result (`committed`, `aborted`).
    pub transactions: IntCounterVec,
    /// From a transaction's begin to its commit, in seconds.
    pub transaction_seconds: prometheus::Histogram,
    /// Partitions whose state is being restored from the changelog now.
    pub state_restoring: prometheus::IntGauge,
    /// Changelog records applied to state stores while restoring.
    pub state_restored: prometheus::IntCounter,
    /// State writes sent to changelogs.
    pub state_writes: prometheus::IntCounter,
    /// Linear memory of each stage's instances now, summed over drivers, bytes.
    pub stage_memory: IntGaugeVec,
    /// What each stateful stage's state holds in the host's memory now, bytes.
    pub state_memory: IntGaugeVec,
    /// The most `stage_memory` has been, bytes.
    pub stage_memory_peak: IntGaugeVec,
    /// Instances replaced after reaching the stage's memory cap.
    pub stage_recycled: IntCounterVec,
    /// Bytes librdkafka holds per client: producers' queues, the consumer's fetch queues.
    pub kafka_queued_bytes: IntGaugeVec,
    /// Records librdkafka holds per client (as `kafka_queued_bytes`).
    pub kafka_queued_messages: IntGaugeVec,
    /// Schema-registry requests by what they asked (`id`, `subject`, `register`) and result
    /// (`ok`, `not_found`, `unavailable`).
    pub schema_lookups: IntCounterVec,
    /// Schema look-ups answered from the cache (no request).
    pub schema_cache_hits: IntCounter,
    /// Records that could not be decoded (`decode`) or encoded (`encode`), by reason.
    pub schema_failures: IntCounterVec,
    /// Lanes holding because the registry cannot be reached (their records wait, nothing
    /// is rejected for it).
    pub schema_held_lanes: IntGauge,
    /// Set once the pipeline is consuming.
    pub ready: AtomicBool,
}

impl Metrics {
    /// A fresh set in its own registry.
    pub fn new() -> Arc<Self> {
        let r = Registry::new();
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
            r.register(Box::new(m.clone()))
                .expect("metric names are unique");
            m
        }
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &r,
                IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
            )
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &r,
                IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"),
            )
        };
        let m = Arc::new(Metrics {
            stage_messages: counter_vec(
                "weir_stage_messages_total",
                "Messages by stage and outcome.",
                &["stage", "outcome"],
            ),
            stage_traps: counter_vec(
                "weir_stage_traps_total",
                "Stage traps (any kind).",
                &["stage"],
            ),
            stage_timeouts: counter_vec(
                "weir_stage_timeouts_total",
                "Stage calls stopped by the deadline.",
                &["stage"],
            ),
            stage_memory: gauge_vec(
                "weir_stage_memory_bytes",
                "Linear memory of the stage's instances now (summed over drivers), bytes.",
                &["stage"],
            ),
            state_memory: gauge_vec(
                "weir_state_memory_bytes",
                "What a stateful stage's state holds in the host's memory over this process's partitions: writes since the last commit, committed values the store has not taken yet, store values remembered (keys, values and 112 bytes each: an estimate), bytes.",
                &["stage"],
            ),
            stage_memory_peak: gauge_vec(
                "weir_stage_memory_peak_bytes",
                "The most weir_stage_memory_bytes has been since start, bytes.",
                &["stage"],
            ),
            stage_recycled: counter_vec(
                "weir_stage_recycled_total",
                "Instances replaced after reaching the stage's memory cap (limits.memory).",
                &["stage"],
            ),
            kafka_queued_bytes: gauge_vec(
                "weir_kafka_queued_bytes",
                "Bytes librdkafka holds (from its statistics, every 5 s): a producer's queue of records not yet acknowledged, the consumer's prefetched records; client: source, sink, reject, transactions, changelog.",
                &["client"],
            ),
            kafka_queued_messages: gauge_vec(
                "weir_kafka_queued_messages",
                "Records librdkafka holds (as weir_kafka_queued_bytes).",
                &["client"],
            ),
            schema_lookups: counter_vec(
                "weir_schema_registry_requests_total",
                "Schema-registry requests by kind (id, subject, register) and result (ok, not_found, unavailable).",
                &["kind", "result"],
            ),
            schema_cache_hits: reg(
                &r,
                IntCounter::new(
                    "weir_schema_cache_hits_total",
                    "Schema look-ups answered from the cache, without a request.",
                )
                .expect("valid metric"),
            ),
            schema_failures: counter_vec(
                "weir_schema_failures_total",
                "Records rejected by the host's schema codec, by direction (decode, encode) and reason (no_magic_byte, truncated, unknown_schema, does_not_fit, wrong_format, unsupported).",
                &["direction", "reason"],
            ),
            schema_held_lanes: reg(
                &r,
                IntGauge::new(
                    "weir_schema_held_lanes",
                    "Lanes waiting for an unreachable schema registry (their records are held, not rejected).",
                )
                .expect("valid metric"),
            ),
            transactions: counter_vec(
                "weir_transactions_total",
                "Kafka transactions (exactly-once) by result: committed, aborted.",
                &["result"],
            ),
            state_restoring: reg(
                &r,
                prometheus::IntGauge::new(
                    "weir_state_restoring_partitions",
                    "Partitions whose stage state is being restored from its changelog (their lanes wait).",
                )
                .expect("valid metric"),
            ),
            state_restored: reg(
                &r,
                prometheus::IntCounter::new(
                    "weir_state_restored_records_total",
                    "Changelog records applied to state stores while restoring.",
                )
                .expect("valid metric"),
            ),
            state_writes: reg(
                &r,
                prometheus::IntCounter::new(
                    "weir_state_writes_total",
                    "Stage state writes (sets and deletes) sent to changelogs.",
                )
                .expect("valid metric"),
            ),
            transaction_seconds: reg(
                &r,
                prometheus::Histogram::with_opts(
                    HistogramOpts::new(
                        "weir_transaction_seconds",
                        "From a transaction's begin to its commit (exactly-once).",
                    )
                    .buckets(
                        prometheus::exponential_buckets(1e-3, 2.0, 14).expect("valid buckets"),
                    ),
                )
                .expect("valid metric"),
            ),
            stage_seconds: reg(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "weir_stage_batch_seconds",
                        "Time one stage took for one batch.",
                    )
                    .buckets(
                        prometheus::exponential_buckets(1e-6, 4.0, 12).expect("valid buckets"),
                    ),
                    &["stage"],
                )
                .expect("valid metric"),
            ),
            batch_size: reg(
                &r,
                prometheus::Histogram::with_opts(
                    HistogramOpts::new("weir_batch_messages", "Messages per batch.").buckets(
                        prometheus::exponential_buckets(1.0, 2.0, 12).expect("valid buckets"),
                    ),
                )
                .expect("valid metric"),
            ),
            consumed: reg(
                &r,
                IntCounter::new(
                    "weir_consumed_messages_total",
                    "Messages read from the source.",
                )
                .expect("valid metric"),
            ),
            in_flight_bytes: reg(
                &r,
                IntGauge::new(
                    "weir_in_flight_bytes",
                    "Message bytes read and not yet fully handled.",
                )
                .expect("valid metric"),
            ),
            paused_partitions: reg(
                &r,
                IntGauge::new(
                    "weir_paused_partitions",
                    "Partitions not read because of backpressure (held or paused).",
                )
                .expect("valid metric"),
            ),
            partition_state: gauge_vec(
                "weir_partition_state",
                "Per owned partition: 0 reading, 1 held (not taking messages), 2 paused.",
                &["topic", "partition"],
            ),
            in_flight_budget: reg(
                &r,
                IntGauge::new(
                    "weir_in_flight_budget_bytes",
                    "The byte budget weir_in_flight_bytes is held under (runtime.max_in_flight).",
                )
                .expect("valid metric"),
            ),
            start_time: {
                let g = reg(
                    &r,
                    IntGauge::new(
                        "weir_start_time_seconds",
                        "Unix time the process started, in seconds.",
                    )
                    .expect("valid metric"),
                );
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                g.set(i64::try_from(now).unwrap_or(i64::MAX));
                g
            },
            ready_gauge: reg(
                &r,
                IntGauge::new(
                    "weir_ready",
                    "1 once the pipeline is consuming (as /readyz), else 0.",
                )
                .expect("valid metric"),
            ),
            committed_offset: gauge_vec(
                "weir_committed_offset",
                "Committed offset per partition.",
                &["topic", "partition"],
            ),
            consumer_lag: gauge_vec(
                "weir_consumer_lag",
                "End offset minus committed offset, per partition.",
                &["topic", "partition"],
            ),
            partitions_stalled: gauge_vec(
                "weir_kafka_partitions_stalled",
                "Partitions of the topic whose group's committed offset has not moved for source.kafka.stalled_after while input waits (unowned, or their owner makes no progress).",
                &["topic"],
            ),
            flow_control: counter_vec(
                "weir_flow_control_total",
                "Flow-control actions: hold (stop reading, prefetch kept), pause and resume (per partition).",
                &["action"],
            ),
            rebalances: counter_vec(
                "weir_rebalances_total",
                "Rebalance callbacks by kind.",
                &["kind"],
            ),
            commits: counter_vec(
                "weir_commits_total",
                "Offset commits by result.",
                &["result"],
            ),
            reloads: counter_vec(
                "weir_plugin_reloads_total",
                "Plugin reloads by stage and result.",
                &["stage", "result"],
            ),
            plugin_info: gauge_vec(
                "weir_plugin_info",
                "Running plugin version per stage.",
                &["stage", "plugin"],
            ),
            rollout_state: gauge_vec(
                "weir_rollout_state",
                "Rollout in progress per stage: 0 none, 1 shadow, 2 canary.",
                &["stage"],
            ),
            rollout_decisions: counter_vec(
                "weir_rollout_decisions_total",
                "Rollout decisions by stage, decision (promote, rollback) and reason.",
                &["stage", "decision", "reason"],
            ),
            shadow_outcomes: counter_vec(
                "weir_shadow_outcomes_total",
                "Shadow comparisons of a candidate's answers with the live version's, by result.",
                &["stage", "result"],
            ),
            produced: counter_vec(
                "weir_produced_records_total",
                "Records acknowledged by the broker.",
                &["destination"],
            ),
            stale_completions: reg(
                &r,
                IntCounter::new(
                    "weir_stale_completions_total",
                    "Completions from an older assignment, ignored.",
                )
                .expect("valid metric"),
            ),
            ready: AtomicBool::new(false),
            registry: r,
        });
        // The process's resident and virtual memory, CPU seconds, open files and threads
        // (`process_*`, from /proc).
        #[cfg(target_os = "linux")]
        m.registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metrics register once");
        // Every known label value starts at zero, so that dashboards and alert rules see the
        // series (and `rate`/`increase` work) before the first event.
        for (vec, values) in [
            (&m.flow_control, &["hold", "pause", "resume"][..]),
            (&m.rebalances, &["assign", "revoke", "error"][..]),
            (&m.commits, &["ok", "error"][..]),
            (&m.produced, &["sink", "dlq"][..]),
        ] {
            for v in values {
                vec.with_label_values(&[*v]);
            }
        }
        m
    }

    /// Marks the pipeline consuming (or not): `/readyz` and `weir_ready`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        self.ready_gauge.set(i64::from(ready));
    }

    /// Forgets the per-partition gauges of a partition this process no longer owns (its lag
    /// and flow state; the committed offset stays, it is still true).
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let labels = [topic, &partition.to_string()];
        let _ = self.consumer_lag.remove_label_values(&labels);
        let _ = self.partition_state.remove_label_values(&labels);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut buf = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        buf
    }

    /// Sets `weir_plugin_info` to the running plugin version (short hash) of every stage, and
    /// makes every per-stage series exist (at zero) from the start.
    pub fn set_plugins<'a>(&self, plugins: impl Iterator<Item = (&'a str, &'a str)>) {
        self.plugin_info.reset();
        for (stage, hash) in plugins {
            self.plugin_info.with_label_values(&[stage, hash]).set(1);
            for outcome in ["keep", "next", "dropped", "reject", "fail"] {
                self.stage_messages.with_label_values(&[stage, outcome]);
            }
            for result in ["published", "rollout", "refused", "unchanged"] {
                self.reloads.with_label_values(&[stage, result]);
            }
            self.stage_traps.with_label_values(&[stage]);
            self.stage_timeouts.with_label_values(&[stage]);
            self.stage_memory.with_label_values(&[stage]);
            self.stage_memory_peak.with_label_values(&[stage]);
            self.stage_recycled.with_label_values(&[stage]);
            self.rollout_state.with_label_values(&[stage]);
            self.stage_seconds.with_label_values(&[stage]);
        }
    }

    /// Moves `weir_plugin_info` of one stage from version `from` to `to` (short hashes).
    pub fn move_plugin(&self, stage: &str, from: &str, to: &str) {
        let _ = self.plugin_info.remove_label_values(&[stage, from]);
        self.plugin_info.with_label_values(&[stage, to]).set(1);
    }

    /// Counts shadow comparisons of one stage by result.
    pub fn add_shadow_outcomes<'a>(
        &self,
        stage: &str,
        results: impl Iterator<Item = (&'a str, u64)>,
    ) {
        for (result, n) in results {
            if n > 0 {
                self.shadow_outcomes
                    .with_label_values(&[stage, result])
                    .inc_by(n);
            }
        }
    }

    /// One driver's stages' memory now and recycles so far (`last` holds what it reported
    /// before): the gauges are sums over drivers, so each driver adds its change.
    pub fn add_stage_memory<'a>(
        &self,
        stages: impl ExactSizeIterator<Item = (&'a str, u64, u64)>,
        last: &mut Vec<(u64, u64)>,
    ) {
        last.resize(stages.len(), (0, 0));
        for ((name, bytes, recycled), prev) in stages.zip(last.iter_mut()) {
            if (bytes, recycled) == *prev {
                continue; // the usual batch: no label lookups
            }
            let g = self.stage_memory.with_label_values(&[name]);
            g.add(bytes as i64 - prev.0 as i64);
            let peak = self.stage_memory_peak.with_label_values(&[name]);
            if g.get() > peak.get() {
                peak.set(g.get());
            }
            if recycled > prev.1 {
                self.stage_recycled
                    .with_label_values(&[name])
                    .inc_by(recycled - prev.1);
            }
            *prev = (bytes, recycled);
        }
    }

    /// The stateful stages' state memory now (process totals: any driver sets them; `last`
    /// holds what this driver set before, so an unchanged value costs no label lookup).
    pub fn set_state_memory<'a>(
        &self,
        stages: impl Iterator<Item = (&'a str, u64)>,
        last: &mut Vec<u64>,
    ) {
        for (i, (name, bytes)) in stages.enumerate() {
            if last.len() <= i {
                last.resize(i + 1, u64::MAX);
            }
            if last[i] != bytes {
                self.state_memory
                    .with_label_values(&[name])
                    .set(bytes.min(i64::MAX as u64) as i64);
                last[i] = bytes;
            }
        }
    }

    /// Adds one driver's stage tallies since the last call (`last` holds the previous ones).
    /// A tally is, in order: keep, next, dropped, reject, fail, traps, timeouts.
    pub fn add_stage_counts<'a>(
        &self,
        stages: impl ExactSizeIterator<Item = (&'a str, [u64; 7])>,
        last: &mut Vec<[u64; 7]>,
    ) {
        last.resize(stages.len(), [0; 7]);
        for ((name, now), prev) in stages.zip(last.iter_mut()) {
            let outcomes = ["keep", "next", "dropped", "reject", "fail"];
            for (i, outcome) in outcomes.iter().enumerate() {
                if now[i] > prev[i] {
                    self.stage_messages
                        .with_label_values(&[name, *outcome])
                        .inc_by(now[i] - prev[i]);
                }
            }
            if now[5] > prev[5] {
                self.stage_traps
                    .with_label_values(&[name])
                    .inc_by(now[5] - prev[5]);
            }
            if now[6] > prev[6] {
                self.stage_timeouts
                    .with_label_values(&[name])
                    .inc_by(now[6] - prev[6]);
            }
            *prev = now;
        }
    }
}
