//! The encoder's fast path: JSON text to Avro in one pass, with no tree built.
//!
//! A stage's output is scanned once and written as it is read, as long as it has the shape a
//! record usually has: members in schema order, each once. Anything else (members in another
//! order, a default to fill in, a union chosen by a `{"full.Name": …}` wrapper, a value that
//! does not fit, text that is not JSON) makes it give up, and [`AvroSchema::from_json`] starts
//! again on the tree path, which says what is wrong. So the fast path never decides alone: a
//! scalar is written by the tree path's own `encode` (given a value made from the token, with
//! no parse), and containers follow the tree path's rules. The test
//! `the_fast_path_writes_what_the_tree_path_writes` holds the two to the same bytes.

use std::borrow::Cow;

use super::binary::{put_bytes, put_long};
use super::logical::{decimal_from, fast_timestamp, in_units, put_minimal_be};
use super::text::{float32_of, plain_run, POW10};
use super::{AvroSchema, Node};
use crate::schema::json::Json;

/// A cursor over JSON text. `None` from any method: give up (not the common shape, or not JSON).
pub(super) struct Scan<'a> {
    /// The text, checked as UTF-8 once (so a string's bytes need no check of their own)…
    text: &'a str,
    /// …and as bytes.
    s: &'a [u8],
    i: usize,
    /// Containers open around the cursor: past [`MAX_DEPTH`] it gives up (the tree path's
    /// parser has its own limit), so a hostile stage's deep output cannot overflow the stack.
    depth: usize,
}

const MAX_DEPTH: usize = 64;

impl<'a> Scan<'a> {
    /// `None` when the text is not UTF-8 (so not JSON).
    pub(super) fn new(s: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(s).ok()?;
        Some(Scan {
            text,
            s,
            i: 0,
            depth: 0,
        })
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// Only whitespace left.
    pub(super) fn at_end(&mut self) -> bool {
        self.ws();
        self.i == self.s.len()
    }

    /// A string without escapes or control characters; `None` for any other.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        self.i += plain_run(&self.s[start..]);
        (self.s.get(self.i)? == &b'"').then_some(())?;
        self.i += 1;
        // Both ends are next to a quote, so on character boundaries.
        self.text.get(start..self.i - 1)
    }

