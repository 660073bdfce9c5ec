//! A JSON value that borrows its text: what the encoder reads a stage's output into.
//! serde_json parses it; strings without escapes and object keys are slices of the input,
//! objects are lists in document order (a record's fields usually come in schema order, so
//! finding each is one comparison). No map is built, no key is copied.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON value borrowing from its text.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer above `i64::MAX`.
    Uint(u64),
    /// Any other number, with its text when it was read by Weir's scanner (a decimal or a
    /// `float` is read from the digits, exactly; the double is correctly rounded).
    Float(f64, Option<&'a str>),
    /// Text.
    Str(Cow<'a, str>),
    /// An array.
    Array(Vec<Json<'a>>),
    /// An object's members in document order.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'a> Json<'a> {
    /// Parses JSON text.
    pub fn parse(text: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(text)
    }

    /// The owned copy of a `serde_json::Value` (a schema's defaults).
    pub fn from_value(v: &serde_json::Value) -> Json<'static> {
        use serde_json::Value;
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Json::Int(i),
                (None, Some(u)) => Json::Uint(u),
                _ => Json::Float(n.as_f64().unwrap_or(f64::NAN), None),
            },
            Value::String(s) => Json::Str(Cow::Owned(s.clone())),
            Value::Array(a) => Json::Array(a.iter().map(Json::from_value).collect()),
            Value::Object(m) => Json::Object(
                m.iter()
                    .map(|(k, v)| (Cow::Owned(k.clone()), Json::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// `null`?
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// A boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// An integer that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Int(i) => u64::try_from(*i).ok(),
            Json::Uint(u) => Some(*u),
            _ => None,
        }
    }

    /// Any number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Int(i) => Some(*i as f64),
            Json::Uint(u) => Some(*u as f64),
            Json::Float(f, _) => Some(*f),
            _ => None,
        }
    }

    /// Text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// An array's items.
    pub fn as_array(&self) -> Option<&[Json<'a>]> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An object's members.
    pub fn as_object(&self) -> Option<&[(Cow<'a, str>, Json<'a>)]> {
        match self {
            Json::Object(m) => Some(m),
            _ => None,
        }
    }

    /// What kind of value it is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Int(_) | Json::Uint(_) => "an integer",
            Json::Float(..) => "a number",
            Json::Str(_) => "text",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

impl fmt::Display for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Int(i) => write!(f, "{i}"),
            Json::Uint(u) => write!(f, "{u}"),
            Json::Float(_, Some(text)) => f.write_str(text),
            Json::Float(x, None) => write!(f, "{x}"),
            Json::Str(s) => f.write_str(s),
            other => f.write_str(other.kind()),
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Json<'de>, E> {
        Ok(Json::Int(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Json<'de>, E> {
        Ok(i64::try_from(u).map_or(Json::Uint(u), Json::Int))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Json<'de>, E> {
        Ok(Json::Float(x, None))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(Json::Array(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut v = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(Key(k)) = map.next_key()? {
            v.push((k, map.next_value()?));
        }
        Ok(Json::Object(v))
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_borrowed_unless_escaped_and_numbers_keep_their_kind() {
        let j =
            Json::parse(br#"{"a":"x","b\n":"y\"","n":[1,-2,18446744073709551615,2.5,null,true]}"#)
                .unwrap();
        let m = j.as_object().unwrap();
        assert!(
            matches!(m[0].0, Cow::Borrowed("a")) && matches!(m[0].1, Json::Str(Cow::Borrowed("x")))
        );
        assert!(matches!(m[1].0, Cow::Owned(_)) && m[1].1.as_str() == Some("y\""));
        assert_eq!(
            m[2].1,
            Json::Array(vec![
                Json::Int(1),
                Json::Int(-2),
                Json::Uint(u64::MAX),
                Json::Float(2.5, None),
                Json::Null,
                Json::Bool(true)
            ])
        );
        assert!(Json::parse(b"{\"a\":1,}").is_err());
        assert!(Json::parse(b"[1] x").is_err());
    }
}
