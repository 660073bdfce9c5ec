//! Avro binary ↔ JSON text, compiled from the schema: no intermediate value tree on the way
//! to JSON; on the way back one pass over the text when it has the usual shape (`stream`),
//! else a borrowed tree (`schema::json::Json`).
//!
//! The JSON form a stage sees (docs/schema-registry.md has the table):
//! records → objects (fields in schema order), enums → their symbol, arrays, maps → objects,
//! unions → the branch's value itself (no `{"type": value}` wrapper; on the way back the first
//! branch the value fits is taken, and a one-key `{"full.Name": value}` object picks a branch
//! by name), `bytes` and `fixed` → base64, `float`/`double` NaN and infinities → `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, `decimal` → a string of the exact decimal (`"12.30"`),
//! `uuid` → its text, `date` → `"2026-12-05"`, `time-millis`/`-micros` → `"13:45:00.250"`,
//! `timestamp-millis`/`-micros`/`-nanos` → RFC 3339 in UTC with 3, 6 or 9 fraction digits,
//! `local-timestamp-*` → the same without the `Z`, `duration` → `{"months", "days", "millis"}`.
//! Encoding also takes numbers for decimals and the epoch-based integers for times.
//!
//! Here: the node types and the entry points. `compile` builds the nodes from a schema,
//! `decode` writes binary as JSON, `encode` (the tree path) and `stream` (the one-pass path)
//! write JSON as binary; `binary`, `text` and `logical` hold the pieces they share.

use std::collections::HashMap;

use serde_json::Value;

use super::json::Json;

mod binary;
mod compile;
mod decode;
mod encode;
#[cfg(test)]
mod exact;
mod logical;
mod stream;
mod text;

use compile::Builder;

/// A schema that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("Avro schema: {0}")]
pub struct SchemaError(String);

/// A record that does not fit its schema, with where (`$.items[2].price`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct FitError {
    /// JSON-path-like place of the problem.
    pub path: String,
    /// What is wrong there.
    pub why: String,
}

impl FitError {
    fn new(why: impl Into<String>) -> Self {
        FitError {
            path: "$".into(),
            why: why.into(),
        }
    }

    /// Prefixes a path step (errors are built from the inside out).
    fn within(mut self, step: &str) -> Self {
        self.path.insert_str(1, step);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Millis,
    Micros,
    Nanos,
}

#[derive(Debug)]
struct Field {
    name: String,
    /// `"name":` ready to write.
    key: Key,
    node: usize,
    default: Option<Json<'static>>,
}

#[derive(Debug)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum {
        name: String,
        symbols: Vec<String>,
    },
    Array(usize),
    Map(usize),
    Record {
        name: String,
        fields: Vec<Field>,
    },
    Union(Vec<usize>),
    /// `decimal` on `bytes` (`fixed: None`) or on a `fixed` of that size.
    Decimal {
        scale: u32,
        fixed: Option<usize>,
    },
    Uuid {
        fixed: bool,
    },
    Date,
    Time(Unit),
    Timestamp {
        unit: Unit,
        local: bool,
    },
    Duration,
    /// A named type used before its definition finished (recursion): the node it names.
    Placeholder,
}

/// A record member's `"name":` as JSON text, kept in 16-byte pieces (the last padded with
/// zeros), so that writing and matching it are a few fixed-size moves, not a call per field.
#[derive(Debug)]
struct Key {
    len: usize,
    pieces: Box<[[u8; 16]]>,
}

