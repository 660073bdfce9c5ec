//! Protobuf records in the registry's wire format: the schema (`.proto` text, or the base64
//! `FileDescriptorProto` some clients register) compiled in-process by `protox`, a record's
//! message type found by the message indexes after the schema id, and messages read and
//! written with `prost-reflect` in the proto3 JSON mapping.

use std::collections::HashMap;

use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// Message indexes deeper than this are refused (a hostile record cannot make a long loop).
const MAX_INDEXES: usize = 64;

/// A compiled Protobuf schema: its file and what that file imports.
#[derive(Debug)]
pub struct ProtoSchema {
    pool: DescriptorPool,
    file: String,
    /// How the stage sees a message (all fields, defaults included).
    ser: SerializeOptions,
}

/// serde_json's compact form, except that a `float` is written as the double it widens to
/// (`0.1f32` as `0.10000000149011612`, as the Avro decoder writes it): read back as a double
/// and narrowed, as prost-reflect reads a `float`, that is the same float bit for bit. The
/// float's own shortest form is not: through a double it rounds twice for a few values in
/// 2^29 (`7.038531e-26`), and `f32::MAX`'s (`3.4028235e38`) reads back above f32's range and
/// is refused (issue 54).
struct WideFloats;

impl serde_json::ser::Formatter for WideFloats {
    fn write_f32<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f32) -> std::io::Result<()> {
        self.write_f64(w, f64::from(v))
    }
}

/// Files by import name, for the compiler.
struct Files(HashMap<String, File>);

impl FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| protox::Error::file_not_found(name))
    }
}

/// One schema text as a file: `.proto` source, or a base64 `FileDescriptorProto`.
fn file(name: &str, text: &str) -> Result<File, String> {
    use base64::Engine as _;
    // Source always has a `{` or a `;` (a message, `syntax = …;`); base64 never does.
    if !text.contains([';', '{']) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| format!("neither .proto text nor a base64 descriptor: {e}"))?;
        return File::decode_file_descriptor_proto(bytes.as_slice())
            .map_err(|e| format!("base64 descriptor: {e}"));
    }
    File::from_source(name, text).map_err(|e| e.to_string())
}

/// A `.proto` file a local schema imports (not one of Google's well-known types): its
/// import name, its text, and the local files it imports itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImport {
    /// The name it is imported by (`common/money.proto`): also its subject when registered.
    pub name: String,
    /// Its `.proto` text.
    pub text: String,
    /// The local files it imports.
    pub imports: Vec<String>,
}

/// What `text` imports, Google's well-known types left out (they are built in).
pub fn imports_of(name: &str, text: &str) -> Result<Vec<String>, String> {
    let f = file(name, text)?;
    Ok(f.file_descriptor_proto()
        .dependency
        .iter()
        .filter(|d| !d.starts_with("google/protobuf/"))
        .cloned()
        .collect())
}

