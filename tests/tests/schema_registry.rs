//! Schema-registry topics end to end (docs/schema-registry.md): records written by an
//! independent client (confluent-kafka's `AvroSerializer`, against `weir broker
//! --schema-registry`) are decoded by Weir to JSON for the stage, and Weir's encoded outputs
//! are read back by that client's `AvroDeserializer`. Bad records and outputs that do not fit
//! go to the reject path with their reasons; a registry that is down holds the lane.

use std::time::{Duration, Instant};

use weir_tests::kafka::{spawn_weir, Broker};
use weir_tests::plugins::PASSTHROUGH;
use weir_tests::secure::{python_run, tool, tools};
use weir_tests::{
    free_port, gauge, json_lines, outcomes, scrape, scratch, stage, try_scrape, Scratch,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// v1 of the input: nested records, an array of records, a map, unions (one with three
/// branches), an enum, and the logical types with a stated JSON form.
const ORDER_V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[
   {"name":"name","type":"string"},{"name":"vip","type":"boolean"}]}},
 {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
   {"name":"sku","type":"string"},{"name":"qty","type":"int"},
   {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}}},
 {"name":"attrs","type":{"type":"map","values":"string"}},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","CANCELLED"]}},
 {"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"ref","type":{"type":"string","logicalType":"uuid"}},
 {"name":"blob","type":"bytes"},
 {"name":"code","type":{"type":"fixed","name":"Code","size":4}},
 {"name":"score","type":["null","double","string"]}
]}"#;

