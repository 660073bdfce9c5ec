//! What schema-registry topics cost, in one run (issue 27's goal: decode + encode add at most
//! 1 µs per message for a 20-field record):
//!
//! * `schema_chain/json`: one batch of 256 messages through the chain (`Chain::run`, what a
//!   driver calls) with the `passthrough` stage, the records as JSON text (no codec);
//! * `schema_chain/avro`: the same records in Avro (the Confluent wire format): decoded to
//!   JSON before the stage and encoded to Avro after it, schemas from the cache (a
//!   development registry in-process; no request in the measured loop);
//! * `schema_chain/protobuf`, `schema_chain/json-schema`: the same with the same 20 fields as
//!   a Protobuf message (proto3 JSON mapping) and as JSON Schema (validated both ways);
//! * `schema_codec/decode-*` and `schema_codec/encode-*`: each codec alone, 256 records.
//!
//! Measured with mimalloc, the `weir` binary's allocator, and transparent huge pages off as
//! the binary has them (`weir::thp`).
//!
//! Run: `cargo bench -p weir-benches --bench schema` (results: docs/BENCHMARKS.md).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use weir::message::{Envelope, Lane, Message};
use weir::metrics::Metrics;
use weir::schema::devserver::DevRegistry;
use weir::schema::{Codecs, Scratch};
use weir_tests::plugins::PASSTHROUGH;

const BATCH: usize = 256;

/// 20 fields: longs, ints, strings, doubles, booleans, an enum, a nullable string, a
/// timestamp and a decimal.
const SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"bench","fields":[
 {"name":"id","type":"long"},{"name":"customer","type":"string"},{"name":"region","type":"string"},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["open","paid","shipped"]}},
 {"name":"qty","type":"int"},{"name":"price","type":"double"},{"name":"discount","type":"double"},
 {"name":"vip","type":"boolean"},{"name":"gift","type":"boolean"},{"name":"note","type":["null","string"]},
 {"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"sku","type":"string"},{"name":"warehouse","type":"int"},{"name":"carrier","type":"string"},
 {"name":"weight","type":"double"},{"name":"country","type":"string"},{"name":"zip","type":"string"},
 {"name":"attempts","type":"int"},{"name":"source","type":"string"}
]}"#;

/// The same 20 fields as a Protobuf message.
const PROTO: &str = r#"syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1; string customer = 2; string region = 3; Status status = 4; int32 qty = 5;
  double price = 6; double discount = 7; bool vip = 8; bool gift = 9; optional string note = 10;
  google.protobuf.Timestamp placed = 11; string total = 12; string sku = 13; int32 warehouse = 14;
  string carrier = 15; double weight = 16; string country = 17; string zip = 18;
  int32 attempts = 19; string source = 20;
  enum Status { open = 0; paid = 1; shipped = 2; }
}
"#;

/// The same 20 fields as a JSON Schema.
const JSON_SCHEMA: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Order","type":"object",
 "properties":{"id":{"type":"integer"},"customer":{"type":"string"},"region":{"type":"string"},
 "status":{"enum":["open","paid","shipped"]},"qty":{"type":"integer","minimum":0},"price":{"type":"number"},
 "discount":{"type":"number","maximum":1},"vip":{"type":"boolean"},"gift":{"type":"boolean"},
 "note":{"type":["string","null"]},"placed":{"type":"string","format":"date-time"},
 "total":{"type":"string","pattern":"^[0-9]+\\.[0-9]{2}$"},"sku":{"type":"string"},"warehouse":{"type":"integer"},
 "carrier":{"type":"string"},"weight":{"type":"number"},"country":{"type":"string","maxLength":2},
 "zip":{"type":"string"},"attempts":{"type":"integer"},"source":{"type":"string"}},
 "required":["id","customer","region","status","qty","price","discount","vip","gift","note","placed",
  "total","sku","warehouse","carrier","weight","country","zip","attempts","source"],
 "additionalProperties":false}"#;

fn json(i: usize) -> String {
    format!(
        r#"{{"id":{i},"customer":"c-{i:06}","region":"eu-west","status":"{}","qty":{},"price":{}.5,"discount":0.1,"vip":{},"gift":false,"note":{},"placed":"2026-12-05T01:02:03.{:03}Z","total":"{}.99","sku":"SKU-{i:05}","warehouse":7,"carrier":"dhl","weight":1.25,"country":"DE","zip":"10115","attempts":1,"source":"web"}}"#,
        ["open", "paid", "shipped"][i % 3],
        i % 10,
        i % 100,
        i.is_multiple_of(2),
        if i.is_multiple_of(4) {
            "\"leave at door\"".to_owned()
        } else {
            "null".to_owned()
        },
        i % 1000,
        i % 500
    )
}