    /// A string, unescaped by serde_json when it has escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.i;
        if let Some(plain) = self.plain_string() {
            return Some(Cow::Borrowed(plain));
        }
        // Escapes: find the closing quote, then let serde_json read (and check) the whole.
        self.i = start;
        self.ws();
        let open = self.i;
        self.skip_string()?;
        serde_json::from_slice::<String>(self.s.get(open..self.i)?)
            .ok()
            .map(Cow::Owned)
    }

    /// Moves past the string whose opening quote is at the cursor (escapes skipped, not read).
    fn skip_string(&mut self) -> Option<()> {
        (self.s.get(self.i)? == &b'"').then_some(())?;
        self.i += 1;
        loop {
            match *self.s.get(self.i)? {
                b'"' => break,
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
        self.i += 1;
        Some(())
    }

    /// A number: `Int` when it is an integer that fits i64 and serde_json would say so,
    /// else `Uint` or `Float` as serde_json reads it. (A small type, returned in registers.)
    fn number(&mut self) -> Option<Number> {
        // The usual shapes in one pass: an integer of up to 18 digits, or a decimal of up to
        // 15 digits with no exponent; anything else is read again by `number_general`.
        let s = self.s;
        let neg = s.get(self.i) == Some(&b'-');
        let int_start = self.i + neg as usize;
        let mut i = int_start;
        let mut v = 0u64;
        while let Some(d) = s.get(i).filter(|d| d.is_ascii_digit()) {
            v = v.wrapping_mul(10) + u64::from(d - b'0');
            i += 1;
        }
        let int_len = i - int_start;
        if int_len == 0 || (int_len > 1 && s[int_start] == b'0') {
            return None;
        }
        match s.get(i) {
            Some(b'.') => {
                let frac_start = i + 1;
                let mut j = frac_start;
                while let Some(d) = s.get(j).filter(|d| d.is_ascii_digit()) {
                    v = v.wrapping_mul(10) + u64::from(d - b'0');
                    j += 1;
                }
                let frac_len = j - frac_start;
                let plain = frac_len > 0
                    && int_len + frac_len <= 15
                    && !matches!(s.get(j), Some(b'e' | b'E'))
                    && !(neg && v == 0);
                if plain {
                    // At most 15 digits (exact in f64) over a power of ten that f64 holds
                    // exactly: one correctly rounded division, what any exact reader gives.
                    self.i = j;
                    let m = v as f64 / POW10[frac_len];
                    return Some(Number::Float(if neg { -m } else { m }));
                }
            }
            Some(b'e' | b'E') => {}
            // 18 digits always fit i64; serde_json reads `-0` as a float.
            _ if int_len <= 18 && !(neg && v == 0) => {
                self.i = i;
                let v = v as i64;
                return Some(Number::Int(if neg { -v } else { v }));
            }
            _ => {}
        }
        self.number_general()
    }

    /// [`Scan::number`] for the shapes it leaves (an exponent, over 18 integer or 15 decimal
    /// digits, `-0`): the token checked as JSON's grammar has it and classed as serde_json
    /// classes it (an integer that fits `i64`, else `u64`, else a float; `-0` a float), the
    /// float read correctly rounded by the standard library (issue 54: what is written is read
    /// back bit for bit). A float out of f64's range is `None`, as serde_json refuses it.
    fn number_general(&mut self) -> Option<Number> {
        let start = self.i;
        let digits = |s: &Self, mut i: usize| {
            while s.s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let neg = self.s.get(self.i) == Some(&b'-');
        let int_start = self.i + neg as usize;
        let int_end = digits(self, int_start);
        let int = self.s.get(int_start..int_end)?;
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return None;
        }
        self.i = int_end;
        let mut integer = true;
        if self.s.get(self.i) == Some(&b'.') {
            let end = digits(self, self.i + 1);
            if end == self.i + 1 {
                return None;
            }
            self.i = end;
            integer = false;
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            let mut at = self.i + 1;
            if let Some(b'+' | b'-') = self.s.get(at) {
                at += 1;
            }
            let end = digits(self, at);
            if end == at {
                return None;
            }
            self.i = end;
            integer = false;
        }
        let text = &self.text[start..self.i];
        if integer && !(neg && int == b"0") {
            if let Ok(i) = text.parse::<i64>() {
                return Some(Number::Int(i));
            }
            if let Ok(u) = text.parse::<u64>() {
                return Some(Number::Uint(u));
            }
        }
        let f: f64 = text.parse().ok()?;
        f.is_finite().then_some(Number::Float(f))
    }

    /// Moves past `word` (`null`, `true`, `false`) if it is at the cursor.
    fn word(&mut self, word: &[u8]) -> Option<()> {
        self.s.get(self.i..)?.starts_with(word).then(|| {
            self.i += word.len();
        })
    }

    /// A scalar value made from its token (no tree).
    fn scalar(&mut self) -> Option<Json<'a>> {
        match self.peek()? {
            b'"' => self.string().map(Json::Str),
            b'n' => self.word(b"null").map(|()| Json::Null),
            b't' => self.word(b"true").map(|()| Json::Bool(true)),
            b'f' => self.word(b"false").map(|()| Json::Bool(false)),
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                let n = self.number()?;
                Some(n.json(&self.text[start..self.i]))
            }
            _ => None,
        }
    }

    /// The value at the cursor as a tree, each float with its text (what a decimal or a
    /// `float` is read from, exactly); `None` where [`tree`] hands the text to serde_json.
    fn value(&mut self) -> Option<Json<'a>> {
        let open = self.peek()?;
        if !matches!(open, b'[' | b'{') {
            return self.scalar();
        }
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        let close = if open == b'[' { b']' } else { b'}' };
        let v = if open == b'[' {
            let mut items = Vec::new();
            if self.eat(close).is_none() {
                loop {
                    items.push(self.value()?);
                    if self.eat(b',').is_none() {
                        break;
                    }
                }
                self.eat(close)?;
            }
            Json::Array(items)
        } else {
            let mut members = Vec::new();
            if self.eat(close).is_none() {
                loop {
                    let key = self.string()?;
                    self.eat(b':')?;
                    members.push((key, self.value()?));
                    if self.eat(b',').is_none() {
                        break;
                    }
                }
                self.eat(close)?;
            }
            Json::Object(members)
        };
        self.depth -= 1;
        Some(v)
    }

    /// The text of the container value here (parsed by the tree path).
    fn container(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        let mut depth = 0usize;
        loop {
            match *self.s.get(self.i)? {
                b'"' => {
                    self.skip_string()?;
                    continue;
                }
                b'[' | b'{' => depth += 1,
                b']' | b'}' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.i += 1;
                        return Some(&self.s[start..self.i]);
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
    }
}

/// JSON text as a tree whose floats keep their text (so a decimal or a `float` is read from
/// the digits written, not from a double that rounded them). What the scan does not take (a
/// text that is not JSON, or nested deeper than [`MAX_DEPTH`]) serde_json reads: its error
/// says what is wrong, and a deep tree's floats have no text (read from the double).
pub(super) fn tree(text: &[u8]) -> Result<Json<'_>, serde_json::Error> {
    if let Some(mut sc) = Scan::new(text) {
        if let Some(v) = sc.value() {
            if sc.at_end() {
                return Ok(v);
            }
        }
    }
    Json::parse(text)
}

