//! JSON → Avro binary on the tree path: a parsed JSON value written by its schema node, with
//! errors that say where the value does not fit (the one-pass `stream` hands anything unusual
//! here).

use chrono::{Datelike as _, Timelike as _};

use super::binary::{put_bytes, put_long};
use super::logical::{decimal_of, fast_timestamp, in_units, put_minimal_be};
use super::text::{float32_of, float_of, from_base64, quoted};
use super::{AvroSchema, FitError, Node, Unit};
use crate::schema::json::Json;

impl AvroSchema {
    pub(super) fn encode(&self, n: usize, v: &Json<'_>, out: &mut Vec<u8>) -> Result<(), FitError> {
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
    pub(super) fn may_fit(&self, n: usize, v: &Json<'_>) -> bool {
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
    pub(super) fn type_name(&self, n: usize) -> String {
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
