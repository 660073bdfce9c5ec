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

use std::collections::HashMap;
use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value;

use super::json::Json;

#[cfg(test)]
mod exact;
mod stream;

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

    fn write_json(&self, n: usize, r: &mut &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        match &self.nodes[n] {
            Node::Array(item) => {
                out.push(b'[');
                let mut i = 0usize;
                blocks(r, |r| {
                    if i > 0 {
                        out.push(b',');
                    }
                    let at = i;
                    i += 1;
                    self.write_json(*item, r, out)
                        .map_err(|e| e.within(&format!("[{at}]")))
                })?;
                out.push(b']');
            }
            Node::Map(value) => {
                out.push(b'{');
                let mut first = true;
                blocks(r, |r| {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    let k = std::str::from_utf8(bytes(r)?)
                        .map_err(|_| FitError::new("a map key that is not UTF-8"))?;
                    string(out, k);
                    out.push(b':');
                    self.write_json(*value, r, out)
                        .map_err(|e| e.within(&format!("[{}]", quoted(k))))
                })?;
                out.push(b'}');
            }
            Node::Record { fields, .. } => {
                out.push(b'{');
                for (i, f) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    f.key.put(out);
                    let node = &self.nodes[f.node];
                    if node.is_container() {
                        self.write_json(f.node, r, out)
                    } else {
                        Self::write_scalar(node, r, out)
                    }
                    .map_err(|e| e.within(&format!(".{}", f.name)))?;
                }
                out.push(b'}');
            }
            Node::Union(branches) => {
                let i = long(r)?;
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| FitError::new(format!("union branch {i} out of range")))?;
                self.write_json(*b, r, out)?;
            }
            scalar => Self::write_scalar(scalar, r, out)?,
        }
        Ok(())
    }

    /// Writes a scalar node's JSON (a small function: records call it per field without the
    /// containers' larger frame).
    fn write_scalar(node: &Node, r: &mut &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        match node {
            Node::Null | Node::Placeholder => out.extend_from_slice(b"null"),
            Node::Boolean => match take(r, 1)?[0] {
                0 => out.extend_from_slice(b"false"),
                1 => out.extend_from_slice(b"true"),
                b => return Err(FitError::new(format!("boolean byte {b}"))),
            },
            Node::Int | Node::Long => {
                itoa(out, long(r)?);
            }
            Node::Float => {
                let b = take(r, 4)?;
                float(
                    out,
                    f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
                );
            }
            Node::Double => {
                let b = take(r, 8)?;
                float(out, f64::from_le_bytes(b.try_into().expect("8 bytes")));
            }
            Node::String => {
                if !utf8_string(out, bytes(r)?) {
                    return Err(FitError::new("a string that is not UTF-8"));
                }
            }
            Node::Enum { symbols, .. } => {
                let i = long(r)?;
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| symbols.get(i))
                    .ok_or_else(|| FitError::new(format!("enum index {i} out of range")))?;
                string(out, s);
            }
            Node::Decimal { scale, fixed } => {
                let b = match fixed {
                    Some(size) => take(r, *size)?,
                    None => bytes(r)?,
                };
                let unscaled = be_signed(b)?;
                out.push(b'"');
                decimal_text(out, unscaled, *scale);
                out.push(b'"');
            }
            Node::Date => {
                let days = long(r)?;
                out.push(b'"');
                if !write_date(out, days) {
                    return Err(FitError::new(format!(
                        "date {days} is outside the years 0-9999"
                    )));
                }
                out.push(b'"');
            }
            Node::Timestamp { unit, local } => {
                let v = long(r)?;
                let (secs, nanos) = split_units(v, *unit);
                out.push(b'"');
                if !write_date(out, secs.div_euclid(86_400)) {
                    return Err(FitError::new(format!(
                        "timestamp {v} is outside the years 0-9999"
                    )));
                }
                let t = secs.rem_euclid(86_400);
                let mut time = *b"T00:00:00.";
                time[1..3].copy_from_slice(&digits::<2>(t / 3600));
                time[4..6].copy_from_slice(&digits::<2>(t / 60 % 60));
                time[7..9].copy_from_slice(&digits::<2>(t % 60));
                out.extend_from_slice(&time);
                match unit {
                    Unit::Millis => out.extend_from_slice(&digits::<3>(nanos / 1_000_000)),
                    Unit::Micros => out.extend_from_slice(&digits::<6>(nanos / 1_000)),
                    Unit::Nanos => out.extend_from_slice(&digits::<9>(nanos)),
                }
                if !*local {
                    out.push(b'Z');
                }
                out.push(b'"');
            }
            Node::Bytes | Node::Fixed(_) | Node::Uuid { .. } | Node::Time(_) | Node::Duration => {
                Self::write_rare(node, r, out)?
            }
            Node::Array(_) | Node::Map(_) | Node::Record { .. } | Node::Union(_) => {
                unreachable!("containers are written by write_json")
            }
        }
        Ok(())
    }

    /// [`AvroSchema::write_scalar`]'s less usual nodes, apart so that the usual ones' function
    /// stays small.
    #[inline(never)]
    fn write_rare(node: &Node, r: &mut &[u8], out: &mut Vec<u8>) -> Result<(), FitError> {
        match node {
            Node::Bytes => {
                let b = bytes(r)?;
                base64_json(out, b);
            }
            Node::Fixed(size) => {
                let b = take(r, *size)?;
                base64_json(out, b);
            }
            Node::Uuid { fixed } => {
                if *fixed {
                    let b = take(r, 16)?;
                    out.push(b'"');
                    for (i, x) in b.iter().enumerate() {
                        if matches!(i, 4 | 6 | 8 | 10) {
                            out.push(b'-');
                        }
                        let _ = write!(Text(out), "{x:02x}");
                    }
                    out.push(b'"');
                } else {
                    let s = std::str::from_utf8(bytes(r)?)
                        .map_err(|_| FitError::new("a uuid that is not UTF-8"))?;
                    string(out, s);
                }
            }
            Node::Time(unit) => {
                let v = long(r)?;
                let (secs, frac) = split_units(v, *unit);
                let t = u32::try_from(secs)
                    .ok()
                    .and_then(|s| {
                        chrono::NaiveTime::from_num_seconds_from_midnight_opt(s, frac as u32)
                    })
                    .ok_or_else(|| FitError::new(format!("time of day {v} out of range")))?;
                let f = match unit {
                    Unit::Millis => "%H:%M:%S%.3f",
                    Unit::Micros => "%H:%M:%S%.6f",
                    Unit::Nanos => "%H:%M:%S%.9f",
                };
                let _ = write!(Text(out), "\"{}\"", t.format(f));
            }
            Node::Duration => {
                let b = take(r, 12)?;
                let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
                let _ = write!(
                    Text(out),
                    "{{\"months\":{},\"days\":{},\"millis\":{}}}",
                    u(0),
                    u(4),
                    u(8)
                );
            }
            _ => unreachable!("write_scalar writes the others"),
        }
        Ok(())
    }

    fn encode(&self, n: usize, v: &Json<'_>, out: &mut Vec<u8>) -> Result<(), FitError> {
        let want = |what: &str| FitError::new(format!("expected {what}, got {}", v.kind()));
        match &self.nodes[n] {
            Node::Null | Node::Placeholder => {
                if !v.is_null() {
                    return Err(want("null"));
                }
            }
            Node::Boolean => out.push(v.as_bool().ok_or_else(|| want("true or false"))? as u8),
            Node::Int => {
                let i = v
                    .as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| want("an integer that fits 32 bits"))?;
                put_long(out, i as i64);
            }
            Node::Long => put_long(out, v.as_i64().ok_or_else(|| want("a 64-bit integer"))?),
            Node::Float => {
                let f = float32_of(v).ok_or_else(|| want("a number"))?;
                out.extend_from_slice(&f.to_le_bytes());
            }
            Node::Double => {
                let f = float_of(v).ok_or_else(|| want("a number"))?;
                out.extend_from_slice(&f.to_le_bytes());
            }
            Node::Bytes => {
                let b = from_base64(v).ok_or_else(|| want("base64 text"))?;
                put_bytes(out, &b);
            }
            Node::Fixed(size) => {
                let b = from_base64(v).ok_or_else(|| want("base64 text"))?;
                if b.len() != *size {
                    return Err(FitError::new(format!(
                        "fixed of {size} bytes, got {} bytes",
                        b.len()
                    )));
                }
                out.extend_from_slice(&b);
            }
            Node::String => put_bytes(out, v.as_str().ok_or_else(|| want("text"))?.as_bytes()),
            Node::Enum { name, symbols } => {
                let s = v.as_str().ok_or_else(|| want("an enum symbol"))?;
                let i = symbols.iter().position(|x| x == s).ok_or_else(|| {
                    FitError::new(format!(
                        "`{s}` is not a symbol of enum {name} ({})",
                        symbols.join(", ")
                    ))
                })?;
                put_long(out, i as i64);
            }
            Node::Array(item) => {
                let a = v.as_array().ok_or_else(|| want("an array"))?;
                if !a.is_empty() {
                    put_long(out, a.len() as i64);
                    for (i, x) in a.iter().enumerate() {
                        self.encode(*item, x, out)
                            .map_err(|e| e.within(&format!("[{i}]")))?;
                    }
                }
                out.push(0);
            }
            Node::Map(value) => {
                let m = v.as_object().ok_or_else(|| want("an object (a map)"))?;
                if !m.is_empty() {
                    put_long(out, m.len() as i64);
                    for (k, x) in m {
                        put_bytes(out, k.as_bytes());
                        self.encode(*value, x, out)
                            .map_err(|e| e.within(&format!("[{}]", quoted(k))))?;
                    }
                }
                out.push(0);
            }
            Node::Record { name, fields } => {
                let m = v
                    .as_object()
                    .ok_or_else(|| want(&format!("an object (record {name})")))?;
                let mut used = 0;
                for (i, f) in fields.iter().enumerate() {
                    // Usually the members come in schema order: one comparison.
                    let found = match m.get(i) {
                        Some((k, x)) if *k == f.name => Some(x),
                        _ => m.iter().find(|(k, _)| *k == f.name).map(|(_, x)| x),
                    };
                    let x = match found {
                        Some(x) => {
                            used += 1;
                            x
                        }
                        None => f.default.as_ref().ok_or_else(|| {
                            FitError::new(format!(
                                "field `{}` of record {name} is missing and has no default",
                                f.name
                            ))
                        })?,
                    };
                    self.encode(f.node, x, out)
                        .map_err(|e| e.within(&format!(".{}", f.name)))?;
                }
                if used < m.len() {
                    return Err(FitError::new(
                        match m.iter().find(|(k, _)| !fields.iter().any(|f| f.name == *k)) {
                            Some((extra, _)) => format!("field `{extra}` is not in record {name}"),
                            None => format!("a field of record {name} appears twice"),
                        },
                    ));
                }
            }
            Node::Union(branches) => {
                let start = out.len();
                let mut last = None;
                for (i, b) in branches.iter().enumerate() {
                    if !self.may_fit(*b, v) {
                        continue;
                    }
                    put_long(out, i as i64);
                    match self.encode(*b, v, out) {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            out.truncate(start);
                            if !matches!(self.nodes[*b], Node::Null) {
                                last = Some(e);
                            }
                        }
                    }
                }
                // `{"full.Name": value}` picks a branch by name.
                if let Some((k, x)) = v
                    .as_object()
                    .filter(|m| m.len() == 1)
                    .and_then(|m| m.iter().next())
                {
                    if let Some(i) = branches.iter().position(|b| *k == self.type_name(*b)) {
                        put_long(out, i as i64);
                        return self.encode(branches[i], x, out);
                    }
                }
                let names: Vec<String> = branches.iter().map(|b| self.type_name(*b)).collect();
                let why = last.map_or_else(String::new, |e| format!(" ({e})"));
                return Err(FitError::new(format!(
                    "fits none of the union's branches [{}]{why}",
                    names.join(", ")
                )));
            }
            Node::Decimal { scale, fixed } => {
                let unscaled = decimal_of(v, *scale)?;
                match fixed {
                    Some(size) => {
                        let b = unscaled.to_be_bytes();
                        if *size < 16 {
                            let (head, tail) = b.split_at(16 - size);
                            let sign = if unscaled < 0 { 0xff } else { 0 };
                            if head.iter().any(|&x| x != sign)
                                || (tail[0] & 0x80 != 0) != (unscaled < 0)
                            {
                                return Err(FitError::new(format!(
                                    "the decimal does not fit {size} bytes"
                                )));
                            }
                            out.extend_from_slice(tail);
                        } else {
                            let sign = if unscaled < 0 { 0xff } else { 0 };
                            out.extend(std::iter::repeat_n(sign, size - 16));
                            out.extend_from_slice(&b);
                        }
                    }
                    None => put_minimal_be(out, unscaled),
                }
            }
            Node::Uuid { fixed } => {
                let s = v.as_str().ok_or_else(|| want("a uuid"))?;
                let hex: String = s.chars().filter(|c| *c != '-').collect();
                let b = (hex.len() == 32 && s.len() == 36)
                    .then(|| hex::decode(&hex).ok())
                    .flatten()
                    .ok_or_else(|| FitError::new(format!("`{s}` is not a uuid")))?;
                if *fixed {
                    out.extend_from_slice(&b);
                } else {
                    put_bytes(out, s.as_bytes());
                }
            }
            Node::Date => {
                let days = match v {
                    Json::Str(s) => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                        .map(|d| d.num_days_from_ce() as i64 - 719_163)
                        .map_err(|_| FitError::new(format!("`{s}` is not a date (YYYY-MM-DD)")))?,
                    _ => v.as_i64().ok_or_else(|| want("a date"))?,
                };
                put_long(out, days);
            }
            Node::Time(unit) => {
                let n = match v {
                    Json::Str(s) => {
                        let t =
                            chrono::NaiveTime::parse_from_str(s, "%H:%M:%S%.f").map_err(|_| {
                                FitError::new(format!("`{s}` is not a time of day (HH:MM:SS.fff)"))
                            })?;
                        in_units(
                            t.num_seconds_from_midnight() as i64,
                            t.nanosecond() as i64,
                            *unit,
                            s,
                        )?
                    }
                    _ => v.as_i64().ok_or_else(|| want("a time of day"))?,
                };
                put_long(out, n);
            }
            Node::Timestamp { unit, local } => {
                let n = match v {
                    Json::Str(s) => match fast_timestamp(s, *local) {
                        Some((secs, nanos)) => in_units(secs, nanos, *unit, s)?,
                        None => {
                            let t = if *local {
                                chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                                    .map(|t| t.and_utc())
                                    .ok()
                            } else {
                                chrono::DateTime::parse_from_rfc3339(s)
                                    .map(|t| t.to_utc())
                                    .ok()
                            }
                            .ok_or_else(|| {
                                FitError::new(format!(
                                    "`{s}` is not a {}timestamp",
                                    if *local { "local " } else { "RFC 3339 " }
                                ))
                            })?;
                            in_units(t.timestamp(), t.timestamp_subsec_nanos() as i64, *unit, s)?
                        }
                    },
                    _ => v.as_i64().ok_or_else(|| want("a timestamp"))?,
                };
                put_long(out, n);
            }
            Node::Duration => {
                let m = v
                    .as_object()
                    .ok_or_else(|| want("{\"months\", \"days\", \"millis\"}"))?;
                for k in ["months", "days", "millis"] {
                    let x = m
                        .iter()
                        .find(|(name, _)| name == k)
                        .and_then(|(_, x)| x.as_u64())
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(|| {
                            FitError::new(format!(
                                "duration `{k}`: expected a 32-bit unsigned integer"
                            ))
                        })?;
                    out.extend_from_slice(&x.to_le_bytes());
                }
                if m.len() > 3 {
                    return Err(FitError::new("a duration has only months, days and millis"));
                }
            }
        }
        Ok(())
    }

    /// Whether a value's JSON kind can be the node's: a cheap test before a union branch is
    /// tried (a miss would build an error message).
    fn may_fit(&self, n: usize, v: &Json<'_>) -> bool {
        match (&self.nodes[n], v) {
            (Node::Union(_), _) => true,
            (Node::Null | Node::Placeholder, j) => j.is_null(),
            (_, Json::Null) => false,
            (Node::Boolean, j) => matches!(j, Json::Bool(_)),
            (Node::Int | Node::Long, j) => matches!(j, Json::Int(_)),
            (Node::Float | Node::Double | Node::Decimal { .. }, j) => {
                matches!(
                    j,
                    Json::Int(_) | Json::Uint(_) | Json::Float(..) | Json::Str(_)
                )
            }
            (
                Node::Bytes | Node::Fixed(_) | Node::String | Node::Enum { .. } | Node::Uuid { .. },
                j,
            ) => {
                matches!(j, Json::Str(_))
            }
            (Node::Date | Node::Time(_) | Node::Timestamp { .. }, j) => {
                matches!(j, Json::Str(_) | Json::Int(_))
            }
            (Node::Array(_), j) => matches!(j, Json::Array(_)),
            (Node::Map(_) | Node::Record { .. } | Node::Duration, j) => {
                matches!(j, Json::Object(_))
            }
        }
    }

    /// The name a union branch goes by: a named type's full name, else the type's.
    fn type_name(&self, n: usize) -> String {
        if let Some((name, _)) = self.names.iter().find(|(_, &i)| i == n) {
            return name.clone();
        }
        match &self.nodes[n] {
            Node::Null | Node::Placeholder => "null",
            Node::Boolean => "boolean",
            Node::Int | Node::Date | Node::Time(Unit::Millis) => "int",
            Node::Long | Node::Time(_) | Node::Timestamp { .. } => "long",
            Node::Float => "float",
            Node::Double => "double",
            Node::Bytes | Node::Decimal { .. } => "bytes",
            Node::String | Node::Uuid { .. } => "string",
            Node::Array(_) => "array",
            Node::Map(_) => "map",
            Node::Union(_) => "union",
            Node::Fixed(_) | Node::Enum { .. } | Node::Record { .. } | Node::Duration => "named",
        }
        .to_owned()
    }
}

