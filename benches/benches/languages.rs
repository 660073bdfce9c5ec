//! The same job in every language: the `orders` example stage (parse JSON, keep `status ==
//! "paid"`, add a field, reject malformed input) over one batch of 256 ~100-byte messages, half
//! of them kept, through the same `StageInstance::process` the pipeline's drivers call:
//!
//! * `native`: the Rust stage function compiled natively and called directly (the baseline),
//! * `rust_batch` / `c_batch`: the Rust and C SDK components on the packed path,
//! * `c_typed`, `python_typed`, `js_typed`: the typed per-message path;
//! * `python_batch`, `js_batch`: the same Python and JavaScript components on the packed path
//!   (their SDKs export both); `js_aot_batch`: the JS stage built with `weir-build-js --aot`;
//! * `go_batch`, `go_typed`: the Go SDK component (Go 1.24+, wasip1) on both paths;
//! * `floor/*`: a Python, a JavaScript and a Go stage that only read the value and keep it
//!   (the boundary and interpreter or runtime entry without the JSON work).
//!
//! The C, Python, JavaScript and Go components are built by `scripts/build-plugins` (run first with
//! `cargo build --release -p weir`; the bench builds them when missing).
//! Run: `cargo bench -p weir-benches --bench languages` (results: docs/BENCHMARKS.md).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir::config::ContractChoice;
use weir::engine::Verdict;
use weir_benches::{engine, instance, lane, messages};
use weir_sdk::testing::TestMessage;
use weir_tests::languages;

const N: usize = 256;
const CONFIG: [(&str, &str); 4] = [
    ("field", "status"),
    ("equals", "paid"),
    ("tag", "checked"),
    ("tag_value", "yes"),
];

fn orders(c: &mut Criterion) {
    let weir = languages::root().join("target/release/weir");
    assert!(
        weir.exists(),
        "build the weir binary first: cargo build --release -p weir"
    );
    let weir = weir.display().to_string();
    let engine = engine();
    let lane = lane();
    let batch = messages(N);
    let mut g = c.benchmark_group("orders");
    g.throughput(Throughput::Elements(N as u64));

    let natives: Vec<TestMessage> = batch
        .iter()
        .map(|e| TestMessage::value(e.msg.value.clone().unwrap()).key("k"))
        .collect();
    let state = orders_rust::setup(&weir_sdk::Config::from_pairs(CONFIG)).unwrap();
    g.bench_function(BenchmarkId::new("native", N), |b| {
        let mut out = Vec::with_capacity(N);
        b.iter(|| {
            out.clear();
            for m in &natives {
                out.push(orders_rust::orders(&m.borrow(), &state));
            }
            std::hint::black_box(&out);
        })
    });

    for (name, plugin, contract) in [
        ("rust_batch", "orders-rust", ContractChoice::Batch),
        ("c_batch", "orders-c", ContractChoice::Batch),
        ("c_typed", "orders-c", ContractChoice::Typed),
        ("python_typed", "orders-python", ContractChoice::Typed),
        ("python_batch", "orders-python", ContractChoice::Batch),
        ("js_typed", "orders-js", ContractChoice::Typed),
        ("js_batch", "orders-js", ContractChoice::Batch),
        ("js_aot_batch", "orders-js-aot", ContractChoice::Batch),
        ("go_batch", "orders-go", ContractChoice::Batch),
        ("go_typed", "orders-go", ContractChoice::Typed),
    ] {
        let path = languages::plugin(&weir, plugin);
        let mut inst = instance(&engine, &path, contract, &CONFIG);
        let mut out = Vec::with_capacity(N);
        g.bench_function(BenchmarkId::new(name, N), |b| {
            b.iter(|| {
                out.clear();
                inst.process(&lane, &batch, &mut out).unwrap();
                let kept = out
                    .iter()
                    .filter(|v| matches!(v, Verdict::Next(m) if m.len() == 1))
                    .count();
                if kept != N / 2 {
                    let odd: Vec<_> = out
                        .iter()
                        .filter(|v| !matches!(v, Verdict::Next(_)))
                        .collect();
                    panic!("{name}: {kept} of {} paid orders kept; {odd:?}", N / 2);
                }
            })
        });
    }
    g.finish();

    // The floor of an interpreted stage: a stage that reads the value as text and keeps the
    // message (`plugins/probe-*`), so boundary + interpreter entry + glue, without the JSON
    // work of `orders`.
    let mut g = c.benchmark_group("floor");
    g.throughput(Throughput::Elements(N as u64));
    for (name, plugin, contract) in [
        ("python_typed", "probe-python", ContractChoice::Typed),
        ("python_batch", "probe-python", ContractChoice::Batch),
        ("js_typed", "probe-js", ContractChoice::Typed),
        ("js_batch", "probe-js", ContractChoice::Batch),
        ("go_typed", "probe-go", ContractChoice::Typed),
        ("go_batch", "probe-go", ContractChoice::Batch),
    ] {
        let path = languages::plugin(&weir, plugin);
        let mut inst = instance(&engine, &path, contract, &[]);
        let mut out = Vec::with_capacity(N);
        g.bench_function(BenchmarkId::new(name, N), |b| {
            b.iter(|| {
                out.clear();
                inst.process(&lane, &batch, &mut out).unwrap();
                assert!(
                    out.iter().all(|v| matches!(v, Verdict::Keep)),
                    "{name}: {out:?}"
                );
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = orders
}
criterion_main!(benches);
