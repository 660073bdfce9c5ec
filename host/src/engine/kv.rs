//! `wasi:keyvalue` for stages: the host side of a stage's buckets ([`crate::state`]).
//!
//! An instance's [`Kv`] holds the writes of the call in progress. They reach the partition's
//! state only when the call returned ([`Kv::end_call`]): a trap, a deadline or a memory
//! trap drops the store and with it the call's writes. Reads see the call's own writes
//! first, then the partition's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker, Resource, WasmList, WasmStr};
use wasmtime::StoreContextMut;
use weir_abi::ABSENT;

use super::bindings::wasi::keyvalue::{atomics, batch, store};
use super::bindings::weir::stage::state_limits;
use super::bindings::{BucketHandle, CasHandle, KeyResponse, KvError};
use super::StageState;
use crate::message::PartitionKey;
use crate::state::log::{Slot, SlotMap, SlotRef};
use crate::state::{encode_shared, now_ms, Encoded, PartitionState, StateSpec};

/// The next cache epoch handed to a guest (`cache-epoch`): never one handed before, never 0.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// An instance's access to its stage's state.
#[derive(Default)]
pub struct Kv {
    spec: Option<Arc<StateSpec>>,
    /// The partition of the call in progress.
    part: Option<Arc<PartitionState>>,
    /// Writes of the call in progress.
    writes: CallWrites,
    /// Shadow candidate: writes stay in `writes` and are dropped after each call.
    throwaway: bool,
    /// The write time of the call in progress (ms since the epoch; one clock read per call).
    now: i64,
    /// Per partition, the cache epoch last handed to the guest (`cache-epoch`).
    epochs: HashMap<PartitionKey, CacheEpoch>,
    /// The call in progress was handed its partition's cache epoch.
    asked: bool,
    /// What the guest may keep between calls, bytes of keys and values.
    keep_bytes: u64,
}

/// What the guest was told it may keep of a partition between its calls, and while what
/// holds.
#[derive(Debug, Clone, Copy)]
struct CacheEpoch {
    /// The partition state it was handed for ([`PartitionState::uid`]).
    uid: u64,
    /// The state's [`PartitionState::version`] that the guest's kept values are (moved on
    /// with the instance's own calls as they return; [`STALE`] when something else may have
    /// changed them).
    version: u64,
    epoch: u64,
}

/// A [`CacheEpoch::version`] no state has.
const STALE: u64 = u64::MAX;

/// The writes of a call in progress, in order: the keys' text one after another in one
/// string (no allocation per key: the partition's log shares the key it holds already, or
/// copies a new one once), and the latest write of each key among the first `indexed`
/// (indexed when a read or a listing comes after writes: a stage that sends its writes in
/// one list when its call returns, as the Rust SDK does, never pays for it).
#[derive(Debug, Default)]
struct CallWrites {
    keys: String,
    /// Bucket, where the key is in `keys`, the encoded value.
    writes: Vec<(u16, std::ops::Range<usize>, Option<Encoded>)>,
    /// Made at the first read after writes (none: a default `CallWrites` costs nothing, so
    /// it can be taken out of the store while the guest's memory is read).
    latest: Option<SlotMap<usize>>,
    indexed: usize,
}

impl CallWrites {
    fn push(&mut self, bucket: u16, key: &str, value: Option<Encoded>) {
        let at = self.keys.len();
        self.keys.push_str(key);
        self.writes.push((bucket, at..self.keys.len(), value));
    }

