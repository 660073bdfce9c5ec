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
pub(crate) mod packed;

/// The values an instance read or wrote, kept between its calls while the host says they
/// are still the values (its `cache-epoch`): a stage that reads a key again reads it here,
/// without a host call (plain Rust, so it is tested natively too).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod kept;

/// A call's writes are kept here, in the guest, packed one after another in one buffer per
/// bucket, and reach the host in one `write-packed` per bucket when the call returns (or
/// before a key listing): the host keeps a call's writes only when it returns anyway, so a
/// stage sees the same state with one host call per call instead of one per write, and no
/// allocation per write on either side. A read of a key the call wrote is answered here.
/// A call that traps leaves its writes here, and the next call drops them, as the host does.
/// The values read and written are also kept between calls (module `kept`) while the
/// host's `cache-epoch` says they still hold.
#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native;