/// A JSON number as serde_json reads it.
#[derive(Clone, Copy)]
enum Number {
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl Number {
    /// The value, a float with its token's `text`.
    fn json(self, text: &str) -> Json<'_> {
        match self {
            Number::Int(i) => Json::Int(i),
            Number::Uint(u) => Json::Uint(u),
            Number::Float(f) => Json::Float(f, Some(text)),
        }
    }

    /// What `Json::as_f64` gives.
    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Uint(u) => u as f64,
            Number::Float(f) => f,
        }
    }
}

impl AvroSchema {
    /// Writes the value at the cursor as node `n`; `None`: give up (the caller truncates `out`
    /// and takes the tree path).
    pub(super) fn stream(&self, n: usize, sc: &mut Scan<'_>, out: &mut Vec<u8>) -> Option<()> {
        let first = sc.peek()?;
        if matches!(first, b'[' | b'{') {
            sc.depth += 1;
            if sc.depth > MAX_DEPTH {
                return None;
            }
        }
        let done = self.stream_node(n, first, sc, out);
        if matches!(first, b'[' | b'{') {
            sc.depth -= 1;
        }
        done
    }

    fn stream_node(&self, n: usize, first: u8, sc: &mut Scan<'_>, out: &mut Vec<u8>) -> Option<()> {
        match (&self.nodes[n], first) {
            (Node::Record { fields, .. }, b'{') => {
                sc.i += 1;
                for (i, f) in fields.iter().enumerate() {
                    if i > 0 {
                        sc.eat(b',')?;
                    }
                    // `"name":` as the schema spells it, else the key read on its own.
                    sc.ws();
                    if f.key.starts(&sc.s[sc.i..]) {
                        sc.i += f.key.len;
                    } else {
                        if sc.plain_string()? != f.name {
                            return None;
                        }
                        sc.eat(b':')?;
                    }
                    // A scalar straight to its writer (the usual member), else the whole way.
                    let first = sc.peek()?;
                    if self.nodes[f.node].is_container() || matches!(first, b'[' | b'{') {
                        self.stream(f.node, sc, out)?;
                    } else {
                        self.stream_scalar(f.node, first, sc, out)?;
                    }
                }
                sc.eat(b'}')
            }
            (Node::Array(item), b'[') => {
                self.block(sc, out, b']', |sc, out| self.stream(*item, sc, out))
            }
            (Node::Map(value), b'{') => self.block(sc, out, b'}', |sc, out| {
                put_bytes(out, sc.plain_string()?.as_bytes());
                sc.eat(b':')?;
                self.stream(*value, sc, out)
            }),
            (Node::Union(branches), b'[' | b'{') => {
                // The tree path's first candidate: the first branch that may take this kind
                // (`AvroSchema::may_fit`).
                let (i, b) = branches.iter().enumerate().find(|(_, b)| {
                    matches!(
                        (&self.nodes[**b], first),
                        (Node::Array(_), b'[')
                            | (Node::Map(_) | Node::Record { .. } | Node::Duration, b'{')
                    )
                })?;
                put_long(out, i as i64);
                self.stream(*b, sc, out)
            }
            (_, b'[' | b'{') => {
                let text = sc.container()?;
                let v = tree(text).ok()?;
                self.encode(n, &v, out).ok()
            }
            (Node::Union(branches), b'n' | b'"') => {
                // The tree path's choice: the first branch that may take a null (or a
                // string); for a string, that branch's answer is final here (the fast path
                // cannot tell a misfit from a shape it leaves to the tree path).
                let kind = if first == b'n' {
                    Json::Null
                } else {
                    Json::Str("".into())
                };
                let (i, b) = branches
                    .iter()
                    .enumerate()
                    .find(|(_, b)| self.may_fit(**b, &kind))?;
                if matches!(self.nodes[*b], Node::Union(_)) {
                    return None;
                }
                put_long(out, i as i64);
                self.stream(*b, sc, out)
            }
            _ => self.stream_scalar(n, first, sc, out),
        }
    }