    fn len(&self) -> usize {
        self.writes.len()
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Runs `add`, which adds writes; when what it answers is not `ok`, the writes it added
    /// are dropped: a list joins the call's writes whole or not at all.
    fn all_or_none<R>(
        &mut self,
        add: impl FnOnce(&mut Self) -> R,
        ok: impl FnOnce(&R) -> bool,
    ) -> R {
        let len = self.len();
        let added = add(self);
        if !ok(&added) {
            self.truncate(len);
        }
        added
    }

    /// Drops the writes from the `len`th on (a list refused whole).
    fn truncate(&mut self, len: usize) {
        if let Some((_, key, _)) = self.writes.get(len) {
            self.keys.truncate(key.start);
        }
        self.writes.truncate(len);
        if self.indexed > len {
            self.forget_index();
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.writes.clear();
        self.forget_index();
    }

    fn forget_index(&mut self) {
        if let Some(l) = &mut self.latest {
            l.clear();
        }
        self.indexed = 0;
    }

    fn slot(&self, i: usize) -> SlotRef<'_> {
        let (bucket, key, _) = &self.writes[i];
        SlotRef(*bucket, &self.keys[key.clone()])
    }

    /// Brings `latest` up to date.
    fn index(&mut self) -> &SlotMap<usize> {
        let mut latest = self.latest.take().unwrap_or_default();
        for i in self.indexed..self.writes.len() {
            latest.insert(self.slot(i).to_slot(), i);
        }
        self.indexed = self.writes.len();
        self.latest.insert(latest)
    }

    /// The call's latest write of `slot` (none: it wrote none; `Some(None)`: a delete).
    fn latest(&mut self, slot: SlotRef<'_>) -> Option<Option<&Encoded>> {
        if self.writes.is_empty() {
            return None;
        }
        let &i = self.index().get(&slot)?;
        Some(self.writes[i].2.as_ref())
    }

    /// Each key the call wrote, and whether its latest write leaves a value.
    fn latest_keys(&mut self) -> impl Iterator<Item = (&Slot, bool)> {
        self.index();
        let writes = &self.writes;
        self.latest
            .iter()
            .flatten()
            .map(|(slot, &i)| (slot, writes[i].2.is_some()))
    }

    /// The writes in order, handed over (the call's writes are empty after).
    fn drain(&mut self) -> impl Iterator<Item = (SlotRef<'_>, Option<Encoded>)> {
        self.forget_index();
        let keys = &self.keys;
        self.writes
            .drain(..)
            .map(move |(bucket, key, value)| (SlotRef(bucket, &keys[key]), value))
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = (SlotRef<'_>, Option<&Encoded>)> {
        (0..self.writes.len()).map(|i| (self.slot(i), self.writes[i].2.as_ref()))
    }
}

impl Kv {
    /// Access for a stage with this state (none: `open` answers `access-denied`), whose
    /// instances may hold `memory` bytes.
    pub fn new(spec: Option<Arc<StateSpec>>, throwaway: bool, memory: usize) -> Self {
        Kv {
            spec,
            throwaway,
            keep_bytes: memory as u64 / 8,
            ..Kv::default()
        }
    }

    /// A batch begins: a throw-away instance forgets the writes of the last one.
    pub fn begin_batch(&mut self) {
        if self.throwaway {
            self.writes.clear();
        }
    }

    /// A call on `part`'s messages begins.
    pub fn begin_call(&mut self, part: Option<Arc<PartitionState>>) {
        if std::mem::take(&mut self.asked) {
            // The last call was handed an epoch and did not return ([`Self::end_call`]): its
            // writes, which the guest kept, were dropped.
            self.stale_epoch();
        }
        self.part = part;
        self.now = now_ms();
        if !self.throwaway {
            self.writes.clear();
        }
    }

    /// The call returned: its writes join the chain run in progress, as the writes of the
    /// messages `first..=tag` (the offsets the call answered). A throw-away instance keeps
    /// them to itself until the next batch.
    pub fn end_call(&mut self, first: i64, tag: i64) {
        if self.throwaway {
            return;
        }
        let asked = std::mem::take(&mut self.asked);
        let Some(p) = &self.part else {
            self.writes.clear();
            return;
        };
        let (before, after) = if !self.writes.is_empty() {
            let made = p.add_call(first, tag, self.writes.drain());
            self.writes.clear();
            made
        } else if asked {
            let v = p.version();
            (v, v)
        } else {
            return;
        };
        if asked {
            // The guest's kept values are the state after its own writes, if nothing else
            // changed it since the epoch was handed.
            if let Some(e) = self.epochs.get_mut(&p.key) {
                e.version = if e.uid == p.uid() && e.version == before {
                    after
                } else {
                    STALE
                };
            }
        }
    }

    /// `cache-epoch`: what the guest may keep of the call's partition between calls. The
    /// same epoch as last time while the state's values changed only by this instance's own
    /// calls that returned; otherwise a new one, and the one it replaces. Nothing (0) for a
    /// throw-away instance (its writes are dropped after each batch), a stage with a TTL
    /// (values expire as time passes) or outside a call.
    fn cache_epoch(&mut self) -> (u64, u64) {
        let expires = self.spec.as_ref().is_none_or(|s| s.ttl.is_some());
        let Some(p) = self.part.as_ref().filter(|_| !self.throwaway && !expires) else {
            return (0, 0);
        };
        self.asked = true;
        let (uid, version) = (p.uid(), p.version());
        let fresh = || CacheEpoch {
            uid,
            version,
            epoch: NEXT_EPOCH.fetch_add(1, Ordering::Relaxed),
        };
        match self.epochs.get_mut(&p.key) {
            Some(e) if e.uid == uid && e.version == version => (e.epoch, 0),
            Some(e) => {
                let old = e.epoch;
                *e = fresh();
                (e.epoch, old)
            }
            None => {
                let e = fresh();
                self.epochs.insert(p.key.clone(), e);
                (e.epoch, 0)
            }
        }
    }

    /// The call's partition's epoch is no longer what the guest kept.
    fn stale_epoch(&mut self) {
        if let Some(e) = self.part.as_ref().and_then(|p| self.epochs.get_mut(&p.key)) {
            e.version = STALE;
        }
    }

    fn spec(&self) -> Result<&StateSpec, KvError> {
        self.spec.as_deref().ok_or(KvError::AccessDenied)
    }

    fn part(&self) -> Result<&Arc<PartitionState>, KvError> {
        self.part.as_ref().ok_or_else(|| {
            KvError::Other("state is only open while a message is processed (not in init)".into())
        })
    }

    fn get(&mut self, slot: SlotRef<'_>) -> Result<Option<Vec<u8>>, KvError> {
        if let Some(v) = self.writes.latest(slot) {
            return Ok(v.map(|v| crate::state::decode(v).1.to_vec()));
        }
        self.part()?
            .get(slot)
            .map_err(|e| KvError::Other(e.to_string()))
    }

    fn put(&mut self, bucket: u16, key: &str, value: Option<&[u8]>) -> Result<(), KvError> {
        self.part()?;
        let value = self.encoded(key, value)?;
        self.writes.push(bucket, key, value);
        Ok(())
    }

    /// A `set-many`'s writes to `bucket`: all of them join the call's writes (every value
    /// within `state.max_value`), or none.
    fn put_many<'a>(
        &mut self,
        bucket: u16,
        pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<(), KvError> {
        self.part()?;
        let checked: Vec<_> = pairs
            .into_iter()
            .map(|(key, value)| Ok((key, self.encoded(key, Some(value))?)))
            .collect::<Result<_, KvError>>()?;
        for (key, value) in checked {
            self.writes.push(bucket, key, value);
        }
        Ok(())
    }

    /// A write's value as the call's writes hold it: within `state.max_value` and encoded
    /// (none: a delete).
    fn encoded(&self, key: &str, value: Option<&[u8]>) -> Result<Option<Encoded>, KvError> {
        value
            .map(|v| {
                self.check_size(key, v.len())?;
                Ok(encode_shared(self.now, v))
            })
            .transpose()
    }

    /// A `write-packed` list's writes to `bucket` (`key-len:u32 value-len:u32 key value`,
    /// little-endian; a value length of [`ABSENT`], the packed formats' absent, deletes)
    /// join the call's writes when every key is UTF-8 and every value within
    /// `state.max_value`; otherwise none of them does, and the answer says what is wrong.
    /// (`into`: the call's writes, taken out of `self` while the guest's memory is read.)
    fn unpack(&self, into: &mut CallWrites, bucket: u16, packed: &[u8]) -> Result<(), KvError> {
        into.all_or_none(|w| self.unpack_into(w, bucket, packed), Result::is_ok)
    }

    /// [`Self::unpack`], leaving the writes before a bad one in `into` (the caller keeps
    /// all or none).
    fn unpack_into(
        &self,
        into: &mut CallWrites,
        bucket: u16,
        mut packed: &[u8],
    ) -> Result<(), KvError> {
        fn take<'a>(packed: &mut &'a [u8], n: usize) -> Result<&'a [u8], KvError> {
            if packed.len() < n {
                return Err(KvError::Other(format!(
                    "write-packed: the list ends inside a write ({n} bytes wanted, {} left)",
                    packed.len()
                )));
            }
            let (head, rest) = packed.split_at(n);
            *packed = rest;
            Ok(head)
        }
        fn word(packed: &mut &[u8]) -> Result<u32, KvError> {
            Ok(u32::from_le_bytes(
                take(packed, 4)?.try_into().expect("4 bytes"),
            ))
        }
        while !packed.is_empty() {
            let klen = word(&mut packed)? as usize;
            let vlen = word(&mut packed)?;
            let key = std::str::from_utf8(take(&mut packed, klen)?)
                .map_err(|e| KvError::Other(format!("write-packed: a key is not UTF-8: {e}")))?;
            let value = match vlen {
                ABSENT => None,
                n => Some(take(&mut packed, n as usize)?),
            };
            into.push(bucket, key, self.encoded(key, value)?);
        }
        Ok(())
    }

