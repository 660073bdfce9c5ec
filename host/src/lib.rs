//! Weir: a host for chains of sandboxed WebAssembly stream-processing stages.
//!
//! See `docs/ARCHITECTURE.md` for the thread anatomy, the data path, the stage contract and
//! the hot-swap protocol. The modules, in data-path order:
//!
//! * [`config`] — the pipeline YAML (and its JSON Schema); each source and sink config builds
//!   its component,
//! * [`source`] — where messages come from (Kafka, JSONL file, stdin) behind one `Source` trait,
//! * [`engine`] — the wasmtime engine, compiled-component cache, plugins and instances,
//! * [`chain`] — one batch through every stage in order,
//! * [`schema`] — schema-registry topics: Avro decoded to JSON before the chain, encoded after,
//! * [`sink`] — where results go (Kafka, JSONL file, stdout, discard) behind one `Sink` trait,
//! * [`runtime`] — the one runtime: controller, lanes, drivers, flow control, commits, shutdown,
//! * [`kafka`] — librdkafka plumbing shared by the Kafka source and sink, and the embedded broker,
//! * [`metrics`] — Prometheus metrics (a leaf everything reports into),
//! * [`redact`] — secrets out of logs, errors, the report and `/metrics`,
//! * [`reload`] — hot swap of plugins while the pipeline runs,
//! * [`rollout`] — each stage's live version and candidate: shadow, canary, promotion, rollback,
//! * [`admin`] — the HTTP listener: metrics, health and the admin API (`/stages`),
//! * [`report`] — the exit report,
//! * [`cli`] — the `weir` subcommands.
#![deny(unsafe_code)]

pub mod ack;
pub mod admin;
pub mod chain;
pub mod cli;
pub mod config;
pub mod engine;
pub mod jsonl;
pub mod kafka;
pub mod message;
pub mod metrics;
pub mod redact;
pub mod reload;
pub mod report;
pub mod rollout;
pub mod runtime;
pub mod schema;
mod sigpipe;
pub mod sink;
pub mod source;
pub mod state;
pub mod thp;
