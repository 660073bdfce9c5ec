//! Weir: a host for chains of sandboxed WebAssembly stream-processing stages.
//!
//! See `docs/ARCHITECTURE.md` for the thread anatomy, the data path, the stage contract and
//! the hot-swap protocol. The modules, in data-path order:
//!
//! * [`config`] — the pipeline YAML (and its JSON Schema),
//! * [`source`] — where messages come from (JSONL file, stdin),
//! * [`engine`] — the wasmtime engine, compiled-component cache, plugins and stage instances,
//! * [`chain`] — one batch through every stage in order,
//! * [`sink`] — where messages go (JSONL file, stdout, discard) and the reject path,
//! * [`pipeline`] — the threads that tie them together, signals, the run summary,
//! * [`kafka`] — the Kafka runtime: controller, lanes, drivers, producer, commits, rebalance,
//! * [`metrics`] — Prometheus metrics and the health endpoints,
//! * [`reload`] — hot swap of plugins while the pipeline runs,
//! * [`cli`] — the `weir` subcommands.
#![deny(unsafe_code)]

pub mod chain;
pub mod cli;
pub mod config;
pub mod engine;
pub mod jsonl;
pub mod kafka;
pub mod message;
pub mod metrics;
pub mod pipeline;
pub mod reload;
pub mod report;
pub mod sink;
pub mod source;
pub mod watermark;
