// A value length of ABSENT deletes (as the batch format's absent values).
use weir_abi::ABSENT;

use super::{same, KeyHash};

/// The call's writes to one bucket: `buf` holds them in order as `write-packed` takes
/// them (`key-len:u32 value-len:u32 key value`), `index` the offset of each key's latest
/// among the first `indexed` bytes of them. A write is indexed when it is made through
/// [`Writes::write`], or later when a read, a [`Writes::forget`] or the sending needs the
/// index: a stage whose reads the kept values answer writes through [`Writes::append`]
/// and [`Writes::rewrite`] (the kept value remembers where its write is) and never pays
/// for an index.
#[derive(Default)]
pub(crate) struct Writes {
    buf: Vec<u8>,
    index: hashbrown::HashTable<u32>,
    /// `buf[..indexed]` is in `index`.
    indexed: usize,
    /// The hash of the keys in `index` (the caller hands in each key's hash, made with it).
    hash: KeyHash,
    /// `buf[..sent]` is with the host already (a listing sent it; the call goes on).
    sent: usize,
    /// A write at or after `sent` was overwritten or taken back: sending filters.
    stale: bool,
}

fn word(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

/// The key and value of the write at `at`, and where the next one starts.
fn entry(buf: &[u8], at: usize) -> (&[u8], Option<&[u8]>, usize) {
    let klen = word(buf, at) as usize;
    let vlen = word(buf, at + 4);
    let key = &buf[at + 8..at + 8 + klen];
    let vat = at + 8 + klen;
    match vlen {
        ABSENT => (key, None, vat),
        n => (key, Some(&buf[vat..vat + n as usize]), vat + n as usize),
    }
}

/// Overwrites the write at `o` (its key `klen` bytes) with `value` where it is, when it is
/// not sent yet (at or after `sent`) and `value` is as long (absent as absent): nothing
/// stale for the sending to filter out. Whether it did.
fn in_place(buf: &mut [u8], sent: usize, o: usize, klen: usize, value: Option<&[u8]>) -> bool {
    let vlen = value.map_or(ABSENT, |v| v.len() as u32);
    if o < sent || word(buf, o + 4) != vlen {
        return false;
    }
    if let Some(v) = value {
        let vat = o + 8 + klen;
        buf[vat..vat + v.len()].copy_from_slice(v);
    }
    true
}

impl Writes {
    /// No writes; keys hashed with `hash`.
    pub(crate) fn new(hash: KeyHash) -> Self {
        Writes {
            hash,
            ..Writes::default()
        }
    }

    /// Indexes the writes not indexed yet (a later write of a key replaces the earlier).
    fn catch_up(&mut self) {
        let Writes {
            buf,
            index,
            indexed,
            hash,
            ..
        } = self;
        while *indexed < buf.len() {
            let at = *indexed;
            let (key, _, end) = entry(buf, at);
            let h = hash.of(key);
            match index.find_entry(h, |&o| same(entry(buf, o as usize).0, key)) {
                Ok(mut e) => *e.get_mut() = at as u32,
                Err(absent) => {
                    absent
                        .into_table()
                        .insert_unique(h, at as u32, |&o| hash.of(entry(buf, o as usize).0));
                }
            }
            *indexed = end;
        }
    }

    fn find(&self, h: u64, key: &[u8]) -> Option<u32> {
        let buf = &self.buf;
        self.index
            .find(h, |&at| same(entry(buf, at as usize).0, key))
            .copied()
    }

    /// The call's latest write of `key` (hashed `h`), if it wrote it.
    pub(crate) fn get(&mut self, h: u64, key: &str) -> Option<Option<Vec<u8>>> {
        self.catch_up();
        let at = self.find(h, key.as_bytes())?;
        Some(entry(&self.buf, at as usize).1.map(<[u8]>::to_vec))
    }

    /// Writes `key` (hashed `h`), indexed.
    pub(crate) fn write(&mut self, h: u64, key: &str, value: Option<&[u8]>) {
        self.catch_up();
        let Writes {
            buf,
            index,
            hash,
            sent,
            stale,
            ..
        } = self;
        let key = key.as_bytes();
        let at = buf.len() as u32;
        match index.find_entry(h, |&o| same(entry(buf, o as usize).0, key)) {
            Ok(mut e) => {
                let o = *e.get() as usize;
                if in_place(buf, *sent, o, key.len(), value) {
                    return;
                }
                *stale |= o >= *sent;
                *e.get_mut() = at;
            }
            Err(absent) => {
                let table = absent.into_table();
                // (Hashes of the entries already in `buf`: the new one is not yet.)
                table.insert_unique(h, at, |&o| hash.of(entry(buf, o as usize).0));
            }
        }
        self.push(key, value);
        self.indexed = self.buf.len();
    }

    /// Writes `key`, the call's first write of it since [`Self::append`] or
    /// [`Self::rewrite`] last answered for it (an earlier one, if any, is sent before it
    /// and the host keeps the later); where the write is.
    pub(crate) fn append(&mut self, key: &str, value: Option<&[u8]>) -> u32 {
        let at = self.buf.len() as u32;
        self.push(key.as_bytes(), value);
        at
    }

    /// Writes `key` again, whose latest write in the call is at `at` (as [`Self::append`]
    /// or this answered): in place when it is not sent yet and the value as long;
    /// where the write is now.
    pub(crate) fn rewrite(&mut self, at: u32, key: &str, value: Option<&[u8]>) -> u32 {
        let o = at as usize;
        if in_place(&mut self.buf, self.sent, o, key.len(), value) {
            return at;
        }
        self.stale |= o >= self.sent;
        self.append(key, value)
    }

    fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let vlen = value.map_or(ABSENT, |v| v.len() as u32);
        let buf = &mut self.buf;
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(&vlen.to_le_bytes());
        buf.extend_from_slice(key);
        if let Some(v) = value {
            buf.extend_from_slice(v);
        }
    }

    /// The host took a write of `key` (hashed `h`) itself: the call's earlier one here is
    /// gone.
    pub(crate) fn forget(&mut self, h: u64, key: &str) {
        self.catch_up();
        let key = key.as_bytes();
        let buf = &self.buf;
        if let Ok(e) = self
            .index
            .find_entry(h, |&o| same(entry(buf, o as usize).0, key))
        {
            self.stale |= *e.get() as usize >= self.sent;
            e.remove();
        }
    }

    /// The writes not sent yet, each key's latest only, packed (when none was
    /// overwritten or taken back, as they are: a key appended twice goes twice, and the
    /// host keeps the later).
    pub(crate) fn unsent(&mut self) -> std::borrow::Cow<'_, [u8]> {
        if !self.stale {
            return self.buf[self.sent..].into();
        }
        self.catch_up();
        let tail = &self.buf[self.sent..];
        let mut out = Vec::with_capacity(tail.len());
        let mut at = self.sent;
        while at < self.buf.len() {
            let (key, _, end) = entry(&self.buf, at);
            if self.find(self.hash.of(key), key) == Some(at as u32) {
                out.extend_from_slice(&self.buf[at..end]);
            }
            at = end;
        }
        out.into()
    }

    /// What [`Self::unsent`] gave the host is with it now (the writes stay for reads).
    pub(crate) fn mark_sent(&mut self) {
        self.sent = self.buf.len();
        self.stale = false;
    }

    /// Whether a write is not with the host yet.
    pub(crate) fn has_unsent(&self) -> bool {
        self.sent < self.buf.len()
    }

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.index.clear();
        self.indexed = 0;
        self.sent = 0;
        self.stale = false;
    }
}

