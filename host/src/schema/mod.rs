//! Schema-registry topics (docs/schema-registry.md): records in the Confluent wire format (a
//! zero byte, a 4-byte schema id, the encoded record) are decoded to JSON text before the
//! first stage and outputs encoded after the last, so a stage in any language works on JSON.
//!
//! * [`registry`] — the registry client and its cache,
//! * [`avro`] — Avro binary ↔ JSON text, compiled from the schema,
//! * [`protobuf`] — Protobuf ↔ JSON text (proto3 JSON mapping), the schema compiled in-process,
//! * [`json_schema`] — JSON Schema validation of records and outputs,
//! * [`json`] — a JSON value that borrows its text (what the Avro encoder reads),
//! * [`codec`] — the decoder and encoder the chain runs, and what they reject,
//! * [`local`] — records of a JSONL source written as JSON beside their schema,
//! * [`devserver`] — a small registry for development (`weir broker --schema-registry`).

pub mod avro;
pub mod codec;
pub mod devserver;
pub mod json;
pub mod json_schema;
pub mod local;
pub mod protobuf;
pub mod registry;
pub mod wire;

pub use codec::{Codecs, Decoder, Decoding, Encoder, Scratch};
pub use registry::{LookupError, Registry, SchemaKind};
pub use wire::CodecReject;