use chrono::{Datelike as _, Timelike as _};

/// Builds the node arena; named types by full name.
#[derive(Default)]
struct Builder {
    nodes: Vec<Node>,
    names: HashMap<String, usize>,
}

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

impl Builder {
    fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    fn full_name(name: &str, ns: Option<&str>) -> String {
        match ns {
            Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
            _ => name.to_owned(),
        }
    }

    fn primitive(name: &str) -> Option<Node> {
        Some(match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::String,
            _ => return None,
        })
    }

    fn node(&mut self, v: &Value, ns: Option<&str>) -> Result<usize, SchemaError> {
        match v {
            Value::String(name) => {
                if let Some(p) = Self::primitive(name) {
                    return Ok(self.push(p));
                }
                let full = Self::full_name(name, ns);
                self.names
                    .get(&full)
                    .or_else(|| self.names.get(name))
                    .copied()
                    .ok_or_else(|| SchemaError(format!("unknown type `{name}`")))
            }
            Value::Array(branches) => {
                let b = branches
                    .iter()
                    .map(|b| self.node(b, ns))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(self.push(Node::Union(b)))
            }
            Value::Object(m) => self.complex(m, ns),
            other => Err(SchemaError(format!("`{other}` is not a type"))),
        }
    }

    fn complex(
        &mut self,
        m: &serde_json::Map<String, Value>,
        ns: Option<&str>,
    ) -> Result<usize, SchemaError> {
        let ty = m
            .get("type")
            .ok_or_else(|| SchemaError("a type without `type`".into()))?;
        let logical = m.get("logicalType").and_then(Value::as_str);
        let ty_name = match ty {
            Value::String(t) => t.as_str(),
            // `{"type": {"type": "array", ...}}` or `{"type": ["null", ...]}`.
            other => return self.node(other, ns),
        };
        // Logical types over primitives.
        if let Some(l) = logical {
            let node = match (l, ty_name) {
                ("decimal", "bytes") => Some(Node::Decimal {
                    scale: scale(m)?,
                    fixed: None,
                }),
                ("uuid", "string") => Some(Node::Uuid { fixed: false }),
                ("date", "int") => Some(Node::Date),
                ("time-millis", "int") => Some(Node::Time(Unit::Millis)),
                ("time-micros", "long") => Some(Node::Time(Unit::Micros)),
                ("timestamp-millis", "long") => Some(Node::Timestamp {
                    unit: Unit::Millis,
                    local: false,
                }),
                ("timestamp-micros", "long") => Some(Node::Timestamp {
                    unit: Unit::Micros,
                    local: false,
                }),
                ("timestamp-nanos", "long") => Some(Node::Timestamp {
                    unit: Unit::Nanos,
                    local: false,
                }),
                ("local-timestamp-millis", "long") => Some(Node::Timestamp {
                    unit: Unit::Millis,
                    local: true,
                }),
                ("local-timestamp-micros", "long") => Some(Node::Timestamp {
                    unit: Unit::Micros,
                    local: true,
                }),
                ("local-timestamp-nanos", "long") => Some(Node::Timestamp {
                    unit: Unit::Nanos,
                    local: true,
                }),
                // An unknown logical type, or one on the wrong type, is ignored (the spec's rule).
                _ => None,
            };
            if let Some(n) = node {
                return Ok(self.push(n));
            }
        }
        if let Some(p) = Self::primitive(ty_name) {
            return Ok(self.push(p));
        }
        match ty_name {
            "array" => {
                let items = m
                    .get("items")
                    .ok_or_else(|| SchemaError("an array without `items`".into()))?;
                let i = self.node(items, ns)?;
                Ok(self.push(Node::Array(i)))
            }
            "map" => {
                let values = m
                    .get("values")
                    .ok_or_else(|| SchemaError("a map without `values`".into()))?;
                let i = self.node(values, ns)?;
                Ok(self.push(Node::Map(i)))
            }
            "record" | "error" | "enum" | "fixed" => {
                let name = m
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| SchemaError(format!("a {ty_name} without a `name`")))?;
                let own_ns = m.get("namespace").and_then(Value::as_str).or(ns);
                let full = Self::full_name(name, own_ns);
                // The namespace the type's own parts are in.
                let inner_ns = full.rsplit_once('.').map(|(n, _)| n.to_owned());
                if self.names.contains_key(&full) {
                    return Err(SchemaError(format!("`{full}` is defined twice")));
                }
                let at = self.push(Node::Placeholder);
                self.names.insert(full.clone(), at);
                let node = match ty_name {
                    "enum" => Node::Enum {
                        name: full,
                        symbols: m
                            .get("symbols")
                            .and_then(Value::as_array)
                            .ok_or_else(|| SchemaError("an enum without `symbols`".into()))?
                            .iter()
                            .map(|s| s.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| SchemaError("enum symbols are text".into()))?,
                    },
                    "fixed" => {
                        let size =
                            m.get("size").and_then(Value::as_u64).ok_or_else(|| {
                                SchemaError(format!("fixed {full} without a `size`"))
                            })? as usize;
                        match logical {
                            Some("decimal") if size > 0 => Node::Decimal {
                                scale: scale(m)?,
                                fixed: Some(size),
                            },
                            Some("uuid") if size == 16 => Node::Uuid { fixed: true },
                            Some("duration") if size == 12 => Node::Duration,
                            _ => Node::Fixed(size),
                        }
                    }
                    _ => {
                        let list = m.get("fields").and_then(Value::as_array).ok_or_else(|| {
                            SchemaError(format!("record {full} without `fields`"))
                        })?;
                        let mut fields = Vec::with_capacity(list.len());
                        for f in list {
                            let fname = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                                SchemaError(format!("a field of {full} without a `name`"))
                            })?;
                            let ftype = f.get("type").ok_or_else(|| {
                                SchemaError(format!("field `{fname}` of {full} without a `type`"))
                            })?;
                            let node = self.node(ftype, inner_ns.as_deref())?;
                            let mut key = Vec::new();
                            string(&mut key, fname);
                            key.push(b':');
                            fields.push(Field {
                                name: fname.to_owned(),
                                key: Key::new(&key),
                                node,
                                default: f.get("default").map(Json::from_value),
                            });
                        }
                        Node::Record { name: full, fields }
                    }
                };
                self.nodes[at] = node;
                Ok(at)
            }
            other if PRIMITIVES.contains(&other) => unreachable!("primitives are handled above"),
            other => {
                let full = Self::full_name(other, ns);
                self.names
                    .get(&full)
                    .or_else(|| self.names.get(other))
                    .copied()
                    .ok_or_else(|| SchemaError(format!("unknown type `{other}`")))
            }
        }
    }
}

