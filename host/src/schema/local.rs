//! Records of a local source (a JSONL file, stdin) written as JSON beside the schema that
//! encodes them, so a stage on a schema-registry topic can be tried without Kafka:
//!
//! ```json
//! {"value": {"schema_id": 7, "avro": {"id": 1, "status": "PAID"}}}
//! {"value": {"subject": "orders-value", "protobuf": {"id": "1"}, "message": "shop.Refund"}}
//! {"value": {"subject": "orders-value", "json": {"id": 1}}}
//! ```
//!
//! The host encodes such a record with that schema into the wire format, as a producer would
//! (a record that does not fit is rejected with the field path), and then decodes it as any
//! record from Kafka: the stage sees exactly what it would see from the topic. A value in the
//! wire format itself (`{"base64": "AAAAAAc…"}`) needs none of this.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::{Compiled, LookupError, Registered, Registry, SchemaKind};
use super::wire::{wire, CodecReject};

/// Which schema encodes a local record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaRef {
    /// A registered schema by id.
    Id(u32),
    /// A subject's latest version.
    Subject(String),
}

/// A local record: its schema, the kind the line says it is, the record as JSON text, and
/// for Protobuf the message it is (default: the file's first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRecord {
    /// The schema.
    pub schema: SchemaRef,
    /// `avro`, `protobuf` or `json`: the key the record is under.
    pub kind: SchemaKind,
    /// The record as JSON text.
    pub record: Vec<u8>,
    /// Protobuf: the message's full name.
    pub message: Option<String>,
}

const FORMATS: [(&str, SchemaKind); 3] = [
    ("avro", SchemaKind::Avro),
    ("protobuf", SchemaKind::Protobuf),
    ("json", SchemaKind::Json),
];

/// The local record in `bytes`: `None` when they are not one (an object with a record under
/// `avro`, `protobuf` or `json` and nothing but `schema_id`, `subject` and `message`
/// beside it), `Some(Err)` when they are one with a mistake.
pub fn parse(bytes: &[u8]) -> Option<Result<LocalRecord, String>> {
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    let known = [
        "schema_id",
        "subject",
        "message",
        "avro",
        "protobuf",
        "json",
    ];
    let records: Vec<_> = FORMATS
        .iter()
        .filter(|(k, _)| obj.contains_key(*k))
        .collect();
    if records.is_empty() || obj.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    Some(record(&obj, &records))
}

fn record(
    obj: &Map<String, Value>,
    records: &[&(&str, SchemaKind)],
) -> Result<LocalRecord, String> {
    let [(name, kind)] = records else {
        return Err("a local record has one of `avro`, `protobuf` or `json`, not several".into());
    };
    let schema = match (obj.get("schema_id"), obj.get("subject")) {
        (Some(id), None) => SchemaRef::Id(
            id.as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| format!("`schema_id` must be a schema id (a number), not {id}"))?,
        ),
        (None, Some(Value::String(s))) => SchemaRef::Subject(s.clone()),
        (None, Some(other)) => return Err(format!("`subject` must be a string, not {other}")),
        (Some(_), Some(_)) => return Err("give `schema_id` or `subject`, not both".into()),
        (None, None) => {
            return Err(format!(
                "a local `{name}` record needs `schema_id` (a registered schema) or `subject` (its latest version)"
            ))
        }
    };
    let message = match obj.get("message") {
        None => None,
        Some(Value::String(m)) if *kind == SchemaKind::Protobuf => Some(m.clone()),
        Some(_) => return Err("`message` (a string) is for `protobuf` records".into()),
    };
    Ok(LocalRecord {
        schema,
        kind: *kind,
        record: serde_json::to_vec(&obj[*name]).expect("a JSON value serializes"),
        message,
    })
}

/// Looks up the record's schema (from the registry's cache when it has it).
pub fn lookup(registry: &Registry, r: &LocalRecord) -> Result<Arc<Registered>, LookupError> {
    match &r.schema {
        SchemaRef::Id(id) => registry.by_id(*id),
        SchemaRef::Subject(s) => registry.latest(s),
    }
}

/// The record in the wire format of `schema`, or why it cannot be (`side`: `key` or `value`,
/// for the reason's text).
pub fn encode(schema: &Registered, r: &LocalRecord, side: &str) -> Result<Vec<u8>, CodecReject> {
    let which = match &r.schema {
        SchemaRef::Id(id) => format!("schema id {id}"),
        SchemaRef::Subject(s) => format!("subject `{s}` (schema id {})", schema.id),
    };
    if schema.kind != r.kind {
        return Err(CodecReject {
            reason: "wrong_format",
            text: format!(
                "{side}: {which} is {}, the line gives a `{}` record",
                schema.kind.as_str(),
                FORMATS
                    .iter()
                    .find(|(_, k)| *k == r.kind)
                    .expect("a format")
                    .0
            ),
        });
    }
    let proto = match (&schema.compiled, &r.message) {
        (Ok(Compiled::Protobuf(p)), Some(m)) => Some(p.by_name(m).map_err(|e| CodecReject {
            reason: "unsupported",
            text: format!("{side}: {which}: message: {e}"),
        })?),
        (Ok(Compiled::Protobuf(p)), None) => Some((p.first(), vec![0])),
        _ => None,
    };
    let mut out = Vec::with_capacity(r.record.len() + 8);
    wire(schema, proto.as_ref(), &r.record, &mut out).map_err(|e| CodecReject {
        reason: "does_not_fit",
        text: format!("{side}: the local record does not match {which}: {e}"),
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_objects_of_the_local_form_are_local_records() {
        let r = parse(br#"{"schema_id": 7, "avro": {"id": 1}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.schema, SchemaRef::Id(7));
        assert_eq!(r.kind, SchemaKind::Avro);
        assert_eq!(r.record, br#"{"id":1}"#);
        let r = parse(br#"{"subject": "o-value", "protobuf": {}, "message": "shop.Refund"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.schema, SchemaRef::Subject("o-value".into()));
        assert_eq!(r.message.as_deref(), Some("shop.Refund"));
        // Plain JSON values and wire-format bytes are not local records.
        for other in [
            &br#"{"id": 1, "avro": 2}"#[..],
            br#"{"id": 1}"#,
            b"[1]",
            b"\x00\x00\x00\x00\x07\x02",
            b"{not json",
        ] {
            assert_eq!(parse(other), None, "{}", String::from_utf8_lossy(other));
        }
        // The form with a mistake says which.
        for (line, says) in [
            (&br#"{"avro": {}}"#[..], "needs `schema_id`"),
            (
                br#"{"schema_id": 1, "subject": "s", "avro": {}}"#,
                "not both",
            ),
            (br#"{"schema_id": "1", "avro": {}}"#, "a number"),
            (
                br#"{"schema_id": 1, "avro": {}, "json": {}}"#,
                "not several",
            ),
            (
                br#"{"schema_id": 1, "avro": {}, "message": "m"}"#,
                "for `protobuf`",
            ),
        ] {
            let err = parse(line).unwrap().unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
