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
    inner: std::rc::Rc<host::Bucket>,
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
        return self.inner.get(key).map_err(host::error);
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
                    Error::Other(format!("key {key:?} holds {} bytes, not a number", v.len()))
                }),
        }
    }

    /// Sets the value of `key`.
    pub fn set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return self.inner.set(key, value.as_ref()).map_err(host::error);
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
        return self.inner.delete(key).map_err(host::error);
        #[cfg(not(target_arch = "wasm32"))]
        return native::set(&self.name, key, None);
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        #[cfg(target_arch = "wasm32")]
        return self.inner.exists(key).map_err(host::error);
        #[cfg(not(target_arch = "wasm32"))]
        return Ok(native::with(&self.name, |b| b.contains_key(key)));
    }

    /// Adds `delta` to the number at `key` (absent: 0) and returns the sum.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, Error> {
        #[cfg(target_arch = "wasm32")]
        return host::increment(&self.inner, key, delta).map_err(host::error);
        #[cfg(not(target_arch = "wasm32"))]
        {
            let sum = self.get_i64(key)?.unwrap_or(0).wrapping_add(delta);
            self.set_i64(key, sum)?;
            Ok(sum)
        }
    }

    /// The values of `keys`, in order.
    pub fn get_many(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        #[cfg(target_arch = "wasm32")]
        {
            let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
            return host::get_many(&self.inner, &keys)
                .map(|kv| kv.into_iter().map(|(_, v)| v).collect())
                .map_err(host::error);
        }
        #[cfg(not(target_arch = "wasm32"))]
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Sets every pair, in order.
    pub fn set_many(&self, pairs: &[(&str, &[u8])]) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        {
            let pairs: Vec<(String, Vec<u8>)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect();
            return host::set_many(&self.inner, &pairs).map_err(host::error);
        }
        #[cfg(not(target_arch = "wasm32"))]
        pairs.iter().try_for_each(|(k, v)| self.set(k, v))
    }

    /// Removes every key of `keys`.
    pub fn delete_many(&self, keys: &[&str]) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        {
            let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
            return host::delete_many(&self.inner, &keys).map_err(host::error);
        }
        #[cfg(not(target_arch = "wasm32"))]
        keys.iter().try_for_each(|k| self.delete(k))
    }

    /// One page of keys after `cursor` (none: from the first), in byte order, and the cursor
    /// of the next page (none: this was the last).
    pub fn keys_page(&self, cursor: Option<&str>) -> Result<(Vec<String>, Option<String>), Error> {
        #[cfg(target_arch = "wasm32")]
        return self
            .inner
            .list_keys(cursor)
            .map(|r| (r.keys, r.cursor))
            .map_err(host::error);
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

#[cfg(target_arch = "wasm32")]
mod host {
    use crate::__private::bindings::wasi::keyvalue::{atomics, batch, store};
    pub use atomics::increment;
    pub use batch::{delete_many, get_many, set_many};
    pub use store::{open as open_raw, Bucket};

    thread_local! {
        /// Buckets opened by this instance: `Bucket::open` on every message is one lookup
        /// here, not two host calls (open and drop).
        static OPEN: std::cell::RefCell<Vec<(String, std::rc::Rc<Bucket>)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    pub fn open_cached(name: &str) -> Result<std::rc::Rc<Bucket>, super::Error> {
        if let Some(b) =
            OPEN.with_borrow(|o| o.iter().find(|(n, _)| n == name).map(|(_, b)| b.clone()))
        {
            return Ok(b);
        }
        let b = std::rc::Rc::new(open_raw(name).map_err(error)?);
        OPEN.with_borrow_mut(|o| o.push((name.to_owned(), b.clone())));
        Ok(b)
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
