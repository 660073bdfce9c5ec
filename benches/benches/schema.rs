//! What schema-registry topics cost, in one run (issue 27's goal: decode + encode add at most
//! 1 µs per message for a 20-field record):
//!
//! * `schema_chain/json`: one batch of 256 messages through the chain (`Chain::run`, what a
//!   driver calls) with the `passthrough` stage, the records as JSON text (no codec);
//! * `schema_chain/avro`: the same records in Avro (the Confluent wire format): decoded to
//!   JSON before the stage and encoded to Avro after it, schemas from the cache (a
//!   development registry in-process; no request in the measured loop);
//! * `schema_codec/decode` and `schema_codec/encode`: the codec alone, 256 records.
//!
//! Measured with mimalloc, the `weir` binary's allocator.
//!
//! Run: `cargo bench -p weir-benches --bench schema` (results: docs/BENCHMARKS.md).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use weir::message::{Envelope, Lane, Message};
use weir::metrics::Metrics;
use weir::schema::devserver::DevRegistry;
use weir::schema::Codecs;
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

fn schema(c: &mut Criterion) {
    let registry = DevRegistry::start("127.0.0.1:0").expect("registry");
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("order.avsc"), SCHEMA).expect("schema file");
    let yaml = format!(
        "name: bench\nsource:\n  kafka:\n    brokers: 127.0.0.1:9\n    topics: [in]\n    group: bench\n    decode: {{ registry: {{ url: '{url}' }} }}\nsink:\n  kafka:\n    brokers: 127.0.0.1:9\n    topic: out\n    encode: {{ format: avro, registry: {{ url: '{url}' }}, schema: '{schema}', auto_register: true }}\nruntime:\n  watch_plugins: false\nstages:\n  - name: pass\n    plugin: {PASSTHROUGH}\n",
        url = registry.url(),
        schema = dir.path().join("order.avsc").display()
    );
    let cfg =
        weir::config::load_str(&dir.path().join("bench.yaml"), &yaml, &|_| None).expect("pipeline");
    let codecs = Codecs::from_config(&cfg, &Metrics::new())
        .expect("codecs")
        .expect("some");
    let encoder = codecs.encode.as_ref().expect("an encoder");
    // The records as JSON and, through the encoder, as Avro in the wire format.
    let texts: Vec<Vec<u8>> = (0..BATCH).map(|i| json(i).into_bytes()).collect();
    let avro: Vec<Vec<u8>> = batch(&texts)
        .iter()
        .map(|e| encoder.encode(&e.msg).expect("fits").expect("a value"))
        .collect();
    // The decoder's schema in the cache, as a driver fetches it before a batch.
    let first = batch(&avro);
    codecs
        .fetch(first.iter().map(|e| &e.msg))
        .expect("the registry answers");
    let lane = Lane {
        topic: "in".into(),
        partition: 0,
        generation: 0,
    };

    let mut g = c.benchmark_group("schema_chain");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, input, with_codecs) in [("json", &texts, false), ("avro", &avro, true)] {
        let mut chain = weir::runtime::prepare(&cfg)
            .expect("the stage loads")
            .chain
            .with_codecs(with_codecs.then(|| codecs.clone()));
        // Both ways produce the same JSON for the stage: check once.
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
    g.bench_function("decode", |b| {
        b.iter_batched(
            || batch(&avro),
            |mut input| {
                for e in &mut input {
                    codecs.decode(&mut e.msg).expect("decodes");
                }
                input
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("encode", |b| {
        b.iter_batched(
            || batch(&texts),
            |input| {
                input
                    .iter()
                    .map(|e| encoder.encode(&e.msg).expect("fits"))
                    .collect::<Vec<_>>()
            },
            BatchSize::SmallInput,
        )
    });
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
