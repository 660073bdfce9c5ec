//! Two builds of a stage (or two stages) on the same batches, interleaved in one process, so a
//! lever (an allocator, a target feature, a rewritten parse) is judged by a ratio that machine
//! noise mostly cancels out of. Each round times `BATCHES` batches of 256 messages with A, then
//! with B; the report is the median time per message of each and the median of the per-round
//! ratios B / A.
//!
//! Run: `cargo run --release -p weir-benches --example ab_stage -- A.wasm B.wasm [ROUNDS]
//! [key=value]...` (default 30 rounds; the config is given to both, e.g. `field=status
//! equals=paid`). Both use the packed batch path.

use std::time::{Duration, Instant};

use weir::config::ContractChoice;
use weir_benches::{engine, instance, lane, messages};

const BATCH: usize = 256;
const BATCHES: usize = 40;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b, rest @ ..] = &args[..] else {
        eprintln!("usage: ab_stage A.wasm B.wasm [ROUNDS] [key=value]...");
        std::process::exit(2);
    };
    let mut rounds = 30usize;
    let mut config = Vec::new();
    for r in rest {
        match r.split_once('=') {
            Some((k, v)) => config.push((k.to_owned(), v.to_owned())),
            None => rounds = r.parse().expect("ROUNDS is a number"),
        }
    }
    let cfg: Vec<(&str, &str)> = config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let engine = engine();
    let lane = lane();
    let batch = messages(BATCH);
    let mut stages = [a, b].map(|p| instance(&engine, p, ContractChoice::Batch, &cfg));
    let mut out = Vec::with_capacity(BATCH);
    let mut time = |i: usize| -> Duration {
        let start = Instant::now();
        for _ in 0..BATCHES {
            out.clear();
            stages[i]
                .process(&lane, &batch, &mut out)
                .expect("stage answers");
        }
        start.elapsed()
    };
    // Warm both (first touch of memory, caches).
    time(0);
    time(1);
    let per_msg = |d: Duration| d.as_nanos() as f64 / (BATCH * BATCHES) as f64;
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (x, y) = (per_msg(time(0)), per_msg(time(1)));
        ta.push(x);
        tb.push(y);
        ratio.push(y / x);
    }
    println!(
        "A {a}: {:.0} ns/msg\nB {b}: {:.0} ns/msg\nB/A (median of {rounds} rounds): {:.3}",
        median(&mut ta),
        median(&mut tb),
        median(&mut ratio)
    );
}
