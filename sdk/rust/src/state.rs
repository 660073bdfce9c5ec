//! Durable per-key state: the buckets a stage declares under `state` in the pipeline YAML.
//!
//! A bucket belongs to the stage and to the source partition of the message being processed:
//! the messages of one key meet their state in one place, and it moves with the partition.
//! A message sees the writes of every message before it. The writes of a message are kept
//! only when its outcome is delivered (`reject` included); a message that fails, traps or
//! times out leaves none. Under `delivery: exactly-once` the state, the outputs and the
//! committed offsets move together. See docs/state.md.
//!
//! ```
//! use weir_sdk::state::Bucket;
//! use weir_sdk::{Message, Outcome};
//!
//! /// Drops a message whose key was seen before.
//! #[weir_sdk::stage]
//! fn first_only(msg: &Message<'_>) -> Outcome {
//!     let Some(key) = msg.key_str() else { return Outcome::Keep };
//!     let seen = match Bucket::open("seen") {
//!         Ok(b) => b,
//!         Err(e) => return Outcome::fail(e.to_string()),
//!     };
//!     match seen.exists(key) {
//!         Ok(true) => Outcome::drop(),
//!         Ok(false) => match seen.set(key, b"") {
//!             Ok(()) => Outcome::Keep,
//!             Err(e) => Outcome::reject(e.to_string()),
//!         },
//!         Err(e) => Outcome::fail(e.to_string()),
//!     }
//! }
//! # fn main() {
//! # use weir_sdk::testing::TestMessage;
//! # weir_sdk::testing::reset_state();
//! # assert_eq!(first_only(&TestMessage::value("x").key("a").borrow()), Outcome::Keep);
//! # assert_eq!(first_only(&TestMessage::value("y").key("a").borrow()), Outcome::drop());
//! # }
//! ```
//!
//! Natively (unit tests) buckets live in memory, per thread: [`crate::testing::reset_state`]
//! empties them.

/// What a state call can answer instead of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No bucket has that name.
    NoSuchStore,
    /// The bucket is not declared under the stage's `state.buckets` in the YAML.
    AccessDenied,
    /// Anything else: a value over `state.max_value`, a store error, `increment` on a value
    /// that is not a number.
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchStore => f.write_str("no such bucket"),
            Error::AccessDenied => {
                f.write_str("bucket not declared for this stage (state.buckets in the YAML)")
            }
            Error::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}

/// One of the stage's buckets.
pub struct Bucket {
    #[cfg(target_arch = "wasm32")]
    inner: host::Open,
    #[cfg(not(target_arch = "wasm32"))]
    name: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bucket")
    }
}

impl Bucket {
    /// Opens the bucket `name` (declared under the stage's `state.buckets`). The instance keeps
    /// the host's handle: opening on every message costs no host call after the first, only
    /// a lookup by name (about 30 ns in wasm). A stage may also open its buckets once in its
    /// `init` and keep them in what `init` returns: reads and writes need a message in
    /// progress, opening does not.
    pub fn open(name: &str) -> Result<Bucket, Error> {
        #[cfg(target_arch = "wasm32")]
        return host::open_cached(name).map(|inner| Bucket { inner });
        #[cfg(not(target_arch = "wasm32"))]
        return Ok(Bucket {
            name: name.to_owned(),
        });
    }

