//! Exactly-once vs at-least-once on the Kafka end-to-end pipeline, interleaved: every round
//! drains the topic once per (commit interval, delivery) pair, so a noisy machine slows both
//! sides of a ratio alike (criterion's `kafka_delivery` group runs them one after the other).
//! Prints each drain's consuming time, then per interval the medians and the throughput
//! ratio exactly-once / at-least-once (of the medians).
//!
//! Run: `cargo run --release -p weir-benches --example kafka_delivery -- [ROUNDS]` (default 15).

use std::time::Duration;

use weir_benches::kafka::{broker, drain, yaml_with};
use weir_tests::plugins::PASSTHROUGH;

const INTERVALS: [&str; 2] = ["100ms", "1s"];
const DELIVERIES: [&str; 2] = ["at-least-once", "exactly-once"];

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(15, |a| a.parse().expect("ROUNDS is a number"));
    let b = broker();
    let mut times = vec![vec![Vec::new(); DELIVERIES.len()]; INTERVALS.len()];
    for round in 0..rounds {
        for (i, interval) in INTERVALS.into_iter().enumerate() {
            for (d, delivery) in DELIVERIES.into_iter().enumerate() {
                let text = yaml_with(b.bootstrap(), PASSTHROUGH, 1, 1, delivery, interval);
                let took = drain(&text);
                println!(
                    "round {round:2} {interval:5} {delivery:13} consuming {:5} ms",
                    took.as_millis()
                );
                times[i][d].push(took);
            }
        }
    }
    for (i, interval) in INTERVALS.into_iter().enumerate() {
        let alo = median(&mut times[i][0]);
        let eos = median(&mut times[i][1]);
        println!(
            "commit_interval {interval:5}: median at-least-once {:4} ms, exactly-once {:4} ms: \
             exactly-once throughput = {:.0} % of at-least-once ({rounds} rounds)",
            alo.as_millis(),
            eos.as_millis(),
            100.0 * alo.as_secs_f64() / eos.as_secs_f64()
        );
    }
}