impl Key {
    fn new(text: &[u8]) -> Self {
        let mut pieces = vec![[0u8; 16]; text.len().div_ceil(16).max(1)];
        pieces.as_flattened_mut()[..text.len()].copy_from_slice(text);
        Key {
            len: text.len(),
            pieces: pieces.into(),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.pieces.as_flattened()[..self.len]
    }

    /// Appends the key.
    fn put(&self, out: &mut Vec<u8>) {
        let at = out.len();
        for p in &self.pieces {
            out.extend_from_slice(p);
        }
        out.truncate(at + self.len);
    }

    /// Whether `s` starts with the key.
    fn starts(&self, s: &[u8]) -> bool {
        let n = self.pieces.len();
        if s.len() < n * 16 {
            return s.starts_with(self.as_bytes());
        }
        let mut diff = 0u128;
        for (i, p) in self.pieces.iter().enumerate() {
            let c: [u8; 16] = s[i * 16..i * 16 + 16].try_into().expect("16 bytes");
            let mut d = u128::from_le_bytes(c) ^ u128::from_le_bytes(*p);
            let left = self.len - i * 16;
            if left < 16 {
                d &= (1u128 << (8 * left)) - 1;
            }
            diff |= d;
        }
        diff == 0
    }
}

impl Node {
    /// An array, a map, a record or a union: a node with nodes inside.
    fn is_container(&self) -> bool {
        matches!(
            self,
            Node::Array(_) | Node::Map(_) | Node::Record { .. } | Node::Union(_)
        )
    }
}

/// A compiled Avro schema.
#[derive(Debug)]
pub struct AvroSchema {
    nodes: Vec<Node>,
    root: usize,
    /// Named types' indices by full name (for union branches chosen by name).
    names: HashMap<String, usize>,
    /// The JSON text of a datum is about this much longer than three times its binary
    /// form: its records' member names (the decoder's first guess of the text's size).
    names_len: usize,
}

impl AvroSchema {
    /// Compiles a schema (JSON text), with the named types of its references first (the
    /// registry's `references`, each a schema text, in dependency order).
    pub fn parse(text: &str, references: &[&str]) -> Result<Self, SchemaError> {
        let mut b = Builder::default();
        for r in references {
            let v: Value = serde_json::from_str(r)
                .map_err(|e| SchemaError(format!("a referenced schema is not JSON: {e}")))?;
            b.node(&v, None)?;
        }
        let v: Value =
            serde_json::from_str(text).map_err(|e| SchemaError(format!("not JSON: {e}")))?;
        let root = b.node(&v, None)?;
        let names_len = b
            .nodes
            .iter()
            .map(|n| match n {
                Node::Record { fields, .. } => fields.iter().map(|f| f.key.len + 1).sum(),
                _ => 0,
            })
            .sum::<usize>()
            .min(4096);
        Ok(AvroSchema {
            nodes: b.nodes,
            root,
            names: b.names,
            names_len,
        })
    }

    /// The root's full name, for a record (the `record-name` subject strategies).
    pub fn name(&self) -> Option<&str> {
        match &self.nodes[self.root] {
            Node::Record { name, .. } | Node::Enum { name, .. } => Some(name),
            _ => self
                .names
                .iter()
                .find(|(_, &i)| i == self.root)
                .map(|(n, _)| n.as_str()),
        }
    }

    /// About how long the JSON text of a datum of `len` bytes is (a little more, mostly):
    /// numbers and dates grow about threefold, and the records' member names are added.
    pub fn json_len_hint(&self, len: usize) -> usize {
        len * 3 + self.names_len + 16
    }

    /// Appends the JSON text of one binary-encoded datum; the whole input must be used.
    pub fn to_json(&self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        out.reserve(self.json_len_hint(input.len()));
        self.write_json(self.root, &mut input, out)?;
        if !input.is_empty() {
            return Err(FitError::new(format!(
                "{} bytes left over after the record (not this schema's data?)",
                input.len()
            )));
        }
        Ok(())
    }

    /// Appends the binary encoding of a JSON text: in one pass when the text has the usual
    /// shape (`stream`), else through a parsed tree (which also says what does not fit).
    pub fn from_json(&self, json: &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        let start = out.len();
        if let Some(mut scan) = stream::Scan::new(json) {
            if self.stream(self.root, &mut scan, out).is_some() && scan.at_end() {
                return Ok(());
            }
        }
        out.truncate(start);
        self.encode_tree(json, out)
    }