    /// The value of `key`, none when it has none.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        #[cfg(target_arch = "wasm32")]
        return host::get(&self.inner, key);
        #[cfg(not(target_arch = "wasm32"))]
        return Ok(native::with(&self.name, |b| b.get(key).cloned()));
    }

    /// The value of `key` as a number written by [`Bucket::increment`] or
    /// [`Bucket::set_i64`] (8 little-endian bytes).
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, Error> {
        match self.get(key)? {
            None => Ok(None),
            Some(v) => v
                .as_slice()
                .try_into()
                .map(|b| Some(i64::from_le_bytes(b)))
                .map_err(|_| {
                    Error::Other(format!(
                        "key {key:?} holds {} bytes, not a number (increment stores 8 little-endian bytes)",
                        v.len()
                    ))
                }),
        }
    }

    /// Sets the value of `key`.
    pub fn set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return host::set(&self.inner, key, value.as_ref());
        #[cfg(not(target_arch = "wasm32"))]
        return native::set(&self.name, key, Some(value.as_ref()));
    }

    /// Sets `key` to a number (as [`Bucket::increment`] stores it).
    pub fn set_i64(&self, key: &str, value: i64) -> Result<(), Error> {
        self.set(key, value.to_le_bytes())
    }

    /// Removes `key`.
    pub fn delete(&self, key: &str) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return host::delete(&self.inner, key);
        #[cfg(not(target_arch = "wasm32"))]
        return native::set(&self.name, key, None);
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        #[cfg(target_arch = "wasm32")]
        return host::get(&self.inner, key).map(|v| v.is_some());
        #[cfg(not(target_arch = "wasm32"))]
        return Ok(native::with(&self.name, |b| b.contains_key(key)));
    }

    /// Adds `delta` to the number at `key` (absent: 0) and returns the sum.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, Error> {
        let sum = self.get_i64(key)?.unwrap_or(0).wrapping_add(delta);
        self.set_i64(key, sum)?;
        Ok(sum)
    }

    /// The values of `keys`, in order.
    pub fn get_many(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Sets every pair, in order.
    pub fn set_many(&self, pairs: &[(&str, &[u8])]) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return host::set_many(&self.inner, pairs);
        #[cfg(not(target_arch = "wasm32"))]
        pairs.iter().try_for_each(|(k, v)| self.set(k, v))
    }

    /// Removes every key of `keys`.
    pub fn delete_many(&self, keys: &[&str]) -> Result<(), Error> {
        keys.iter().try_for_each(|k| self.delete(k))
    }

    /// One page of keys after `cursor` (none: from the first), in byte order, and the cursor
    /// of the next page (none: this was the last).
    pub fn keys_page(&self, cursor: Option<&str>) -> Result<(Vec<String>, Option<String>), Error> {
        #[cfg(target_arch = "wasm32")]
        return host::keys_page(&self.inner, cursor);
        #[cfg(not(target_arch = "wasm32"))]
        return Ok((
            native::with(&self.name, |b| {
                b.keys()
                    .filter(|k| cursor.is_none_or(|c| k.as_str() > c))
                    .cloned()
                    .collect()
            }),
            None,
        ));
    }

    /// Every key, in byte order (all pages: mind the size of the bucket).
    pub fn keys(&self) -> Result<Vec<String>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (keys, next) = self.keys_page(cursor.as_deref())?;
            all.extend(keys);
            match next {
                Some(n) => cursor = Some(n),
                None => return Ok(all),
            }
        }
    }
}

/// Whether two keys are the same bytes, compared 8 bytes at a step (a key lookup compares
/// one; wasm's `memcmp` takes one byte per step and a call).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in a8.by_ref().zip(b8.by_ref()) {
        if u64::from_ne_bytes(x.try_into().expect("8 bytes"))
            != u64::from_ne_bytes(y.try_into().expect("8 bytes"))
        {
            return false;
        }
    }
    let (ta, tb) = (a8.remainder(), b8.remainder());
    let mut i = 0;
    while i < ta.len() {
        if ta[i] != tb[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The hash of a key in the SDK's tables (a call's writes, the kept values; one per key and
/// operation, shared by both): one 64-bit multiply per 8 bytes and a final mix, keyed by a
/// seed (per instance: the keys come from the input, so their hashes are not guessable).
/// Made for wasm32, which multiplies 64-bit numbers natively but has no 64 × 64 → 128 bit
/// multiply (what foldhash and its kind fold with, emulated there in a call).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KeyHash(u64);

impl KeyHash {
    /// Hashes keyed by `seed`.
    pub(crate) const fn with_seed(seed: u64) -> Self {
        KeyHash(seed)
    }

    /// Hashes keyed by a random seed.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn random() -> Self {
        use std::hash::BuildHasher;
        KeyHash(std::hash::RandomState::new().hash_one(0x5745_4952_u64))
    }

    /// The hash of `key`.
    #[inline]
    pub(crate) fn of(self, key: &[u8]) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(26);
        let word = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
        let half = |at: usize| {
            u64::from(u32::from_le_bytes(
                key[at..at + 4].try_into().expect("4 bytes"),
            ))
        };
        let n = key.len();
        let mut h = self.0 ^ (n as u64).wrapping_mul(K);
        if n >= 8 {
            let mut at = 0;
            while at + 8 < n {
                h = mix(h, word(at));
                at += 8;
            }
            // The last 8 bytes (overlapping the word before when `n` is not a multiple).
            h = mix(h, word(n - 8));
        } else if n >= 4 {
            h = mix(h, (half(0) << 32) | half(n - 4));
        } else if n > 0 {
            let b = |at: usize| u64::from(key[at]);
            h = mix(h, (b(0) << 16) | (b(n / 2) << 8) | b(n - 1));
        }
        // murmur3's 64-bit finaliser: every bit of the state reaches the bits a table uses.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod same_tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn same_is_byte_equality(
            a in proptest::collection::vec(0u8..3, 0..30),
            b in proptest::collection::vec(0u8..3, 0..30),
        ) {
            prop_assert_eq!(super::same(&a, &b), a == b);
            prop_assert!(super::same(&a, &a.clone()));
        }

        /// Equal keys hash equal; a key's hash depends on the seed and on every byte.
        #[test]
        fn a_key_hash_depends_on_the_seed_and_every_byte(
            key in proptest::collection::vec(any::<u8>(), 1..40),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            seed in any::<u64>(),
        ) {
            let h = super::KeyHash::with_seed(seed);
            prop_assert_eq!(h.of(&key), h.of(&key.clone()));
            let mut other = key.clone();
            other[at.index(key.len())] ^= flip;
            prop_assert_ne!(h.of(&key), h.of(&other));
            prop_assert_ne!(h.of(&key), super::KeyHash::with_seed(seed ^ 1).of(&key));
            let mut longer = key.clone();
            longer.push(0);
            prop_assert_ne!(h.of(&key), h.of(&longer));
        }
    }

    /// The hashes of many similar keys spread over a table's low bits and top 7 bits
    /// (hashbrown's bucket index and tag).
    #[test]
    fn similar_keys_spread_over_the_bits_a_table_uses() {
        let h = super::KeyHash::with_seed(7);
        let mut low = [0u32; 256];
        let mut top = [0u32; 128];
        for i in 0..25_600 {
            let x = h.of(format!("key-{i:06}").as_bytes());
            low[(x & 0xff) as usize] += 1;
            top[(x >> 57) as usize] += 1;
        }
        // 100 and 200 expected in each.
        assert!(
            low.iter().all(|&n| (50..170).contains(&n)),
            "low byte: {low:?}"
        );
        assert!(
            top.iter().all(|&n| (120..290).contains(&n)),
            "top 7 bits: {top:?}"
        );
    }
}

