//! What state costs a stage, measured in one run:
//!
//! * `state_batch/*`: one batch of 256 messages through the chain (`Chain::run`, what a driver
//!   calls) with the `misbehave` stage: `stateless` (no state), `get_set` (one `get` and one
//!   `set` per message, keys cycling over 100,000, the writes to pending and the store commit
//!   every 40 batches), `get_set_changelog_per_commit` (the same, with a changelog: each
//!   key's last write since the last commit sent just before the commit, as both deliveries
//!   do, by the at-least-once changelog producer to an in-process mock cluster), and
//!   `changelog_records_only`, the floor under the changelog row: a batch's 256 changelog
//!   records (one per message), made beforehand, sent through the same producer, no stage.
//! * `state_restore/*`: a partition's store restored from its changelog (30,000 records on
//!   the mock cluster, into an empty state dir), and a store of 1,000,000 keys whose checkpoint
//!   is at the changelog's end (a restart: nothing to re-read).
//!
//! Measured with mimalloc, the `weir` binary's allocator, and transparent huge pages off as
//! the binary has them (`weir::thp`).
//!
//! Run: `cargo bench -p weir-benches --bench state` (results: docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

/// The `weir` binary's allocator, so the allocations of the state path cost what they cost
/// in a pipeline.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use weir::kafka::embedded::EmbeddedBroker;
use weir::message::{Envelope, Header, Lane, Message};
use weir::sink::changelog::KafkaChangelog;
use weir::sink::{Changelog, Ticket};
use weir::source::PartitionKey;
use weir::state::{StateRegistry, StateSpec};
use weir_tests::plugins::MISBEHAVE;

const BATCH: usize = 256;
const KEYS: usize = 100_000;
const COMMIT_EVERY: u64 = 40;

/// `WEIR_BENCH_STATE_KEYS` / `WEIR_BENCH_STATE_COMMIT_EVERY` override the key count and the
/// commit interval (in batches) of `state_batch`, to take the cost apart.
fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn yaml(dir: &std::path::Path, bootstrap: &str, state: bool) -> String {
    let stage = if state {
        "    config: { get_set: kv }\n    state: { buckets: [kv] }\n"
    } else {
        ""
    };
    format!(
        "name: bench\nsource:\n  kafka: {{ brokers: \"{bootstrap}\", topics: [in], group: bench }}\nsink:\n  discard: {{}}\nruntime:\n  state_dir: {}\n  watch_plugins: false\nstages:\n  - name: m\n    plugin: {MISBEHAVE}\n{stage}",
        dir.display()
    )
}

fn batch(first: i64, keys: usize) -> Vec<Envelope> {
    (0..BATCH as i64)
        .map(|i| {
            let o = first + i;
            Envelope {
                offset: o,
                msg: Message {
                    key: Some(format!("key-{:06}", o as usize % keys).into_bytes()),
                    value: Some(weir_benches::value(o as usize).into_bytes()),
                    headers: vec![Header {
                        key: "trace".into(),
                        value: Some(b"abc".to_vec().into()),
                    }],
                    timestamp: Some(1_700_000_000_000),
                    topic: None,
                },
            }
        })
        .collect()
}

