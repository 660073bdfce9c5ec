#!/usr/bin/env bash
# What serde_json's `float_roundtrip` feature costs a stage that parses JSON (issue 54): the
# Rust SDK's `json` feature turns it on, so every number is read correctly rounded. The same
# small program is built twice, with and without the feature (serde_json's version from this
# workspace's Cargo.lock), and each parses the same documents into `serde_json::Value`:
#
#   orders    the `orders` bench's ~100-byte messages (no float: the feature cannot matter)
#   prices    short decimals (`12.34`, `0.1`, `52.370216`): the shapes most data has
#   doubles   doubles of any bit pattern in their shortest form (17 digits, exponents)
#
# and counts how many of 100,000 doubles of any bit pattern each build reads back as another.
# It prints ns per document for each, best of 5 runs of 200,000 documents, both builds
# alternating in one sitting. Results: docs/BENCHMARKS.md. Run from anywhere:
#   benches/scripts/float-roundtrip.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="$(awk '/^name = "serde_json"$/ { getline; gsub(/[^0-9.]/, "", $0); print; exit }' "$root/Cargo.lock")"
work="${TMPDIR:-/tmp}/weir-float-roundtrip"
mkdir -p "$work/src"
cat >"$work/Cargo.toml" <<TOML
[package]
name = "float-roundtrip"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
serde_json = { version = "=$version", default-features = false, features = ["std"] }

[features]
exact = ["serde_json/float_roundtrip"]

[profile.release]
codegen-units = 1
TOML
cat >"$work/src/main.rs" <<'RUST'
use std::hint::black_box;
use std::time::Instant;

fn docs(kind: &str) -> Vec<String> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..256)
        .map(|i| match kind {
            "orders" => {
                let status = if i % 2 == 0 { "paid" } else { "open" };
                let v = format!(r#"{{"id":{i},"status":"{status}","region":"eu","customer":"c-{i:06}","pad":""#);
                format!("{v}{}\"}}", "x".repeat(100usize.saturating_sub(v.len() + 2)))
            }
            "prices" => format!(
                r#"{{"id":{i},"price":{}.{:02},"discount":0.1,"lat":52.{:06},"lon":4.{:06},"weight":1.25}}"#,
                next() % 1000,
                next() % 100,
                next() % 1_000_000,
                next() % 1_000_000
            ),
            _ => {
                let mut d = || loop {
                    let f = f64::from_bits(next());
                    if f.is_finite() {
                        return f;
                    }
                };
                format!(
                    r#"{{"id":{i},"a":{:?},"b":{:?},"c":{:?},"d":{:?},"e":{:?}}}"#,
                    d(),
                    d(),
                    d(),
                    d(),
                    d()
                )
            }
        })
        .collect()
}

fn main() {
    let build = if cfg!(feature = "exact") { "float_roundtrip" } else { "default" };
    for kind in ["orders", "prices", "doubles"] {
        let docs = docs(kind);
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..(200_000 / docs.len()) {
                for d in &docs {
                    black_box(serde_json::from_str::<serde_json::Value>(black_box(d)).unwrap());
                }
            }
            let n = (200_000 / docs.len()) * docs.len();
            best = best.min(start.elapsed().as_nanos() as f64 / n as f64);
        }
        println!("{build:16} {kind:8} {best:8.1} ns/doc");
    }
    // How many doubles of any bit pattern, in their shortest form, this build reads back
    // as another double.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let (mut wrong, mut n) = (0, 0);
    while n < 100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let d = f64::from_bits(x);
        if !d.is_finite() {
            continue;
        }
        n += 1;
        let back: f64 = serde_json::from_str(&format!("{d:?}")).unwrap();
        wrong += usize::from(back.to_bits() != d.to_bits());
    }
    println!("{build:16} read back wrong: {wrong} of {n} doubles of any bit pattern");
}
RUST
export CARGO_TARGET_DIR="$work/target"
(cd "$work" && cargo build --release --quiet && cp target/release/float-roundtrip default)
(cd "$work" && cargo build --release --quiet --features exact && cp target/release/float-roundtrip exact)
echo "serde_json $version, $(uname -m), $(nproc) cores"
for round in 1 2; do
  echo "round $round"
  "$work/default"
  "$work/exact"
done