fn scale(m: &serde_json::Map<String, Value>) -> Result<u32, SchemaError> {
    let s = m
        .get("scale")
        .map_or(Some(0), Value::as_u64)
        .unwrap_or(u64::MAX);
    let p = m.get("precision").and_then(Value::as_u64).unwrap_or(38);
    if s > p || p > 38 {
        return Err(SchemaError(format!(
            "decimal(precision {p}, scale {s}): Weir takes precision up to 38 and scale up to precision"
        )));
    }
    Ok(s as u32)
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], FitError> {
    if r.len() < n {
        return Err(FitError::new(format!(
            "the record ends early ({n} bytes needed, {} left)",
            r.len()
        )));
    }
    let (a, b) = r.split_at(n);
    *r = b;
    Ok(a)
}

fn long(r: &mut &[u8]) -> Result<i64, FitError> {
    let mut v: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *r
            .first()
            .ok_or_else(|| FitError::new("the record ends inside a number"))?;
        *r = &r[1..];
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
        }
    }
    Err(FitError::new("a number longer than 10 bytes"))
}

fn bytes<'a>(r: &mut &'a [u8]) -> Result<&'a [u8], FitError> {
    let n = long(r)?;
    let n = usize::try_from(n).map_err(|_| FitError::new(format!("negative length {n}")))?;
    take(r, n)
}

