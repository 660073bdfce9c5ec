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
    /// the host's handle: opening on every message costs no host call after the first.
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

/// A call's writes are kept here, in the guest, and reach the host in one `set-many` (and one
/// `delete-many`) per bucket when the call returns (or before a key listing): the host keeps a
/// call's writes only when it returns anyway, so a stage sees the same state with one host
/// call per call instead of one per write. A read of a key the call wrote is answered here.
/// A call that traps leaves its writes here, and the next call drops them, as the host does.
#[cfg(target_arch = "wasm32")]
mod host {
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::rc::Rc;

    use crate::__private::bindings::wasi::keyvalue::{batch, store};
    use crate::__private::bindings::weir::stage::state_limits;
    pub use store::{open as open_raw, Bucket};

    /// An open bucket: the host's handle and its place in [`CALL`].
    pub struct Open {
        bucket: Rc<Bucket>,
        id: usize,
    }

    /// A key's value as the call in progress wrote it; `dirty`: not sent to the host yet.
    struct Value {
        value: Option<Vec<u8>>,
        dirty: bool,
    }

    /// FNV-1a: the map holds at most a call's keys (a batch's), so a keyed hash buys nothing.
    #[derive(Default, Clone, Copy)]
    struct Fnv(u64);

    impl std::hash::Hasher for Fnv {
        fn write(&mut self, bytes: &[u8]) {
            let mut h = if self.0 == 0 {
                0xcbf2_9ce4_8422_2325
            } else {
                self.0
            };
            for b in bytes {
                h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
            self.0 = h;
        }
        fn finish(&self) -> u64 {
            self.0
        }
    }

    type Map = HashMap<String, Value, std::hash::BuildHasherDefault<Fnv>>;

    thread_local! {
        /// Buckets opened by this instance: `Bucket::open` on every message is one lookup
        /// here, not two host calls (open and drop).
        static OPEN: RefCell<Vec<(String, Rc<Bucket>)>> = const { RefCell::new(Vec::new()) };
        /// Per open bucket, the keys the call in progress wrote.
        static CALL: RefCell<Vec<Map>> = const { RefCell::new(Vec::new()) };
        /// `state.max_value`, asked once.
        static MAX_VALUE: Cell<Option<u64>> = const { Cell::new(None) };
        /// A call (`process`, `process-batch`) is in progress: writes wait here.
        static IN_CALL: Cell<bool> = const { Cell::new(false) };
    }

    pub fn open_cached(name: &str) -> Result<Open, super::Error> {
        if let Some((id, bucket)) = OPEN.with_borrow(|o| {
            o.iter()
                .position(|(n, _)| n == name)
                .map(|i| (i, o[i].1.clone()))
        }) {
            return Ok(Open { bucket, id });
        }
        let bucket = Rc::new(open_raw(name).map_err(error)?);
        // From now on the calls' writes are sent when each call returns.
        crate::__private::state_in_use(flush_and_forget);
        let id = OPEN.with_borrow_mut(|o| {
            o.push((name.to_owned(), bucket.clone()));
            o.len() - 1
        });
        CALL.with_borrow_mut(|c| c.resize_with(id + 1, Map::default));
        Ok(Open { bucket, id })
    }

    fn max_value() -> u64 {
        MAX_VALUE.get().unwrap_or_else(|| {
            let m = state_limits::max_value();
            MAX_VALUE.set(Some(m));
            m
        })
    }

    pub fn get(b: &Open, key: &str) -> Result<Option<Vec<u8>>, super::Error> {
        if let Some(v) = CALL.with_borrow(|c| c[b.id].get(key).map(|v| v.value.clone())) {
            return Ok(v);
        }
        // Not kept: a key read and not written costs a host call per read, as without the
        // map (keeping every read cost more than it saved when keys do not repeat in a call).
        b.bucket.get(key).map_err(error)
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

    /// A write the host answers at once: outside a call (in `init` it refuses: state is open
    /// only while a message is processed), or a value over `state.max_value` (it refuses it
    /// with its reason). Should it take the write, it holds it now, newer than the call's
    /// earlier write of the key here.
    fn direct(b: &Open, key: &str, value: Option<&[u8]>) -> Result<(), super::Error> {
        match value {
            Some(v) => b.bucket.set(key, v),
            None => b.bucket.delete(key),
        }
        .map_err(error)?;
        CALL.with_borrow_mut(|c| c[b.id].remove(key));
        Ok(())
    }

    /// Keeps a write for when the call returns.
    fn write(b: &Open, key: &str, value: Option<&[u8]>) {
        CALL.with_borrow_mut(|c| {
            let value = value.map(<[u8]>::to_vec);
            match c[b.id].get_mut(key) {
                Some(v) => {
                    v.value = value;
                    v.dirty = true;
                }
                None => {
                    c[b.id].insert(key.to_owned(), Value { value, dirty: true });
                }
            }
        });
    }

    pub fn set_many(b: &Open, pairs: &[(&str, &[u8])]) -> Result<(), super::Error> {
        if !IN_CALL.get() || pairs.iter().any(|(_, v)| v.len() as u64 > max_value()) {
            // The host answers (all or nothing: it checks every value before writing any).
            let owned: Vec<(String, Vec<u8>)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect();
            batch::set_many(&b.bucket, &owned).map_err(error)?;
            CALL.with_borrow_mut(|c| {
                for (k, _) in pairs {
                    c[b.id].remove(*k);
                }
            });
            return Ok(());
        }
        for (k, v) in pairs {
            write(b, k, Some(v));
        }
        Ok(())
    }

    pub fn keys_page(
        b: &Open,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), super::Error> {
        // The host lists what it holds: the call's writes go there first.
        send_writes(false).map_err(super::Error::Other)?;
        b.bucket
            .list_keys(cursor)
            .map(|r| (r.keys, r.cursor))
            .map_err(error)
    }

    /// Sends the call's writes to the host (each key's last): `forget`, the call returns and
    /// its map is emptied (moved out, not copied); otherwise the written values stay, sent,
    /// for the call's later reads.
    fn send_writes(forget: bool) -> Result<(), String> {
        let buckets = OPEN.with_borrow(|o| o.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>());
        for (id, bucket) in buckets.iter().enumerate() {
            let (sets, deletes) = CALL.with_borrow_mut(|c| {
                let mut sets: Vec<(String, Vec<u8>)> = Vec::new();
                let mut deletes: Vec<String> = Vec::new();
                let mut add = |k: String, v: Option<Vec<u8>>| match v {
                    Some(v) => sets.push((k, v)),
                    None => deletes.push(k),
                };
                if forget {
                    for (k, v) in c[id].drain().filter(|(_, v)| v.dirty) {
                        add(k, v.value);
                    }
                } else {
                    for (k, v) in c[id].iter_mut().filter(|(_, v)| v.dirty) {
                        v.dirty = false;
                        add(k.clone(), v.value.clone());
                    }
                }
                (sets, deletes)
            });
            if !sets.is_empty() {
                batch::set_many(bucket, &sets).map_err(|e| error(e).to_string())?;
            }
            if !deletes.is_empty() {
                batch::delete_many(bucket, &deletes).map_err(|e| error(e).to_string())?;
            }
        }
        Ok(())
    }

    /// The call returns (`send`: its writes go to the host first), or a new one begins (not
    /// sent: what is left is a trapped call's).
    fn flush_and_forget(send: bool) {
        if send {
            if let Err(e) = send_writes(true) {
                panic!("weir: the call's state writes could not be sent: {e}");
            }
        }
        CALL.with_borrow_mut(|c| c.iter_mut().for_each(Map::clear));
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
