//! Benchmarks only: see `benches/stage.rs` and docs/BENCHMARKS.md.