/// The writes of a packed list, in order, as the host reads them.
#[cfg(test)]
pub(crate) fn parse(mut packed: &[u8]) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    while !packed.is_empty() {
        let (key, value, end) = entry(packed, 0);
        out.push((
            String::from_utf8(key.to_vec()).expect("a key is UTF-8"),
            value.map(<[u8]>::to_vec),
        ));
        packed = &packed[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::{parse, KeyHash, Writes};

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, Vec<u8>),
        Delete(u8),
        /// The host took a write of the key itself (a value over the limit, say).
        Direct(u8, Option<Vec<u8>>),
        /// A key listing: what is not sent goes to the host; the call goes on.
        Send,
        /// A write through the mark a kept value holds ([`Writes::append`],
        /// [`Writes::rewrite`]), none: a delete.
        Tracked(u8, Option<Vec<u8>>),
        /// The kept values start over: their marks are gone.
        ForgetMarks,
        /// A read of the key.
        Read(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..6, proptest::collection::vec(any::<u8>(), 0..5))
                .prop_map(|(k, v)| Op::Set(k, v)),
            1 => (0u8..6).prop_map(Op::Delete),
            1 => (0u8..6, proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3)))
                .prop_map(|(k, v)| Op::Direct(k, v)),
            1 => Just(Op::Send),
            4 => (0u8..6, proptest::option::of(proptest::collection::vec(any::<u8>(), 0..5)))
                .prop_map(|(k, v)| Op::Tracked(k, v)),
            1 => Just(Op::ForgetMarks),
            3 => (0u8..6).prop_map(Op::Read),
        ]
    }

    fn key(k: u8) -> String {
        // Keys of different lengths, one empty.
        "k".repeat(k as usize)
    }

    proptest! {
        /// Whatever a call does, a read answers the call's latest write of a key (none:
        /// ask the host), and the host, applying what it was sent in order, holds what
        /// the stage wrote: each key's last value, never a write taken back. A key goes
        /// twice in one sending only when the marks were forgotten in between.
        #[test]
        fn reads_and_what_the_host_gets_follow_the_writes(ops in proptest::collection::vec(op(), 0..60)) {
            let kh = KeyHash::with_seed(3);
            let h = |k: u8| kh.of(key(k).as_bytes());
            let mut w = Writes::new(kh);
            // What the call wrote and the host does not hold yet / what the host holds.
            let mut call: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
            let mut host: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
            // What the stage did, in order: what the host must hold in the end.
            let mut truth: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
            let mut sent = 0;
            // Per key, where its kept value says its latest write is.
            let mut marks: BTreeMap<u8, u32> = BTreeMap::new();
            // The marks were forgotten, or a key written without one, since the last
            // sending.
            let mut forgot = false;
            let send = |w: &mut Writes, host: &mut BTreeMap<String, Option<Vec<u8>>>, sent: &mut usize, forgot: &mut bool| {
                let packed = w.unsent().into_owned();
                let writes = parse(&packed);
                // Each key once at most: the earlier writes of a key are not sent.
                let mut keys: Vec<&String> = writes.iter().map(|(k, _)| k).collect();
                keys.sort();
                keys.dedup();
                assert!(*forgot || keys.len() == writes.len(), "a key sent twice in {writes:?}");
                *forgot = false;
                *sent += writes.len();
                // In order: a later write of a key wins.
                host.extend(writes);
                w.mark_sent();
            };
            for op in ops {
                match op {
                    Op::Set(k, v) => {
                        // (A write not through a kept value: the key has none.)
                        marks.remove(&k);
                        w.write(h(k), &key(k), Some(&v));
                        call.insert(key(k), Some(v.clone()));
                        truth.insert(key(k), Some(v));
                    }
                    Op::Delete(k) => {
                        marks.remove(&k);
                        w.write(h(k), &key(k), None);
                        call.insert(key(k), None);
                        truth.insert(key(k), None);
                    }
                    Op::Direct(k, v) => {
                        host.insert(key(k), v.clone());
                        truth.insert(key(k), v);
                        w.forget(h(k), &key(k));
                        marks.remove(&k);
                        call.remove(&key(k));
                    }
                    Op::Send => {
                        send(&mut w, &mut host, &mut sent, &mut forgot);
                        // Sent writes stay readable in the call.
                    }
                    Op::Tracked(k, v) => {
                        let at = match marks.get(&k) {
                            Some(&at) => w.rewrite(at, &key(k), v.as_deref()),
                            None => {
                                // (A write of the key not through its mark may be
                                // before it: both go.)
                                forgot |= call.contains_key(&key(k));
                                w.append(&key(k), v.as_deref())
                            }
                        };
                        marks.insert(k, at);
                        call.insert(key(k), v.clone());
                        truth.insert(key(k), v);
                    }
                    Op::ForgetMarks => {
                        marks.clear();
                        forgot = true;
                    }
                    Op::Read(k) => {
                        prop_assert_eq!(w.get(h(k), &key(k)), call.get(&key(k)).cloned());
                    }
                }
            }
            for k in 0..6 {
                prop_assert_eq!(w.get(h(k), &key(k)), call.get(&key(k)).cloned());
            }
            send(&mut w, &mut host, &mut sent, &mut forgot);
            // The host holds each key's last write, the call's or its own direct one.
            prop_assert_eq!(&host, &truth);
            w.clear();
            prop_assert!(!w.has_unsent());
            prop_assert_eq!(w.get(h(1), &key(1)), None);
        }
    }
}