/// A call's write of `key` (hashed by `h`, asked only when needed) in bucket `bucket`: it
/// joins the call's packed writes (sent when the call returns) and is kept. A kept value
/// remembers where its write is in the call's packed writes, so the call's next write of the
/// key goes there (in place when it can) without a lookup of its own; a value not kept is
/// written with the lookup. A write of the key the last read found needs no hash at all
/// ([`kept::Kept::put_with`]).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_kept(
    kept: &mut kept::Kept,
    writes: &mut packed::Writes,
    call: u64,
    bucket: usize,
    h: impl Fn() -> u64,
    key: &str,
    value: Option<&[u8]>,
    ask: impl FnOnce() -> kept::Epoch,
) {
    let mut written = false;
    kept.put_with(bucket, &h, key, value, ask, |w| {
        let at = if w.call == call {
            writes.rewrite(w.at, key, value)
        } else {
            writes.append(key, value)
        };
        *w = kept::Written { call, at };
        written = true;
    });
    if !written {
        writes.write(h(), key, value);
    }
}

/// A call's writes to one bucket, packed as the host's `write-packed` takes them (the guest
/// side of the Rust SDK's state; plain Rust, so it is tested natively too).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod packed {
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
}

/// The values an instance read or wrote, kept between its calls while the host says they
/// are still the values (its `cache-epoch`): a stage that reads a key again reads it here,
/// without a host call (plain Rust, so it is tested natively too).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod kept {
    use weir_abi::ABSENT;

    use super::{same, KeyHash};

    /// A kept value: the key's bytes and the value's in one allocation (a lookup that finds
    /// it touches the table's slot and this, not a key and a value apart).
    struct Entry {
        data: Box<[u8]>,
        klen: u32,
        /// [`ABSENT`]: the key has no value.
        vlen: u32,
        /// Where the key's latest write of a call is in the call's packed writes.
        written: Written,
    }

    /// Where a key's latest write is in a call's packed writes (`super::packed::Writes`),
    /// so that the call's next write of the key finds it without a lookup of its own.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub(crate) struct Written {
        /// The call it belongs to (another number: none in the call in progress; 0: none).
        pub call: u64,
        /// The write's offset in the call's packed writes.
        pub at: u32,
    }

    impl Entry {
        fn new(key: &[u8], value: Option<&[u8]>) -> Entry {
            let mut data = Vec::with_capacity(key.len() + value.map_or(0, <[u8]>::len));
            data.extend_from_slice(key);
            data.extend_from_slice(value.unwrap_or_default());
            Entry {
                data: data.into_boxed_slice(),
                klen: key.len() as u32,
                vlen: value.map_or(ABSENT, |v| v.len() as u32),
                written: Written::default(),
            }
        }

        fn key(&self) -> &[u8] {
            &self.data[..self.klen as usize]
        }

        fn value(&self) -> Option<&[u8]> {
            (self.vlen != ABSENT).then(|| &self.data[self.klen as usize..])
        }

        fn is(&self, key: &[u8]) -> bool {
            self.klen as usize == key.len() && same(self.key(), key)
        }

        /// The value is `value` now (in place when as long).
        fn set(&mut self, value: Option<&[u8]>) {
            match value {
                Some(v) if self.vlen == v.len() as u32 => {
                    self.data[self.klen as usize..].copy_from_slice(v);
                }
                _ => {
                    let written = self.written;
                    *self = Entry::new(&self.data[..self.klen as usize], value);
                    self.written = written;
                }
            }
        }

        /// Bytes it counts for.
        fn size(&self) -> usize {
            OVERHEAD + self.data.len()
        }
    }

    /// One bucket's kept values, by key.
    #[derive(Default)]
    struct Values {
        table: hashbrown::HashTable<Entry>,
    }

    impl Values {
        /// Adds `e` (hashed `h` with `hash`), whose key is not here.
        fn insert(&mut self, hash: KeyHash, h: u64, e: Entry) {
            self.table.insert_unique(h, e, |e| hash.of(e.key()));
        }

        fn bytes(&self) -> usize {
            self.table.iter().map(Entry::size).sum()
        }
    }

    /// What the host says of a call's partition (`cache-epoch`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Epoch {
        /// The values kept under it are still the values (0: keep nothing beyond the call).
        pub current: u64,
        /// The values kept under it are stale (0: none).
        pub replaces: u64,
        /// The most bytes of keys and values to keep.
        pub keep_bytes: u64,
    }

    /// Where a read found a kept value: its bucket and its place in that bucket's table.
    #[derive(Debug, Clone, Copy)]
    struct Found {
        bucket: usize,
        index: usize,
    }

    /// Bytes a kept value counts for besides its key and value (the map's slot and the two
    /// allocations, roughly).
    const OVERHEAD: usize = 48;

    /// Reads and writes per judgement of whether keeping pays ([`Kept::tally`]).
    const WINDOW: u32 = 8192;

    /// Per epoch (one per partition the instance has seen) and bucket, the values kept.
    pub(crate) struct Kept {
        /// The hash of the keys (the caller hands in each key's hash, made with it).
        hash: KeyHash,
        /// The call's epoch (none: not asked yet in this call).
        call: Option<Epoch>,
        /// Where the call's epoch is in `epochs` (none: not looked up since it changed).
        slot: Option<usize>,
        /// Where the last read found a kept value (none: it found none, or values were
        /// added or forgotten since): a write of the key right after its read (a
        /// read-modify-write) finds it there without a hash or a lookup. Only a hint: a
        /// write uses it when the value there, in the call's table, has the write's key.
        found: Option<Found>,
        epochs: Vec<(u64, Vec<Values>)>,
        /// Bytes kept, counted as [`OVERHEAD`] plus key and value per value.
        bytes: usize,
        /// Reads and writes in the current window, and reads answered here among them.
        ops: u32,
        hits: u32,
        /// Reads and writes left while nothing is kept (the last window's reads were seldom
        /// answered here: keys that do not come back cost a copy each and save nothing).
        off: u32,
        window: u32,
    }

    impl Kept {
        /// Nothing kept yet (const: a thread-local of it needs no lazy start).
        pub(crate) const fn new() -> Self {
            Kept::with_window(WINDOW)
        }

        /// Keeping, judged every `window` reads and writes.
        pub(crate) const fn with_window(window: u32) -> Self {
            Kept {
                hash: KeyHash::with_seed(0),
                call: None,
                slot: None,
                found: None,
                epochs: Vec::new(),
                bytes: 0,
                ops: 0,
                hits: 0,
                off: 0,
                window,
            }
        }

        /// Keys are hashed with `hash` from now on (what was kept is forgotten).
        pub(crate) fn set_hash(&mut self, hash: KeyHash) {
            self.start_over();
            self.hash = hash;
        }

        /// A call begins: its epoch is asked at its first read or write.
        pub(crate) fn begin_call(&mut self) {
            self.call = None;
            self.slot = None;
            self.found = None;
        }

        /// Counts a read or write (`hit`: a read answered here); false while nothing is
        /// kept. When fewer than one in 16 of a window's reads and writes were reads
        /// answered here, everything kept is forgotten and nothing is kept for the next 16
        /// windows.
        fn tally(&mut self, hit: bool) -> bool {
            if self.off > 0 {
                self.off -= 1;
                return false;
            }
            self.ops += 1;
            self.hits += u32::from(hit);
            if self.ops >= self.window {
                let pays = self.hits * 16 >= self.window;
                self.ops = 0;
                self.hits = 0;
                if !pays {
                    self.start_over();
                    self.off = self.window * 16;
                    return false;
                }
            }
            true
        }

        /// The call's values of `bucket`, asking the host for the call's epoch (`ask`) first
        /// when the call has not yet; none when nothing is kept.
        fn values(&mut self, bucket: usize, ask: impl FnOnce() -> Epoch) -> Option<&mut Values> {
            let e = match self.call {
                Some(e) => e,
                None => {
                    let e = ask();
                    if e.replaces != 0 {
                        self.forget(e.replaces);
                    }
                    self.call = Some(e);
                    e
                }
            };
            if e.current == 0 {
                return None;
            }
            let at = match self.slot {
                Some(at) => at,
                None => {
                    let at = match self.epochs.iter().position(|(n, _)| *n == e.current) {
                        Some(at) => at,
                        None => {
                            self.epochs.push((e.current, Vec::new()));
                            self.epochs.len() - 1
                        }
                    };
                    self.slot = Some(at);
                    at
                }
            };
            let buckets = &mut self.epochs[at].1;
            if buckets.len() <= bucket {
                buckets.resize_with(bucket + 1, Values::default);
            }
            Some(&mut buckets[bucket])
        }

        /// Forgets what was kept under `epoch`.
        fn forget(&mut self, epoch: u64) {
            if let Some(at) = self.epochs.iter().position(|(n, _)| *n == epoch) {
                self.slot = None;
                self.found = None;
                let (_, buckets) = self.epochs.swap_remove(at);
                let gone: usize = buckets.iter().map(Values::bytes).sum();
                self.bytes -= gone;
            }
        }

        /// The kept value of `key`, hashed `h` (none: not kept; `Some(None)`: kept as
        /// absent).
        pub(crate) fn get(
            &mut self,
            bucket: usize,
            h: u64,
            key: &str,
            ask: impl FnOnce() -> Epoch,
        ) -> Option<Option<Vec<u8>>> {
            self.found = None;
            if self.off > 0 {
                self.tally(false);
                return None;
            }
            let table = &self.values(bucket, ask)?.table;
            let index = table.find_bucket_index(h, |e| e.is(key.as_bytes()));
            let v = index.map(|i| {
                let e = table.get_bucket(i).expect("the place just found");
                e.value().map(<[u8]>::to_vec)
            });
            self.found = index.map(|index| Found { bucket, index });
            self.tally(v.is_some());
            v
        }

        /// `key`'s value (`key` hashed `h`) is `value` now (read from the host, or written
        /// by the call). When more than the epoch's `keep_bytes` are kept, everything kept is
        /// forgotten.
        pub(crate) fn put(
            &mut self,
            bucket: usize,
            h: u64,
            key: &str,
            value: Option<&[u8]>,
            ask: impl FnOnce() -> Epoch,
        ) {
            // (Not the call's write in its packed writes, or not that one any more.)
            self.put_with(bucket, &|| h, key, value, ask, |w| *w = Written::default());
        }

        /// [`Self::put`], handing `mark` where the key's latest write of the call is in the
        /// call's packed writes (as `mark` last left it) to update; false when the value is
        /// not kept (`mark` may have run: what it marked is forgotten). `h` hashes the key,
        /// asked only when the last read did not find this very key (a read-modify-write
        /// writes without a hash or a lookup).
        pub(crate) fn put_with(
            &mut self,
            bucket: usize,
            h: &impl Fn() -> u64,
            key: &str,
            value: Option<&[u8]>,
            ask: impl FnOnce() -> Epoch,
            mark: impl FnOnce(&mut Written),
        ) -> bool {
            if !self.tally(false) {
                return false;
            }
            let hash = self.hash;
            // (The last read's find, when it is this key's: `is` tells, whatever happened.)
            let found = self.found.filter(|f| f.bucket == bucket).map(|f| f.index);
            let Some(values) = self.values(bucket, ask) else {
                return false;
            };
            let key = key.as_bytes();
            let index = found
                .filter(|&i| values.table.get_bucket(i).is_some_and(|e| e.is(key)))
                .or_else(|| values.table.find_bucket_index(h(), |e| e.is(key)));
            let added = if let Some(e) = index.and_then(|i| values.table.get_bucket_mut(i)) {
                let before = e.size();
                e.set(value);
                mark(&mut e.written);
                e.size() as isize - before as isize
            } else {
                let mut e = Entry::new(key, value);
                mark(&mut e.written);
                let n = e.size();
                values.insert(hash, h(), e);
                // (The table may have moved its values.)
                self.found = None;
                n as isize
            };
            self.bytes = self.bytes.saturating_add_signed(added);
            let limit = self.call.map_or(0, |e| e.keep_bytes) as usize;
            if self.bytes > limit {
                // (The call's writes are still in its packed buffer: a read that finds
                // nothing here looks there before it asks the host.)
                self.start_over();
                return false;
            }
            true
        }

        /// Forgets everything kept.
        fn start_over(&mut self) {
            self.slot = None;
            self.found = None;
            self.epochs.clear();
            self.bytes = 0;
        }

        /// Bytes kept.
        #[cfg(test)]
        pub(crate) fn bytes(&self) -> usize {
            self.bytes
        }
    }

    #[cfg(test)]
    mod tests {
        use std::collections::BTreeMap;

        use proptest::prelude::*;

        use super::super::packed::{parse, Writes};
        use super::super::{write_kept, KeyHash};
        use super::{Epoch, Kept};

        #[derive(Debug, Clone)]
        enum Op {
            /// A call begins on partition `p` (0..3).
            Call(u8),
            /// The call reads `k` in bucket `b`.
            Read(u8, u8),
            /// The call writes (or deletes) `k` in bucket `b`.
            Write(u8, u8, Option<Vec<u8>>),
            /// Something other than this instance changes partition `p`'s value of `k`.
            Other(u8, u8, u8, Option<Vec<u8>>),
        }

        fn op() -> impl Strategy<Value = Op> {
            let value = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40));
            prop_oneof![
                1 => (0u8..3).prop_map(Op::Call),
                4 => (0u8..2, 0u8..5).prop_map(|(b, k)| Op::Read(b, k)),
                3 => (0u8..2, 0u8..5, value.clone()).prop_map(|(b, k, v)| Op::Write(b, k, v)),
                1 => (0u8..3, 0u8..2, 0u8..5, value).prop_map(|(p, b, k, v)| Op::Other(p, b, k, v)),
            ]
        }

        /// The host's side, as the host keeps it: per partition a version bumped by every
        /// change, per partition the epoch handed out and the version it stands for.
        #[derive(Default)]
        struct Host {
            values: BTreeMap<(u8, u8, u8), Vec<u8>>,
            version: BTreeMap<u8, u64>,
            handed: BTreeMap<u8, (u64, u64)>,
            next: u64,
        }

        impl Host {
            fn epoch(&mut self, p: u8, keep_bytes: u64) -> Epoch {
                let version = *self.version.entry(p).or_default();
                match self.handed.get(&p).copied() {
                    Some((epoch, v)) if v == version => Epoch {
                        current: epoch,
                        replaces: 0,
                        keep_bytes,
                    },
                    old => {
                        self.next += 1;
                        self.handed.insert(p, (self.next, version));
                        Epoch {
                            current: self.next,
                            replaces: old.map_or(0, |o| o.0),
                            keep_bytes,
                        }
                    }
                }
            }

            fn write(&mut self, p: u8, b: u8, k: u8, v: Option<Vec<u8>>, own: bool) {
                match v {
                    Some(v) => self.values.insert((p, b, k), v),
                    None => self.values.remove(&(p, b, k)),
                };
                let version = self.version.entry(p).or_default();
                *version += 1;
                if own {
                    // The instance's own write (its call returned): what it kept is true.
                    if let Some(h) = self.handed.get_mut(&p) {
                        h.1 = *version;
                    }
                }
            }
        }

        fn key(k: u8) -> String {
            "k".repeat(k as usize)
        }

        /// What the call's packed writes send, applied in order, is each key's last write in
        /// the call; they are emptied for the next call.
        fn sent_are_written(
            writes: &mut [Writes; 2],
            wrote: &mut BTreeMap<(u8, String), Option<Vec<u8>>>,
        ) -> Result<(), TestCaseError> {
            for (b, w) in writes.iter_mut().enumerate() {
                let mut got = BTreeMap::new();
                for (k, v) in parse(&w.unsent()) {
                    got.insert((b as u8, k), v);
                }
                let want: BTreeMap<_, _> = wrote
                    .iter()
                    .filter(|((wb, _), _)| *wb == b as u8)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
                w.clear();
            }
            wrote.clear();
            Ok(())
        }

        proptest! {
            /// Whatever the calls do and whatever else changes the partitions, a read that
            /// the kept values answer answers what the host holds, and the bytes counted stay
            /// within the limit; a read they do not answer finds the call's own writes; and
            /// the call's packed writes, made through the kept values' marks
            /// ([`write_kept`]), send each key's last write of the call.
            #[test]
            fn what_is_kept_is_what_the_host_holds(
                ops in proptest::collection::vec(op(), 0..150),
                keep_bytes in prop_oneof![Just(100_000u64), 0u64..400],
                window in prop_oneof![Just(super::WINDOW), 1u32..6],
            ) {
                let mut host = Host::default();
                let mut kept = Kept::with_window(window);
                let kh = KeyHash::with_seed(5);
                kept.set_hash(kh);
                let h = |k: u8| kh.of(key(k).as_bytes());
                let mut part = 0u8;
                // Changes to the partition of the call in progress wait for its end (a lane
                // runs one call at a time).
                let mut later = Vec::new();
                // The call's packed writes per bucket (`write_kept`), and what it wrote.
                let mut writes = [Writes::new(kh), Writes::new(kh)];
                let mut wrote: BTreeMap<(u8, String), Option<Vec<u8>>> = BTreeMap::new();
                let mut call = 1u64;
                for op in ops {
                    match op {
                        Op::Call(p) => {
                            sent_are_written(&mut writes, &mut wrote)?;
                            call += 1;
                            for (p, b, k, v) in later.drain(..) {
                                host.write(p, b, k, v, false);
                            }
                            part = p;
                            kept.begin_call();
                        }
                        Op::Read(b, k) => {
                            let truth = host.values.get(&(part, b, k)).cloned();
                            match kept.get(b as usize, h(k), &key(k), || host.epoch(part, keep_bytes)) {
                                Some(v) => prop_assert_eq!(v, truth),
                                None => match writes[b as usize].get(h(k), &key(k)) {
                                    Some(v) => prop_assert_eq!(v, truth),
                                    None => kept.put(b as usize, h(k), &key(k), truth.as_deref(), || host.epoch(part, keep_bytes)),
                                },
                            }
                        }
                        Op::Write(b, k, v) => {
                            write_kept(&mut kept, &mut writes[b as usize], call, b as usize, || h(k), &key(k), v.as_deref(), || host.epoch(part, keep_bytes));
                            wrote.insert((b, key(k)), v.clone());
                            host.write(part, b, k, v, true);
                        }
                        Op::Other(p, b, k, v) if p == part => later.push((p, b, k, v)),
                        Op::Other(p, b, k, v) => host.write(p, b, k, v, false),
                    }
                    prop_assert!(kept.bytes() as u64 <= keep_bytes, "{} bytes kept", kept.bytes());
                }
                sent_are_written(&mut writes, &mut wrote)?;
            }
        }
    }
}