    /// A value of `len` bytes for `key` is refused when over `state.max_value`.
    fn check_size(&self, key: &str, len: usize) -> Result<(), KvError> {
        let max = self.spec()?.max_value;
        if len > max {
            return Err(KvError::Other(format!(
                "value of {len} bytes for key {key:?} is over state.max_value ({max} bytes)"
            )));
        }
        Ok(())
    }
}

/// Links `wasi:keyvalue` store, atomics and batch.
pub fn add_to_linker(linker: &mut Linker<StageState>) -> wasmtime::Result<()> {
    store::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    atomics::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    batch::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    state_limits::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    add_borrowing(linker)
}

/// Keys up to this long are copied out of the guest's memory onto the stack for a `get`.
const KEY_ON_STACK: usize = 128;

/// `get` and `set-many`, the calls a stateful stage makes for its every message, again
/// (shadowing the generated ones): with the key and values read in the guest's memory, not
/// lifted into a `String` and a `Vec` each first (two allocations and copies per key and
/// value that the state then copies into its own shared key and value anyway).
fn add_borrowing(linker: &mut Linker<StageState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut store = linker.instance("wasi:keyvalue/store@0.2.0-draft2")?;
    store.func_wrap(
        "[method]bucket.get",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, key): (Resource<BucketHandle>, WasmStr)|
         -> wasmtime::Result<(Result<Option<Vec<u8>>, KvError>,)> {
            let mut on_stack = [0u8; KEY_ON_STACK];
            let on_heap: String;
            let key: &str = {
                let text = key.to_str(&cx)?;
                match on_stack.get_mut(..text.len()) {
                    Some(buf) => {
                        buf.copy_from_slice(text.as_bytes());
                        std::str::from_utf8(buf)?
                    }
                    None => {
                        on_heap = text.into_owned();
                        &on_heap
                    }
                }
            };
            let s = cx.data_mut();
            Ok((bucket_of(s, &b).and_then(|bucket| s.kv.get(SlotRef(bucket, key))),))
        },
    )?;
    let mut batch = linker.instance("wasi:keyvalue/batch@0.2.0-draft2")?;
    batch.func_wrap(
        "set-many",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, pairs): (Resource<BucketHandle>, WasmList<(WasmStr, WasmList<u8>)>)|
         -> wasmtime::Result<(Result<(), KvError>,)> {
            let pairs: Vec<(WasmStr, WasmList<u8>)> =
                pairs.iter(&mut cx)?.collect::<wasmtime::Result<_>>()?;
            set_many_borrowed(&mut cx, &b, &pairs).map(|r| (r,))
        },
    )?;
    let mut limits = linker.instance("weir:stage/state-limits@0.1.0")?;
    limits.func_wrap(
        "write-packed",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, packed): (Resource<BucketHandle>, WasmList<u8>)|
         -> wasmtime::Result<(Result<(), KvError>,)> {
            let bucket = match bucket_of(cx.data_mut(), &b) {
                Ok(bucket) => bucket,
                Err(e) => return Ok((Err(e),)),
            };
            add_from_guest(&mut cx, |cx, kv, writes| {
                Ok(kv.unpack_into(writes, bucket, packed.as_le_slice(cx)))
            })
            .map(|r| (r,))
        },
    )?;
    Ok(())
}