/// The local files a `.proto` in folder `dir` imports, read from that folder (as `protoc
/// -I DIR` would), each after the ones it imports.
pub fn local_imports(
    dir: &std::path::Path,
    name: &str,
    text: &str,
) -> Result<Vec<LocalImport>, String> {
    fn visit(
        dir: &std::path::Path,
        name: &str,
        text: &str,
        depth: usize,
        out: &mut Vec<LocalImport>,
    ) -> Result<(), String> {
        if depth > 32 {
            return Err("imports nest deeper than 32".into());
        }
        for imp in imports_of(name, text)? {
            if out.iter().any(|i| i.name == imp) {
                continue;
            }
            let path = dir.join(&imp);
            let t = std::fs::read_to_string(&path)
                .map_err(|e| format!("import \"{imp}\" ({}): {e}", path.display()))?;
            visit(dir, &imp, &t, depth + 1, out)?;
            if !out.iter().any(|i| i.name == imp) {
                out.push(LocalImport {
                    imports: imports_of(&imp, &t)?,
                    name: imp,
                    text: t,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    visit(dir, name, text, 0, &mut out)?;
    Ok(out)
}

impl ProtoSchema {
    /// Compiles `text` (named `name` when it is source) with the files it imports: `refs`
    /// are (import name, text) pairs, and Google's well-known types are built in.
    pub fn parse(name: &str, text: &str, refs: &[(String, String)]) -> Result<Self, String> {
        let main = file(name, text)?;
        let main_name = main.name().to_owned();
        let mut files = HashMap::new();
        for (n, t) in refs {
            let f = file(n, t).map_err(|e| format!("reference `{n}`: {e}"))?;
            // A descriptor knows its own name; the reference's name is how it is imported.
            files.insert(n.clone(), f.clone());
            files.entry(f.name().to_owned()).or_insert(f);
        }
        files.insert(main_name.clone(), main);
        let mut resolver = ChainFileResolver::new();
        resolver.add(Files(files));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler
            .open_file(&main_name)
            .map_err(|e| format!("{e:?}").replace('\n', " "))?;
        let pool = compiler.descriptor_pool();
        let schema = ProtoSchema {
            pool,
            file: main_name,
            ser: SerializeOptions::new().skip_default_fields(false),
        };
        if schema.file().messages().len() == 0 {
            return Err("the schema defines no message".into());
        }
        Ok(schema)
    }

    fn file(&self) -> prost_reflect::FileDescriptor {
        self.pool
            .get_file_by_name(&self.file)
            .expect("the compiled file is in its pool")
    }

    /// The first message the file defines (its name, for subjects).
    pub fn first(&self) -> MessageDescriptor {
        self.file().messages().next().expect("checked at parse")
    }

    /// The message type a record's indexes name (top-level index, then nested indexes).
    pub fn by_indexes(&self, indexes: &[i32]) -> Option<MessageDescriptor> {
        let (first, rest) = indexes.split_first()?;
        let mut m = self.file().messages().nth(usize::try_from(*first).ok()?)?;
        for i in rest {
            let child = m.child_messages().nth(usize::try_from(*i).ok()?)?;
            m = child;
        }
        Some(m)
    }

    /// A message type by full name (or by name alone when one message has it) and its
    /// indexes in the file.
    pub fn by_name(&self, name: &str) -> Result<(MessageDescriptor, Vec<i32>), String> {
        fn walk(
            m: MessageDescriptor,
            path: &mut Vec<i32>,
            found: &mut Vec<(MessageDescriptor, Vec<i32>)>,
            name: &str,
        ) {
            if m.full_name() == name || m.name() == name {
                found.push((m.clone(), path.clone()));
            }
            for (i, c) in m.child_messages().enumerate() {
                path.push(i as i32);
                walk(c, path, found, name);
                path.pop();
            }
        }
        let mut found = Vec::new();
        for (i, m) in self.file().messages().enumerate() {
            walk(m, &mut vec![i as i32], &mut found, name);
        }
        if let Some(exact) = found.iter().position(|(m, _)| m.full_name() == name) {
            return Ok(found.swap_remove(exact));
        }
        match found.len() {
            1 => Ok(found.pop().expect("one")),
            0 => Err(format!(
                "no message `{name}` in {} (it has {})",
                self.file,
                self.file()
                    .messages()
                    .map(|m| m.full_name().to_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Err(format!(
                "`{name}` names {} messages; give the full name",
                found.len()
            )),
        }
    }

    /// A record's body (after the 5-byte header) as JSON text: the message indexes, then
    /// the message.
    pub fn to_json(&self, body: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let (indexes, rest) = read_indexes(body)?;
        let desc = self.by_indexes(&indexes).ok_or_else(|| {
            format!(
                "message indexes {indexes:?} name no message in {}",
                self.file
            )
        })?;
        let msg = DynamicMessage::decode(desc.clone(), rest)
            .map_err(|e| format!("not a {}: {e}", desc.full_name()))?;
        let mut ser = serde_json::Serializer::with_formatter(out, WideFloats);
        msg.serialize_with_options(&mut ser, &self.ser)
            .map_err(|e| format!("{}: {e}", desc.full_name()))
    }

    /// Encodes `json` as `desc` (whose indexes are `indexes`) after a header already in
    /// `out`. A field that does not fit is named by its path (`$.items[1].qty`).
    pub fn from_json(
        desc: &MessageDescriptor,
        indexes: &[i32],
        json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let mut track = serde_path_to_error::Track::new();
        let msg = DynamicMessage::deserialize_with_options(
            desc.clone(),
            serde_path_to_error::Deserializer::new(&mut de, &mut track),
            &DeserializeOptions::new(),
        )
        .map_err(|e| {
            let path = track.path().to_string();
            let path = if path == "." {
                "$".to_owned()
            } else {
                format!("$.{path}").replace(".[", "[")
            };
            format!("{path}: {e}")
        })?;
        de.end().map_err(|e| format!("$: {e}"))?;
        write_indexes(indexes, out);
        msg.encode(out)
            .map_err(|e| format!("{}: {e}", desc.full_name()))
    }
}

/// The indexes of a message in the wire format: a zigzag-varint count, then each index;
/// a lone `0` stands for `[0]` (the first message).
pub fn read_indexes(mut b: &[u8]) -> Result<(Vec<i32>, &[u8]), String> {
    let next = |b: &mut &[u8]| {
        let v = prost::encoding::decode_varint(b)
            .map_err(|_| "truncated message indexes".to_string())?;
        let v = ((v >> 1) as i64) ^ -((v & 1) as i64);
        i32::try_from(v).map_err(|_| format!("message index {v} out of range"))
    };
    let n = next(&mut b)?;
    if n == 0 {
        return Ok((vec![0], b));
    }
    let n = usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_INDEXES)
        .ok_or_else(|| format!("{n} message indexes (at most {MAX_INDEXES})"))?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(next(&mut b)?);
    }
    Ok((v, b))
}

/// Writes a message's indexes as [`read_indexes`] reads them.
pub fn write_indexes(indexes: &[i32], out: &mut Vec<u8>) {
    let zz = |v: i32| u64::from(((v << 1) ^ (v >> 31)) as u32);
    if indexes == [0] {
        out.push(0);
        return;
    }
    prost::encoding::encode_varint(zz(indexes.len() as i32), out);
    for i in indexes {
        prost::encoding::encode_varint(zz(*i), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDERS: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "common.proto";
message Order {
  string id = 1;
  int64 qty = 2;
  repeated Item items = 3;
  map<string, int32> tags = 4;
  Status status = 5;
  google.protobuf.Timestamp at = 6;
  bytes raw = 7;
  common.Money total = 8;
  oneof pay { string card = 9; string iban = 10; }
  message Item { string sku = 1; uint32 n = 2; }
  enum Status { NEW = 0; PAID = 1; }
}
message Refund { string order_id = 1; }
"#;
    const COMMON: &str = r#"syntax = "proto3"; package common; message Money { int64 cents = 1; string currency = 2; }"#;

    fn schema() -> ProtoSchema {
        ProtoSchema::parse(
            "orders.proto",
            ORDERS,
            &[("common.proto".into(), COMMON.into())],
        )
        .unwrap()
    }

    #[test]
    fn indexes_round_trip_and_the_first_message_is_one_zero() {
        for idx in [vec![0], vec![1], vec![0, 0], vec![3, 1, 2], vec![0, 70_000]] {
            let mut b = Vec::new();
            write_indexes(&idx, &mut b);
            b.push(0xAA);
            let (back, rest) = read_indexes(&b).unwrap();
            assert_eq!(back, idx);
            assert_eq!(rest, [0xAA]);
        }
        let mut b = Vec::new();
        write_indexes(&[0], &mut b);
        assert_eq!(b, [0]);
        assert!(read_indexes(&[]).unwrap_err().contains("truncated"));
        assert!(read_indexes(&[0xFE, 0x01]).unwrap_err().contains("at most"));
        assert!(read_indexes(&[4, 2]).unwrap_err().contains("truncated"));
    }

    #[test]
    fn messages_are_found_by_index_and_by_name() {
        let s = schema();
        assert_eq!(s.first().full_name(), "shop.Order");
        assert_eq!(s.by_indexes(&[1]).unwrap().full_name(), "shop.Refund");
        assert_eq!(
            s.by_indexes(&[0, 0]).unwrap().full_name(),
            "shop.Order.TagsEntry"
        );
        assert_eq!(
            s.by_indexes(&[0, 1]).unwrap().full_name(),
            "shop.Order.Item"
        );
        assert!(s.by_indexes(&[2]).is_none());
        assert_eq!(s.by_name("shop.Refund").unwrap().1, vec![1]);
        assert_eq!(s.by_name("Item").unwrap().1, vec![0, 1]);
        assert!(s
            .by_name("Nope")
            .unwrap_err()
            .contains("shop.Order, shop.Refund"));
    }

    #[test]
    fn json_round_trips_through_the_wire_form_with_the_proto3_mapping() {
        let s = schema();
        let (order, idx) = s.by_name("shop.Order").unwrap();
        let json = br#"{"id":"o-1","qty":"9007199254740993","items":[{"sku":"a","n":2}],
            "tags":{"k":1},"status":"PAID","at":"2026-12-05T03:40:02.123Z","raw":"AAEC",
            "total":{"cents":"1250","currency":"EUR"},"iban":"DE00"}"#;
        let mut wire = Vec::new();
        ProtoSchema::from_json(&order, &idx, json, &mut wire).unwrap();
        let mut out = Vec::new();
        s.to_json(&wire, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["qty"], "9007199254740993", "int64 as a string: {v}");
        assert_eq!(v["items"][0]["n"], 2);
        assert_eq!(v["status"], "PAID");
        assert_eq!(v["at"], "2026-12-05T03:40:02.123Z");
        assert_eq!(v["raw"], "AAEC");
        assert_eq!(v["total"]["currency"], "EUR");
        assert_eq!(v["iban"], "DE00");
        assert!(
            v.get("card").is_none(),
            "the unset oneof branch is absent: {v}"
        );
        // Defaults are shown, so a stage sees every field.
        let mut wire = Vec::new();
        ProtoSchema::from_json(&order, &idx, b"{}", &mut wire).unwrap();
        let mut out = Vec::new();
        s.to_json(&wire, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "");
        assert_eq!(v["qty"], "0");
        assert_eq!(v["status"], "NEW");
        assert_eq!(v["items"], serde_json::json!([]));
    }

    #[test]
    fn the_encoder_takes_every_form_the_proto3_json_mapping_allows() {
        let s = schema();
        let (order, idx) = s.by_name("shop.Order").unwrap();
        let json = |j: &str| {
            let mut wire = Vec::new();
            ProtoSchema::from_json(&order, &idx, j.as_bytes(), &mut wire).unwrap();
            let mut out = Vec::new();
            s.to_json(&wire, &mut out).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        // Proto field names and JSON names, numbers as text and text as numbers, enum
        // numbers, URL-safe base64, null for an unset message field.
        let v = json(
            r#"{"qty":12,"items":[{"sku":"a","n":"3"}],"status":1,"raw":"-_8","total":null,"tags":{"k":"7"}}"#,
        );
        assert_eq!(v["qty"], "12");
        assert_eq!(v["items"][0]["n"], 3);
        assert_eq!(v["status"], "PAID");
        assert_eq!(v["raw"], "+/8=");
        assert!(v.get("total").is_none(), "{v}");
        assert_eq!(v["tags"]["k"], 7);
        let (refund, ridx) = s.by_name("shop.Refund").unwrap();
        let mut wire = Vec::new();
        ProtoSchema::from_json(&refund, &ridx, br#"{"order_id":"x"}"#, &mut wire).unwrap();
        let mut out = Vec::new();
        s.to_json(&wire, &mut out).unwrap();
        assert_eq!(out, br#"{"orderId":"x"}"#);
        // Unknown fields in the bytes (a newer writer) are dropped from the JSON.
        let mut wire = Vec::new();
        ProtoSchema::from_json(&order, &idx, br#"{"id":"y"}"#, &mut wire).unwrap();
        wire.extend_from_slice(&[0xF8, 0x06, 0x01]); // field 111, varint 1
        let mut out = Vec::new();
        s.to_json(&wire, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "y");
        assert!(!String::from_utf8_lossy(&out).contains("111"), "{v}");
    }

    #[test]
    fn what_does_not_fit_is_named_by_its_path() {
        let s = schema();
        let (order, idx) = s.by_name("shop.Order").unwrap();
        let err = |j: &str| {
            ProtoSchema::from_json(&order, &idx, j.as_bytes(), &mut Vec::new()).unwrap_err()
        };
        let e = err(r#"{"items":[{"sku":"a"},{"n":"x"}]}"#);
        assert!(e.starts_with("$.items[1].n:"), "{e}");
        let e = err(r#"{"status":"LOST"}"#);
        assert!(e.starts_with("$.status:"), "{e}");
        let e = err(r#"{"colour":"red"}"#);
        assert!(e.contains("colour"), "{e}");
        let e = err(r#"{"id":"x"} trailing"#);
        assert!(e.starts_with("$:"), "{e}");
    }

    #[test]
    fn a_base64_descriptor_is_read_like_its_source() {
        use base64::Engine as _;
        let s = schema();
        let fd = s.file().file_descriptor_proto().encode_to_vec();
        let common = s
            .pool
            .get_file_by_name("common.proto")
            .unwrap()
            .file_descriptor_proto()
            .encode_to_vec();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let d = ProtoSchema::parse(
            "ignored",
            &b64(&fd),
            &[("common.proto".into(), b64(&common))],
        )
        .unwrap();
        assert_eq!(
            d.by_indexes(&[0, 1]).unwrap().full_name(),
            "shop.Order.Item"
        );
        let bad = ProtoSchema::parse("x.proto", "bm90IGEgZGVzY3JpcHRvcg==", &[]).unwrap_err();
        assert!(bad.contains("descriptor"), "{bad}");
        let e = ProtoSchema::parse(
            "x.proto",
            "syntax = \"proto3\"; message A { nope b = 1; }",
            &[],
        )
        .unwrap_err();
        assert!(e.contains("nope"), "{e}");
        let e = ProtoSchema::parse("x.proto", ORDERS, &[]).unwrap_err();
        assert!(e.contains("common.proto"), "{e}");
    }

    const NUMBERS: &str = r#"syntax = "proto3"; message N {
        double d = 1; float f = 2; int64 l = 3; uint64 u = 4; sfixed64 s = 5;
        repeated double ds = 6; repeated float fs = 7; }"#;

    /// A message of every number kind, in the wire format (its indexes first), as a client
    /// other than Weir writes it.
    fn numbers_wire(desc: &MessageDescriptor, d: f64, f: f32, l: i64, u: u64) -> Vec<u8> {
        use prost_reflect::Value;
        let mut m = DynamicMessage::new(desc.clone());
        m.set_field_by_name("d", Value::F64(d));
        m.set_field_by_name("f", Value::F32(f));
        m.set_field_by_name("l", Value::I64(l));
        m.set_field_by_name("u", Value::U64(u));
        m.set_field_by_name("s", Value::I64(l));
        m.set_field_by_name("ds", Value::List(vec![Value::F64(d), Value::F64(-d)]));
        m.set_field_by_name("fs", Value::List(vec![Value::F32(f), Value::F32(-f)]));
        let mut wire = Vec::new();
        write_indexes(&[0], &mut wire);
        m.encode(&mut wire).unwrap();
        wire
    }

    /// Decode, then encode what was decoded: the same wire bytes (issue 54).
    fn proto_round_trip(d: f64, f: f32, l: i64, u: u64) -> Result<(), String> {
        let s = ProtoSchema::parse("n.proto", NUMBERS, &[]).unwrap();
        let (desc, idx) = s.by_name("N").unwrap();
        let wire = numbers_wire(&desc, d, f, l, u);
        let mut json = Vec::new();
        s.to_json(&wire, &mut json)?;
        let mut back = Vec::new();
        ProtoSchema::from_json(&desc, &idx, &json, &mut back)?;
        if back != wire {
            return Err(format!(
                "came back changed: {}",
                String::from_utf8_lossy(&json)
            ));
        }
        Ok(())
    }

    #[test]
    fn numbers_at_the_edges_come_back_bit_for_bit_through_protobuf() {
        let doubles = [
            "2.849334360432075e-17",
            "-3.8524530647661083e+25",
            "4.1803008046001145e-13",
            "2.2250738585072011e-308",
            "5e-324",
            "1.7976931348623157e308",
            "-0",
        ];
        // f32::MAX's shortest text reads back above f32's range through a double, and
        // 7.038531e-26's rounds twice: both written widened, so both come back.
        let floats = [
            f32::MAX,
            f32::MIN,
            f32::from_bits(0x15ae_43fd),
            f32::from_bits(1),
        ];
        for (d, f) in doubles.iter().zip(floats.iter().cycle()) {
            let d: f64 = d.parse().unwrap();
            proto_round_trip(d, *f, i64::MAX, u64::MAX).unwrap_or_else(|e| panic!("{d:e}: {e}"));
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Any double, float (NaN aside: proto3 JSON writes `"NaN"`, payload not kept),
        /// 64-bit integer: decode then encode is the identity on the wire.
        #[test]
        fn decode_then_encode_is_the_identity_for_every_protobuf_number(
            d in any::<u64>().prop_map(f64::from_bits).prop_filter("not NaN", |d| !d.is_nan()),
            f in any::<u32>().prop_map(f32::from_bits).prop_filter("not NaN", |f| !f.is_nan()),
            l in any::<i64>(),
            u in any::<u64>(),
        ) {
            proto_round_trip(d, f, l, u).map_err(TestCaseError::fail)?;
        }
    }
}
