//! The JSONL message form used by local sources and sinks.
//!
//! One message per line:
//!
//! ```json
//! {"key": "k1", "value": "{\"n\":1}", "headers": [["h", "v"], ["empty", null]], "timestamp": 1700000000000}
//! ```
//!
//! * `key`, `value` and header values are bytes, written as a JSON string when they are valid
//!   UTF-8 and as `{"base64": "..."}` otherwise, so any bytes round-trip. On input, a value that
//!   is any other JSON (object, array, number, bool) stands for its compact JSON text.
//!   `null` or a missing field means absent.
//! * `headers` is a list of `[name, value]` pairs (order and duplicates kept); on input an
//!   object `{"name": value}` is accepted too.
//! * `timestamp` is milliseconds since the Unix epoch; `topic` is the output topic a stage set.
//!   Output lines of the reject path add `reject` (reason, stage, plugin, source) fields; on
//!   input they read as the `weir.*` headers of a dead-letter record (`weir replay`).

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::message::{Header, Message};

/// A line that is not a message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

fn bytes_of(field: &str, v: &Value) -> Result<Option<Vec<u8>>, ParseError> {
    Ok(match v {
        Value::Null => None,
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 && m.contains_key("base64") => {
            let Some(Value::String(b)) = m.get("base64") else {
                return Err(ParseError(format!("`{field}.base64` must be a string")));
            };
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| ParseError(format!("`{field}.base64`: {e}")))?,
            )
        }
        other => Some(other.to_string().into_bytes()),
    })
}

/// Renders bytes as a JSON string when UTF-8, else as `{"base64": ...}`.
pub fn bytes_json(b: Option<&[u8]>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
        },
    }
}

/// Parses one JSONL line into a message.
pub fn parse_line(line: &str) -> Result<Message, ParseError> {
    let v: Value = serde_json::from_str(line).map_err(|e| ParseError(format!("not JSON: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(ParseError("a message line must be a JSON object".into()));
    };
    let mut msg = Message::default();
    for (k, v) in std::mem::take(&mut obj) {
        match k.as_str() {
            "key" => msg.key = bytes_of("key", &v)?,
            "value" => msg.value = bytes_of("value", &v)?,
            "timestamp" => {
                msg.timestamp =
                    match v {
                        Value::Null => None,
                        v => Some(v.as_i64().ok_or_else(|| {
                            ParseError("`timestamp` must be an integer (ms)".into())
                        })?),
                    }
            }
            "topic" => {
                msg.topic = match v {
                    Value::Null => None,
                    Value::String(s) => Some(s),
                    _ => return Err(ParseError("`topic` must be a string".into())),
                }
            }
            "headers" => msg.headers.extend(parse_headers(&v)?),
            "reject" => msg.headers.extend(reject_headers(&v)?),
            other => {
                return Err(ParseError(format!(
                "unknown field `{other}` (expected key, value, headers, timestamp, topic, reject)"
            )))
            }
        }
    }
    Ok(msg)
}

fn parse_headers(v: &Value) -> Result<Vec<Header>, ParseError> {
    let pair = |k: &str, v: &Value| -> Result<Header, ParseError> {
        Ok(Header {
            key: k.to_owned().into(),
            value: bytes_of("headers", v)?.map(Into::into),
        })
    };
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Object(m) => m.iter().map(|(k, v)| pair(k, v)).collect(),
        Value::Array(items) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                Some([Value::String(k), v]) => pair(k, v),
                _ => Err(ParseError(
                    "each header must be a [\"name\", value] pair".into(),
                )),
            })
            .collect(),
        _ => Err(ParseError(
            "`headers` must be a list of [name, value] pairs or an object".into(),
        )),
    }
}

/// The `reject` object of a reject-path line as the `weir.*` headers a dead-letter topic
/// carries (so a reject file replays like a DLQ topic).
fn reject_headers(v: &Value) -> Result<Vec<Header>, ParseError> {
    let bad = || ParseError("`reject` must be an object with reason, stage, plugin, source".into());
    let r = v.as_object().ok_or_else(bad)?;
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let source = r.get("source").and_then(Value::as_object);
    let fields = [
        ("weir.reason", text(r.get("reason"))),
        ("weir.stage", text(r.get("stage"))),
        ("weir.plugin", text(r.get("plugin"))),
        (
            "weir.source.topic",
            text(source.and_then(|s| s.get("topic"))),
        ),
        (
            "weir.source.partition",
            text(source.and_then(|s| s.get("partition"))),
        ),
        (
            "weir.source.offset",
            text(source.and_then(|s| s.get("offset"))),
        ),
    ];
    Ok(fields
        .into_iter()
        .filter_map(|(k, v)| {
            v.map(|v| Header {
                key: k.to_owned().into(),
                value: Some(v.into_bytes().into()),
            })
        })
        .collect())
}

/// Renders a message as a JSON object (fields that are absent are left out).
pub fn message_json(msg: &Message) -> Map<String, Value> {
    let mut m = Map::new();
    if msg.key.is_some() {
        m.insert("key".into(), bytes_json(msg.key.as_deref()));
    }
    m.insert("value".into(), bytes_json(msg.value.as_deref()));
    if !msg.headers.is_empty() {
        let hs = msg
            .headers
            .iter()
            .map(|h| json!([h.key, bytes_json(h.value.as_deref())]))
            .collect();
        m.insert("headers".into(), Value::Array(hs));
    }
    if let Some(ts) = msg.timestamp {
        m.insert("timestamp".into(), ts.into());
    }
    if let Some(t) = &msg.topic {
        m.insert("topic".into(), t.clone().into());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_round_trip() {
        let msg = Message {
            key: Some(vec![0xff, 0x00, 0x80]),
            value: Some(b"plain text".to_vec()),
            headers: vec![
                Header {
                    key: "bin".into(),
                    value: Some(vec![0xc3, 0x28].into()),
                },
                Header {
                    key: "null".into(),
                    value: None,
                },
                Header {
                    key: "bin".into(),
                    value: Some(b"dup".as_slice().into()),
                },
            ],
            timestamp: Some(42),
            topic: Some("out".into()),
        };
        let line = Value::Object(message_json(&msg)).to_string();
        assert_eq!(parse_line(&line).unwrap(), msg);
    }

    #[test]
    fn json_values_stand_for_their_text() {
        let m = parse_line(r#"{"value": {"a": 1}, "headers": {"h": "v"}}"#).unwrap();
        assert_eq!(m.value.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(m.headers[0].value.as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn bad_lines_say_why() {
        assert!(parse_line("nope").unwrap_err().0.contains("not JSON"));
        assert!(parse_line(r#"{"valeu": 1}"#)
            .unwrap_err()
            .0
            .contains("unknown field `valeu`"));
        assert!(parse_line(r#"{"timestamp": "x"}"#)
            .unwrap_err()
            .0
            .contains("timestamp"));
    }
}
