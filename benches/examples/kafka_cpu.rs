//! Wall and CPU time per drain of the Kafka end-to-end pipeline, native pass-through vs one
//! wasm pass-through stage, alternating in one run. CPU time is the whole process's (user +
//! system, every thread: broker, librdkafka, controller, driver), read from `/proc/self/stat`,
//! so a run that waits shows as wall time without CPU time.
//!
//! Run: `cargo run --release -p weir-benches --example kafka_cpu -- [ROUNDS]` (default 5).

use std::time::Duration;

use weir_benches::kafka::{broker, drain, yaml, N};
use weir_tests::plugins::PASSTHROUGH;

/// User + system time of this process so far.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses): utime and stime are the 12th
    // and 13th, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().expect("tick count"))
        .collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(5, |a| a.parse().expect("ROUNDS is a number"));
    let b = broker();
    let mut sums = [(Duration::ZERO, Duration::ZERO); 2];
    for round in 0..rounds {
        for (i, (name, stages)) in [("native", 0), ("wasm_1", 1)].into_iter().enumerate() {
            let text = yaml(b.bootstrap(), PASSTHROUGH, stages, 1);
            let c0 = cpu();
            let wall = drain(&text);
            let used = cpu() - c0;
            sums[i].0 += wall;
            sums[i].1 += used;
            println!(
                "round {round} {name:7} consuming {:5} ms  cpu (whole run) {:5} ms",
                wall.as_millis(),
                used.as_millis()
            );
        }
    }
    for (i, name) in ["native", "wasm_1"].into_iter().enumerate() {
        let (wall, used) = sums[i];
        let secs = wall.as_secs_f64() / rounds as f64;
        println!(
            "{name:7} mean consuming {:5.0} ms ({:.0} k msg/s), cpu {:5.0} ms",
            secs * 1e3,
            N as f64 / secs / 1e3,
            used.as_secs_f64() * 1e3 / rounds as f64
        );
    }
}
