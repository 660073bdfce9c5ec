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