/// Python: the producer's records (`make(i)`) and the schemas, shared by both scripts.
fn python_prelude(b: &Broker, s: &Scratch) -> String {
    let v1 = s.write("order-v1.avsc", ORDER_V1);
    // v2 adds a field with a default (schema evolution on one subject).
    let v2 = ORDER_V1.replace(
        r#" {"name":"score""#,
        r#" {"name":"channel","type":"string","default":"web"},
 {"name":"score""#,
    );
    let v2 = s.write("order-v2.avsc", &v2);
    format!(
        r#"
import datetime, decimal, json, math, struct, uuid
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient, Schema
from confluent_kafka.schema_registry.avro import AvroSerializer, AvroDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField
BS = "{bs}"
sr = SchemaRegistryClient({{"url": "{url}"}})
V1 = open("{v1}").read()
V2 = open("{v2}").read()
STATUS = ["NEW", "PAID", "CANCELLED"]
# Doubles a best-effort reader gets one ulp off (issue 54), the range's edges, then doubles of
# any bit pattern: each must come back equal.
EDGE = [2.849334360432075e-17, -3.8524530647661083e+25, 4.1803008046001145e-13, 5e-324,
    -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308, 0.1, 1e23]
def double(i):
    if i // 3 < len(EDGE):
        return EDGE[i // 3]
    x = struct.unpack("<d", ((i * 0x9E3779B97F4A7C15) % 2**64).to_bytes(8, "little"))[0]
    return x if math.isfinite(x) else i / 8.0
def make(i):
    r = {{
        "id": i - 5,
        "customer": {{"name": "cüstomer \"%d\"" % i, "vip": i % 2 == 0}},
        "items": [{{"sku": "s%d-%d" % (i, k), "qty": k - 1, "price": decimal.Decimal(i * 100 + k).scaleb(-2) * (-1 if k == 2 else 1)}} for k in range(i % 4)],
        "attrs": {{"k%d" % k: "v" * k for k in range(i % 3)}},
        "note": None if i % 5 else "note %d" % i,
        "status": STATUS[i % 3],
        "placed": datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc) + datetime.timedelta(milliseconds=i * 1001 - 50000),
        "day": datetime.date(1969, 12, 1) + datetime.timedelta(days=i),
        "ref": uuid.UUID(int=i * 7919),
        "blob": bytes(range(i % 7)) + b"\xff",
        "code": bytes([i % 256, 0, 255, 7]),
        "score": [None, double(i), "s%d" % i][i % 3],
    }}
    return r
"#,
        bs = b.bootstrap,
        url = b.registry.as_deref().expect("the broker's registry"),
        v1 = v1.display(),
        v2 = v2.display()
    )
}

/// Reads `out` back with the independent client: `setup` defines `d` (the deserializer) and
/// `expect(i)` (what the i-th output must equal, as `value(m)` gives it); records whose
/// `i % 3 == 2` must be missing (rejected). Asserts none is missing, extra, duplicated or
/// different, and one schema id; returns the summary (`schemas`, `subjects`).
fn read_back(python: &str, prelude: &str, setup: &str, value: &str, n: usize) -> serde_json::Value {
    let seen = python_run(
        python,
        &format!(
            r#"{prelude}
{setup}
c = Consumer({{"bootstrap.servers": BS, "group.id": "py-read-back", "enable.partition.eof": True}})
c.assign([TopicPartition("out", 0, 0)])
got, bad, schema_ids = {{}}, [], set()
while True:
    m = c.poll(10)
    assert m is not None, "timed out reading out"
    if m.error():
        break
    schema_ids.add(int.from_bytes(m.value()[1:5], "big"))
    i = int(m.key())
    v, want = {value}, expect(i)
    if v != want:
        bad.append((i, repr(v), repr(want)))
    got[i] = got.get(i, 0) + 1
want = [i for i in range({n}) if i % 3 != 2]
print(json.dumps({{"missing": [i for i in want if i not in got], "extra": [i for i in got if i not in want],
    "duplicated": [i for i, k in got.items() if k > 1], "different": bad[:2], "n_different": len(bad),
    "schemas": sorted(schema_ids), "subjects": sr.get_subjects()}}))
"#
        ),
    );
    let seen: serde_json::Value = serde_json::from_str(seen.trim()).expect("the reader's summary");
    for k in ["missing", "extra", "duplicated", "different"] {
        assert_eq!(seen[k], serde_json::json!([]), "{k}: {seen}");
    }
    assert_eq!(seen["schemas"].as_array().unwrap().len(), 1, "{seen}");
    seen
}

#[test]
fn avro_from_an_independent_producer_is_decoded_for_the_stage_and_encoded_for_an_independent_reader(
) {
    let t = tools();
    let python = tool(&t, "WEIR_KAFKA_PYTHON");
    let b = Broker::with_registry(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let s = scratch!();
    let prelude = python_prelude(&b, &s);
    let n = 300;
    // v1 and v2 interleaved on one subject, then four bad records.
    let ids = python_run(
        &python,
        &format!(
            r#"{prelude}
p = Producer({{"bootstrap.servers": BS}})
ctx = SerializationContext("in", MessageField.VALUE)
s1, s2 = AvroSerializer(sr, V1), AvroSerializer(sr, V2)
for i in range({n}):
    r = make(i)
    if i % 2:
        r["channel"] = "app%d" % i
        p.produce("in", key=str(i), value=s2(r, ctx))
    else:
        p.produce("in", key=str(i), value=s1(r, ctx))
id1 = sr.lookup_schema("in-value", Schema(V1, "AVRO")).schema_id
id2 = sr.lookup_schema("in-value", Schema(V2, "AVRO")).schema_id
p.produce("in", key="bad-no-magic", value=b'{{"id": 1}}')
p.produce("in", key="bad-truncated", value=b"\x00\x00\x00")
p.produce("in", key="bad-unknown-id", value=b"\x00\x00\x00\x03\xe7\x02")
p.produce("in", key="bad-not-its-schema", value=b"\x00" + id1.to_bytes(4, "big") + b"\x02\xff\xff\xff")
assert p.flush(30) == 0
print(id1, id2)
"#
        ),
    );
    let ids: Vec<u32> = ids.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");

    // The output schema: v2 whose Status has no CANCELLED (those outputs do not fit).
    let out_schema = ORDER_V1.replace(r#","CANCELLED"]"#, "]").replace(
        r#" {"name":"score""#,
        r#" {"name":"channel","type":"string","default":"web"},
 {"name":"score""#,
    );
    s.write("order-out.avsc", &out_schema);
    let registry = b.registry.clone().unwrap();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: avro\n    stop_at_end: true\n    decode: {{ format: auto, registry: {{ url: '{registry}' }} }}\nstages:\n{st}sink:\n  kafka:\n    brokers: {bs}\n    topic: out\n    encode:\n      format: avro\n      registry: {{ url: '{registry}' }}\n      schema: order-out.avsc\n      auto_register: true\nreject:\n  kafka:\n    brokers: {bs}\n    topic: dlq\nruntime:\n  connect_timeout: 10s\n",
        bs = b.bootstrap,
        st = stage("pass", PASSTHROUGH, &[])
    );
    s.write("avro.yaml", &yaml);
    let out = s.run(&["run", "avro.yaml", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir run: {err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    let cancelled = (0..n).filter(|i| i % 3 == 2).count();
    assert_eq!(report["read"], n + 4, "{report}");
    assert_eq!(report["written"], n - cancelled, "{report}");
    assert_eq!(report["rejected"], cancelled + 4, "{report}");

    // The independent reader decodes every output with the schema Weir registered, and
    // each equals what was produced (v1 records with v2's default filled in).
    let seen = read_back(
        &python,
        &prelude,
        r#"d = AvroDeserializer(sr)
def expect(i):
    want = make(i)
    want["channel"] = "app%d" % i if i % 2 else "web"
    return want"#,
        r#"d(m.value(), SerializationContext("out", MessageField.VALUE))"#,
        n,
    );
    assert!(
        seen["subjects"]
            .as_array()
            .unwrap()
            .contains(&"out-value".into()),
        "the output schema was registered under out-value: {seen}"
    );

    // Each bad record and each output that does not fit is on the reject path with a reason
    // that says what was wrong; the stage saw the schema of each decoded record.
    let dlq = b.read("dlq");
    assert_eq!(dlq.len(), cancelled + 4, "{dlq:?}");
    let reason = |key: &str| {
        dlq.iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("no reject for {key}: {dlq:?}"))
            .header("weir.reason")
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        reason("bad-no-magic").contains("magic byte"),
        "{}",
        reason("bad-no-magic")
    );
    assert!(
        reason("bad-truncated").contains("too short"),
        "{}",
        reason("bad-truncated")
    );
    assert!(
        reason("bad-unknown-id").contains("schema id 999"),
        "{}",
        reason("bad-unknown-id")
    );
    assert!(
        reason("bad-not-its-schema").contains(&format!("id {}", ids[0])),
        "{}",
        reason("bad-not-its-schema")
    );
    for r in dlq.iter().filter(|r| !r.key.starts_with("bad-")) {
        let i: usize = r.key.parse().expect("a produced key");
        assert_eq!(i % 3, 2, "only CANCELLED orders are rejected: {r:?}");
        assert_eq!(r.header("weir.stage"), Some("weir.encode"), "{r:?}");
        let why = r.header("weir.reason").unwrap_or_default();
        assert!(
            why.contains("$.status") && why.contains("CANCELLED"),
            "{why}"
        );
        let (id, version) = if i % 2 == 1 {
            (ids[1], "2")
        } else {
            (ids[0], "1")
        };
        assert_eq!(
            r.header("weir.schema.id"),
            Some(id.to_string().as_str()),
            "{r:?}"
        );
        assert_eq!(r.header("weir.schema.subject"), Some("in-value"), "{r:?}");
        assert_eq!(r.header("weir.schema.version"), Some(version), "{r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.value).expect("the stage's JSON");
        assert_eq!(v["status"], "CANCELLED");
        assert_eq!(
            v["placed"].as_str().map(|t| t.ends_with('Z')),
            Some(true),
            "{v}"
        );
    }
}

#[test]
fn a_registry_that_is_down_holds_the_lane_and_rejects_nothing_then_it_goes_on() {
    let t = tools();
    let python = tool(&t, "WEIR_KAFKA_PYTHON");
    let mut b = Broker::with_registry(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let s = scratch!();
    let prelude = python_prelude(&b, &s);
    let n = 50;
    python_run(
        &python,
        &format!(
            r#"{prelude}
p = Producer({{"bootstrap.servers": BS}})
ser = AvroSerializer(sr, V1)
for i in range({n}):
    p.produce("in", key=str(i), value=ser(make(i), SerializationContext("in", MessageField.VALUE)))
assert p.flush(30) == 0
"#
        ),
    );
    b.command("registry-down");
    let port = free_port();
    let registry = b.registry.clone().unwrap();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: held\n    stop_at_end: true\n    decode: {{ registry: {{ url: '{registry}' }} }}\nstages:\n{st}sink:\n  kafka:\n    brokers: {bs}\n    topic: out\nreject:\n  kafka:\n    brokers: {bs}\n    topic: dlq\nruntime:\n  metrics: 127.0.0.1:{port}\n  connect_timeout: 10s\n",
        bs = b.bootstrap,
        st = stage("pass", PASSTHROUGH, &[])
    );
    s.write("held.yaml", &yaml);
    let mut weir = spawn_weir(&s, "held.yaml", "weir.log");
    // Held: the lane waits, nothing comes out, nothing is rejected, the gauge says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = try_scrape(port, "/metrics")
            .ok()
            .and_then(|(_, body)| gauge(&body, "weir_schema_held_lanes"));
        if held == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lane never held: {held:?}; log: {}",
            weir_tests::evidence::tail(&s.path("weir.log"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        weir.try_wait().unwrap().is_none(),
        "weir ended while the registry was down"
    );
    assert_eq!(
        b.read("out").len(),
        0,
        "outputs while the registry was down"
    );
    assert_eq!(
        b.read("dlq").len(),
        0,
        "rejects while the registry was down"
    );
    let (_, body) = scrape(port, "/metrics");
    let unavailable = body
        .lines()
        .find(|l| l.starts_with("weir_schema_registry_requests_total") && l.contains("unavailable"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        unavailable >= 2.0,
        "it asked again with backoff: {unavailable}\n{body}"
    );
    // Up again: everything goes through, nothing rejected.
    b.command("registry-up");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = weir.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "weir did not finish after the registry came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = weir_tests::evidence::tail(&s.path("weir.log"));
    assert!(status.success(), "weir exited {status}: {log}");
    let out = b.read("out");
    assert_eq!(out.len(), n, "{log}");
    assert_eq!(b.read("dlq").len(), 0, "{log}");
    let first: serde_json::Value = serde_json::from_str(&out[0].value).expect("JSON for the stage");
    assert_eq!(first["id"], -5, "{first}");
    assert_eq!(out[0].header("weir.schema.subject"), Some("in-value"));
    assert!(log.contains("holds"), "the log says the lane held: {log}");
}

#[test]
fn an_encoder_whose_subject_lacks_its_schema_stops_the_start_naming_the_subject() {
    let b = Broker::with_registry(WEIR, &[("in", 1), ("out", 1)]);
    let s = scratch!();
    s.write("order.avsc", ORDER_V1);
    let registry = b.registry.clone().unwrap();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: g\n    stop_at_end: true\nsink:\n  kafka:\n    brokers: {bs}\n    topic: out\n    encode: {{ format: avro, registry: {{ url: '{registry}' }}, schema: order.avsc }}\nruntime:\n  connect_timeout: 10s\n",
        bs = b.bootstrap
    );
    s.write("enc.yaml", &yaml);
    let out = s.run(&["run", "enc.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sink.kafka.encode")
            && err.contains("subject `out-value`")
            && err.contains("auto_register"),
        "{err}"
    );
    // A registry nobody listens on: said at start, naming the address.
    let port = free_port();
    s.write(
        "down.yaml",
        &yaml.replace(&registry, &format!("http://127.0.0.1:{port}")),
    );
    let out = s.run(&["run", "down.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[test]
fn the_yaml_in_docs_schema_registry_md_loads() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/schema-registry.md"
    ))
    .expect("docs/schema-registry.md");
    let yaml = docs
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block");
    let s = scratch!();
    s.write("docs.yaml", yaml);
    let out = s
        .weir(&["check", "docs.yaml"])
        .env("SR_KEY", "key")
        .env("SR_SECRET", "secret")
        .output()
        .expect("weir check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A typo in the block is named with its line and field.
    s.write("typo.yaml", &yaml.replace("cache_ttl:", "cache_tll:"));
    let out = s
        .weir(&["check", "typo.yaml"])
        .env("SR_KEY", "key")
        .env("SR_SECRET", "secret")
        .output()
        .expect("weir check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("typo.yaml:11:")
            && err.contains("source.kafka.decode.registry.cache_tll")
            && err.contains("did you mean `cache_ttl`"),
        "{err}"
    );
}

/// The Protobuf input: a file that imports another (a schema reference) and a well-known
/// type, with nested messages, a map, an enum, a oneof, `optional`, 64-bit integers.
const ORDERS_PROTO: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "common.proto";
message Order {
  int64 id = 1;
  Customer customer = 2;
  repeated Item items = 3;
  map<string, string> attrs = 4;
  optional string note = 5;
  Status status = 6;
  google.protobuf.Timestamp placed = 7;
  bytes blob = 8;
  common.Money total = 9;
  oneof pay { string card = 10; string iban = 11; }
  double score = 12;
  uint64 big = 13;
  message Customer { string name = 1; bool vip = 2; }
  message Item { string sku = 1; int32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; CANCELLED = 2; }
}
message Refund { int64 order_id = 1; string why = 2; }
"#;
const COMMON_PROTO: &str = r#"syntax = "proto3";
package common;
message Money { int64 cents = 1; string currency = 2; }
"#;

/// Python: protoc (grpcio-tools) builds the message classes; `make(i)` is the i-th order.
fn protobuf_prelude(b: &Broker, s: &Scratch) -> String {
    std::fs::create_dir_all(s.path("proto")).expect("proto folder");
    s.write("proto/orders.proto", ORDERS_PROTO);
    s.write("proto/common.proto", COMMON_PROTO);
    // What Weir encodes to: the same shape in one file, without CANCELLED.
    let out = ORDERS_PROTO
        .replace("package shop;", "package shopout;")
        .replace("import \"common.proto\";\n", "")
        .replace("common.Money total", "Money total")
        .replace(" CANCELLED = 2;", "")
        .replace(
            "message Refund",
            "message Money { int64 cents = 1; string currency = 2; }\nmessage Refund",
        );
    s.write("proto/out.proto", &out);
    format!(
        r#"
import json, os, sys
from grpc_tools import protoc
import grpc_tools
D = "{dir}"
inc = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", "-I" + D, "-I" + inc, "--python_out=" + D, D + "/orders.proto", D + "/common.proto", D + "/out.proto"]) == 0
sys.path.insert(0, D)
import orders_pb2, out_pb2
from google.protobuf.json_format import MessageToDict
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer, ProtobufDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField
BS = "{bs}"
sr = SchemaRegistryClient({{"url": "{url}"}})
def make(i, cls=orders_pb2):
    o = cls.Order(id=i * 1000003 - 7, status=i % 3, score=i / 8.0, big=2**63 + i, blob=bytes(range(i % 7)) + b"\xff")
    o.customer.name = "cüstomer \"%d\"" % i
    o.customer.vip = i % 2 == 0
    for k in range(i % 4):
        o.items.add(sku="s%d-%d" % (i, k), qty=k - 1)
    for k in range(i % 3):
        o.attrs["k%d" % k] = "v" * k
    if i % 5 == 0:
        o.note = "note %d" % i
    if i % 4 == 1:
        o.card = "c%d" % i
    elif i % 4 == 2:
        o.iban = "DE%d" % i
    o.placed.FromMilliseconds(1796000000000 + i * 1001)
    o.total.cents = i * 250 - 1000
    o.total.currency = "EUR"
    return o
def as_dict(m):
    return MessageToDict(m, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
"#,
        dir = s.path("proto").display(),
        bs = b.bootstrap,
        url = b.registry.as_deref().expect("the broker's registry"),
    )
}

#[test]
fn protobuf_from_an_independent_producer_is_decoded_by_message_index_and_encoded_for_an_independent_reader(
) {
    let t = tools();
    let python = tool(&t, "WEIR_KAFKA_PYTHON");
    let b = Broker::with_registry(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let s = scratch!();
    let prelude = protobuf_prelude(&b, &s);
    let n = 120;
    // Orders, refunds (the file's second message) and items (a nested message) on one
    // subject, then bad records.
    let id = python_run(
        &python,
        &format!(
            r#"{prelude}
p = Producer({{"bootstrap.servers": BS}})
ctx = SerializationContext("in", MessageField.VALUE)
conf = {{"auto.register.schemas": True}}
so = ProtobufSerializer(orders_pb2.Order, sr, conf)
sf = ProtobufSerializer(orders_pb2.Refund, sr, conf)
si = ProtobufSerializer(orders_pb2.Order.Item, sr, conf)
for i in range({n}):
    p.produce("in", key=str(i), value=so(make(i), ctx))
for i in range(5):
    p.produce("in", key="refund-%d" % i, value=sf(orders_pb2.Refund(order_id=i, why="late %d" % i), ctx))
    p.produce("in", key="item-%d" % i, value=si(orders_pb2.Order.Item(sku="x%d" % i, qty=i), ctx))
first = so(make(0), ctx)
sid = int.from_bytes(first[1:5], "big")
p.produce("in", key="bad-no-magic", value=b"\x08\x01")
p.produce("in", key="bad-truncated", value=b"\x00\x00\x00")
p.produce("in", key="bad-unknown-id", value=b"\x00\x00\x00\x03\xe7\x00\x08\x01")
p.produce("in", key="bad-index", value=b"\x00" + sid.to_bytes(4, "big") + b"\x02\x0e\x08\x01")
p.produce("in", key="bad-not-its-schema", value=b"\x00" + sid.to_bytes(4, "big") + b"\x00\x0a\x05ab")
assert p.flush(30) == 0
print(sid, json.dumps(sr.get_subjects()))
"#
        ),
    );
    let (sid, subjects) = id.trim().split_once(' ').expect("id and subjects");
    assert!(
        subjects.contains("common.proto"),
        "the import was registered as a reference: {subjects}"
    );
    let registry = b.registry.clone().unwrap();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: proto\n    stop_at_end: true\n    decode: {{ format: protobuf, registry: {{ url: '{registry}' }} }}\nstages:\n{st}sink:\n  kafka:\n    brokers: {bs}\n    topic: out\n    encode:\n      format: protobuf\n      registry: {{ url: '{registry}' }}\n      schema: proto/out.proto\n      message: shopout.Order\n      auto_register: true\nreject:\n  kafka:\n    brokers: {bs}\n    topic: dlq\nruntime:\n  connect_timeout: 10s\n",
        bs = b.bootstrap,
        st = stage("pass", PASSTHROUGH, &[])
    );
    s.write("proto.yaml", &yaml);
    let out = s.run(&["run", "proto.yaml", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir run: {err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    let cancelled = (0..n).filter(|i| i % 3 == 2).count();
    assert_eq!(report["read"], n + 10 + 5, "{report}");
    assert_eq!(report["written"], n - cancelled, "{report}");
    assert_eq!(report["rejected"], cancelled + 10 + 5, "{report}");

    // The independent reader decodes every output and each equals what was produced.
    let seen = read_back(
        &python,
        &prelude,
        "d = ProtobufDeserializer(out_pb2.Order)\ndef expect(i):\n    return as_dict(make(i))",
        r#"as_dict(d(m.value(), SerializationContext("out", MessageField.VALUE)))"#,
        n,
    );
    assert!(
        seen["subjects"]
            .as_array()
            .unwrap()
            .contains(&"out-value".into()),
        "{seen}"
    );

    // The stage saw refunds and nested items as their own messages (found by index); they
    // do not fit the output message, so they are rejected naming the field; each bad
    // record's reason says what was wrong.
    let dlq = b.read("dlq");
    assert_eq!(dlq.len(), cancelled + 15, "{dlq:?}");
    let rec = |key: &str| {
        dlq.iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("no reject for {key}: {dlq:?}"))
    };
    let reason = |key: &str| {
        rec(key)
            .header("weir.reason")
            .unwrap_or_default()
            .to_owned()
    };
    for i in 0..5 {
        let r = rec(&format!("refund-{i}"));
        let v: serde_json::Value = serde_json::from_str(&r.value).expect("the refund as JSON");
        assert_eq!(v["orderId"], i.to_string(), "{v}");
        assert_eq!(v["why"], format!("late {i}"), "{v}");
        assert!(reason(&format!("refund-{i}")).contains("orderId"), "{r:?}");
        let r = rec(&format!("item-{i}"));
        let v: serde_json::Value = serde_json::from_str(&r.value).expect("the item as JSON");
        assert_eq!(v["sku"], format!("x{i}"), "{v}");
        assert_eq!(v["qty"], i, "{v}");
        assert_eq!(r.header("weir.schema.id"), Some(sid), "{r:?}");
    }
    for (key, says) in [
        ("bad-no-magic", "magic byte".to_owned()),
        ("bad-truncated", "too short".to_owned()),
        ("bad-unknown-id", "schema id 999".to_owned()),
        ("bad-index", "message indexes [7]".to_owned()),
        ("bad-not-its-schema", format!("id {sid}")),
    ] {
        assert!(reason(key).contains(&says), "{key}: {}", reason(key));
        assert_eq!(rec(key).header("weir.stage"), Some("weir.decode"), "{key}");
    }
    for r in dlq.iter().filter(|r| r.key.parse::<usize>().is_ok()) {
        let i: usize = r.key.parse().unwrap();
        assert_eq!(i % 3, 2, "only CANCELLED orders are rejected: {r:?}");
        assert_eq!(r.header("weir.stage"), Some("weir.encode"), "{r:?}");
        let why = r.header("weir.reason").unwrap_or_default();
        assert!(
            why.starts_with("does not fit") && why.contains("$.status"),
            "{why}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.value).expect("the stage's JSON");
        assert_eq!(v["status"], "CANCELLED", "{v}");
        assert_eq!(
            v["big"],
            (9223372036854775808u64 + i as u64).to_string(),
            "{v}"
        );
        assert!(v["placed"].as_str().unwrap_or("").ends_with('Z'), "{v}");
    }
}

/// The JSON Schema input: draft-07 with a referenced schema, an enum, formats and bounds.
const ORDER_JSON_SCHEMA: &str = r#"{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Order",
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "customer": {"type": "object", "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"}}, "required": ["name", "vip"]},
    "items": {"type": "array", "items": {"$ref": "item.json"}},
    "status": {"enum": ["NEW", "PAID", "CANCELLED"]},
    "note": {"type": ["string", "null"]},
    "score": {"type": "number"}
  },
  "required": ["id", "customer", "items", "status"],
  "additionalProperties": false
}"#;
const ITEM_JSON_SCHEMA: &str = r#"{"type":"object","properties":{"sku":{"type":"string","minLength":1},"qty":{"type":"integer","minimum":0}},"required":["sku","qty"],"additionalProperties":false}"#;

#[test]
fn json_schema_records_are_validated_both_ways_with_an_independent_client() {
    let t = tools();
    let python = tool(&t, "WEIR_KAFKA_PYTHON");
    let b = Broker::with_registry(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let s = scratch!();
    s.write("order.schema.json", ORDER_JSON_SCHEMA);
    s.write("item.schema.json", ITEM_JSON_SCHEMA);
    // The output schema: CANCELLED is not a status there.
    s.write(
        "order-out.schema.json",
        &ORDER_JSON_SCHEMA
            .replace(r#", "CANCELLED"]"#, "]")
            .replace(r#"{"$ref": "item.json"}"#, ITEM_JSON_SCHEMA),
    );
    let n = 90;
    let prelude = format!(
        r#"
import json
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient, Schema, SchemaReference
from confluent_kafka.schema_registry.json_schema import JSONSerializer, JSONDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField
BS = "{bs}"
sr = SchemaRegistryClient({{"url": "{url}"}})
D = "{dir}"
STATUS = ["NEW", "PAID", "CANCELLED"]
def make(i):
    return {{"id": i * 7 - 3, "customer": {{"name": "cüstomer \"%d\"" % i, "vip": i % 2 == 0}},
        "items": [{{"sku": "s%d-%d" % (i, k), "qty": k}} for k in range(i % 4)],
        "status": STATUS[i % 3], "note": None if i % 5 else "note %d" % i, "score": i / 8.0}}
"#,
        bs = b.bootstrap,
        url = b.registry.as_deref().expect("the broker's registry"),
        dir = s.path("").display(),
    );
    let sid = python_run(
        &python,
        &format!(
            r#"{prelude}
item = sr.register_schema("item.json", Schema(open(D + "/item.schema.json").read(), "JSON"))
ref = SchemaReference("item.json", "item.json", 1)
schema = Schema(open(D + "/order.schema.json").read(), "JSON", [ref])
sid = sr.register_schema("in-value", schema)
ser = JSONSerializer(schema, sr, conf={{"auto.register.schemas": False, "use.latest.version": True}})
p = Producer({{"bootstrap.servers": BS}})
ctx = SerializationContext("in", MessageField.VALUE)
for i in range({n}):
    p.produce("in", key=str(i), value=ser(make(i), ctx))
h = b"\x00" + sid.to_bytes(4, "big")
p.produce("in", key="bad-no-magic", value=b'{{"id": 1}}')
p.produce("in", key="bad-not-json", value=h + b'{{"id": ')
p.produce("in", key="bad-not-its-schema", value=h + json.dumps(dict(make(1), items=[{{"sku": "", "qty": 1}}])).encode())
assert p.flush(30) == 0
print(sid)
"#
        ),
    );
    let sid = sid.trim().to_owned();
    let registry = b.registry.clone().unwrap();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: js\n    stop_at_end: true\n    decode: {{ format: json-schema, registry: {{ url: '{registry}' }} }}\nstages:\n{st}sink:\n  kafka:\n    brokers: {bs}\n    topic: out\n    encode:\n      format: json-schema\n      registry: {{ url: '{registry}' }}\n      schema: order-out.schema.json\n      subject: record-name\n      auto_register: true\nreject:\n  kafka:\n    brokers: {bs}\n    topic: dlq\nruntime:\n  connect_timeout: 10s\n",
        bs = b.bootstrap,
        st = stage("pass", PASSTHROUGH, &[])
    );
    s.write("js.yaml", &yaml);
    let out = s.run(&["run", "js.yaml", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir run: {err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    let cancelled = (0..n).filter(|i| i % 3 == 2).count();
    assert_eq!(report["read"], n + 3, "{report}");
    assert_eq!(report["written"], n - cancelled, "{report}");
    assert_eq!(report["rejected"], cancelled + 3, "{report}");

    // The independent reader validates each output against the schema Weir registered
    // (subject `Order`, the schema's title) and each equals what was produced.
    let seen = read_back(
        &python,
        &prelude,
        "latest = sr.get_latest_version(\"Order\")\nd = JSONDeserializer(latest.schema.schema_str)\nexpect = make",
        r#"d(m.value(), SerializationContext("out", MessageField.VALUE))"#,
        n,
    );
    let latest = python_run(
        &python,
        &format!("{prelude}\nprint(sr.get_latest_version(\"Order\").schema_id)"),
    );
    assert_eq!(
        seen["schemas"],
        serde_json::json!([latest.trim().parse::<u32>().expect("an id")]),
        "{seen}"
    );

    let dlq = b.read("dlq");
    assert_eq!(dlq.len(), cancelled + 3, "{dlq:?}");
    let reason = |key: &str| {
        dlq.iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("no reject for {key}: {dlq:?}"))
            .header("weir.reason")
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        reason("bad-no-magic").contains("magic byte"),
        "{}",
        reason("bad-no-magic")
    );
    assert!(
        reason("bad-not-json").contains("not JSON"),
        "{}",
        reason("bad-not-json")
    );
    let why = reason("bad-not-its-schema");
    assert!(
        why.contains(&format!("id {sid}")) && why.contains("$.items[0].sku"),
        "{why}"
    );
    for r in dlq.iter().filter(|r| r.key.parse::<usize>().is_ok()) {
        let i: usize = r.key.parse().unwrap();
        assert_eq!(i % 3, 2, "only CANCELLED orders are rejected: {r:?}");
        assert_eq!(r.header("weir.stage"), Some("weir.encode"), "{r:?}");
        let why = r.header("weir.reason").unwrap_or_default();
        assert!(
            why.contains("subject `Order`") && why.contains("$.status"),
            "{why}"
        );
        assert_eq!(r.header("weir.schema.id"), Some(sid.as_str()), "{r:?}");
        assert_eq!(r.header("weir.schema.subject"), Some("in-value"), "{r:?}");
    }
}

/// A small Avro record for the local path: a long, an enum, a union, a timestamp.
const PAY: &str = r#"{"type":"record","name":"Pay","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

/// Registers `schema` (Avro) under `subject` in the registry at `url`; its id.
fn register(url: &str, subject: &str, schema: &str) -> u32 {
    let body: serde_json::Value = ureq::post(&format!("{url}/subjects/{subject}/versions"))
        .send_json(serde_json::json!({ "schema": schema }))
        .expect("registering the schema")
        .into_json()
        .unwrap();
    body["id"].as_u64().expect("an id") as u32
}

/// Avro's zigzag varint of a long.
fn zigzag(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[test]
fn a_jsonl_source_takes_records_beside_their_schema_or_in_wire_format_and_decodes_them_like_a_topic(
) {
    use base64::Engine as _;
    let b = Broker::with_registry(WEIR, &[]);
    let url = b.registry.clone().unwrap();
    let id = register(&url, "pay-value", PAY);
    // The wire format of {id: 3, status: NEW, note: null, placed: 1764896523456}, as a
    // producer writes it.
    let mut wire = vec![0];
    wire.extend_from_slice(&id.to_be_bytes());
    zigzag(3, &mut wire);
    zigzag(0, &mut wire); // NEW
    zigzag(0, &mut wire); // the union's `null` branch
    zigzag(1_764_896_523_456, &mut wire);
    let wire = base64::engine::general_purpose::STANDARD.encode(&wire);
    let s = scratch!();
    let lines = [
        serde_json::json!({"key": "a", "value": {"schema_id": id, "avro": {"id": 1, "status": "PAID", "note": "x", "placed": "2025-12-05T01:02:03.456Z"}}}),
        serde_json::json!({"key": "b", "value": {"subject": "pay-value", "avro": {"id": 2, "status": "PAID", "placed": 1_764_896_523_456_i64}}}),
        serde_json::json!({"key": "c", "value": {"base64": wire}}),
        serde_json::json!({"key": "d", "value": {"schema_id": id, "avro": {"id": "one", "status": "PAID", "placed": 0}}}),
        serde_json::json!({"key": "e", "value": {"schema_id": 999, "avro": {"id": 5}}}),
        serde_json::json!({"key": "f", "value": {"id": 6}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    s.write("in.jsonl", &text);
    let yaml = format!(
        "source:\n  jsonl:\n    path: in.jsonl\n    topic: pay\n    decode: {{ format: avro, registry: {{ url: '{url}' }} }}\nstages:\n{}sink:\n  jsonl:\n    path: out.jsonl\nreject:\n  jsonl:\n    path: rejected.jsonl\n",
        stage("tag", weir_tests::plugins::JSON_ENRICH, &[("set.checked", "yes")])
    );
    s.write("p.yaml", &yaml);
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = s.read_jsonl("out.jsonl");
    let values: Vec<serde_json::Value> = out
        .iter()
        .map(|m| serde_json::from_str(m["value"].as_str().expect("JSON text")).unwrap())
        .collect();
    assert_eq!(
        values,
        [
            serde_json::json!({"id": 1, "status": "PAID", "note": "x", "placed": "2025-12-05T01:02:03.456Z", "checked": "yes"}),
            serde_json::json!({"id": 2, "status": "PAID", "note": null, "placed": "2025-12-05T01:02:03.456Z", "checked": "yes"}),
            serde_json::json!({"id": 3, "status": "NEW", "note": null, "placed": "2025-12-05T01:02:03.456Z", "checked": "yes"}),
        ],
        "{out:?}"
    );
    for m in &out {
        let headers = m["headers"].to_string();
        assert!(
            headers.contains(&format!(r#"["weir.schema.id","{id}"]"#))
                && headers.contains(r#"["weir.schema.subject","pay-value"]"#),
            "{m}"
        );
    }
    let rejected = s.read_jsonl("rejected.jsonl");
    let reasons: Vec<(&str, &str)> = rejected
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["reject"]["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(reasons.len(), 3, "{rejected:?}");
    assert!(
        reasons[0].0 == "d"
            && reasons[0].1.contains("does not match")
            && reasons[0].1.contains("$.id: expected a 64-bit integer"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].0 == "e" && reasons[1].1.contains("999"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].0 == "f" && reasons[2].1.contains("magic byte"),
        "{reasons:?}"
    );
    assert!(
        rejected
            .iter()
            .all(|r| r["reject"]["stage"] == "weir.decode"),
        "{rejected:?}"
    );

    // `weir test --registry` gives the stage the same records and says the same rejects.
    let o = s.run(&[
        "test",
        weir_tests::plugins::JSON_ENRICH,
        "--input",
        "in.jsonl",
        "--config",
        "set.checked=yes",
        "--registry",
        &url,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let answers = json_lines(&o.stdout);
    assert_eq!(
        outcomes(&answers),
        ["next", "next", "next", "reject", "reject", "reject"],
        "{answers:?}"
    );
    for (answer, want) in answers.iter().zip(&values) {
        let got: serde_json::Value =
            serde_json::from_str(answer["messages"][0]["value"].as_str().unwrap()).unwrap();
        assert_eq!(&got, want);
    }
    assert!(
        answers[3..].iter().all(|a| a["stage"] == "weir.decode"),
        "{answers:?}"
    );
}

/// The id the registry holds for `subject`'s latest version.
fn latest_id(url: &str, subject: &str) -> u32 {
    let body: serde_json::Value = ureq::get(&format!("{url}/subjects/{subject}/versions/latest"))
        .call()
        .expect("the subject's latest version")
        .into_json()
        .unwrap();
    body["id"].as_u64().expect("an id") as u32
}

#[test]
fn outputs_keys_and_values_are_encoded_each_with_its_subject_and_never_half() {
    let b = Broker::with_registry(WEIR, &[("out", 1)]);
    let url = b.registry.clone().unwrap();
    let s = scratch!();
    s.write(
        "key.avsc",
        r#"{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}"#,
    );
    s.write(
        "value.avsc",
        r#"{"type":"record","name":"V","fields":[{"name":"n","type":"long"}]}"#,
    );
    let lines = [
        serde_json::json!({"key": {"id": 7}, "value": {"n": 1}}),
        serde_json::json!({"key": {"id": "x"}, "value": {"n": 2}}),
        serde_json::json!({"key": {"id": 8}, "value": {"n": "y"}}),
        serde_json::json!({"value": {"n": 3}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    s.write("in.jsonl", &text);
    let enc = |schema: &str| {
        format!("{{ format: avro, registry: {{ url: '{url}' }}, schema: {schema}, auto_register: true }}")
    };
    let yaml = format!(
        "source:\n  jsonl: {{ path: in.jsonl }}\nstages:\n{}sink:\n  kafka:\n    brokers: {}\n    topic: out\n    encode: {}\n    encode_key: {}\nreject:\n  jsonl: {{ path: rejected.jsonl }}\n",
        stage("pass", PASSTHROUGH, &[]),
        b.bootstrap,
        enc("value.avsc"),
        enc("key.avsc")
    );
    s.write("p.yaml", &yaml);
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (kid, vid) = (latest_id(&url, "out-key"), latest_id(&url, "out-value"));
    assert_ne!(kid, vid, "two subjects, two schemas");
    let wire = |id: u32, zigzag: u8| {
        let mut w = vec![0];
        w.extend_from_slice(&id.to_be_bytes());
        w.push(zigzag);
        String::from_utf8(w).unwrap()
    };
    let records = b.read("out");
    let got: Vec<(String, String)> = records
        .iter()
        .map(|r| (r.key.clone(), r.value.clone()))
        .collect();
    assert_eq!(
        got,
        [(wire(kid, 14), wire(vid, 2)), (String::new(), wire(vid, 6))],
        "key {{id: 7}} and value {{n: 1}}; no key and value {{n: 3}}"
    );
    // A key or a value that does not fit: rejected as the stage left it, nothing encoded.
    let rejected = s.read_jsonl("rejected.jsonl");
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0]["key"], r#"{"id":"x"}"#, "{rejected:?}");
    assert!(
        rejected[0]["reject"]["reason"]
            .as_str()
            .unwrap()
            .contains("out-key")
            && rejected[0]["reject"]["stage"] == "weir.encode",
        "{rejected:?}"
    );
    assert_eq!(
        rejected[1]["key"], r#"{"id":8}"#,
        "the key stays as it was: {rejected:?}"
    );
    assert_eq!(rejected[1]["value"], r#"{"n":"y"}"#, "{rejected:?}");
    assert!(
        rejected[1]["reject"]["reason"]
            .as_str()
            .unwrap()
            .contains("out-value"),
        "{rejected:?}"
    );
}
