//! JSON read in place, for the common stage that reads a few fields and maybe sets one.
//!
//! [`Object::parse`] checks the whole value once (malformed JSON is an error, exactly as
//! `serde_json::from_slice` would say) and keeps the top-level fields as borrowed slices of
//! the message: no tree of maps and strings is built, so a stage that looks at one field pays
//! for a scan, not for a `serde_json::Value` and its allocations (see docs/BENCHMARKS.md).
//! Nested fields are found by re-reading only the values on the way ([`Object::pointer`]).
//! [`Object::set_str`] / [`Object::set_json`] change or add a field and [`Object::to_vec`]
//! writes the object back, keeping the input's field order and the text of every field not
//! touched.
//!
//! ```
//! use weir_sdk::json::{Object, Pointer};
//! let mut o = Object::parse(br#"{"status":"paid","user":{"country":"NL"}}"#).unwrap();
//! assert_eq!(o.get("status").and_then(|v| v.as_str()).as_deref(), Some("paid"));
//! let country = Pointer::parse("/user/country");
//! assert_eq!(o.pointer(&country).unwrap().raw(), r#""NL""#);
//! o.set_str("seen", "yes");
//! assert_eq!(o.to_vec(), br#"{"status":"paid","user":{"country":"NL"},"seen":"yes"}"#);
//! ```

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

mod scan;

/// Why a value could not be read as a JSON object.
#[derive(Debug)]
pub enum JsonError {
    /// The value is not valid JSON; the text is serde_json's (line, column, what).
    Malformed(serde_json::Error),
    /// Valid JSON, but not an object.
    NotAnObject,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::Malformed(e) => write!(f, "malformed JSON: {e}"),
            JsonError::NotAnObject => f.write_str("value is not a JSON object"),
        }
    }
}

impl std::error::Error for JsonError {}

/// One JSON value as the text it was written with (valid JSON, checked when it was read).
#[derive(Debug, Clone, Copy)]
pub struct Value<'a>(&'a str);

impl<'a> Value<'a> {
    /// The value's JSON text, e.g. `"paid"` (with quotes), `12.5`, `{"a":1}`.
    pub fn raw(&self) -> &'a str {
        self.0
    }

    /// The string, unescaped, when the value is a JSON string (borrowed when it has no
    /// escapes).
    pub fn as_str(&self) -> Option<Cow<'a, str>> {
        if !self.0.starts_with('"') {
            return None;
        }
        let inner = &self.0[1..self.0.len() - 1];
        if !inner.contains('\\') {
            return Some(Cow::Borrowed(inner));
        }
        serde_json::from_str::<String>(self.0).ok().map(Cow::Owned)
    }

    /// Whether the value is a JSON string.
    pub fn is_str(&self) -> bool {
        self.0.starts_with('"')
    }

    /// The value read into a `serde_json::Value` (allocates; for the rare field that needs it).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.0).expect("checked when it was read")
    }

    /// The field `key` of this value when it is an object (the last one, if repeated).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        if !self.0.starts_with('{') {
            return None;
        }
        let fields = Object::parse(self.0.as_bytes()).ok()?.fields;
        match fields.into_iter().rev().find(|(k, _)| k == key)?.1 {
            Cow::Borrowed(text) => Some(Value(text)),
            Cow::Owned(_) => unreachable!("a value just read is borrowed"),
        }
    }

    /// Element `index` of this value when it is an array.
    pub fn index(&self, index: usize) -> Option<Value<'a>> {
        if !self.0.starts_with('[') {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(self.0);
        let found = ElementAt(index).deserialize(&mut de).ok()?;
        found.map(|raw| Value(raw.get()))
    }

    /// The value `pointer` leads to from this one.
    pub fn pointer(&self, pointer: &Pointer) -> Option<Value<'a>> {
        pointer
            .tokens
            .iter()
            .try_fold(*self, |v, token| step(v, token))
    }
}

/// One step of a pointer: a field of an object or an element of an array.
fn step<'a>(v: Value<'a>, token: &str) -> Option<Value<'a>> {
    match v.0.as_bytes().first() {
        Some(b'{') => v.get(token),
        Some(b'[') => array_index(token).and_then(|i| v.index(i)),
        _ => None,
    }
}