    /// [`AvroSchema::stream`] for a node that is not a container, at a token that is not
    /// one (a small function: records call it per member).
    fn stream_scalar(
        &self,
        n: usize,
        first: u8,
        sc: &mut Scan<'_>,
        out: &mut Vec<u8>,
    ) -> Option<()> {
        match (&self.nodes[n], first) {
            // The commonest scalars written here; the same bytes as `encode` writes for the
            // value the token is, and `None` where `encode` would fail.
            (Node::String, b'"') => {
                let start = sc.i;
                match sc.plain_string() {
                    Some(text) => put_bytes(out, text.as_bytes()),
                    None => {
                        sc.i = start;
                        return self.scalar(n, sc, out);
                    }
                }
                Some(())
            }
            (Node::Enum { symbols, .. }, b'"') => {
                let start = sc.i;
                match sc.plain_string() {
                    Some(text) => {
                        let i = symbols.iter().position(|x| x == text)?;
                        put_long(out, i as i64);
                    }
                    None => {
                        sc.i = start;
                        return self.scalar(n, sc, out);
                    }
                }
                Some(())
            }
            (Node::Timestamp { unit, local }, b'"') => {
                let start = sc.i;
                let plain = sc.plain_string();
                match plain.and_then(|t| Some((t, fast_timestamp(t, *local)?))) {
                    Some((text, (secs, nanos))) => {
                        put_long(out, in_units(secs, nanos, *unit, text).ok()?);
                        Some(())
                    }
                    None => {
                        sc.i = start;
                        self.scalar(n, sc, out)
                    }
                }
            }
            (Node::Decimal { scale, fixed: None }, b'"') => {
                let start = sc.i;
                match sc.plain_string() {
                    Some(text) => {
                        put_minimal_be(out, decimal_from(text, *scale).ok()?);
                        Some(())
                    }
                    None => {
                        sc.i = start;
                        self.scalar(n, sc, out)
                    }
                }
            }
            (Node::Long | Node::Int, b'-' | b'0'..=b'9') => {
                let Number::Int(v) = sc.number()? else {
                    return None;
                };
                if matches!(self.nodes[n], Node::Int) {
                    i32::try_from(v).ok()?;
                }
                put_long(out, v);
                Some(())
            }
            (Node::Double, b'-' | b'0'..=b'9') => {
                let f = sc.number()?.as_f64();
                out.extend_from_slice(&f.to_le_bytes());
                Some(())
            }
            (Node::Float, b'-' | b'0'..=b'9') => {
                let start = sc.i;
                let v = sc.number()?.json(&sc.text[start..sc.i]);
                out.extend_from_slice(&float32_of(&v)?.to_le_bytes());
                Some(())
            }
            (Node::Boolean, b't') => {
                sc.word(b"true")?;
                out.push(1);
                Some(())
            }
            (Node::Boolean, b'f') => {
                sc.word(b"false")?;
                out.push(0);
                Some(())
            }
            _ => self.scalar(n, sc, out),
        }
    }