/// A call's writes are kept here, in the guest, packed one after another in one buffer per
/// bucket, and reach the host in one `write-packed` per bucket when the call returns (or
/// before a key listing): the host keeps a call's writes only when it returns anyway, so a
/// stage sees the same state with one host call per call instead of one per write, and no
/// allocation per write on either side. A read of a key the call wrote is answered here.
/// A call that traps leaves its writes here, and the next call drops them, as the host does.
/// The values read and written are also kept between calls (module `kept`) while the
/// host's `cache-epoch` says they still hold.
#[cfg(target_arch = "wasm32")]
mod host {
    use std::cell::{Cell, RefCell};

    use super::kept::{Epoch, Kept};
    use super::packed::Writes;
    use super::KeyHash;
    use crate::__private::bindings::wasi::keyvalue::store;
    use crate::__private::bindings::weir::stage::state_limits;
    pub use store::{open as open_raw, Bucket};

    /// An open bucket: its place in [`Calls::buckets`].
    pub struct Open {
        id: usize,
    }

    /// A bucket the instance opened.
    struct Opened {
        name: Box<str>,
        /// The host's handle.
        handle: Bucket,
        /// The writes of the call in progress.
        writes: Writes,
    }

    /// What the instance holds of its state between host calls (one borrow per operation).
    struct Calls {
        /// Buckets opened by this instance: `Bucket::open` on every message is one lookup
        /// here, not two host calls (open and drop).
        buckets: Vec<Opened>,
        /// The values read and written, kept between calls while the host says they hold.
        kept: Kept,
        /// The keys' hash in both (one per key and operation).
        hash: KeyHash,
        /// The call in progress, never 0 (a kept value's mark of its write in the call's
        /// packed writes holds in this call only).
        call: u64,
    }

