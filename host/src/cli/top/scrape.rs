//! Reading a running pipeline's `/metrics` over plain TCP into a [`Snapshot`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};

/// How long one scrape may take (connect, send, read).
const TIMEOUT: Duration = Duration::from_secs(2);
/// A metric every Weir exports from its first moment: how an address is told to be Weir.
const WEIR_MARKER: &str = "weir_start_time_seconds";

/// Why a scrape gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// Nothing answers there (or it did not answer in time).
    #[error("cannot reach {addr}: {source}")]
    Unreachable {
        addr: String,
        source: std::io::Error,
    },
    /// Something answered, but not Weir's metrics.
    #[error("{addr} does not serve Weir metrics ({why})")]
    NotWeir { addr: String, why: String },
}

/// One stage's counters.
#[derive(Debug, Default, Clone)]
pub struct StageSample {
    /// Messages by outcome (`keep`, `next`, `dropped`, `reject`, `fail`).
    pub outcomes: BTreeMap<String, f64>,
    pub traps: f64,
    pub timeouts: f64,
    /// Batch time histogram: cumulative counts by upper bound (seconds), ascending.
    pub batch_seconds: Vec<(f64, f64)>,
    /// Running plugin (short hash).
    pub plugin: String,
    /// Rollout in progress: 0 none, 1 shadow, 2 canary.
    pub rollout: f64,
    /// Linear memory of its instances now, bytes.
    pub memory: f64,
    /// Instances recycled at the memory cap.
    pub recycled: f64,
    /// What its state holds in the host's memory, bytes (none: the stage keeps no state).
    pub state: Option<f64>,
}

impl StageSample {
    /// Messages the stage answered (every outcome).
    pub fn input(&self) -> f64 {
        self.outcomes.values().sum()
    }
}

/// One owned partition.
#[derive(Debug, Default, Clone, Copy)]
pub struct PartitionSample {
    pub committed: Option<f64>,
    pub lag: Option<f64>,
    /// 0 reading, 1 held, 2 paused (`weir_partition_state`).
    pub state: f64,
}

/// Everything `weir top` shows, from one scrape.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub stages: BTreeMap<String, StageSample>,
    /// By (topic, partition): the partitions the process owns.
    pub partitions: BTreeMap<(String, i32), PartitionSample>,
    pub consumed: f64,
    pub in_flight: f64,
    pub budget: f64,
    pub paused: f64,
    pub start_time: f64,
    pub ready: bool,
    /// Label value → count, for the counters with one label.
    pub flow: BTreeMap<String, f64>,
    pub rebalances: BTreeMap<String, f64>,
    pub commits: BTreeMap<String, f64>,
    pub produced: BTreeMap<String, f64>,
    pub reloads: f64,
    /// The process's resident memory, bytes.
    pub rss: f64,
    /// Partitions whose state is being restored now.
    pub restoring: f64,
    /// Bytes librdkafka holds, summed over its clients.
    pub kafka_queued: f64,
}

pub use super::super::http::host_port;

/// Fetches and parses `http://ADDR/metrics`.
pub fn scrape(addr: &str) -> Result<Snapshot, ScrapeError> {
    let body = fetch(addr).map_err(|source| ScrapeError::Unreachable {
        addr: addr.to_owned(),
        source,
    })?;
    parse(addr, &body)
}

fn fetch(addr: &str) -> std::io::Result<String> {
    let (status, body) = super::super::http::request("GET", addr, "/metrics", None, None, TIMEOUT)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::ConnectionRefused, e.reason))?;
    if status != 200 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("GET /metrics answered {status}"),
        ));
    }
    Ok(body)
}

