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
use super::bindings::{KeyResponse, KvError};
use super::StageState;
use crate::source::PartitionKey;
use crate::state::log::{Slot, SlotMap, SlotRef};
use crate::state::{encode_shared, now_ms, Encoded, PartitionState, StateSpec};

/// The next cache epoch handed to a guest (`cache-epoch`): never one handed before, never 0.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The host's side of a guest `bucket`: which of the stage's buckets.
#[derive(Debug)]
pub struct BucketHandle {
    bucket: u16,
}

/// The host's side of a guest `cas`: a key and the value it had when the handle was made.
#[derive(Debug)]
pub struct CasHandle {
    bucket: u16,
    key: Arc<str>,
    seen: Option<Vec<u8>>,
}

/// An instance's access to its stage's state.
#[derive(Default)]
pub struct Kv {
    spec: Option<Arc<StateSpec>>,
    /// The partition of the call in progress.
    part: Option<Arc<PartitionState>>,
    /// Writes of the call in progress, in order, and the latest of each key among the
    /// first `indexed` of them (indexed when a read comes after writes: a stage that writes
    /// in one `set-many` at the end of its call, as the Rust SDK does, never pays for it).
    writes: Vec<(Slot, Option<Encoded>)>,
    latest: SlotMap<usize>,
    indexed: usize,
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
            self.latest.clear();
            self.indexed = 0;
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
            self.latest.clear();
            self.indexed = 0;
        }
    }

    /// The call returned: its writes join the chain run in progress, as the writes of the
    /// messages `first..=tag` (the offsets the call answered). A throw-away instance keeps
    /// them to itself until the next batch.
    pub fn end_call(&mut self, first: i64, tag: i64) {
        if self.throwaway {
            return;
        }
        self.latest.clear();
        self.indexed = 0;
        let writes = std::mem::take(&mut self.writes);
        let asked = std::mem::take(&mut self.asked);
        let Some(p) = &self.part else { return };
        let (before, after) = if !writes.is_empty() {
            p.add_call(first, tag, writes)
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

    /// Brings `latest` up to date with the call's writes.
    fn index(&mut self) {
        for (i, (slot, _)) in self.writes.iter().enumerate().skip(self.indexed) {
            self.latest.insert(slot.clone(), i);
        }
        self.indexed = self.writes.len();
    }

    fn get(&mut self, slot: SlotRef<'_>) -> Result<Option<Vec<u8>>, KvError> {
        if !self.writes.is_empty() {
            self.index();
            if let Some(&i) = self.latest.get(&slot) {
                return Ok(self.writes[i]
                    .1
                    .as_deref()
                    .map(|v| crate::state::decode(v).1.to_vec()));
            }
        }
        self.part()?
            .get(slot)
            .map_err(|e| KvError::Other(e.to_string()))
    }

    fn put(&mut self, bucket: u16, key: Arc<str>, value: Option<&[u8]>) -> Result<(), KvError> {
        if let Some(v) = value {
            self.check_size(&key, v.len())?;
        }
        self.part()?;
        self.writes
            .push(((bucket, key), value.map(|v| encode_shared(self.now, v))));
        Ok(())
    }

    /// A `set-many`'s writes, every value already checked ([`Self::check_size`]): all of them
    /// join the call's writes, or none.
    fn put_many(&mut self, writes: Vec<(Slot, Option<Encoded>)>) -> Result<(), KvError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.part()?;
        self.writes.extend(writes);
        Ok(())
    }

    /// A `write-packed` list's writes to `bucket` (`key-len:u32 value-len:u32 key value`,
    /// little-endian; a value length of [`ABSENT`], the packed formats' absent, deletes),
    /// every key UTF-8 and every value within `state.max_value`; otherwise what is wrong,
    /// and none of them.
    fn unpack(
        &self,
        bucket: u16,
        mut packed: &[u8],
    ) -> Result<Vec<(Slot, Option<Encoded>)>, KvError> {
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
        let mut writes = Vec::new();
        while !packed.is_empty() {
            let klen = word(&mut packed)? as usize;
            let vlen = word(&mut packed)?;
            let key = std::str::from_utf8(take(&mut packed, klen)?)
                .map_err(|e| KvError::Other(format!("write-packed: a key is not UTF-8: {e}")))?;
            let value = match vlen {
                ABSENT => None,
                n => {
                    self.check_size(key, n as usize)?;
                    Some(encode_shared(self.now, take(&mut packed, n as usize)?))
                }
            };
            writes.push(((bucket, Arc::<str>::from(key)), value));
        }
        Ok(writes)
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
            let writes = cx.data().kv.unpack(bucket, packed.as_le_slice(&cx));
            Ok((writes.and_then(|w| cx.data_mut().kv.put_many(w)),))
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
    let now = cx.data().kv.now;
    let mut writes = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let key = k.to_str(&*cx)?;
        let value = v.as_le_slice(&*cx);
        if let Err(e) = cx.data().kv.check_size(&key, value.len()) {
            return Ok(Err(e));
        }
        writes.push((
            (bucket, Arc::<str>::from(&*key)),
            Some(encode_shared(now, value)),
        ));
    }
    Ok(cx.data_mut().kv.put_many(writes))
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
        let writes = self.kv.unpack(bucket, &packed)?;
        self.kv.put_many(writes)
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
        self.kv.put(bucket, key.into(), Some(&value))
    }

    fn delete(&mut self, b: Resource<BucketHandle>, key: String) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.put(bucket, key.into(), None)
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
        self.kv.index();
        let kv = &self.kv;
        let (mut keys, mut next) = kv
            .part()?
            .list(bucket, cursor.as_deref())
            .map_err(|e| KvError::Other(e.to_string()))?;
        // The call's own writes since the page was read.
        let mut changed = false;
        for (slot, &i) in &kv.latest {
            if slot.0 != bucket || cursor.as_deref().is_some_and(|c| &*slot.1 <= c) {
                continue;
            }
            if next.as_deref().is_some_and(|n| &*slot.1 > n) {
                continue;
            }
            let present = kv.writes[i].1.is_some();
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
        self.kv.put(slot.0, slot.1, Some(&sum.to_le_bytes()))?;
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
            .put(slot.0, slot.1, Some(&value))
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
        let mut writes = Vec::with_capacity(key_values.len());
        for (k, v) in key_values {
            self.kv.check_size(&k, v.len())?;
            writes.push(((bucket, k.into()), Some(encode_shared(self.kv.now, &v))));
        }
        self.kv.put_many(writes)
    }

    fn delete_many(&mut self, b: Resource<BucketHandle>, keys: Vec<String>) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        for k in keys {
            self.kv.put(bucket, k.into(), None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Kv, KvError};
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
        let writes = kv(2).unpack(3, &packed).expect("parses");
        let got: Vec<(u16, &str, Option<&[u8]>)> = writes
            .iter()
            .map(|((b, k), v)| (*b, &**k, v.as_deref().map(|v| decode(v).1)))
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
        assert!(kv(2).unpack(0, &[]).expect("empty").is_empty());
    }

    #[test]
    fn a_bad_packed_list_is_refused_whole() {
        let mut good = Vec::new();
        write(&mut good, b"a", Some(b"1"));
        // Cut short anywhere: refused.
        for cut in 1..good.len() {
            let e = other(kv(10).unpack(0, &good[..cut]));
            assert!(e.contains("ends inside a write"), "cut at {cut}: {e}");
        }
        let mut bad = good.clone();
        write(&mut bad, &[0xff, 0xfe], Some(b"x"));
        assert!(other(kv(10).unpack(0, &bad)).contains("not UTF-8"));
        let mut big = good.clone();
        write(&mut big, b"k", Some(&[7; 11]));
        let e = other(kv(10).unpack(0, &big));
        assert!(
            e.contains("11 bytes") && e.contains("state.max_value"),
            "{e}"
        );
        // A huge claimed length is an error, not an allocation.
        let mut lie = Vec::new();
        lie.extend_from_slice(&1u32.to_le_bytes());
        lie.extend_from_slice(&(ABSENT - 1).to_le_bytes());
        lie.push(b'k');
        assert!(other(kv(usize::MAX).unpack(0, &lie)).contains("ends inside a write"));
    }
}