    /// [`AvroSchema::from_json`] through a parsed tree.
    fn encode_tree(&self, json: &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        let v = stream::tree(json).map_err(|e| FitError::new(format!("not JSON: {e}")))?;
        self.encode(self.root, &v, out)
    }
}

#[cfg(test)]
mod tests {
    use super::binary::put_long;
    use super::logical::fast_timestamp;
    use super::text::{float, short_float};
    use super::*;

    fn round_trip(schema: &str, json: &str) -> String {
        let s = AvroSchema::parse(schema, &[]).expect("schema");
        let mut bin = Vec::new();
        s.from_json(json.as_bytes(), &mut bin).expect("encodes");
        let mut back = Vec::new();
        s.to_json(&bin, &mut back).expect("decodes");
        String::from_utf8(back).unwrap()
    }

    const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},
        {"name":"customer","type":"string"},
        {"name":"note","type":["null","string"],"default":null},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
        {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
            {"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
        {"name":"tags","type":{"type":"map","values":"double"}},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"ref","type":{"type":"string","logicalType":"uuid"}},
        {"name":"raw","type":"bytes"},
        {"name":"next","type":["null","Item"],"default":null}
    ]}"#;

    #[test]
    fn a_nested_record_round_trips_with_its_logical_types_in_their_json_form() {
        let json = r#"{"id":-7,"customer":"ä \"q\"","note":null,"status":"PAID","items":[{"sku":"a","qty":2},{"sku":"b","qty":-1}],"tags":{"x":1.5},"price":"-12.30","at":"2026-12-05T01:02:03.456Z","day":"1969-12-31","ref":"123e4567-e89b-12d3-a456-426614174000","raw":"AAH/","next":{"sku":"c","qty":3}}"#;
        assert_eq!(round_trip(ORDER, json), json);
    }

    #[test]
    fn the_binary_form_is_the_avro_spec_s() {
        // A long -1 is zigzag 1; a string is its length (zigzag) and bytes; a union its index.
        let s = AvroSchema::parse(r#"["null","string"]"#, &[]).unwrap();
        let mut b = Vec::new();
        s.from_json(br#""ab""#, &mut b).unwrap();
        assert_eq!(b, [2, 4, b'a', b'b']);
        let s = AvroSchema::parse(r#""long""#, &[]).unwrap();
        let mut b = Vec::new();
        s.from_json(b"-1", &mut b).unwrap();
        assert_eq!(b, [1]);
        let mut b = Vec::new();
        s.from_json(b"300", &mut b).unwrap();
        assert_eq!(b, [0xd8, 0x04]);
        // A decimal's bytes: the unscaled value, big-endian two's complement, minimal.
        let d = AvroSchema::parse(
            r#"{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}"#,
            &[],
        )
        .unwrap();
        let mut b = Vec::new();
        d.from_json(br#""-1.28""#, &mut b).unwrap();
        assert_eq!(b, [2, 0x80]);
        let mut b = Vec::new();
        d.from_json(br#""1.28""#, &mut b).unwrap();
        assert_eq!(b, [4, 0x00, 0x80]);
    }

    #[test]
    fn a_record_that_does_not_fit_says_where() {
        let s = AvroSchema::parse(ORDER, &[]).unwrap();
        let mut b = Vec::new();
        let bad = r#"{"id":1,"customer":"c","status":"PAID","items":[{"sku":"a","qty":2},{"sku":"b","qty":"x"}],"tags":{},"price":"1","at":0,"day":0,"ref":"123e4567-e89b-12d3-a456-426614174000","raw":""}"#;
        let e = s.from_json(bad.as_bytes(), &mut b).unwrap_err();
        assert_eq!(e.path, "$.items[1].qty");
        assert!(e.why.contains("expected an integer"), "{e}");
        let e = s
            .from_json(
                bad.replace("\"PAID\"", "\"GONE\"").as_bytes(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert_eq!(e.path, "$.status");
        let e = s.from_json(br#"{"id":1}"#, &mut Vec::new()).unwrap_err();
        assert!(
            e.why.contains("`customer`") && e.why.contains("missing"),
            "{e}"
        );
        let e = s
            .from_json(
                bad.replace("\"raw\":\"\"", "\"raw\":\"\",\"extra\":1")
                    .replace("\"x\"", "1")
                    .as_bytes(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(e.why.contains("`extra`"), "{e}");
        let e = s
            .from_json(
                bad.replace("\"price\":\"1\"", "\"price\":\"1.234\"")
                    .replace("\"x\"", "1")
                    .as_bytes(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert_eq!(e.path, "$.price");
    }

    #[test]
    fn truncated_or_overlong_data_is_an_error_not_a_guess() {
        let s = AvroSchema::parse(ORDER, &[]).unwrap();
        let good = r#"{"id":1,"customer":"c","status":"PAID","items":[],"tags":{},"price":"1","at":0,"day":0,"ref":"123e4567-e89b-12d3-a456-426614174000","raw":""}"#;
        let mut b = Vec::new();
        s.from_json(good.as_bytes(), &mut b).unwrap();
        for cut in 0..b.len() {
            assert!(
                s.to_json(&b[..cut], &mut Vec::new()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(s
            .to_json(&longer, &mut Vec::new())
            .unwrap_err()
            .why
            .contains("left over"));
    }

    #[test]
    fn recursive_types_fixed_uuid_duration_and_times() {
        let list = r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}"#;
        let j = r#"{"v":1,"next":{"v":2,"next":null}}"#;
        assert_eq!(round_trip(list, j), j);
        let u = r#"{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}"#;
        assert_eq!(
            round_trip(u, r#""123e4567-e89b-12d3-a456-426614174000""#),
            r#""123e4567-e89b-12d3-a456-426614174000""#
        );
        let d = r#"{"type":"fixed","name":"D","size":12,"logicalType":"duration"}"#;
        assert_eq!(
            round_trip(d, r#"{"months":1,"days":2,"millis":3}"#),
            r#"{"months":1,"days":2,"millis":3}"#
        );
        let t = r#"{"type":"long","logicalType":"timestamp-micros"}"#;
        assert_eq!(
            round_trip(t, r#""1960-01-01T00:00:00.000001Z""#),
            r#""1960-01-01T00:00:00.000001Z""#
        );
        assert_eq!(round_trip(t, "1"), r#""1970-01-01T00:00:00.000001Z""#);
        let tm = r#"{"type":"int","logicalType":"time-millis"}"#;
        assert_eq!(round_trip(tm, r#""13:45:00.250""#), r#""13:45:00.250""#);
        let f = r#"{"type":"fixed","name":"F","size":3,"logicalType":"decimal","precision":6,"scale":1}"#;
        assert_eq!(round_trip(f, "-0.5"), r#""-0.5""#);
        assert_eq!(round_trip(r#""double""#, r#""NaN""#), r#""NaN""#);
        let u2 = r#"["int",{"type":"record","name":"A","fields":[]},{"type":"record","name":"B","fields":[]}]"#;
        let s = AvroSchema::parse(u2, &[]).unwrap();
        let mut b = Vec::new();
        s.from_json(br#"{"B":{}}"#, &mut b).unwrap();
        assert_eq!(b, [4]);
    }

    #[test]
    fn short_doubles_are_written_as_serde_json_writes_them() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut values = vec![
            0.1,
            0.2,
            0.3,
            1.25,
            37.5,
            100.0,
            0.001,
            0.0015,
            0.05,
            99_999_999_999.999_9,
            1e-3,
            1e11,
            1e10,
            123_456.789_1,
            0.000_999_9,
            2.0f64.powi(40),
            1.0 / 3.0,
        ];
        for i in 0..200_000u64 {
            let r = next();
            let k = (r % 7) as i32;
            let m = (next() >> (next() % 64)) % 1_000_000_000_000_000;
            values.push(match i % 4 {
                // Decimals of every scale, as a producer writes prices and weights.
                0 | 1 => m as f64 / 10f64.powi(k),
                2 => (m % 100_000) as f64 / 10f64.powi(k),
                // Any double.
                _ => f64::from_bits(r),
            });
        }
        let mut fast = 0;
        for v in values {
            for v in [v, -v] {
                let mut ours = Vec::new();
                float(&mut ours, v);
                let mut theirs = Vec::new();
                if v.is_finite() {
                    serde_json::to_writer(&mut theirs, &v).unwrap();
                } else {
                    continue;
                }
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&theirs),
                    "{v:e}"
                );
                fast += usize::from(short_float(&mut Vec::new(), v));
            }
        }
        // The fast path is taken (else this test checks nothing of it).
        assert!(fast > 100_000, "{fast} of the values took the fast path");
    }

    #[test]
    fn dates_and_timestamps_match_chrono_across_the_calendar() {
        let t =
            AvroSchema::parse(r#"{"type":"long","logicalType":"timestamp-millis"}"#, &[]).unwrap();
        let d = AvroSchema::parse(r#"{"type":"int","logicalType":"date"}"#, &[]).unwrap();
        // Every day from 1600 to 2400, and millisecond instants around the epoch and leap days.
        for days in (-135_140..157_000).step_by(7) {
            let mut b = Vec::new();
            put_long(&mut b, days);
            let mut out = Vec::new();
            d.to_json(&b, &mut out).unwrap();
            let want = chrono::NaiveDate::from_num_days_from_ce_opt(days as i32 + 719_163).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("\"{}\"", want.format("%Y-%m-%d"))
            );
            let ms = days * 86_400_000 + (days * 7919).rem_euclid(86_400_000);
            let mut b = Vec::new();
            put_long(&mut b, ms);
            let mut out = Vec::new();
            t.to_json(&b, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            let want = chrono::DateTime::from_timestamp_millis(ms).unwrap();
            assert_eq!(
                text,
                format!("\"{}\"", want.format("%Y-%m-%dT%H:%M:%S%.3fZ"))
            );
            // And back, by the fast parser and by chrono's (an offset).
            let mut again = Vec::new();
            t.from_json(text.as_bytes(), &mut again).unwrap();
            assert_eq!(again, b, "{text}");
            let offset = format!(
                "\"{}\"",
                want.with_timezone(&chrono::FixedOffset::east_opt(5400).unwrap())
                    .to_rfc3339()
            );
            let mut again = Vec::new();
            t.from_json(offset.as_bytes(), &mut again).unwrap();
            assert_eq!(again, b, "{offset}");
        }
        assert!(fast_timestamp("2026-02-29T00:00:00Z", false).is_none());
        assert!(fast_timestamp("2024-02-29T00:00:00Z", false).is_some());
        assert!(fast_timestamp("2024-02-29T00:00:00", false).is_none());
        assert!(t
            .from_json(br#""2026-12-05T00:00:00.0001Z""#, &mut Vec::new())
            .unwrap_err()
            .why
            .contains("finer"));
    }

    #[test]
    fn references_define_names_the_schema_uses() {
        let item = r#"{"type":"record","name":"Item","namespace":"shop","fields":[{"name":"sku","type":"string"}]}"#;
        let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"item","type":"Item"}]}"#;
        let s = AvroSchema::parse(order, &[item]).unwrap();
        assert_eq!(s.name(), Some("shop.Order"));
        let mut b = Vec::new();
        s.from_json(br#"{"item":{"sku":"x"}}"#, &mut b).unwrap();
        assert!(AvroSchema::parse(order, &[])
            .unwrap_err()
            .to_string()
            .contains("unknown type `Item`"));
    }
}