/// `set-many` of pairs in the guest's memory: all or nothing (every value is checked against
/// `state.max_value` before any is written). A key that is not UTF-8 traps, as a lifted
/// `string` does.
fn set_many_borrowed(
    cx: &mut StoreContextMut<'_, StageState>,
    b: &Resource<BucketHandle>,
    pairs: &[(WasmStr, WasmList<u8>)],
) -> wasmtime::Result<Result<(), KvError>> {
    let bucket = match bucket_of(cx.data_mut(), b) {
        Ok(bucket) => bucket,
        Err(e) => return Ok(Err(e)),
    };
    add_from_guest(cx, |cx, kv, writes| {
        for (k, v) in pairs {
            let key = k.to_str(cx)?;
            match kv.encoded(&key, Some(v.as_le_slice(cx))) {
                Ok(value) => writes.push(bucket, &key, value),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    })
}

/// Adds to the call's writes what `add` reads in the guest's memory: all of it, or none when
/// `add` answers an error or traps (or no call is in progress). The call's writes are taken
/// out of the store meanwhile, so that `add` may read the guest's memory while it adds.
fn add_from_guest<'a>(
    cx: &mut StoreContextMut<'a, StageState>,
    add: impl FnOnce(
        &StoreContextMut<'a, StageState>,
        &Kv,
        &mut CallWrites,
    ) -> wasmtime::Result<Result<(), KvError>>,
) -> wasmtime::Result<Result<(), KvError>> {
    let mut writes = std::mem::take(&mut cx.data_mut().kv.writes);
    let kv = &cx.data().kv;
    let added = writes.all_or_none(
        |w| match kv.part() {
            Ok(_) => add(cx, kv, w),
            Err(e) => Ok(Err(e)),
        },
        |added| matches!(added, Ok(Ok(()))),
    );
    cx.data_mut().kv.writes = writes;
    added
}

impl state_limits::Host for StageState {
    fn max_value(&mut self) -> u64 {
        self.kv.spec.as_ref().map_or(0, |s| s.max_value as u64)
    }

    fn cache_epoch(&mut self) -> state_limits::Epoch {
        let (current, replaces) = self.kv.cache_epoch();
        state_limits::Epoch {
            current,
            replaces,
            keep_bytes: self.kv.keep_bytes,
        }
    }

    fn write_packed(&mut self, b: Resource<BucketHandle>, packed: Vec<u8>) -> Result<(), KvError> {
        // (Shadowed by the borrowing one in `add_borrowing`, which the linker calls.)
        let bucket = bucket_of(self, &b)?;
        let mut writes = std::mem::take(&mut self.kv.writes);
        let kv = &self.kv;
        let unpacked = kv
            .part()
            .and_then(|_| kv.unpack(&mut writes, bucket, &packed));
        self.kv.writes = writes;
        unpacked
    }
}

fn bucket_of(s: &mut StageState, b: &Resource<BucketHandle>) -> Result<u16, KvError> {
    s.table()
        .get(b)
        .map(|h| h.bucket)
        .map_err(|e| KvError::Other(e.to_string()))
}

impl store::Host for StageState {
    fn open(&mut self, identifier: String) -> Result<Resource<BucketHandle>, KvError> {
        let bucket = self
            .kv
            .spec()?
            .bucket(&identifier)
            .ok_or(KvError::AccessDenied)?;
        self.table()
            .push(BucketHandle { bucket })
            .map_err(|e| KvError::Other(e.to_string()))
    }
}

impl store::HostBucket for StageState {
    fn get(&mut self, b: Resource<BucketHandle>, key: String) -> Result<Option<Vec<u8>>, KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.get(SlotRef(bucket, &key))
    }

    fn set(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.put(bucket, &key, Some(&value))
    }

    fn delete(&mut self, b: Resource<BucketHandle>, key: String) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.put(bucket, &key, None)
    }

    fn exists(&mut self, b: Resource<BucketHandle>, key: String) -> Result<bool, KvError> {
        let bucket = bucket_of(self, &b)?;
        Ok(self.kv.get(SlotRef(bucket, &key))?.is_some())
    }

    fn list_keys(
        &mut self,
        b: Resource<BucketHandle>,
        cursor: Option<String>,
    ) -> Result<KeyResponse, KvError> {
        let bucket = bucket_of(self, &b)?;
        let kv = &mut self.kv;
        let (mut keys, mut next) = kv
            .part()?
            .list(bucket, cursor.as_deref())
            .map_err(|e| KvError::Other(e.to_string()))?;
        // The call's own writes since the page was read.
        let mut changed = false;
        for (slot, present) in kv.writes.latest_keys() {
            if slot.0 != bucket || cursor.as_deref().is_some_and(|c| &*slot.1 <= c) {
                continue;
            }
            if next.as_deref().is_some_and(|n| &*slot.1 > n) {
                continue;
            }
            match (keys.binary_search_by(|k| k.as_str().cmp(&slot.1)), present) {
                (Ok(at), false) => {
                    keys.remove(at);
                    changed = true;
                }
                (Err(at), true) => {
                    keys.insert(at, slot.1.to_string());
                    changed = true;
                }
                _ => {}
            }
        }
        if changed && next.is_some() {
            next = keys.last().cloned();
        }
        Ok(KeyResponse { keys, cursor: next })
    }

    fn drop(&mut self, b: Resource<BucketHandle>) -> wasmtime::Result<()> {
        self.table().delete(b)?;
        Ok(())
    }
}