/// An array index in a JSON pointer token: digits, no sign, no leading zero (RFC 6901).
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// A JSON pointer (RFC 6901, e.g. `/user/country`), split and unescaped once (at `init`),
/// not on every message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    tokens: Vec<String>,
}

impl Pointer {
    /// Reads `pointer`; a text without a leading `/` is one top-level field name.
    pub fn parse(pointer: &str) -> Pointer {
        let tokens = match pointer.strip_prefix('/') {
            None if pointer.is_empty() => Vec::new(),
            None => vec![pointer.to_owned()],
            Some(rest) => rest
                .split('/')
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect(),
        };
        Pointer { tokens }
    }
}

/// A JSON object read in place: its top-level fields as borrowed text.
#[derive(Debug, Clone)]
pub struct Object<'a> {
    fields: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> Object<'a> {
    /// Checks `bytes` (the whole text must be one valid JSON value) and keeps the top-level
    /// fields when it is an object.
    pub fn parse(bytes: &'a [u8]) -> Result<Object<'a>, JsonError> {
        // The common case in one pass written for wasm; serde_json decides everything else
        // (and words the error).
        if let Some(fields) = scan::object_fields(bytes) {
            return Ok(Object { fields });
        }
        let parsed = Self::read(serde_json::Deserializer::from_slice(bytes));
        match parsed {
            Ok(fields) => Ok(Object { fields }),
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                // Not an object; whether it is valid JSON at all decides which error.
                match serde_json::from_slice::<de::IgnoredAny>(bytes) {
                    Ok(_) => Err(JsonError::NotAnObject),
                    Err(e) => Err(JsonError::Malformed(e)),
                }
            }
            Err(e) => Err(JsonError::Malformed(e)),
        }
    }

    /// The top-level fields, then the end of the text.
    #[allow(clippy::type_complexity)]
    fn read<R: serde_json::de::Read<'a>>(
        mut de: serde_json::Deserializer<R>,
    ) -> Result<Vec<(Cow<'a, str>, Cow<'a, str>)>, serde_json::Error> {
        let Fields(fields) = Fields::deserialize(&mut de)?;
        de.end()?;
        Ok(fields)
    }

    /// The top-level field `key` (the last one, if the object repeats it).
    pub fn get(&self, key: &str) -> Option<Value<'_>> {
        self.fields
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| Value(v))
    }

    /// The value `pointer` leads to (`/a/b/0`); the empty pointer is not a field.
    pub fn pointer(&self, pointer: &Pointer) -> Option<Value<'_>> {
        let (first, rest) = pointer.tokens.split_first()?;
        rest.iter()
            .try_fold(self.get(first)?, |v, token| step(v, token))
    }

    /// The top-level fields in input order (a repeated key appears each time).
    pub fn iter(&self) -> impl Iterator<Item = (&str, Value<'_>)> {
        self.fields.iter().map(|(k, v)| (k.as_ref(), Value(v)))
    }

    /// Sets field `key` to the string `value` (in place when present, else appended).
    pub fn set_str(&mut self, key: &str, value: &str) {
        let text = serde_json::to_string(value).expect("a string always serializes");
        self.set_text(key, text);
    }

    /// Sets field `key` to `value` written as JSON (in place when present, else appended).
    pub fn set_json<T: serde::Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let text = serde_json::to_string(value)?;
        self.set_text(key, text);
        Ok(())
    }

    fn set_text(&mut self, key: &str, text: String) {
        match self.fields.iter().position(|(k, _)| k == key) {
            Some(at) => {
                self.fields[at].1 = Cow::Owned(text);
                // A repeated key collapses to its first place, as a map would hold it once.
                let mut i = at + 1;
                while i < self.fields.len() {
                    if self.fields[i].0 == key {
                        self.fields.remove(i);
                    } else {
                        i += 1;
                    }
                }
            }
            None => self
                .fields
                .push((Cow::Owned(key.to_owned()), Cow::Owned(text))),
        }
    }

    /// The object as compact JSON text: fields in their order, values as they were written.
    pub fn to_vec(&self) -> Vec<u8> {
        let len: usize = self.fields.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
        let mut out = Vec::with_capacity(len + 2);
        out.push(b'{');
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_key(&mut out, k);
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
        }
        out.push(b'}');
        out
    }
}

/// A key as a JSON string: copied as is when nothing in it needs escaping.
fn write_key(out: &mut Vec<u8>, key: &str) {
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, key).expect("writing to a Vec cannot fail");
    }
}