fn state_batch(c: &mut Criterion) {
    // As the `weir` binary runs: no transparent huge pages (see `weir::thp`).
    weir::thp::disable();
    let broker = EmbeddedBroker::start(1).expect("broker");
    broker.create_topic("in", 1).expect("topic");
    broker
        .create_topic("bench.m.kv.changelog", 1)
        .expect("topic");
    let lane = Lane {
        topic: "in".into(),
        partition: 0,
        generation: 0,
    };
    let key = PartitionKey::new("in", 0);
    let keys = knob("WEIR_BENCH_STATE_KEYS", KEYS as u64) as usize;
    let commit_every = knob("WEIR_BENCH_STATE_COMMIT_EVERY", COMMIT_EVERY);
    let src = src_of(&broker);
    let mut g = c.benchmark_group("state_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    // (row, state, changelog)
    for (name, state, changelog) in [
        ("stateless", false, false),
        ("get_set", true, false),
        ("get_set_changelog_per_commit", true, true),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let cfg = weir::config::load_str(
            std::path::Path::new("bench.yaml"),
            &yaml(dir.path(), broker.bootstrap(), state),
            &|_| None,
        )
        .expect("pipeline");
        let prepared = weir::runtime::prepare(&cfg).expect("stage loads");
        let mut chain = prepared.chain;
        let registry = chain.state();
        let log = changelog
            .then(|| KafkaChangelog::open(&src, None, Default::default(), None).expect("producer"));
        if let Some(log) = &log {
            // As `run_parts` does when the pipeline has a changelog.
            registry.set_cache_of_changelog(log.acks());
        }
        // As a driver does when the lane is assigned.
        chain
            .restore_state(&key, 0, None)
            .expect("the partition's state opens");
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let mut next: i64 = 0;
        let mut batches = 0u64;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let first = next;
                    next += BATCH as i64;
                    batch(first, keys)
                },
                |input| {
                    let first = input[0].offset;
                    let out = chain.run(&lane, input).expect("runs");
                    let send = |changes: &[weir::sink::ChangeRecord]| {
                        if let Some(log) = &log {
                            let n = changes.len() as u32;
                            let t = Ticket::new(key.clone(), 1, first, n, done_tx.clone());
                            log.write(&lane, changes, &t);
                        }
                    };
                    batches += 1;
                    if state && batches.is_multiple_of(commit_every) {
                        let next = first + BATCH as i64;
                        // Each key's last write since the last commit goes out just before
                        // it (here through the plain producer).
                        send(&registry.take_changes(&key, 0, next));
                        registry.commit(&key, next).expect("commit");
                    }
                    while done_rx.try_recv().is_ok() {}
                    std::hint::black_box(out);
                },
                BatchSize::SmallInput,
            )
        });
    }
    // The floor under the changelog row: a batch's 256 changelog records (one per message,
    // what a commit sends when every message wrote a key of its own), made beforehand and
    // produced through the same producer, with no stage and no state.
    let log = KafkaChangelog::open(&src, None, Default::default(), None).expect("producer");
    let topic: std::sync::Arc<str> = "bench.m.kv.changelog".into();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut next: i64 = 0;
    g.bench_function("changelog_records_only", |b| {
        b.iter_batched(
            || {
                let first = next;
                next += BATCH as i64;
                (first..first + BATCH as i64)
                    .map(|o| weir::sink::ChangeRecord {
                        topic: topic.clone(),
                        key: format!("key-{:06}", o as usize % keys).into(),
                        value: Some(weir::state::encode_shared(
                            0,
                            weir_benches::value(o as usize).as_bytes(),
                        )),
                        tag: o,
                    })
                    .collect::<Vec<_>>()
            },
            |records| {
                let t = Ticket::new(
                    key.clone(),
                    1,
                    records[0].tag,
                    BATCH as u32,
                    done_tx.clone(),
                );
                log.write(&lane, &records, &t);
                while done_rx.try_recv().is_ok() {}
                records
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// The Kafka source of the bench's pipelines on `broker` (what their changelog producers open).
fn src_of(broker: &EmbeddedBroker) -> weir::config::KafkaSource {
    let cfg = weir::config::load_str(
        std::path::Path::new("bench.yaml"),
        &yaml(std::path::Path::new("unused"), broker.bootstrap(), false),
        &|_| None,
    )
    .expect("pipeline");
    match cfg.source {
        weir::config::SourceConfig::Kafka(src) => src,
        _ => unreachable!(),
    }
}

fn state_restore(c: &mut Criterion) {
    // As the `weir` binary runs: no transparent huge pages (see `weir::thp`).
    weir::thp::disable();
    // The mock cluster keeps about 4 MB per partition (no compaction): 30,000 records of ~120
    // bytes stay in it.
    const RECORDS: usize = 30_000;
    let broker = EmbeddedBroker::start(1).expect("broker");
    broker.create_topic("in", 1).expect("topic");
    broker
        .create_topic("bench.m.kv.changelog", 1)
        .expect("topic");
    let dir = tempfile::tempdir().expect("dir");
    let cfg = weir::config::load_str(
        std::path::Path::new("bench.yaml"),
        &yaml(dir.path(), broker.bootstrap(), true),
        &|_| None,
    )
    .expect("pipeline");
    let weir::config::SourceConfig::Kafka(src) = &cfg.source else {
        unreachable!()
    };
    let spec = StateSpec::of("bench", &cfg.stages[0]).expect("state");
    let log = KafkaChangelog::open(src, None, Default::default(), None).expect("producer");
    // The changelog: RECORDS writes of ~100-byte values over KEYS keys.
    let lane = Lane {
        topic: "in".into(),
        partition: 0,
        generation: 0,
    };
    let key = PartitionKey::new("in", 0);
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    for chunk in 0..RECORDS / 1000 {
        let records: Vec<weir::sink::ChangeRecord> = (0..1000)
            .map(|i| {
                let n = chunk * 1000 + i;
                weir::sink::ChangeRecord {
                    topic: spec.changelogs[0].clone(),
                    key: format!("key-{:06}", n % KEYS).into(),
                    value: Some(weir::state::encode_shared(
                        0,
                        weir_benches::value(n).as_bytes(),
                    )),
                    tag: n as i64,
                }
            })
            .collect();
        let t = Ticket::new(key.clone(), 1, chunk as i64, 1000, done_tx.clone());
        log.write(&lane, &records, &t);
    }
    for _ in 0..RECORDS / 1000 {
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("changelog acknowledged");
    }
    let mut g = c.benchmark_group("state_restore");
    g.sample_size(10).warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.bench_function("changelog_30k_records", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let empty = tempfile::tempdir().expect("dir");
                let reg =
                    StateRegistry::open_specs(empty.path(), vec![spec.clone()]).expect("store");
                let part = reg
                    .stage("m")
                    .unwrap()
                    .partition(&key, 0)
                    .expect("partition");
                let t0 = Instant::now();
                let r = part.restore(&log).expect("restored");
                took += t0.elapsed();
                assert_eq!(r.records, RECORDS as u64);
            }
            took
        })
    });
    // A restart: a store of 1M keys, checkpointed at the changelog's end.
    let full = tempfile::tempdir().expect("dir");
    {
        let reg = StateRegistry::open_specs(full.path(), vec![spec.clone()]).expect("store");
        let part = reg
            .stage("m")
            .unwrap()
            .partition(&key, 0)
            .expect("partition");
        part.restore(&log).expect("restored");
        let store = reg.stage("m").unwrap().store().clone();
        let mut cp = store.checkpoint(&key).expect("checkpoint");
        for chunk in 0..100 {
            let keys: Vec<(String, Vec<u8>)> = (0..10_000)
                .map(|i| {
                    (
                        format!("big-{:07}", chunk * 10_000 + i),
                        weir::state::encode(0, b"12345678"),
                    )
                })
                .collect();
            let changes: Vec<weir::state::store::Change<'_>> = keys
                .iter()
                .map(|(k, v)| ("kv", k.as_str(), Some(v.as_slice())))
                .collect();
            cp.source_next = Some(0);
            store.apply(&key, &changes, &cp).expect("apply");
        }
    }
    g.throughput(Throughput::Elements(1_000_000));
    g.bench_function("local_checkpoint_1m_keys", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let t0 = Instant::now();
                let reg =
                    StateRegistry::open_specs(full.path(), vec![spec.clone()]).expect("store");
                let part = reg
                    .stage("m")
                    .unwrap()
                    .partition(&key, 0)
                    .expect("partition");
                let r = part.restore(&log).expect("restored");
                took += t0.elapsed();
                assert_eq!(r.records, 0, "nothing to re-read");
                drop((part, reg));
            }
            took
        })
    });
    g.finish();
}

criterion_group!(benches, state_batch, state_restore);
criterion_main!(benches);