    /// An array's or map's comma-separated items up to `close` (the cursor is on the opening
    /// bracket), each written by `item`, as the tree path writes them: one block (the count,
    /// then the items; none for no items) and the end-of-blocks zero.
    fn block(
        &self,
        sc: &mut Scan<'_>,
        out: &mut Vec<u8>,
        close: u8,
        mut item: impl FnMut(&mut Scan<'_>, &mut Vec<u8>) -> Option<()>,
    ) -> Option<()> {
        sc.i += 1;
        let at = out.len();
        let mut count = 0i64;
        if sc.peek()? != close {
            loop {
                item(sc, out)?;
                count += 1;
                if sc.peek()? != b',' {
                    break;
                }
                sc.i += 1;
            }
        }
        sc.eat(close)?;
        if count > 0 {
            let mut head = Vec::with_capacity(10);
            put_long(&mut head, count);
            out.splice(at..at, head);
        }
        out.push(0);
        Some(())
    }

    /// A scalar written by `encode` from the value its token is.
    fn scalar(&self, n: usize, sc: &mut Scan<'_>, out: &mut Vec<u8>) -> Option<()> {
        let v = sc.scalar()?;
        self.encode(n, &v, out).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node kind, nested: records in arrays, maps and unions, logical types, a
    /// recursive type.
    const SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},
        {"name":"n","type":"int"},
        {"name":"customer","type":"string"},
        {"name":"note","type":["null","string"],"default":null},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
        {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
            {"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
        {"name":"tags","type":{"type":"map","values":"double"}},
        {"name":"f","type":"float"},
        {"name":"ok","type":"boolean"},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
        {"name":"cents","type":{"type":"fixed","name":"Cents","size":4,"logicalType":"decimal","precision":8,"scale":2}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"ref","type":{"type":"string","logicalType":"uuid"}},
        {"name":"raw","type":"bytes"},
        {"name":"hash","type":{"type":"fixed","name":"Hash","size":2}},
        {"name":"wait","type":{"type":"fixed","name":"Wait","size":12,"logicalType":"duration"}},
        {"name":"next","type":["null","Item"],"default":null},
        {"name":"any","type":["null","long","string",{"type":"array","items":"long"},{"type":"map","values":"string"}]},
        {"name":"list","type":["null",{"type":"record","name":"Node","fields":[
            {"name":"v","type":"long"},{"name":"rest","type":["null","Node"]}]}]},
        {"name":"num","type":["null","double","string"],"default":null}
    ]}"#;

    /// The usual shape: every member in schema order.
    const MEMBERS: &[(&str, &str)] = &[
        ("id", "-7"),
        ("n", "3"),
        ("customer", r#""ä \"q\"""#),
        ("note", "null"),
        ("status", r#""PAID""#),
        ("items", r#"[{"sku":"a","qty":2},{"sku":"b","qty":-1}]"#),
        ("tags", r#"{"x":1.5,"y":-2}"#),
        ("f", "0.25"),
        ("ok", "true"),
        ("price", r#""-12.30""#),
        ("cents", r#""1.05""#),
        ("at", r#""2026-12-05T01:02:03.456Z""#),
        ("day", r#""1969-12-31""#),
        ("ref", r#""123e4567-e89b-12d3-a456-426614174000""#),
        ("raw", r#""AAH/""#),
        ("hash", r#""AAE=""#),
        ("wait", r#"{"months":1,"days":2,"millis":3}"#),
        ("next", r#"{"sku":"c","qty":3}"#),
        ("any", "[1,2]"),
        ("list", r#"{"v":1,"rest":{"v":2,"rest":null}}"#),
        ("num", "null"),
    ];

    /// The members joined with `comma` and `colon`, member `name`'s value replaced by `value`.
    fn text(name: &str, value: &str, comma: &str, colon: &str) -> String {
        let body: Vec<String> = MEMBERS
            .iter()
            .map(|(k, v)| format!("\"{k}\"{colon}{}", if *k == name { value } else { v }))
            .collect();
        format!("{{{}}}", body.join(comma))
    }

    fn with(name: &str, value: &str) -> String {
        text(name, value, ",", ":")
    }

    /// Both paths give the same bytes, or both the same error.
    fn same(s: &AvroSchema, text: &[u8]) -> Result<(), String> {
        let (mut fast, mut tree) = (vec![9], vec![9]);
        let a = s.from_json(text, &mut fast).map_err(|e| e.to_string());
        let b = s.encode_tree(text, &mut tree).map_err(|e| e.to_string());
        assert_eq!(
            (&a, &fast),
            (&b, &tree),
            "fast path and tree path differ on {}",
            String::from_utf8_lossy(text)
        );
        a
    }

    /// Whether the fast path took the text by itself.
    fn streams(s: &AvroSchema, text: &[u8]) -> bool {
        let Some(mut scan) = Scan::new(text) else {
            return false;
        };
        s.stream(s.root, &mut scan, &mut Vec::new()).is_some() && scan.at_end()
    }

    #[test]
    fn the_fast_path_writes_what_the_tree_path_writes() {
        let s = AvroSchema::parse(SCHEMA, &[]).unwrap();
        let good = with("", "");
        // The usual shape is taken by the fast path alone, and each variation of it too.
        let usual = [
            good.clone(),
            text("", "", " ,\n\t", " : "),
            format!("  {good}  \n"),
            with("customer", r#""tab\there \u00e9 \ud83d\ude00""#),
            with("note", r#""a note""#),
            with("items", "[]"),
            with("tags", "{}"),
            with(
                "tags",
                r#"{"a":1e3,"b":-0,"c":0.1,"d":123456789012345678901234567890}"#,
            ),
            with("id", "-9223372036854775808"),
            with("id", "9223372036854775807"),
            with("id", "123456789012345678"),
            with("f", "3"),
            with("next", "null"),
            with("any", "null"),
            with("any", "-5"),
            with("any", r#""text""#),
            with("any", r#"{"k":"v","k2":"w"}"#),
            with("price", "12.5"),
            with("at", "1700000000000"),
            with("day", "19000"),
            with("list", "null"),
            with("ok", "false"),
            with("at", r#""2026-12-05T01:02:03.456+02:00""#),
            with("at", r#""1999-02-28T23:59:59Z""#),
            with("price", r#""-0.5""#),
            with("price", r#"".5""#),
            with("price", r#""7.""#),
            // A union whose first branch for text is a double: "NaN" is one.
            with("num", r#""NaN""#),
            with("num", "2.5"),
        ];
        for text in &usual {
            same(&s, text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(
                streams(&s, text.as_bytes()),
                "the fast path gave up on {text}"
            );
        }
        // Shapes it leaves to the tree path (same answers), and texts that do not fit.
        let leaves = [
            // Members out of order, a missing one with a default, one unknown, one twice.
            good.replacen(r#""id":-7,"n":3,"#, r#""n":3,"id":-7,"#, 1),
            good.replacen(r#""note":null,"#, "", 1),
            good.replacen(r#""id":-7,"#, r#""id":-7,"extra":1,"#, 1),
            good.replacen(r#""id":-7,"#, r#""id":-7,"id":-7,"#, 1),
            good.replacen(r#""id""#, r#""\u0069d""#, 1),
            // A union branch picked by name, a record branch that does not fit.
            with("next", r#"{"shop.Item":{"sku":"c","qty":3}}"#),
            with("any", r#"{"long":5}"#),
            with("any", r#"{"k":1}"#),
            // Values that do not fit.
            with("id", "1.5"),
            with("id", "-0"),
            with("id", "9223372036854775808"),
            with("id", r#""7""#),
            with("n", "4294967296"),
            with("status", r#""GONE""#),
            with("items", r#"[{"sku":"a"}]"#),
            with("items", r#"[{"sku":"a","qty":1},null]"#),
            with("tags", r#"{"a":"b"}"#),
            with("hash", r#""AAEC""#),
            with("wait", r#"{"months":1}"#),
            with("list", r#"{"v":1,"rest":{"v":"x","rest":null}}"#),
            with("at", r#""yesterday""#),
            with("at", r#""2026-12-05T01:02:03.456789Z""#),
            with("at", r#""2026-02-30T00:00:00Z""#),
            with("price", r#""1.234""#),
            with("price", r#""1e3""#),
            with("price", r#""1.2.3""#),
            with("price", r#""-""#),
            with("price", r#""""#),
            with("ok", "fals"),
            // The double branch does not take this text, the string branch does.
            with("num", r#""text""#),
            // Not JSON.
            good.replacen("-7", "-07", 1),
            good.replacen("-7", "07", 1),
            good.replacen("-7", "-", 1),
            good.replacen("0.25", "0.", 1),
            good.replacen("0.25", "1e", 1),
            good.replacen("true", "tru", 1),
            good.replacen("true", "truex", 1),
            good.replacen(r#""a","qty""#, "\"a\u{1}\",\"qty\"", 1),
            good.replacen(r#""q\"""#, r#""q\x""#, 1),
            good.replacen('}', "", 1),
            format!("{good},"),
            format!("{good}{{}}"),
            good[..good.len() / 2].to_owned(),
            String::new(),
            "[]".to_owned(),
            "null".to_owned(),
        ];
        for text in &leaves {
            let _ = same(&s, text.as_bytes());
        }
        // Invalid UTF-8 in a string.
        let mut bad = good.as_bytes().to_vec();
        let at = good.find("ä").unwrap();
        bad[at] = 0xff;
        assert!(same(&s, &bad).is_err());
        // Every prefix of the usual shape: the same answer both ways.
        for end in 0..good.len() {
            if good.is_char_boundary(end) {
                let _ = same(&s, &good.as_bytes()[..end]);
            }
        }
        // Numbers of every length for a map of doubles: the same value as serde_json reads.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let numbers: Vec<String> = (0..2000)
            .map(|i| {
                let (a, b) = (next() >> (next() % 64), next() >> (next() % 64));
                let sign = if i % 3 == 0 { "-" } else { "" };
                match i % 4 {
                    0 => format!("{sign}{a}.{b}"),
                    1 => format!(
                        "{sign}{}.{:0width$}",
                        a % 1000,
                        b % 100_000,
                        width = i % 9 + 1
                    ),
                    2 => format!("{sign}{a}e-{}", b % 30),
                    _ => format!("{sign}0.{b}"),
                }
            })
            .collect();
        let map: Vec<String> = numbers
            .iter()
            .enumerate()
            .map(|(i, n)| format!("\"k{i}\":{n}"))
            .collect();
        let tags = with("tags", &format!("{{{}}}", map.join(",")));
        same(&s, tags.as_bytes()).unwrap();
        assert!(streams(&s, tags.as_bytes()));
        // A recursive type nested deeper than the fast path goes: the same answer.
        let mut deep = String::from("null");
        for v in 0..200 {
            deep = format!(r#"{{"v":{v},"rest":{deep}}}"#);
        }
        let _ = same(&s, with("list", &deep).as_bytes());
    }
}
