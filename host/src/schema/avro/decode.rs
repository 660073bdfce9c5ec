//! Avro binary → JSON text, written node by node as the bytes are read (no value tree).

use std::fmt::Write as _;

use super::binary::{blocks, bytes, long, take};
use super::logical::{be_signed, decimal_text, digits, split_units, write_date};
use super::text::{base64_json, float, itoa, quoted, string, utf8_string, Text};
use super::{AvroSchema, FitError, Node, Unit};

impl AvroSchema {
    pub(super) fn write_json(
        &self,
        n: usize,
        r: &mut &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), FitError> {
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
    pub(super) fn write_scalar(
        node: &Node,
        r: &mut &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), FitError> {
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
    pub(super) fn write_rare(
        node: &Node,
        r: &mut &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), FitError> {
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
}