impl atomics::Host for StageState {
    fn increment(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
        delta: i64,
    ) -> Result<i64, KvError> {
        let slot = (bucket_of(self, &b)?, Arc::<str>::from(key));
        let now = match self.kv.get(SlotRef::of(&slot))? {
            None => 0,
            Some(v) => i64::from_le_bytes(v.as_slice().try_into().map_err(|_| {
                KvError::Other(format!(
                    "key {:?} holds {} bytes, not a number (increment stores 8 little-endian bytes)",
                    slot.1,
                    v.len()
                ))
            })?),
        };
        let sum = now.wrapping_add(delta);
        self.kv.put(slot.0, &slot.1, Some(&sum.to_le_bytes()))?;
        Ok(sum)
    }

    fn swap(&mut self, cas: Resource<CasHandle>, value: Vec<u8>) -> Result<(), atomics::CasError> {
        let h = self
            .table()
            .delete(cas)
            .map_err(|e| atomics::CasError::StoreError(KvError::Other(e.to_string())))?;
        let slot = (h.bucket, h.key);
        let now = self
            .kv
            .get(SlotRef::of(&slot))
            .map_err(atomics::CasError::StoreError)?;
        if now != h.seen {
            let fresh = self
                .table()
                .push(CasHandle {
                    bucket: slot.0,
                    key: slot.1,
                    seen: now.clone(),
                })
                .map_err(|e| atomics::CasError::StoreError(KvError::Other(e.to_string())))?;
            return Err(atomics::CasError::CasFailed((fresh, now)));
        }
        self.kv
            .put(slot.0, &slot.1, Some(&value))
            .map_err(atomics::CasError::StoreError)
    }
}

