//! The Kafka end-to-end set-up shared by `benches/kafka.rs` (criterion, wall time) and
//! `examples/kafka_cpu.rs` (wall and CPU time per drain): one topic of [`N`] messages in an
//! embedded broker, drained through the whole pipeline with a fresh consumer group.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use weir::kafka::embedded::EmbeddedBroker;
use weir::runtime::{self, RunOptions};

/// Messages in the topic (8 partitions × ~4 MB stays under the mock cluster's retention).
pub const N: usize = 200_000;
/// Partitions of the input and output topics.
pub const PARTITIONS: i32 = 8;

static GROUP: AtomicUsize = AtomicUsize::new(0);

/// Starts a one-broker embedded cluster with `in` (seeded with [`N`] ~100-byte JSON values)
/// and `out`.
pub fn broker() -> EmbeddedBroker {
    let broker = EmbeddedBroker::start(1).expect("broker");
    broker.create_topic("in", PARTITIONS).expect("topic");
    broker.create_topic("out", PARTITIONS).expect("topic");
    // The changelog of the stateful stage in `state_yaml` (the mock cluster does not create
    // topics on request).
    broker
        .create_topic("weir.pass0.kv.changelog", PARTITIONS)
        .expect("topic");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.jsonl");
    std::fs::write(&path, seed_lines(N)).expect("seed file");
    assert_eq!(broker.seed_jsonl("in", &path).expect("seeded"), N as u64);
    broker
}

/// `n` JSONL lines, each a ~100-byte JSON value with a key (the benchmarks' input).
pub fn seed_lines(n: usize) -> String {
    let mut text = String::with_capacity(n * 140);
    for i in 0..n {
        let v = format!(
            r#"{{\"id\":{i},\"status\":\"paid\",\"region\":\"eu\",\"pad\":\"{}\"}}"#,
            "x".repeat(48)
        );
        text.push_str(&format!("{{\"key\":\"key-{i:05}\",\"value\":\"{v}\"}}\n"));
    }
    text
}

/// The pipeline: `in` → `stages` copies of `plugin` on `drivers` drivers → `out`, with a
/// fresh group, stopping at the end of the topic.
pub fn yaml(bootstrap: &str, plugin: &str, stages: usize, drivers: usize) -> String {
    yaml_with(bootstrap, plugin, stages, drivers, "at-least-once", "500ms")
}

/// [`yaml`] with a `delivery` promise and a `commit_interval`.
pub fn yaml_with(
    bootstrap: &str,
    plugin: &str,
    stages: usize,
    drivers: usize,
    delivery: &str,
    commit_interval: &str,
) -> String {
    let group = GROUP.fetch_add(1, Ordering::Relaxed);
    let mut s = format!(
        "delivery: {delivery}\nsource:\n  kafka:\n    brokers: {bootstrap}\n    topics: [in]\n    group: bench-{group}\n    stop_at_end: true\n    commit_interval: {commit_interval}\n    properties:\n      fetch.wait.max.ms: 10\n"
    );
    if stages == 0 {
        s.push_str("stages: []\n");
    } else {
        s.push_str("stages:\n");
    }
    for i in 0..stages {
        s.push_str(&format!("  - name: pass{i}\n    plugin: {plugin}\n"));
    }
    s.push_str(&format!(
        "sink:\n  kafka:\n    brokers: {bootstrap}\n    topic: out\nruntime:\n  drivers: {drivers}\n  watch_plugins: false\n"
    ));
    s
}

/// [`yaml_with`] (one `plugin` stage, one driver) where the stage keeps state (`get_set:
/// kv`, bucket `kv`, `misbehave`) or not, its store in `state_dir`.
pub fn state_yaml(
    bootstrap: &str,
    plugin: &str,
    delivery: &str,
    state: bool,
    state_dir: &std::path::Path,
) -> String {
    let mut s = yaml_with(bootstrap, plugin, 1, 1, delivery, "1s");
    if state {
        s = s.replace(
            &format!("    plugin: {plugin}\n"),
            &format!("    plugin: {plugin}\n    config: {{ get_set: kv }}\n    state: {{ buckets: [kv] }}\n"),
        );
    }
    s.push_str(&format!("  state_dir: {}\n", state_dir.display()));
    s
}

/// One drain of the topic: the time spent consuming (the report's `consuming_ms`: from the
/// first message read to the end, so start-up and group join are not counted).
pub fn drain(yaml: &str) -> Duration {
    let cfg = weir::config::load_str(std::path::Path::new("bench.yaml"), yaml, &|_| None)
        .expect("bench pipeline");
    let report = runtime::run(&cfg, &RunOptions::default()).expect("pipeline runs");
    assert_eq!(
        report.read as usize, N,
        "drained the whole topic: {:?} {:?}",
        report.error, report.failure
    );
    assert!(report.reached_end, "{:?}", report.error);
    Duration::from_secs_f64(report.consuming_ms / 1e3)
}