fn batch(values: &[Vec<u8>]) -> Vec<Envelope> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Envelope {
            offset: i as i64,
            msg: Message {
                key: Some(format!("key-{i:05}").into_bytes()),
                value: Some(v.clone()),
                headers: Vec::new(),
                timestamp: Some(1_700_000_000_000),
                topic: None,
            },
        })
        .collect()
}

/// A pipeline whose Kafka source decodes and sink encodes with `format` and the schema file.
fn codecs(
    registry: &DevRegistry,
    dir: &std::path::Path,
    format: &str,
    file: &str,
    text: &str,
) -> (weir::config::PipelineConfig, Arc<Codecs>) {
    std::fs::write(dir.join(file), text).expect("schema file");
    let yaml = format!(
        "name: bench\nsource:\n  kafka:\n    brokers: 127.0.0.1:9\n    topics: [in]\n    group: bench\n    decode: {{ registry: {{ url: '{url}' }} }}\nsink:\n  kafka:\n    brokers: 127.0.0.1:9\n    topic: out-{format}\n    encode: {{ format: {format}, registry: {{ url: '{url}' }}, schema: '{schema}', auto_register: true }}\nruntime:\n  watch_plugins: false\nstages:\n  - name: pass\n    plugin: {PASSTHROUGH}\n",
        url = registry.url(),
        schema = dir.join(file).display()
    );
    let cfg = weir::config::load_str(&dir.join("bench.yaml"), &yaml, &|_| None).expect("pipeline");
    let codecs = Codecs::from_config(&cfg, &Metrics::new())
        .expect("codecs")
        .expect("some");
    (cfg, codecs)
}

fn schema(c: &mut Criterion) {
    // As the `weir` binary runs: no transparent huge pages (see `weir::thp`).
    weir::thp::disable();
    let registry = DevRegistry::start("127.0.0.1:0").expect("registry");
    let dir = tempfile::tempdir().expect("dir");
    let texts: Vec<Vec<u8>> = (0..BATCH).map(|i| json(i).into_bytes()).collect();
    let lane = Lane {
        topic: "in".into(),
        partition: 0,
        generation: 0,
    };
    // Per format: the pipeline, its codecs and the records in the wire format (through the
    // encoder), the decoder's schema in the cache as a driver fetches it before a batch.
    let formats: Vec<_> = [
        ("avro", "order.avsc", SCHEMA),
        ("protobuf", "order.proto", PROTO),
        ("json-schema", "order.json", JSON_SCHEMA),
    ]
    .into_iter()
    .map(|(format, file, text)| {
        let (cfg, codecs) = codecs(&registry, dir.path(), format, file, text);
        let encoder = codecs.encode.as_ref().expect("an encoder");
        let wire: Vec<Vec<u8>> = batch(&texts)
            .iter()
            .map(|e| encoder.encode(&e.msg).expect("fits").expect("a value"))
            .collect();
        codecs
            .fetch(batch(&wire).iter().map(|e| &e.msg))
            .expect("the registry answers");
        (format, cfg, codecs, wire)
    })
    .collect();

    let mut g = c.benchmark_group("schema_chain");
    g.throughput(Throughput::Elements(BATCH as u64));
    let plain = [("json", &formats[0].1, None, &texts)];
    let coded = formats
        .iter()
        .map(|(format, cfg, codecs, wire)| (*format, cfg, Some(codecs.clone()), wire));
    for (name, cfg, codecs, input) in plain.into_iter().chain(coded) {
        let mut chain = weir::runtime::prepare(cfg)
            .expect("the stage loads")
            .chain
            .with_codecs(codecs);
        // Every way produces the same outputs: check once.
        let out = chain.run(&lane, batch(input)).expect("runs");
        assert_eq!(
            out.outputs.len(),
            BATCH,
            "{name}: {:?}",
            out.rejects.first().map(|r| &r.reason)
        );
        g.bench_function(name, |b| {
            b.iter_batched(
                || batch(input),
                |input| chain.run(&lane, input).expect("runs"),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    let mut g = c.benchmark_group("schema_codec");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (format, _, codecs, wire) in &formats {
        g.bench_function(format!("decode-{format}"), |b| {
            b.iter_batched(
                || batch(wire),
                |mut input| {
                    // As the chain decodes a batch.
                    let mut decoding = codecs.decoding();
                    for e in &mut input {
                        decoding.decode(&mut e.msg).expect("decodes");
                    }
                    input
                },
                BatchSize::SmallInput,
            )
        });
        let encoder = codecs.encode.as_ref().expect("an encoder");
        g.bench_function(format!("encode-{format}"), |b| {
            b.iter_batched(
                || batch(&texts),
                |input| {
                    // As the chain encodes a batch's outputs.
                    let mut scratch = Scratch::default();
                    input
                        .iter()
                        .map(|e| encoder.encode_after(&e.msg, &mut scratch).expect("fits"))
                        .collect::<Vec<_>>()
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(4));
    targets = schema
}
criterion_main!(benches);