    thread_local! {
        static CALLS: RefCell<Calls> = const {
            RefCell::new(Calls {
                buckets: Vec::new(),
                kept: Kept::new(),
                hash: KeyHash::with_seed(0),
                call: 1,
            })
        };
        /// `state.max_value`, asked once.
        static MAX_VALUE: Cell<Option<u64>> = const { Cell::new(None) };
        /// A call (`process`, `process-batch`) is in progress: writes wait here.
        static IN_CALL: Cell<bool> = const { Cell::new(false) };
    }

    /// The call's partition's cache epoch, from the host.
    fn epoch() -> Epoch {
        let e = state_limits::cache_epoch();
        Epoch {
            current: e.current,
            replaces: e.replaces,
            keep_bytes: e.keep_bytes,
        }
    }

    pub fn open_cached(name: &str) -> Result<Open, super::Error> {
        if let Some(id) = CALLS.with_borrow(|c| {
            c.buckets
                .iter()
                .position(|b| super::same(b.name.as_bytes(), name.as_bytes()))
        }) {
            return Ok(Open { id });
        }
        let handle = open_raw(name).map_err(error)?;
        // From now on the calls' writes are sent when each call returns.
        crate::__private::state_in_use(flush_and_forget);
        let id = CALLS.with_borrow_mut(|c| {
            if c.buckets.is_empty() {
                // The first bucket: keys are hashed with a seed of this instance's own.
                c.hash = KeyHash::random();
                c.kept.set_hash(c.hash);
            }
            c.buckets.push(Opened {
                name: name.into(),
                handle,
                writes: Writes::new(c.hash),
            });
            c.buckets.len() - 1
        });
        Ok(Open { id })
    }