impl atomics::HostCas for StageState {
    fn new(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
    ) -> Result<Resource<CasHandle>, KvError> {
        Ok(self.new_with_read(b, key)?.0)
    }

    fn new_with_read(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
    ) -> Result<(Resource<CasHandle>, Option<Vec<u8>>), KvError> {
        let slot = (bucket_of(self, &b)?, Arc::<str>::from(key));
        let seen = self.kv.get(SlotRef::of(&slot))?;
        let h = self
            .table()
            .push(CasHandle {
                bucket: slot.0,
                key: slot.1,
                seen: seen.clone(),
            })
            .map_err(|e| KvError::Other(e.to_string()))?;
        Ok((h, seen))
    }

    fn drop(&mut self, c: Resource<CasHandle>) -> wasmtime::Result<()> {
        self.table().delete(c)?;
        Ok(())
    }
}

impl batch::Host for StageState {
    fn get_many(
        &mut self,
        b: Resource<BucketHandle>,
        keys: Vec<String>,
    ) -> Result<Vec<(String, Option<Vec<u8>>)>, KvError> {
        let bucket = bucket_of(self, &b)?;
        keys.into_iter()
            .map(|k| {
                let v = self.kv.get(SlotRef(bucket, &k))?;
                Ok((k, v))
            })
            .collect()
    }

    fn set_many(
        &mut self,
        b: Resource<BucketHandle>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), KvError> {
        // (Shadowed by `set_many_borrowed`, which the linker calls; the same checks.)
        let bucket = bucket_of(self, &b)?;
        self.kv.put_many(
            bucket,
            key_values.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )
    }

