//! End to end through a Kafka-protocol broker (librdkafka's mock cluster on loopback TCP, in
//! this process): the whole `weir` pipeline — consumer, lanes, driver, chain, producer with
//! acknowledgements, commits — over the same topic, in one run:
//!
//! * `native`: no stages (the host alone: the "native pass-through pipeline"),
//! * `wasm_1`: one wasm pass-through stage,
//! * `wasm_3`: three wasm pass-through stages,
//! * `wasm_1_drivers_2`: one wasm stage on two driver threads.
//!
//! and, in a second group (`kafka_delivery`), one wasm stage at-least-once vs exactly-once
//! (`delivery: exactly-once`: Kafka transactions per partition) with commit intervals of 100 ms
//! and 1 s. The mock cluster answers the transactional requests without doing their broker-side
//! work (docs/exactly-once.md), so this measures the client side: the per-partition producers,
//! the transaction round trips and the waits for acknowledgements at every commit.
//!
//! Each iteration drains the topic once with a fresh consumer group (`stop_at_end`) and is
//! timed from the first message read to the end (the report's `consuming_ms`), so start-up and
//! group join are not counted. Throughput is messages per second.
//!
//! Run: `cargo bench -p weir-benches --bench kafka` (results: docs/BENCHMARKS.md).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_benches::kafka::{broker, drain, state_yaml, yaml, yaml_with, N};
use weir_tests::plugins::{MISBEHAVE, PASSTHROUGH};

fn end_to_end(c: &mut Criterion) {
    let broker = broker();
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
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| drain(&yaml(&bootstrap, PASSTHROUGH, stages, drivers)))
                    .sum()
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("kafka_delivery");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N as u64));
    for interval in ["100ms", "1s"] {
        for delivery in ["at-least-once", "exactly-once"] {
            g.bench_function(format!("{delivery}_{interval}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            drain(&yaml_with(
                                &bootstrap,
                                PASSTHROUGH,
                                1,
                                1,
                                delivery,
                                interval,
                            ))
                        })
                        .sum()
                })
            });
        }
    }
    g.finish();
}

/// A stateful stage (`misbehave` with one `get` and one `set` per message) vs the same stage
/// without state, at-least-once and exactly-once (commit interval 1 s).
fn with_state(c: &mut Criterion) {
    let broker = broker();
    let bootstrap = broker.bootstrap().to_owned();
    let mut g = c.benchmark_group("kafka_state");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N as u64));
    for delivery in ["at-least-once", "exactly-once"] {
        // `get_set_kept`: the state dir survives from one drain to the next (a restart: the
        // restore reads only what the last drain wrote); `get_set`: a new state dir each time
        // (the restore reads the whole changelog the mock cluster kept).
        for (name, state, keep) in [
            ("stateless", false, false),
            ("get_set", true, false),
            ("get_set_kept", true, true),
        ] {
            let kept = tempfile::tempdir().expect("state dir");
            g.bench_function(format!("{delivery}_{name}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            let fresh = tempfile::tempdir().expect("state dir");
                            let dir = if keep { kept.path() } else { fresh.path() };
                            drain(&state_yaml(&bootstrap, MISBEHAVE, delivery, state, dir))
                        })
                        .sum()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, end_to_end, with_state);
criterion_main!(benches);