    fn max_value() -> u64 {
        MAX_VALUE.get().unwrap_or_else(|| {
            let m = state_limits::max_value();
            MAX_VALUE.set(Some(m));
            m
        })
    }

    pub fn get(b: &Open, key: &str) -> Result<Option<Vec<u8>>, super::Error> {
        CALLS.with_borrow_mut(|c| {
            let h = c.hash.of(key.as_bytes());
            // (What the call wrote is kept too, unless the kept values started over since.)
            if let Some(v) = c.kept.get(b.id, h, key, epoch) {
                return Ok(v);
            }
            let bucket = &mut c.buckets[b.id];
            if let Some(v) = bucket.writes.get(h, key) {
                return Ok(v);
            }
            let v = bucket.handle.get(key).map_err(error)?;
            c.kept.put(b.id, h, key, v.as_deref(), epoch);
            Ok(v)
        })
    }

    pub fn set(b: &Open, key: &str, value: &[u8]) -> Result<(), super::Error> {
        if !IN_CALL.get() || value.len() as u64 > max_value() {
            return direct(b, key, Some(value));
        }
        write(b, key, Some(value));
        Ok(())
    }

    pub fn delete(b: &Open, key: &str) -> Result<(), super::Error> {
        if !IN_CALL.get() {
            return direct(b, key, None);
        }
        write(b, key, None);
        Ok(())
    }

