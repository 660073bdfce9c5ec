//! Writers: batches (host side) and results (guest side).

use crate::{ABSENT, FAIL, KEEP, MAGIC, NEXT, NO_TIMESTAMP, REJECT, VERSION};

#[inline]
fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn put_i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn len_of(bytes: Option<&[u8]>) -> u32 {
    bytes.map_or(ABSENT, |b| b.len() as u32)
}

#[inline]
fn put_opt(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    if let Some(b) = bytes {
        buf.extend_from_slice(b);
    }
}

fn put_headers<'h>(buf: &mut Vec<u8>, headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)>) {
    for (k, v) in headers {
        put_u32(buf, k.len() as u32);
        put_u32(buf, len_of(v));
        buf.extend_from_slice(k.as_bytes());
        put_opt(buf, v);
    }
}

/// Writes one input batch into a reusable buffer.
pub struct BatchWriter<'a> {
    buf: &'a mut Vec<u8>,
    count: u32,
}

impl<'a> BatchWriter<'a> {
    /// Clears `buf` and starts a batch of messages from one topic and partition.
    pub fn new(buf: &'a mut Vec<u8>, topic: &str, partition: i32) -> Self {
        buf.clear();
        put_u32(buf, MAGIC);
        put_u32(buf, VERSION);
        put_u32(buf, 0);
        put_u32(buf, topic.len() as u32);
        buf.extend_from_slice(topic.as_bytes());
        buf.extend_from_slice(&partition.to_le_bytes());
        BatchWriter { buf, count: 0 }
    }

    /// Appends one message.
    pub fn push<'h>(
        &mut self,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl ExactSizeIterator<Item = (&'h str, Option<&'h [u8]>)>,
    ) {
        let buf = &mut *self.buf;
        // The fixed part in one copy: offset, timestamp, key-len, value-len, header-count.
        let mut fixed = [0u8; 28];
        fixed[0..8].copy_from_slice(&offset.to_le_bytes());
        fixed[8..16].copy_from_slice(&timestamp.unwrap_or(NO_TIMESTAMP).to_le_bytes());
        fixed[16..20].copy_from_slice(&len_of(key).to_le_bytes());
        fixed[20..24].copy_from_slice(&len_of(value).to_le_bytes());
        fixed[24..28].copy_from_slice(&(headers.len() as u32).to_le_bytes());
        buf.reserve(28 + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
        buf.extend_from_slice(&fixed);
        put_opt(buf, key);
        put_opt(buf, value);
        put_headers(buf, headers);
        self.count += 1;
    }

    /// Number of messages pushed so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Writes the count into the header; the buffer then holds the finished batch.
    pub fn finish(self) {
        self.buf[8..12].copy_from_slice(&self.count.to_le_bytes());
    }
}

/// Writes the answer to one batch (guest side).
///
/// Verdicts go in a fixed area at the front, bodies after it, so answering never moves
/// bytes except when a `fail` ends the answer early.
pub struct ResultWriter {
    buf: Vec<u8>,
    expected: usize,
    answered: usize,
}

impl ResultWriter {
    /// A writer for the answer to a batch of `count` messages.
    pub fn new(count: usize) -> Self {
        let mut buf = Vec::with_capacity(4 + count + 64);
        buf.extend_from_slice(&(count as u32).to_le_bytes());
        buf.resize(4 + count, KEEP);
        ResultWriter {
            buf,
            expected: count,
            answered: 0,
        }
    }

    // `#[inline]` here and on the answers: they are called per message from the stage's
    // crate, and without it (and without LTO) each stays an out-of-line call.
    #[inline]
    fn verdict(&mut self, v: u8) {
        assert!(self.answered < self.expected, "more answers than messages");
        self.buf[4 + self.answered] = v;
        self.answered += 1;
    }

    /// The message continues unchanged.
    #[inline]
    pub fn keep(&mut self) {
        // The verdicts start out as `keep`: only the count moves.
        assert!(self.answered < self.expected, "more answers than messages");
        self.answered += 1;
    }

    /// The message is replaced by `count` messages, which the caller then writes with
    /// [`ResultWriter::message`] exactly `count` times.
    #[inline]
    pub fn next(&mut self, count: usize) {
        self.verdict(NEXT);
        put_u32(&mut self.buf, count as u32);
    }

    /// One output message of the current `next` answer.
    pub fn message<'h>(
        &mut self,
        timestamp: Option<i64>,
        topic: Option<&str>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl ExactSizeIterator<Item = (&'h str, Option<&'h [u8]>)>,
    ) {
        let buf = &mut self.buf;
        put_i64(buf, timestamp.unwrap_or(NO_TIMESTAMP));
        put_u32(buf, len_of(topic.map(str::as_bytes)));
        put_u32(buf, len_of(key));
        put_u32(buf, len_of(value));
        put_u32(buf, headers.len() as u32);
        put_opt(buf, topic.map(str::as_bytes));
        put_opt(buf, key);
        put_opt(buf, value);
        put_headers(buf, headers);
    }

    /// The message goes to the reject path.
    pub fn reject(&mut self, reason: &str) {
        self.verdict(REJECT);
        put_u32(&mut self.buf, reason.len() as u32);
        self.buf.extend_from_slice(reason.as_bytes());
    }

    /// The pipeline stops at this message; no further message is answered.
    pub fn fail(&mut self, reason: &str) {
        self.verdict(FAIL);
        put_u32(&mut self.buf, reason.len() as u32);
        self.buf.extend_from_slice(reason.as_bytes());
        let unused = self.expected - self.answered;
        if unused > 0 {
            let start = 4 + self.answered;
            self.buf.drain(start..start + unused);
            self.expected = self.answered;
            self.buf[0..4].copy_from_slice(&(self.answered as u32).to_le_bytes());
        }
    }

    /// True once a `fail` was written: the guest must stop answering.
    pub fn failed(&self) -> bool {
        self.answered == self.expected && self.buf[4..4 + self.answered].last() == Some(&FAIL)
    }

    /// The finished answer.
    pub fn finish(self) -> Vec<u8> {
        assert_eq!(
            self.answered, self.expected,
            "every message needs an answer"
        );
        self.buf
    }
}
