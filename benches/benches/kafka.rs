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

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_benches::kafka::{broker, drain, yaml, N};
use weir_tests::plugins::PASSTHROUGH;

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
}

criterion_group!(benches, end_to_end);
criterion_main!(benches);