    /// A write that joins the call's (sent when it returns), and is kept
    /// ([`super::write_kept`]).
    fn write(b: &Open, key: &str, value: Option<&[u8]>) {
        CALLS.with_borrow_mut(|c| {
            let hash = c.hash;
            let writes = &mut c.buckets[b.id].writes;
            let h = || hash.of(key.as_bytes());
            super::write_kept(&mut c.kept, writes, c.call, b.id, h, key, value, epoch);
        });
    }

    /// A write the host answers at once: outside a call (in `init` it refuses: state is open
    /// only while a message is processed), or a value over `state.max_value` (it refuses it
    /// with its reason). Should it take the write, it holds it now, newer than the call's
    /// earlier write of the key here.
    fn direct(b: &Open, key: &str, value: Option<&[u8]>) -> Result<(), super::Error> {
        CALLS
            .with_borrow(|c| {
                let handle = &c.buckets[b.id].handle;
                match value {
                    Some(v) => handle.set(key, v),
                    None => handle.delete(key),
                }
            })
            .map_err(error)?;
        took(b, key, value);
        Ok(())
    }

    /// The host took a write of `key` itself: the call's earlier one is not sent, and the
    /// value is kept.
    fn took(b: &Open, key: &str, value: Option<&[u8]>) {
        CALLS.with_borrow_mut(|c| {
            let h = c.hash.of(key.as_bytes());
            c.buckets[b.id].writes.forget(h, key);
            c.kept.put(b.id, h, key, value, epoch);
        });
    }

