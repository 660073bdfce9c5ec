//! JSON text pieces: integers, floats written as serde_json writes them, strings, base64.

use base64::Engine as _;

use crate::schema::json::Json;

pub(super) fn itoa(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// `fmt::Write` into a byte buffer.
pub(super) struct Text<'a>(pub(super) &'a mut Vec<u8>);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

pub(super) fn float(out: &mut Vec<u8>, f: f64) {
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
pub(super) fn short_float(out: &mut Vec<u8>, f: f64) -> bool {
    let a = f.abs();
    if !(1e-3..1e11).contains(&a) {
        return false;
    }
    for (k, p) in POW10[..5].iter().enumerate() {
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

pub(super) fn float_of(v: &Json<'_>) -> Option<f64> {
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

pub(super) fn string(out: &mut Vec<u8>, s: &str) {
    if plain_run(s.as_bytes()) == s.len() {
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
pub(super) fn utf8_string(out: &mut Vec<u8>, b: &[u8]) -> bool {
    if plain_ascii_run(b) == b.len() {
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

pub(super) fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("text to JSON")
}

pub(super) fn base64_json(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    let at = out.len();
    out.resize(at + base64::encoded_len(b.len(), true).expect("a size"), 0);
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(b, &mut out[at..])
        .expect("room for base64");
    out.truncate(at + n);
    out.push(b'"');
}

pub(super) fn from_base64(v: &Json<'_>) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()
}

/// Exact powers of ten in f64.
pub(super) const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// How many bytes from the start are plain string content: not `"`, `\\` or a control
/// character. Eight at a time (a word's bytes tested at once), then one at a time.
pub(super) fn plain_run(s: &[u8]) -> usize {
    run(s, false)
}

/// [`plain_run`] that also stops at the first byte that is not ASCII.
pub(super) fn plain_ascii_run(s: &[u8]) -> usize {
    run(s, true)
}

#[inline(always)]
fn run(s: &[u8], ascii: bool) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let high = if ascii { HIGH } else { 0 };
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let special = has_zero(x ^ (ONES * u64::from(b'"')))
            | has_zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH)
            | (x & high);
        if special != 0 {
            break;
        }
        i += 8;
    }
    while s
        .get(i)
        .is_some_and(|&b| b != b'"' && b != b'\\' && b >= 0x20 && !(ascii && b >= 0x80))
    {
        i += 1;
    }
    i
}
