//! Bounds-checked readers: batches (guest side) and results (host side).

use crate::{AbiError, ABSENT, FAIL, KEEP, MAGIC, NEXT, NO_TIMESTAMP, REJECT, VERSION};

type Result<T> = std::result::Result<T, AbiError>;

/// A cursor over a byte slice; every read checks the bounds.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    data: &'a [u8],
}

impl<'a> Cursor<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.data.len() {
            return Err(AbiError("truncated"));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }

    /// `N` bytes as an array: one bounds check for a whole fixed-size record.
    #[inline]
    fn array<const N: usize>(&mut self) -> Result<&'a [u8; N]> {
        let (head, tail) = self
            .data
            .split_first_chunk::<N>()
            .ok_or(AbiError("truncated"))?;
        self.data = tail;
        Ok(head)
    }

    #[inline]
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    fn i64(&mut self) -> Result<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    #[inline]
    fn opt(&mut self, len: u32) -> Result<Option<&'a [u8]>> {
        if len == ABSENT {
            Ok(None)
        } else {
            self.take(len as usize).map(Some)
        }
    }

    fn str(&mut self, len: u32) -> Result<&'a str> {
        std::str::from_utf8(self.take(len as usize)?).map_err(|_| AbiError("string is not UTF-8"))
    }

    /// Skips `count` headers and returns the bytes they occupy.
    #[inline]
    fn headers(&mut self, count: u32) -> Result<&'a [u8]> {
        let start = self.data;
        for _ in 0..count {
            let lens = self.array::<8>()?;
            let k = u32_at(lens, 0);
            let v = u32_at(lens, 4);
            // Two takes, not one of the sum: on wasm32 the sum of two u32 could wrap.
            self.take(k as usize)?;
            self.opt(v)?;
        }
        Ok(&start[..start.len() - self.data.len()])
    }
}

#[inline]
fn u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn i64_at<const N: usize>(b: &[u8; N], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(a)
}

fn timestamp(raw: i64) -> Option<i64> {
    (raw != NO_TIMESTAMP).then_some(raw)
}

/// The headers of a message, read lazily.
#[derive(Clone, Copy, Debug)]
pub struct Headers<'a> {
    raw: &'a [u8],
    count: u32,
}

impl<'a> Headers<'a> {
    /// Number of headers.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when there are no headers.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The headers in order. Header keys that are not UTF-8 read as empty strings; the
    /// writer never produces them.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let mut cur = Cursor { data: self.raw };
        (0..self.count).map(move |_| {
            // The bytes were validated when the message was read.
            let k = cur.u32().unwrap_or(0);
            let v = cur.u32().unwrap_or(ABSENT);
            let key = cur.str(k).unwrap_or("");
            let value = cur.opt(v).unwrap_or(None);
            (key, value)
        })
    }
}

/// One input message, borrowed from the batch.
#[derive(Clone, Copy, Debug)]
pub struct InMessage<'a> {
    /// Source offset.
    pub offset: i64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The headers.
    pub headers: Headers<'a>,
}

/// Reads an input batch (guest side).
pub struct BatchReader<'a> {
    cur: Cursor<'a>,
    remaining: u32,
    /// Source topic of every message in the batch.
    pub topic: &'a str,
    /// Source partition of every message in the batch.
    pub partition: i32,
    /// Number of messages in the batch.
    pub count: u32,
}

impl<'a> BatchReader<'a> {
    /// Reads the batch header.
    pub fn new(data: &'a [u8]) -> Result<Self> {
        let mut cur = Cursor { data };
        if cur.u32()? != MAGIC {
            return Err(AbiError("bad magic"));
        }
        if cur.u32()? != VERSION {
            return Err(AbiError("unsupported version"));
        }
        let count = cur.u32()?;
        let tlen = cur.u32()?;
        let topic = cur.str(tlen)?;
        let p = cur.take(4)?;
        let partition = i32::from_le_bytes([p[0], p[1], p[2], p[3]]);
        Ok(BatchReader {
            cur,
            remaining: count,
            topic,
            partition,
            count,
        })
    }

    #[inline]
    fn read_one(&mut self) -> Result<InMessage<'a>> {
        let c = &mut self.cur;
        let fixed = c.array::<28>()?;
        let offset = i64_at(fixed, 0);
        let ts = i64_at(fixed, 8);
        let klen = u32_at(fixed, 16);
        let vlen = u32_at(fixed, 20);
        let hcount = u32_at(fixed, 24);
        let key = c.opt(klen)?;
        let value = c.opt(vlen)?;
        let raw = c.headers(hcount)?;
        Ok(InMessage {
            offset,
            timestamp: timestamp(ts),
            key,
            value,
            headers: Headers { raw, count: hcount },
        })
    }
}

impl<'a> Iterator for BatchReader<'a> {
    type Item = Result<InMessage<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.read_one();
        if r.is_err() {
            self.remaining = 0;
        }
        Some(r)
    }
}