/// Array and map blocks: a count (negative: then a byte size), items, until a zero count.
fn blocks(
    r: &mut &[u8],
    mut item: impl FnMut(&mut &[u8]) -> Result<(), FitError>,
) -> Result<(), FitError> {
    loop {
        let mut n = long(r)?;
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            n = n
                .checked_neg()
                .ok_or_else(|| FitError::new("bad block count"))?;
            long(r)?;
        }
        if n as u64 > r.len() as u64 * 8 + 8 {
            return Err(FitError::new(format!(
                "a block of {n} items in {} bytes",
                r.len()
            )));
        }
        for _ in 0..n {
            item(r)?;
        }
    }
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn itoa(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// `fmt::Write` into a byte buffer.
struct Text<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else if !short_float(out, f) {
        serde_json::to_writer(&mut *out, &f).expect("writing a number to memory");
    }
}

/// Writes a double that is a decimal of at most 15 digits, 4 of them after the point (a
/// price, a weight, a ratio), as serde_json would (its shortest form that reads back the
/// same), without the general algorithm; false (nothing written) for any other.
///
/// With at most 15 significant digits, no other decimal as short reads back as the same
/// double, so the first scale at which the double is an integer over a power of ten that
/// reads back exactly gives the shortest form (trailing zeros taken off).
fn short_float(out: &mut Vec<u8>, f: f64) -> bool {
    let a = f.abs();
    if !(1e-3..1e11).contains(&a) {
        return false;
    }
    for (k, p) in stream::POW10[..5].iter().enumerate() {
        let m = a * p;
        let mi = m as u64;
        if mi as f64 != m || mi as f64 / p != a {
            continue;
        }
        if f < 0.0 {
            out.push(b'-');
        }
        let mut buffer = itoa::Buffer::new();
        let digits = buffer.format(mi).as_bytes();
        // `k` digits after the point (zeros first when there are fewer), trailing zeros off,
        // at least one.
        let (int, frac) = digits.split_at(digits.len().saturating_sub(k));
        out.extend_from_slice(if int.is_empty() { b"0" } else { int });
        out.push(b'.');
        out.extend(std::iter::repeat_n(b'0', k - frac.len()));
        match frac.iter().rposition(|&d| d != b'0') {
            Some(last) => out.extend_from_slice(&frac[..=last]),
            None => out.push(b'0'),
        }
        return true;
    }
    false
}

