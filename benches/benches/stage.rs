//! Per-message cost of a stage, measured through the same `StageInstance::process` the
//! pipeline's drivers call, next to a native-Rust baseline in the same run.
//!
//! * `boundary/*`: the passthrough stage on the packed batch path and on the typed path, at
//!   batch 1/64/256/1024 (host encode + call + decode: the "boundary + host cost").
//! * `json_filter/*`: the JSON filter compiled natively (same Rust function, called directly)
//!   vs as a wasm stage on the batch path, batch 256.
//! * `swap/*`: what a driver pauses for at a hot swap with a warm cache: a new instance + init.
//! * `rollout/*`: one JSON-filter stage through the chain alone, with a shadow candidate (the
//!   same plugin: every answer is compared), and as a canary whose share does not include the
//!   lane (routing only) or splits the batch by key (50%), batch 256.
//!
//! Run: `cargo bench -p weir-benches` (results and commands: docs/BENCHMARKS.md).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir::config::ContractChoice;
use weir::engine::{StageInstance, Verdict};
use weir_benches::{engine, instance, lane, messages, spec};
use weir_sdk::testing::TestMessage;
use weir_tests::plugins;

const BATCHES: [usize; 4] = [1, 64, 256, 1024];

fn boundary(c: &mut Criterion) {
    let engine = engine();
    let lane = lane();
    let mut g = c.benchmark_group("boundary");
    for n in BATCHES {
        let batch = messages(n);
        g.throughput(Throughput::Elements(n as u64));
        // Native baseline: the same decision in plain Rust (look at the message, keep it).
        let natives: Vec<TestMessage> = batch
            .iter()
            .map(|e| TestMessage::value(e.msg.value.clone().unwrap()))
            .collect();
        g.bench_with_input(BenchmarkId::new("native", n), &natives, |b, msgs| {
            let mut out = Vec::with_capacity(n);
            b.iter(|| {
                out.clear();
                for m in msgs {
                    out.push(passthrough_native(&m.borrow()));
                }
                std::hint::black_box(&out);
            })
        });
        for (name, contract) in [
            ("wasm_batch", ContractChoice::Batch),
            ("wasm_typed", ContractChoice::Typed),
        ] {
            let mut inst = instance(&engine, plugins::PASSTHROUGH, contract, &[]);
            let mut out = Vec::with_capacity(n);
            g.bench_with_input(BenchmarkId::new(name, n), &batch, |b, batch| {
                b.iter(|| {
                    out.clear();
                    inst.process(&lane, batch, &mut out).unwrap();
                    assert!(matches!(out.last(), Some(Verdict::Keep)));
                })
            });
        }
    }
    g.finish();
}

fn passthrough_native(_m: &weir_sdk::Message<'_>) -> weir_sdk::Outcome {
    weir_sdk::Outcome::Keep
}

fn json_filter(c: &mut Criterion) {
    let engine = engine();
    let lane = lane();
    let cfg = [("field", "status"), ("equals", "paid")];
    let mut g = c.benchmark_group("json_filter");
    for n in [64, 256] {
        let batch = messages(n);
        g.throughput(Throughput::Elements(n as u64));
        let natives: Vec<TestMessage> = batch
            .iter()
            .map(|e| TestMessage::value(e.msg.value.clone().unwrap()).key("k"))
            .collect();
        let state = json_filter::setup(&weir_sdk::Config::from_pairs(cfg)).unwrap();
        g.bench_with_input(BenchmarkId::new("native", n), &natives, |b, msgs| {
            let mut out = Vec::with_capacity(n);
            b.iter(|| {
                out.clear();
                for m in msgs {
                    out.push(json_filter::json_filter(&m.borrow(), &state));
                }
                std::hint::black_box(&out);
            })
        });
        let mut inst = instance(&engine, plugins::JSON_FILTER, ContractChoice::Batch, &cfg);
        let mut out = Vec::with_capacity(n);
        g.bench_with_input(BenchmarkId::new("wasm_batch", n), &batch, |b, batch| {
            b.iter(|| {
                out.clear();
                inst.process(&lane, batch, &mut out).unwrap();
                assert_eq!(out.len(), n);
            })
        });
    }
    g.finish();
}

fn swap(c: &mut Criterion) {
    let engine = engine();
    let mut g = c.benchmark_group("swap");
    for (name, path, cfg) in [
        ("passthrough", plugins::PASSTHROUGH, &[][..]),
        (
            "json_filter",
            plugins::JSON_FILTER,
            &[("field", "status")][..],
        ),
    ] {
        let p = Arc::new(
            engine
                .load_plugin("bench", std::path::Path::new(path))
                .unwrap(),
        );
        let spec = spec(ContractChoice::Auto, cfg);
        g.bench_function(BenchmarkId::new("instantiate_init", name), |b| {
            b.iter(|| StageInstance::new(&engine, spec.clone(), p.clone()).unwrap())
        });
    }
    g.finish();
}

fn rollout(c: &mut Criterion) {
    use weir::chain::Chain;
    use weir::config::{CanaryBy, Observe, Percent, RollbackWhen, RolloutConfig, RolloutMode};
    use weir::rollout::StageSlot;
    let engine = engine();
    // Partition 1 is outside a 50% lane share (see `rollout::split`).
    let lane = weir::message::Lane {
        topic: "bench".into(),
        partition: 1,
        generation: 0,
    };
    let cfg = [("field", "status"), ("equals", "paid")];
    let plugin = Arc::new(
        engine
            .load_plugin("bench", std::path::Path::new(plugins::JSON_FILTER))
            .unwrap(),
    );
    let never = RollbackWhen {
        trap: 0,
        fail: 0,
        reject_rate: None,
        diff_rate: None,
        slower: None,
    };
    let policy = |mode, by| RolloutConfig {
        mode,
        by,
        share: Percent(0.5),
        observe: Observe::Messages(u64::MAX),
        rollback_when: never.clone(),
        ..RolloutConfig::default()
    };
    let n = 256;
    let batch = messages(n);
    let mut g = c.benchmark_group("rollout");
    g.throughput(Throughput::Elements(n as u64));
    for (name, mode, by) in [
        ("single", RolloutMode::Immediate, CanaryBy::Lane),
        ("shadow", RolloutMode::Shadow, CanaryBy::Lane),
        ("canary_lane_outside", RolloutMode::Canary, CanaryBy::Lane),
        ("canary_key_half", RolloutMode::Canary, CanaryBy::Key),
    ] {
        let slot = Arc::new(StageSlot::new(
            spec(ContractChoice::Batch, &cfg),
            plugins::JSON_FILTER.into(),
            RolloutConfig::default(),
            plugin.clone(),
        ));
        if mode != RolloutMode::Immediate {
            slot.start_rollout(plugin.clone(), policy(mode, by), "bench")
                .unwrap();
        }
        let mut chain = Chain::new(&engine, &[slot]).unwrap();
        g.bench_with_input(BenchmarkId::new(name, n), &batch, |b, batch| {
            b.iter(|| {
                let out = chain.run(&lane, batch.clone()).unwrap();
                assert_eq!(out.outputs.len(), n / 2);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    targets = boundary, json_filter, swap, rollout
}
criterion_main!(benches);