/// The top-level fields of an object, read in one pass.
struct Fields<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(8);
                while let Some(Key(k)) = map.next_key()? {
                    let v: &'de RawValue = map.next_value()?;
                    fields.push((k, Cow::Borrowed(v.get())));
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(FieldsVisitor)
    }
}

/// A key, borrowed from the input unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Reads an array, keeping only element `.0`.
struct ElementAt(usize);

impl<'de> DeserializeSeed<'de> for ElementAt {
    type Value = Option<&'de RawValue>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ElementAt {
    type Value = Option<&'de RawValue>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut i = 0;
        while let Some(v) = seq.next_element::<&'de RawValue>()? {
            if i == self.0 {
                found = Some(v);
            }
            i += 1;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_borrowed_and_found() {
        let o = Object::parse(br#" {"a": 1, "b" : "x\"y", "a": [1, {"c": null}]} "#).unwrap();
        assert_eq!(o.get("a").unwrap().raw(), r#"[1, {"c": null}]"#);
        assert_eq!(o.get("b").unwrap().as_str().as_deref(), Some("x\"y"));
        assert!(o.get("zz").is_none());
        let p = Pointer::parse("/a/1/c");
        assert_eq!(o.pointer(&p).unwrap().raw(), "null");
        assert!(o.pointer(&Pointer::parse("/a/01")).is_none());
        assert!(o.pointer(&Pointer::parse("/a/7")).is_none());
        assert_eq!(o.iter().count(), 3);
    }

    #[test]
    fn pointer_tokens_unescape() {
        let o = Object::parse(br#"{"a/b":{"m~n":true}}"#).unwrap();
        assert_eq!(
            o.pointer(&Pointer::parse("/a~1b/m~0n")).unwrap().raw(),
            "true"
        );
        assert_eq!(Pointer::parse("plain"), Pointer::parse("/plain"));
    }

    #[test]
    fn errors_say_malformed_or_not_an_object() {
        for bad in [
            &b"{not json"[..],
            b"[1, {",
            b"{\"a\":1} x",
            b"",
            b"{\"a\":}",
            b"{\"a\":\"\xff\"}",
        ] {
            assert!(
                matches!(Object::parse(bad), Err(JsonError::Malformed(_))),
                "{:?}",
                std::str::from_utf8(bad)
            );
        }
        for other in [&b"[1]"[..], b"3", b"\"s\"", b"null"] {
            assert!(matches!(Object::parse(other), Err(JsonError::NotAnObject)));
        }
        // The same text as serde_json's own error.
        let ours = Object::parse(b"{\"a\" 1}").unwrap_err().to_string();
        let theirs = serde_json::from_slice::<serde_json::Value>(b"{\"a\" 1}").unwrap_err();
        assert_eq!(ours, format!("malformed JSON: {theirs}"));
    }

    #[test]
    fn set_replaces_in_place_or_appends_and_escapes() {
        let mut o = Object::parse(br#"{"k":1,"x":2,"k":3,"q\"":4}"#).unwrap();
        o.set_str("k", "v\n");
        o.set_json("n", &[1, 2]).unwrap();
        assert_eq!(o.to_vec(), br#"{"k":"v\n","x":2,"q\"":4,"n":[1,2]}"#);
        let back: serde_json::Value = serde_json::from_slice(&o.to_vec()).unwrap();
        assert_eq!(back["q\""], 4);
    }

    #[test]
    fn same_answers_as_a_value_tree() {
        let docs = [
            r#"{"a":{"b":[0,{"c":"d"}]},"e":1.50,"f":"\u00e9"}"#,
            r#"{"a":null,"a":{"b":"last"}}"#,
            r#"{}"#,
        ];
        let pointers = [
            "/a", "/a/b", "/a/b/1/c", "/a/b/0", "/e", "/f", "/missing", "/a/b/2",
        ];
        for d in docs {
            let o = Object::parse(d.as_bytes()).unwrap();
            let tree: serde_json::Value = serde_json::from_str(d).unwrap();
            for p in pointers {
                let ours = o.pointer(&Pointer::parse(p)).map(|v| v.to_value());
                assert_eq!(ours.as_ref(), tree.pointer(p), "{d} {p}");
            }
        }
    }
}
