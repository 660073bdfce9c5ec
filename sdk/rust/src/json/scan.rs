//! The fast path of [`super::Object::parse`]: one validating pass over a JSON object that keeps
//! its top-level fields as borrowed text, written for wasm.
//!
//! In a wasm stage every loop back-edge and every function entry checks the host's deadline
//! (wasmtime's epoch interruption), so the cost of a parse there grows with the number of loop
//! steps and calls, not only with the work done. This scanner is one function with loops over
//! 8-byte words (`u64`, native in wasm): a string's bytes are tested eight at a time for the
//! quote, the backslash and control characters; nested values are validated without recursion
//! below [`MAX_DEPTH`].
//!
//! It answers only when it is sure: `Some(fields)` exactly when serde_json would accept the text
//! as an object and read the same fields (the property tests below compare the two on generated
//! and mutated documents). Anything else — malformed text, a key with an
//! escape, nesting deeper than [`MAX_DEPTH`] — is `None`, and the caller takes serde_json's path,
//! which gives the same fields or the error serde_json would give.

use std::borrow::Cow;
use std::ops::Range;

/// The fields of an object, as [`super::Object`] holds them.
pub(super) type Fields<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// Deeper nesting is left to serde_json's path.
const MAX_DEPTH: usize = 64;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// A mark on the high bit of every byte of `w` that is zero (the lowest mark is exact; marks
/// above it may be false).
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(ONES) & !w & HIGH
}

/// Marks the bytes of `w` that end or interrupt a string's plain run: `"`, `\` and control
/// characters below 0x20 (the lowest mark is exact).
#[inline(always)]
fn string_stops(w: u64) -> u64 {
    zero_bytes(w ^ (ONES * u64::from(b'"')))
        | zero_bytes(w ^ (ONES * u64::from(b'\\')))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
}