/// Parses a text exposition into a snapshot; `NotWeir` when it is not Weir's.
pub fn parse(addr: &str, body: &str) -> Result<Snapshot, ScrapeError> {
    let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).map_err(|e| {
        ScrapeError::NotWeir {
            addr: addr.to_owned(),
            why: format!("not a Prometheus exposition: {e}"),
        }
    })?;
    if !scrape.samples.iter().any(|s| s.metric == WEIR_MARKER) {
        return Err(ScrapeError::NotWeir {
            addr: addr.to_owned(),
            why: format!("no `{WEIR_MARKER}` in /metrics"),
        });
    }
    let mut snap = Snapshot {
        at: Instant::now(),
        stages: BTreeMap::new(),
        partitions: BTreeMap::new(),
        consumed: 0.0,
        in_flight: 0.0,
        budget: 0.0,
        paused: 0.0,
        start_time: 0.0,
        ready: false,
        flow: BTreeMap::new(),
        rebalances: BTreeMap::new(),
        commits: BTreeMap::new(),
        produced: BTreeMap::new(),
        reloads: 0.0,
        rss: 0.0,
        restoring: 0.0,
        kafka_queued: 0.0,
    };
    for s in &scrape.samples {
        let label = |name: &str| s.labels.get(name).unwrap_or("").to_owned();
        let v = match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => {
                if s.metric == "weir_stage_batch_seconds" {
                    let mut b: Vec<(f64, f64)> =
                        buckets.iter().map(|h| (h.less_than, h.count)).collect();
                    b.sort_by(|x, y| x.0.total_cmp(&y.0));
                    snap.stages.entry(label("stage")).or_default().batch_seconds = b;
                }
                continue;
            }
            Value::Summary(_) => continue,
        };
        let partition = || {
            let p = label("partition").parse().unwrap_or(-1);
            (label("topic"), p)
        };
        match s.metric.as_str() {
            "weir_stage_messages_total" => {
                let st = snap.stages.entry(label("stage")).or_default();
                *st.outcomes.entry(label("outcome")).or_default() += v;
            }
            "weir_stage_traps_total" => snap.stages.entry(label("stage")).or_default().traps = v,
            "weir_stage_timeouts_total" => {
                snap.stages.entry(label("stage")).or_default().timeouts = v
            }
            "weir_plugin_info" if v > 0.0 => {
                snap.stages.entry(label("stage")).or_default().plugin = label("plugin")
            }
            "weir_rollout_state" => snap.stages.entry(label("stage")).or_default().rollout = v,
            "weir_stage_memory_bytes" => snap.stages.entry(label("stage")).or_default().memory = v,
            "weir_state_memory_bytes" => {
                snap.stages.entry(label("stage")).or_default().state = Some(v);
            }
            "weir_stage_recycled_total" => {
                snap.stages.entry(label("stage")).or_default().recycled = v
            }
            "process_resident_memory_bytes" => snap.rss = v,
            "weir_state_restoring_partitions" => snap.restoring = v,
            "weir_kafka_queued_bytes" => snap.kafka_queued += v,
            "weir_partition_state" => snap.partitions.entry(partition()).or_default().state = v,
            "weir_consumer_lag" => snap.partitions.entry(partition()).or_default().lag = Some(v),
            "weir_committed_offset" => {
                // Shown for owned partitions only (a released one keeps its last commit).
                if let Some(p) = snap.partitions.get_mut(&partition()) {
                    p.committed = Some(v);
                } else {
                    snap.partitions.insert(
                        partition(),
                        PartitionSample {
                            committed: Some(v),
                            lag: None,
                            state: -1.0,
                        },
                    );
                }
            }
            "weir_consumed_messages_total" => snap.consumed = v,
            "weir_in_flight_bytes" => snap.in_flight = v,
            "weir_in_flight_budget_bytes" => snap.budget = v,
            "weir_paused_partitions" => snap.paused = v,
            "weir_start_time_seconds" => snap.start_time = v,
            "weir_ready" => snap.ready = v > 0.0,
            "weir_flow_control_total" => {
                snap.flow.insert(label("action"), v);
            }
            "weir_rebalances_total" => {
                snap.rebalances.insert(label("kind"), v);
            }
            "weir_commits_total" => {
                snap.commits.insert(label("result"), v);
            }
            "weir_produced_records_total" => {
                snap.produced.insert(label("destination"), v);
            }
            "weir_plugin_reloads_total" => snap.reloads += v,
            _ => {}
        }
    }
    // A partition seen only through its last commit, and no lag or state, is not owned.
    snap.partitions
        .retain(|_, p| p.state >= 0.0 || p.lag.is_some());
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposition_without_weir_metrics_is_not_weir() {
        let e = parse("x:1", "# TYPE up gauge\nup 1\n").unwrap_err();
        assert!(e.to_string().contains("does not serve Weir metrics"), "{e}");
    }

    #[test]
    fn stages_partitions_and_histograms_are_read() {
        let metrics = crate::metrics::Metrics::new();
        metrics
            .stage_messages
            .with_label_values(&["s", "keep"])
            .inc_by(5);
        metrics
            .stage_messages
            .with_label_values(&["s", "reject"])
            .inc_by(2);
        metrics
            .stage_seconds
            .with_label_values(&["s"])
            .observe(0.001);
        metrics.rollout_state.with_label_values(&["s"]).set(2);
        metrics.add_stage_memory([("s", 3 << 20, 2)].into_iter(), &mut Vec::new());
        metrics.set_state_memory([("s", 5000)].into_iter(), &mut Vec::new());
        metrics.state_restoring.set(4);
        crate::kafka::queued::Queued::of(&metrics, "sink").producer(
            &rdkafka::statistics::Statistics {
                msg_size: 1000,
                ..Default::default()
            },
        );
        let fetched = crate::kafka::queued::Queued::of(&metrics, "source");
        fetched.producer(&rdkafka::statistics::Statistics {
            msg_size: 24,
            ..Default::default()
        });
        metrics.consumer_lag.with_label_values(&["t", "3"]).set(40);
        metrics
            .partition_state
            .with_label_values(&["t", "3"])
            .set(2);
        metrics
            .committed_offset
            .with_label_values(&["t", "3"])
            .set(100);
        metrics
            .committed_offset
            .with_label_values(&["t", "9"])
            .set(7);
        let snap = parse("x:1", &metrics.render()).unwrap();
        let s = &snap.stages["s"];
        assert_eq!(s.input(), 7.0);
        assert_eq!(s.rollout, 2.0, "a canary in progress");
        assert_eq!((s.memory, s.recycled), ((3 << 20) as f64, 2.0));
        assert_eq!(s.state, Some(5000.0));
        assert_eq!(snap.restoring, 4.0);
        assert_eq!(
            snap.kafka_queued, 24.0,
            "summed over the live clients (the sink's share left with its client)"
        );
        assert!(snap.rss > 0.0, "the process's resident memory");
        assert!(s.batch_seconds.iter().any(|(_, c)| *c == 1.0));
        let p = snap.partitions[&("t".to_owned(), 3)];
        assert_eq!(
            (p.committed, p.lag, p.state),
            (Some(100.0), Some(40.0), 2.0)
        );
        assert!(
            !snap.partitions.contains_key(&("t".to_owned(), 9)),
            "a released partition is not shown"
        );
    }
}
