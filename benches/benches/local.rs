//! The local path end to end: a JSONL file → the whole runtime (source thread, controller,
//! lane, driver, chain, discard sink, commits) → discard, in one run:
//!
//! * `native`: no stages (the runtime alone),
//! * `wasm_1`: one wasm pass-through stage.
//!
//! Each iteration runs the pipeline over the same file of [`N`] ~100-byte JSON messages and is
//! timed from the first message read to the end (the report's `consuming_ms`). Throughput is
//! messages per second.
//!
//! Run: `cargo bench -p weir-benches --bench local` (results: docs/BENCHMARKS.md).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir::runtime::{self, RunOptions};
use weir_tests::plugins::PASSTHROUGH;

/// Messages in the file.
const N: usize = 200_000;

fn local(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, weir_benches::kafka::seed_lines(N)).expect("input file");
    let mut g = c.benchmark_group("local_e2e");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(15))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N as u64));
    for (name, stages) in [("native", 0), ("wasm_1", 1)] {
        let mut yaml = format!("source:\n  jsonl:\n    path: {}\n", input.display());
        yaml.push_str(if stages == 0 {
            "stages: []\n"
        } else {
            "stages:\n"
        });
        for i in 0..stages {
            yaml.push_str(&format!("  - name: pass{i}\n    plugin: {PASSTHROUGH}\n"));
        }
        yaml.push_str("sink:\n  discard: {}\nruntime:\n  watch_plugins: false\n");
        let cfg = weir::config::load_str(std::path::Path::new("bench.yaml"), &yaml, &|_| None)
            .expect("bench pipeline");
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let r = runtime::run(&cfg, &RunOptions::default()).expect("runs");
                        assert_eq!(r.read as usize, N);
                        Duration::from_secs_f64(r.consuming_ms / 1e3)
                    })
                    .sum()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, local);
criterion_main!(benches);