/// A `float` field's value: from a float's own digits, rounded once to f32 (through a double
/// first, a few decimals in 2^29 would round twice and land on the wrong neighbour), and an
/// integer straight to f32 (not through a double).
pub(super) fn float32_of(v: &Json<'_>) -> Option<f32> {
    match v {
        Json::Float(_, Some(text)) => text.parse().ok(),
        Json::Float(f, None) => Some(*f as f32),
        Json::Int(i) => Some(*i as f32),
        Json::Uint(u) => Some(*u as f32),
        other => float_of(other).map(|f| f as f32),
    }
}

fn float_of(v: &Json<'_>) -> Option<f64> {
    match v {
        Json::Str(s) => match &**s {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        n => n.as_f64(),
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    if stream::plain_run(s.as_bytes()) == s.len() {
        // Nothing to escape (the usual case): the text as it is, quoted.
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("writing text to memory");
    }
}

/// A string's bytes as JSON text; false (nothing written) when they are not UTF-8.
fn utf8_string(out: &mut Vec<u8>, b: &[u8]) -> bool {
    if stream::plain_ascii_run(b) == b.len() {
        // ASCII with nothing to escape (the usual case): the bytes as they are, quoted.
        out.reserve(b.len() + 2);
        out.push(b'"');
        out.extend_from_slice(b);
        out.push(b'"');
        return true;
    }
    match std::str::from_utf8(b) {
        Ok(s) => {
            string(out, s);
            true
        }
        Err(_) => false,
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("text to JSON")
}

fn base64_json(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    let at = out.len();
    out.resize(at + base64::encoded_len(b.len(), true).expect("a size"), 0);
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(b, &mut out[at..])
        .expect("room for base64");
    out.truncate(at + n);
    out.push(b'"');
}

fn from_base64(v: &Json<'_>) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()
}

/// A big-endian two's complement integer of up to 16 bytes.
fn be_signed(b: &[u8]) -> Result<i128, FitError> {
    if b.len() > 16 {
        // Leading sign bytes are allowed (a fixed wider than the value needs).
        let (head, tail) = b.split_at(b.len() - 16);
        let sign = if b.first().is_some_and(|x| x & 0x80 != 0) {
            0xff
        } else {
            0
        };
        if head.iter().any(|&x| x != sign) {
            return Err(FitError::new("a decimal over 38 digits"));
        }
        return be_signed(tail);
    }
    if b.is_empty() {
        return Ok(0);
    }
    let mut full = if b[0] & 0x80 != 0 {
        [0xffu8; 16]
    } else {
        [0u8; 16]
    };
    full[16 - b.len()..].copy_from_slice(b);
    Ok(i128::from_be_bytes(full))
}

/// The shortest big-endian two's complement of `v` (what a `decimal` on `bytes` holds).
fn put_minimal_be(out: &mut Vec<u8>, v: i128) {
    let b = v.to_be_bytes();
    let sign = if v < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 15 && b[start] == sign && (b[start + 1] & 0x80 != 0) == (v < 0) {
        start += 1;
    }
    put_bytes(out, &b[start..]);
}

fn decimal_text(out: &mut Vec<u8>, unscaled: i128, scale: u32) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(unscaled.unsigned_abs());
    if unscaled < 0 {
        out.push(b'-');
    }
    let scale = scale as usize;
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
    } else if digits.len() > scale {
        let (i, f) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(i.as_bytes());
        out.push(b'.');
        out.extend_from_slice(f.as_bytes());
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
        out.extend_from_slice(digits.as_bytes());
    }
}

/// A decimal from text or a JSON number: the unscaled integer at `scale`. More fraction
/// digits than the scale is an error (never rounded).
fn decimal_of(v: &Json<'_>, scale: u32) -> Result<i128, FitError> {
    let number;
    let text: &str = match v {
        Json::Str(s) => s,
        // A float's own digits where it has them (never the double, which may have rounded
        // them); an integer's, or (a tree too deep for the scanner) the double's shortest form.
        Json::Float(_, Some(text)) => text,
        Json::Int(_) | Json::Uint(_) | Json::Float(_, None) => {
            number = v.to_string();
            &number
        }
        _ => {
            return Err(FitError::new(format!(
                "expected a decimal, got {}",
                v.kind()
            )))
        }
    };
    decimal_from(text, scale)
}

/// [`decimal_of`] text: digits with an optional point and an optional exponent (`1.5e2`, as a
/// JSON number or Java's `BigDecimal` may write it), read exactly. Fraction digits beyond the
/// scale are taken only when they are zeros (`1.50` at scale 1): a value is never rounded.
fn decimal_from(text: &str, scale: u32) -> Result<i128, FitError> {
    let bad = || {
        FitError::new(format!(
            "`{text}` is not a decimal with at most {scale} fraction digits"
        ))
    };
    let (neg, t) = match text.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        all => (false, all),
    };
    let (mantissa, exponent) = match t.iter().position(|&c| c == b'e' || c == b'E') {
        Some(at) => {
            let e = std::str::from_utf8(&t[at + 1..])
                .ok()
                .and_then(|e| e.parse::<i64>().ok())
                .ok_or_else(bad)?;
            (&t[..at], e)
        }
        None => (t, 0),
    };
    // The digits of the integer part and the fraction as one number (significant digits
    // only: leading zeros are not counted), and how many of them are after the point.
    let mut digits: Vec<u8> = Vec::with_capacity(mantissa.len());
    let mut fraction: Option<i64> = None;
    for &c in mantissa {
        match c {
            b'0'..=b'9' => {
                digits.push(c - b'0');
                if let Some(f) = &mut fraction {
                    *f += 1;
                }
            }
            b'.' if fraction.is_none() => fraction = Some(0),
            _ => return Err(bad()),
        }
    }
    if digits.is_empty() {
        return Err(bad());
    }
    // Places after the point once the exponent moves it; trailing zeros past the scale go.
    let mut places = fraction.unwrap_or(0).saturating_sub(exponent);
    while places > i64::from(scale) && digits.last() == Some(&0) {
        digits.pop();
        places -= 1;
    }
    if digits.is_empty() {
        return Ok(0);
    }
    if places > i64::from(scale) {
        return Err(bad());
    }
    let too_long = || FitError::new(format!("`{text}` has more than 38 digits"));
    let zeros = i64::from(scale) - places;
    let first = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
    if (digits.len() - first) as i64 + zeros > 38 {
        return Err(if digits[first..].is_empty() {
            bad()
        } else {
            too_long()
        });
    }
    let mut n = 0i128;
    for &d in &digits[first..] {
        n = n * 10 + i128::from(d);
    }
    for _ in 0..zeros {
        n *= 10;
    }
    if n >= 10i128.pow(38) {
        return Err(too_long());
    }
    Ok(if neg { -n } else { n })
}