    pub fn set_many(b: &Open, pairs: &[(&str, &[u8])]) -> Result<(), super::Error> {
        if !IN_CALL.get() || pairs.iter().any(|(_, v)| v.len() as u64 > max_value()) {
            // The host answers (all or nothing: it checks every value before writing any).
            let owned: Vec<(String, Vec<u8>)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect();
            CALLS
                .with_borrow(|c| {
                    crate::__private::bindings::wasi::keyvalue::batch::set_many(
                        &c.buckets[b.id].handle,
                        &owned,
                    )
                })
                .map_err(error)?;
            pairs.iter().for_each(|(k, v)| took(b, k, Some(v)));
            return Ok(());
        }
        pairs.iter().for_each(|(k, v)| write(b, k, Some(v)));
        Ok(())
    }

    pub fn keys_page(
        b: &Open,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), super::Error> {
        // The host lists what it holds: the call's writes go there first.
        send_writes(false).map_err(super::Error::Other)?;
        CALLS
            .with_borrow(|c| c.buckets[b.id].handle.list_keys(cursor))
            .map(|r| (r.keys, r.cursor))
            .map_err(error)
    }

    /// Sends the call's writes not sent yet to the host (each key's last) in one
    /// `write-packed` per bucket: `forget`, the call returns and they are emptied; otherwise
    /// they stay, sent, for the call's later reads.
    fn send_writes(forget: bool) -> Result<(), String> {
        CALLS.with_borrow_mut(|c| {
            for b in &mut c.buckets {
                if b.writes.has_unsent() {
                    state_limits::write_packed(&b.handle, &b.writes.unsent())
                        .map_err(|e| error(e).to_string())?;
                }
                if forget {
                    b.writes.clear();
                } else {
                    b.writes.mark_sent();
                }
            }
            Ok(())
        })
    }

    /// The call returns (`send`: its writes go to the host first), or a new one begins (not
    /// sent: what is left is a trapped call's).
    fn flush_and_forget(send: bool) {
        if send {
            if let Err(e) = send_writes(true) {
                panic!("weir: the call's state writes could not be sent: {e}");
            }
        }
        CALLS.with_borrow_mut(|c| {
            c.buckets.iter_mut().for_each(|b| b.writes.clear());
            c.kept.begin_call();
            // (The marks of the call that ended hold no more.)
            c.call += 1;
        });
        IN_CALL.set(!send);
    }

    pub fn error(e: store::Error) -> super::Error {
        match e {
            store::Error::NoSuchStore => super::Error::NoSuchStore,
            store::Error::AccessDenied => super::Error::AccessDenied,
            store::Error::Other(s) => super::Error::Other(s),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    type Buckets = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

    thread_local! {
        static BUCKETS: RefCell<Buckets> = const { RefCell::new(BTreeMap::new()) };
    }

    pub fn with<R>(bucket: &str, f: impl FnOnce(&BTreeMap<String, Vec<u8>>) -> R) -> R {
        BUCKETS.with(|b| f(b.borrow_mut().entry(bucket.to_owned()).or_default()))
    }

    pub fn set(bucket: &str, key: &str, value: Option<&[u8]>) -> Result<(), super::Error> {
        BUCKETS.with(|b| {
            let mut b = b.borrow_mut();
            let m = b.entry(bucket.to_owned()).or_default();
            match value {
                Some(v) => m.insert(key.to_owned(), v.to_vec()),
                None => m.remove(key),
            };
        });
        Ok(())
    }

    pub fn reset() {
        BUCKETS.with(|b| b.borrow_mut().clear());
    }
}