    fn delete_many(&mut self, b: Resource<BucketHandle>, keys: Vec<String>) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        for k in keys {
            self.kv.put(bucket, &k, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{CallWrites, Kv, KvError};
    use crate::state::log::SlotRef;
    use crate::state::{decode, StateSpec};
    use weir_abi::ABSENT;

    fn kv(max_value: usize) -> Kv {
        Kv::new(
            Some(Arc::new(StateSpec {
                stage: "s".into(),
                buckets: vec!["b".into()],
                ttl: None,
                max_value,
                changelogs: vec!["p.s.b.changelog".into()],
            })),
            false,
            64 << 20,
        )
    }

    fn write(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&value.map_or(ABSENT, |v| v.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value.unwrap_or_default());
    }

    /// A `write-packed` list unpacked by `kv` in a call on a partition: the call's writes.
    fn unpack(kv: &Kv, bucket: u16, packed: &[u8]) -> Result<CallWrites, KvError> {
        let mut writes = CallWrites::default();
        kv.unpack(&mut writes, bucket, packed)?;
        Ok(writes)
    }

    fn other(r: Result<impl std::fmt::Debug, KvError>) -> String {
        match r {
            Err(KvError::Other(e)) => e,
            r => panic!("expected other(..), got {r:?}"),
        }
    }

    #[test]
    fn a_packed_list_is_the_writes_in_order() {
        let mut packed = Vec::new();
        write(&mut packed, b"a", Some(b"1"));
        write(&mut packed, b"", Some(b""));
        write(&mut packed, "é".as_bytes(), None);
        write(&mut packed, b"a", Some(b"22"));
        let writes = unpack(&kv(2), 3, &packed).expect("parses");
        let got: Vec<(u16, &str, Option<&[u8]>)> = writes
            .iter()
            .map(|(SlotRef(b, k), v)| (b, k, v.map(|v| decode(v).1)))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, "a", Some(&b"1"[..])),
                (3, "", Some(&b""[..])),
                (3, "é", None),
                (3, "a", Some(&b"22"[..])),
            ]
        );
        assert!(unpack(&kv(2), 0, &[]).expect("empty").is_empty());
    }

    #[test]
    fn a_bad_packed_list_is_refused_whole() {
        let mut good = Vec::new();
        write(&mut good, b"a", Some(b"1"));
        // Cut short anywhere: refused.
        for cut in 1..good.len() {
            let e = other(unpack(&kv(10), 0, &good[..cut]));
            assert!(e.contains("ends inside a write"), "cut at {cut}: {e}");
        }
        let mut bad = good.clone();
        write(&mut bad, &[0xff, 0xfe], Some(b"x"));
        assert!(other(unpack(&kv(10), 0, &bad)).contains("not UTF-8"));
        let mut big = good.clone();
        write(&mut big, b"k", Some(&[7; 11]));
        let e = other(unpack(&kv(10), 0, &big));
        assert!(
            e.contains("11 bytes") && e.contains("state.max_value"),
            "{e}"
        );
        // After the call's earlier writes (read back, so indexed): those stay, none of the
        // refused list's joins them.
        let mut writes = unpack(&kv(10), 0, &good).expect("parses");
        let mut more = Vec::new();
        write(&mut more, b"b", Some(b"2"));
        write(&mut more, b"a", Some(b"3"));
        kv(10).unpack(&mut writes, 0, &more).expect("parses");
        assert!(writes.latest(SlotRef(0, "b")).is_some());
        write(&mut more, b"c", Some(&[7; 11]));
        let mut refused = unpack(&kv(10), 0, &good).expect("parses");
        assert!(refused.latest(SlotRef(0, "a")).is_some(), "indexed");
        other(kv(10).unpack(&mut refused, 0, &more));
        assert_eq!(refused.len(), 1);
        assert_eq!(refused.keys, "a");
        let a = refused
            .latest(SlotRef(0, "a"))
            .expect("a")
            .expect("a value");
        assert_eq!(decode(a).1, b"1");
        assert_eq!(refused.latest(SlotRef(0, "b")), None);
        // A huge claimed length is an error, not an allocation.
        let mut lie = Vec::new();
        lie.extend_from_slice(&1u32.to_le_bytes());
        lie.extend_from_slice(&(ABSENT - 1).to_le_bytes());
        lie.push(b'k');
        assert!(other(unpack(&kv(usize::MAX), 0, &lie)).contains("ends inside a write"));
    }
}