#[inline(always)]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// A cursor over validated UTF-8 text.
struct Scan<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Scan<'a> {
    #[inline(always)]
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) -> Option<u8> {
        while let Some(&c) = self.bytes().get(self.i) {
            if !is_ws(c) {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    /// A string, the cursor on its opening quote; leaves the cursor after the closing one.
    /// Returns whether it had an escape.
    #[inline(always)]
    fn string(&mut self) -> Option<bool> {
        let b = self.bytes();
        let mut i = self.i + 1;
        let mut escaped = false;
        loop {
            // Eight bytes at a time while eight remain, then byte by byte.
            while let Some(chunk) = b.get(i..i + 8) {
                let w = u64::from_le_bytes(chunk.try_into().ok()?);
                let stops = string_stops(w);
                if stops != 0 {
                    i += (stops.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            let c = *b.get(i)?;
            match c {
                b'"' => {
                    self.i = i + 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match *b.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let hex = b.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            i += 6;
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                _ => i += 1,
            }
        }
    }

    /// A number (JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`).
    #[inline(always)]
    fn number(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match *b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = digits(b, i + 1),
            _ => return None,
        }
        if b.get(i) == Some(&b'.') {
            let end = digits(b, i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let end = digits(b, i);
            if end == i {
                return None;
            }
            i = end;
        }
        self.i = i;
        Some(())
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes().get(self.i..self.i + word.len())? != word {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// One whole value of any kind, the cursor on its first byte. Containers are followed
    /// with a stack of open brackets instead of recursion.
    fn value(&mut self) -> Option<()> {
        // Open containers: `true` for an object, `false` for an array.
        let mut open = [false; MAX_DEPTH];
        let mut depth = 0usize;
        loop {
            // A value starts here.
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    let object = self.bytes()[self.i] == b'{';
                    self.i += 1;
                    let next = self.ws()?;
                    if next == if object { b'}' } else { b']' } {
                        self.i += 1;
                    } else {
                        *open.get_mut(depth)? = object;
                        depth += 1;
                        if object {
                            self.key()?;
                        }
                        self.ws()?;
                        continue;
                    }
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers until one goes on with a comma.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let object = open[depth - 1];
                match self.ws()? {
                    b',' => {
                        self.i += 1;
                        self.ws()?;
                        if object {
                            self.key()?;
                            self.ws()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.i += 1;
                depth -= 1;
            }
        }
    }

    /// `"key" :`, the cursor on its quote; leaves the cursor after the colon. Returns where the
    /// key's text lies between the quotes (escapes not decoded) and whether it had an escape.
    #[inline(always)]
    fn key(&mut self) -> Option<(Range<usize>, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let escaped = self.string()?;
        let end = self.i - 1;
        if self.ws()? != b':' {
            return None;
        }
        self.i += 1;
        Some((start..end, escaped))
    }
}

#[inline(always)]
fn digits(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The top-level fields of `bytes` when it is a JSON object whose keys have no escapes and
/// whose nesting is at most [`MAX_DEPTH`] deep; `None` when serde_json's path must decide.
pub(super) fn object_fields(bytes: &[u8]) -> Option<Fields<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut s = Scan { text, i: 0 };
    if s.ws()? != b'{' {
        return None;
    }
    s.i += 1;
    let mut fields = Vec::with_capacity(8);
    if s.ws()? == b'}' {
        s.i += 1;
    } else {
        loop {
            let (key, escaped) = s.key()?;
            if escaped {
                return None;
            }
            let key = s.text.get(key)?;
            s.ws()?;
            let from = s.i;
            s.value()?;
            let value = s.text.get(from..s.i)?;
            fields.push((Cow::Borrowed(key), Cow::Borrowed(value)));
            match s.ws()? {
                b',' => {
                    s.i += 1;
                    s.ws()?;
                }
                b'}' => {
                    s.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if s.ws().is_some() {
        return None;
    }
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// What serde_json's path reads (`None`: it refuses the text or it is not an object).
    fn by_serde(bytes: &[u8]) -> Option<Fields<'_>> {
        super::super::Object::read(serde_json::Deserializer::from_slice(bytes)).ok()
    }

    /// The fast path may pass, but when it answers it must answer as serde_json does.
    fn agrees(bytes: &[u8]) -> Result<bool, TestCaseError> {
        let fast = object_fields(bytes);
        if let Some(fast) = &fast {
            let slow = by_serde(bytes);
            prop_assert_eq!(
                Some(fast),
                slow.as_ref(),
                "text {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        Ok(fast.is_some())
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON numbers are finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((".{0,6}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// An object's text: keys with or without characters that need escapes, repeated keys,
    /// values compact or pretty.
    fn document() -> impl Strategy<Value = (String, bool)> {
        let key = prop_oneof![3 => "[a-z_]{0,8}", 1 => ".{0,6}"];
        (
            prop::collection::vec((key, value(), any::<bool>()), 0..7),
            "[ \t\r\n]{0,2}",
        )
            .prop_map(|(fields, ws)| {
                let plain_keys = fields
                    .iter()
                    .all(|(k, _, _)| serde_json::to_string(k).unwrap().len() == k.len() + 2);
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v, pretty)| {
                        let v = if *pretty {
                            serde_json::to_string_pretty(v).unwrap()
                        } else {
                            serde_json::to_string(v).unwrap()
                        };
                        format!("{}{ws}:{ws}{v}", serde_json::to_string(k).unwrap())
                    })
                    .collect();
                (
                    format!("{ws}{{{ws}{}{ws}}}{ws}", body.join(&format!("{ws},"))),
                    plain_keys,
                )
            })
    }

    /// Bytes that matter to the grammar, for mutations.
    const SPECIAL: &[u8] =
        b"\"\\{}[]:,0123456789-+.eEtfnu \t\n\r/xa\x00\x1f\x7f\x80\xbf\xc3\xe2\xf0\xff";

    /// Pieces of JSON, for structures that are almost right.
    const TOKENS: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"k\"",
        "\"\"",
        "1",
        "-2.5e3",
        "true",
        "null",
        " ",
        "\n",
        "{\"b\":",
        "[1,",
        "\"\\\"\"",
        "\"\\u0041\"",
    ];

    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            document(),
            prop::collection::vec(
                (
                    any::<prop::sample::Index>(),
                    0u8..4,
                    prop::sample::select(SPECIAL),
                ),
                1..4,
            ),
        )
            .prop_map(|((text, _), edits)| {
                let mut b = text.into_bytes();
                for (at, op, byte) in edits {
                    if b.is_empty() {
                        b.push(byte);
                        continue;
                    }
                    let i = at.index(b.len());
                    match op {
                        0 => b[i] = byte,
                        1 => b.insert(i, byte),
                        2 => {
                            b.remove(i);
                        }
                        _ => b.truncate(i),
                    }
                }
                b
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn valid_objects_read_as_serde_json_reads_them((text, plain_keys) in document()) {
            let answered = agrees(text.as_bytes())?;
            // With plain keys (and shallow nesting, which the strategy keeps) the fast path
            // answers: it is really the path taken.
            prop_assert_eq!(answered, plain_keys, "text {:?}", text);
        }

        #[test]
        fn mutated_text_is_refused_or_read_as_serde_json_reads_it(bytes in mutated()) {
            agrees(&bytes)?;
        }

        #[test]
        fn token_soup_is_refused_or_read_as_serde_json_reads_it(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..14)
        ) {
            agrees(format!("{{\"a\":{}", tokens.concat()).as_bytes())?;
        }

        #[test]
        fn arbitrary_bytes_are_refused_or_read_as_serde_json_reads_them(
            bytes in prop::collection::vec(prop::sample::select(SPECIAL), 0..24)
        ) {
            agrees(&bytes)?;
        }
    }

    #[test]
    fn edge_cases_agree_with_serde_json() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let cases: Vec<String> = [
            r#"{}"#,
            r#" { } "#,
            r#"{"a":1,}"#,
            r#"{"a":-}"#,
            r#"{"a":-0}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1.e5}"#,
            r#"{"a":1e}"#,
            r#"{"a":1e+}"#,
            r#"{"a":2E-3}"#,
            r#"{"a":-0.5e+07}"#,
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":true,"b":false,"c":null}"#,
            r#"{"a":"\u12G4"}"#,
            r#"{"a":"\u00e9\ud800"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\"}"#,
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"del\u{7f}\"}",
            r#"{"é":"ü","k":"日本語"}"#,
            r#"{"a\"b":1}"#,
            r#"{"a":[1,[2,{"b":[]}],{}]}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":{"b":1,}}"#,
            r#"{"a":{"b" 1}}"#,
            r#"{"a":{"b":1]}"#,
            r#"{"a":[1}}"#,
            r#"{"a":{1:2}}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}}"#,
            r#"[1]"#,
            r#""s""#,
            r#"{"a":"0123456789abcdefghij\"klmnop"}"#,
            r#"{"a":"01234567"}"#,
            r#"{"a":"0123456"}"#,
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([deep(62), deep(63), deep(64), deep(200)])
        .collect();
        for c in &cases {
            agrees(c.as_bytes()).unwrap();
        }
        // Invalid UTF-8 inside a string and a control character are refused.
        for bad in [
            &b"{\"a\":\"\xff\"}"[..],
            b"{\"a\":\"\xc3\"}",
            b"{\"a\":\"\x01\"}",
        ] {
            assert!(object_fields(bad).is_none());
            assert!(by_serde(bad).is_none());
        }
        // The fast path answers the common shapes, including long strings and deep nesting.
        for ok in [
            r#" { } "#,
            r#"{"a":true,"b":false,"c":null}"#,
            r#"{"é":"ü","k":"日本語"}"#,
            r#"{"a":[1,[2,{"b":[]}],{}]}"#,
            r#"{"a":"0123456789abcdefghij\"klmnop"}"#,
        ] {
            assert!(object_fields(ok.as_bytes()).is_some(), "{ok}");
        }
        assert!(object_fields(deep(63).as_bytes()).is_some());
        assert!(object_fields(deep(200).as_bytes()).is_none());
        assert!(by_serde(deep(200).as_bytes()).is_some());
    }
}