/// Whole seconds and the nanoseconds within them (floor division).
fn split_units(v: i64, unit: Unit) -> (i64, i64) {
    let per = match unit {
        Unit::Millis => 1_000,
        Unit::Micros => 1_000_000,
        Unit::Nanos => 1_000_000_000,
    };
    let secs = v.div_euclid(per);
    let frac = v.rem_euclid(per) * (1_000_000_000 / per);
    (secs, frac)
}

/// Seconds and nanoseconds as the schema's unit; finer than the unit is refused (never
/// rounded), and so is a time the unit's 64 bits cannot hold.
fn in_units(secs: i64, nanos: i64, unit: Unit, text: &str) -> Result<i64, FitError> {
    let (per_sec, per) = match unit {
        Unit::Millis => (1_000, 1_000_000),
        Unit::Micros => (1_000_000, 1_000),
        Unit::Nanos => (1_000_000_000, 1),
    };
    if nanos % per != 0 {
        return Err(FitError::new(format!(
            "`{text}` is finer than the schema's {}",
            match unit {
                Unit::Millis => "milliseconds",
                Unit::Micros => "microseconds",
                Unit::Nanos => "nanoseconds",
            }
        )));
    }
    secs.checked_mul(per_sec)
        .and_then(|v| v.checked_add(nanos / per))
        .ok_or_else(|| FitError::new(format!("`{text}` is out of the schema's range")))
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DD`; false (nothing written) outside the years 0-9999.
fn write_date(out: &mut Vec<u8>, days: i64) -> bool {
    if !(-719_528..=2_932_896).contains(&days) {
        return false;
    }
    let (y, m, d) = civil_from_days(days);
    let mut date = *b"0000-00-00";
    date[0..4].copy_from_slice(&digits::<4>(y));
    date[5..7].copy_from_slice(&digits::<2>(m));
    date[8..10].copy_from_slice(&digits::<2>(d));
    out.extend_from_slice(&date);
    true
}

/// `v` (non-negative, under 10^W) in exactly `W` decimal digits, two at a time.
fn digits<const W: usize>(mut v: i64) -> [u8; W] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut text = [b'0'; W];
    let mut i = W;
    while i >= 2 {
        let pair = (v % 100) as usize * 2;
        text[i - 2..i].copy_from_slice(&PAIRS[pair..pair + 2]);
        v /= 100;
        i -= 2;
    }
    if i == 1 {
        text[0] = b'0' + (v % 10) as u8;
    }
    text
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]` with `Z` (or nothing, for a local timestamp), the form
/// the decoder writes, without a general parser: seconds since the epoch and nanoseconds.
/// Anything else (an offset, a leap second) is `None`, for the general parser.
fn fast_timestamp(s: &str, local: bool) -> Option<(i64, i64)> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        b[r].iter().try_fold(0i64, |a, &c| {
            c.is_ascii_digit().then(|| a * 10 + i64::from(c - b'0'))
        })
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > month_days[mo as usize - 1]
        || h > 23
        || mi > 59
        || se > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n = i - start;
        if n == 0 || n > 9 {
            return None;
        }
        nanos = num(start..i)? * 10i64.pow(9 - n as u32);
    }
    match (&b[i..], local) {
        (b"Z", false) | (b"", true) => {}
        _ => return None,
    }
    Some((
        days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se,
        nanos,
    ))
}

#[cfg(test)]
mod tests {
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
