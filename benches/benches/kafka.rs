//! End to end through a Kafka-protocol broker (librdkafka's mock cluster on loopback TCP, in
//! this process): the whole `weir` pipeline — consumer, lanes, driver, chain, producer with
//! acknowledgements, commits — over the same topic, in one run:
//!
//! * `native`: no stages (the host alone: the "native pass-through pipeline"),
//! * `wasm_1`: one wasm pass-through stage,
//! * `wasm_3`: three wasm pass-through stages,
//! * `wasm_1_drivers_2`: one wasm stage on two driver threads.
//!
//! Each iteration drains the topic once with a fresh consumer group (`stop_at_end`) and is
//! timed from the first message read to the end (the report's `consuming_ms`), so start-up and
//! group join are not counted. Throughput is messages per second.
//!
//! Run: `cargo bench -p weir-benches --bench kafka` (results: docs/BENCHMARKS.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir::kafka::embedded::EmbeddedBroker;
use weir::pipeline::{self, RunOptions};
use weir_tests::plugins::PASSTHROUGH;

/// Messages in the topic (8 partitions × ~4 MB stays under the mock cluster's retention).
const N: usize = 200_000;
const PARTITIONS: i32 = 8;

static GROUP: AtomicUsize = AtomicUsize::new(0);

fn seed(broker: &EmbeddedBroker) {
    broker.create_topic("in", PARTITIONS).expect("topic");
    broker.create_topic("out", PARTITIONS).expect("topic");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.jsonl");
    let mut text = String::with_capacity(N * 140);
    for i in 0..N {
        let v = format!(
            r#"{{\"id\":{i:08},\"status\":\"paid\",\"region\":\"eu\",\"pad\":\"{}\"}}"#,
            "x".repeat(48)
        );
        text.push_str(&format!("{{\"key\":\"key-{i:05}\",\"value\":\"{v}\"}}\n"));
    }
    std::fs::write(&path, text).expect("seed file");
    assert_eq!(broker.seed_jsonl("in", &path).expect("seeded"), N as u64);
}

fn yaml(bootstrap: &str, stages: usize, drivers: usize) -> String {
    let group = GROUP.fetch_add(1, Ordering::Relaxed);
    let mut s = format!(
        "source:\n  kafka:\n    brokers: {bootstrap}\n    topics: [in]\n    group: bench-{group}\n    stop_at_end: true\n    properties:\n      fetch.wait.max.ms: 10\nstages:\n"
    );
    if stages == 0 {
        s = s.replace("stages:\n", "stages: []\n");
    }
    for i in 0..stages {
        s.push_str(&format!("  - name: pass{i}\n    plugin: {PASSTHROUGH}\n"));
    }
    s.push_str(&format!(
        "sink:\n  kafka:\n    brokers: {bootstrap}\n    topic: out\nruntime:\n  drivers: {drivers}\n  watch_plugins: false\n"
    ));
    s
}

/// One drain of the topic; the time spent consuming.
fn drain(bootstrap: &str, stages: usize, drivers: usize) -> Duration {
    let text = yaml(bootstrap, stages, drivers);
    let cfg = weir::config::load_str(std::path::Path::new("bench.yaml"), &text, &|_| None)
        .expect("bench pipeline");
    let report = pipeline::run(&cfg, &RunOptions::default()).expect("pipeline runs");
    assert_eq!(report.read as usize, N, "drained the whole topic");
    let k = report.kafka.expect("kafka report");
    assert!(k.reached_end);
    Duration::from_secs_f64(k.consuming_ms / 1e3)
}

fn end_to_end(c: &mut Criterion) {
    let broker = EmbeddedBroker::start(1).expect("broker");
    seed(&broker);
    let bootstrap = broker.bootstrap().to_owned();
    let mut g = c.benchmark_group("kafka_e2e");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N as u64));
    for (name, stages, drivers) in [
        ("native", 0, 1),
        ("wasm_1", 1, 1),
        ("wasm_3", 3, 1),
        ("wasm_1_drivers_2", 1, 2),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| drain(&bootstrap, stages, drivers)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, end_to_end);
criterion_main!(benches);