/// One output message, borrowed from a result.
#[derive(Clone, Copy, Debug)]
pub struct OutMessage<'a> {
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// Output topic set by the stage.
    pub topic: Option<&'a str>,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The headers.
    pub headers: Headers<'a>,
}

/// The output messages of one `next` verdict.
#[derive(Clone, Copy, Debug)]
pub struct OutMessages<'a> {
    raw: &'a [u8],
    count: u32,
}

impl<'a> OutMessages<'a> {
    /// Number of output messages.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the input was filtered out.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Total payload bytes (keys, values, topics, headers) of the output messages.
    pub fn byte_len(&self) -> usize {
        self.raw.len()
    }

    /// The messages in order (already validated).
    pub fn iter(&self) -> impl Iterator<Item = OutMessage<'a>> + 'a {
        let mut cur = Cursor { data: self.raw };
        (0..self.count).map_while(move |_| read_out(&mut cur).ok())
    }
}

fn read_out<'a>(c: &mut Cursor<'a>) -> Result<OutMessage<'a>> {
    let ts = c.i64()?;
    let tlen = c.u32()?;
    let klen = c.u32()?;
    let vlen = c.u32()?;
    let hcount = c.u32()?;
    let topic = match tlen {
        ABSENT => None,
        n => Some(c.str(n)?),
    };
    let key = c.opt(klen)?;
    let value = c.opt(vlen)?;
    let raw = c.headers(hcount)?;
    // Header keys must be UTF-8 in output: check now so `Headers::iter` never hides one.
    let headers = Headers { raw, count: hcount };
    let mut check = Cursor { data: raw };
    for _ in 0..hcount {
        let k = check.u32()?;
        let v = check.u32()?;
        check.str(k)?;
        check.opt(v)?;
    }
    Ok(OutMessage {
        timestamp: timestamp(ts),
        topic,
        key,
        value,
        headers,
    })
}

/// What a stage answered for one input message.
#[derive(Clone, Copy, Debug)]
pub enum Verdict<'a> {
    /// Continue unchanged.
    Keep,
    /// Replace by these messages.
    Next(OutMessages<'a>),
    /// Reject with this reason.
    Reject(&'a str),
    /// Stop the pipeline with this reason.
    Fail(&'a str),
}

/// Reads a result (host side). The whole result is validated up front, so iteration cannot fail.
pub struct ResultReader<'a> {
    verdicts: &'a [u8],
    body: Cursor<'a>,
    index: usize,
}

impl<'a> ResultReader<'a> {
    /// Validates a result for a batch of `sent` messages.
    pub fn new(data: &'a [u8], sent: usize) -> Result<Self> {
        let mut cur = Cursor { data };
        let count = cur.u32()? as usize;
        if count > sent {
            return Err(AbiError("more answers than messages"));
        }
        let verdicts = cur.take(count)?;
        if count < sent && verdicts.last() != Some(&FAIL) {
            return Err(AbiError("fewer answers than messages without a fail"));
        }
        let body = cur;
        // Validate every body now.
        let mut check = body;
        for (i, v) in verdicts.iter().enumerate() {
            match *v {
                KEEP => {}
                NEXT => {
                    let n = check.u32()?;
                    for _ in 0..n {
                        read_out(&mut check)?;
                    }
                }
                REJECT | FAIL => {
                    let len = check.u32()?;
                    check.str(len)?;
                    if *v == FAIL && i + 1 != count {
                        return Err(AbiError("answers after a fail"));
                    }
                }
                _ => return Err(AbiError("unknown verdict")),
            }
        }
        if !check.data.is_empty() {
            return Err(AbiError("trailing bytes"));
        }
        Ok(ResultReader {
            verdicts,
            body,
            index: 0,
        })
    }

    /// Number of answers.
    pub fn len(&self) -> usize {
        self.verdicts.len()
    }

    /// True when every answer is `keep` (one scan of the verdict bytes, no per-answer
    /// decoding): the common case of a filter that lets a whole batch through.
    pub fn all_keep(&self) -> bool {
        self.verdicts.iter().all(|&v| v == KEEP)
    }

    /// True when nothing was answered (only for an empty batch).
    pub fn is_empty(&self) -> bool {
        self.verdicts.is_empty()
    }
}

impl<'a> Iterator for ResultReader<'a> {
    type Item = Verdict<'a>;

    fn next(&mut self) -> Option<Verdict<'a>> {
        let v = *self.verdicts.get(self.index)?;
        self.index += 1;
        let body = &mut self.body;
        // Validated in `new`, so the reads below cannot fail.
        Some(match v {
            NEXT => {
                let count = body.u32().ok()?;
                let start = body.data;
                for _ in 0..count {
                    read_out(body).ok()?;
                }
                let used = start.len() - body.data.len();
                Verdict::Next(OutMessages {
                    raw: &start[..used],
                    count,
                })
            }
            REJECT => {
                let len = body.u32().ok()?;
                Verdict::Reject(body.str(len).ok()?)
            }
            FAIL => {
                let len = body.u32().ok()?;
                Verdict::Fail(body.str(len).ok()?)
            }
            _ => Verdict::Keep,
        })
    }
}
