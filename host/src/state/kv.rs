//! A stage instance's access to its state: what `wasi:keyvalue` does, without the bindings
//! (the engine links them: `engine/kv.rs`).
//!
//! An instance's [`Kv`] holds the writes of the call in progress. They reach the partition's
//! state only when the call returned ([`Kv::end_call`]): a trap, a deadline or a memory
//! trap drops the store and with it the call's writes. Reads see the call's own writes
//! first, then the partition's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weir_abi::ABSENT;

use super::log::{Slot, SlotMap, SlotRef};
use super::{encode_shared, now_ms, Encoded, PartitionState, StateSpec};
use crate::message::PartitionKey;

/// Why a state call is refused (what `wasi:keyvalue`'s `error` says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// The stage declares no such bucket, or no state at all.
    AccessDenied,
    /// Anything else, said in words.
    Other(String),
}

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
    /// The write time of the call in progress (ms since the epoch), read at its first write:
    /// one clock read per call that writes, none for the others.
    now: std::cell::Cell<Option<i64>>,
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
pub struct CallWrites {
    keys: String,
    /// Bucket, where the key is in `keys`, the encoded value.
    writes: Vec<(u16, std::ops::Range<usize>, Option<Encoded>)>,
    /// Made at the first read after writes (none: a default `CallWrites` costs nothing, so
    /// it can be taken out of the store while the guest's memory is read).
    latest: Option<SlotMap<usize>>,
    indexed: usize,
}

impl CallWrites {
    /// Adds a write of `key` in `bucket` (`None`: a delete).
    pub fn push(&mut self, bucket: u16, key: &str, value: Option<Encoded>) {
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
    pub fn all_or_none<R>(
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
        if self.spec.is_none() {
            // A stage without state has nothing to begin (issue 55: it paid a clock read
            // and the bookkeeping below on every call).
            return;
        }
        if std::mem::take(&mut self.asked) {
            // The last call was handed an epoch and did not return ([`Self::end_call`]): its
            // writes, which the guest kept, were dropped.
            self.stale_epoch();
        }
        self.part = part;
        self.now.set(None);
        if !self.throwaway {
            self.writes.clear();
        }
    }

    /// The call returned: its writes join the chain run in progress, as the writes of the
    /// messages `first..=tag` (the offsets the call answered). A throw-away instance keeps
    /// them to itself until the next batch.
    pub fn end_call(&mut self, first: i64, tag: i64) {
        if self.throwaway || self.spec.is_none() {
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
    pub fn cache_epoch(&mut self) -> (u64, u64) {
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

    /// The bucket the stage declared under this name (`open`).
    pub fn bucket(&self, name: &str) -> Result<u16, KvError> {
        self.spec()?.bucket(name).ok_or(KvError::AccessDenied)
    }

    /// The largest value one write may store (`state.max_value`; 0 without state).
    pub fn max_value(&self) -> u64 {
        self.spec.as_ref().map_or(0, |s| s.max_value as u64)
    }

    /// What the guest may keep between calls, bytes of keys and values.
    pub fn keep_bytes(&self) -> u64 {
        self.keep_bytes
    }

    fn part(&self) -> Result<&Arc<PartitionState>, KvError> {
        self.part.as_ref().ok_or_else(|| {
            KvError::Other("state is only open while a message is processed (not in init)".into())
        })
    }

    /// `Ok` while a call is in progress (state is open only then).
    pub fn in_call(&self) -> Result<(), KvError> {
        self.part().map(|_| ())
    }

    /// The call's writes, taken out (while the guest's memory is read to add to them);
    /// [`Self::put_back_writes`] returns them.
    pub fn take_writes(&mut self) -> CallWrites {
        std::mem::take(&mut self.writes)
    }

    /// Returns the writes [`Self::take_writes`] took.
    pub fn put_back_writes(&mut self, writes: CallWrites) {
        self.writes = writes;
    }

    /// The value of `key` in `bucket`: the call's own latest write, else the partition's.
    pub fn get(&mut self, bucket: u16, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let slot = SlotRef(bucket, key);
        if let Some(v) = self.writes.latest(slot) {
            return Ok(v.map(|v| crate::state::decode(v).1.to_vec()));
        }
        self.part()?
            .get(slot)
            .map_err(|e| KvError::Other(e.to_string()))
    }

    /// Writes `key` in `bucket` (`None`: deletes it) in the call's writes.
    pub fn put(&mut self, bucket: u16, key: &str, value: Option<&[u8]>) -> Result<(), KvError> {
        self.part()?;
        let value = self.encoded(key, value)?;
        self.writes.push(bucket, key, value);
        Ok(())
    }

    /// A `set-many`'s writes to `bucket`: all of them join the call's writes (every value
    /// within `state.max_value`), or none.
    pub fn put_many<'a>(
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
    pub fn encoded(&self, key: &str, value: Option<&[u8]>) -> Result<Option<Encoded>, KvError> {
        value
            .map(|v| {
                self.check_size(key, v.len())?;
                Ok(encode_shared(self.write_time(), v))
            })
            .transpose()
    }

    /// A `write-packed` list's writes to `bucket` (`key-len:u32 value-len:u32 key value`,
    /// little-endian; a value length of [`ABSENT`], the packed formats' absent, deletes)
    /// join the call's writes when every key is UTF-8 and every value within
    /// `state.max_value`; otherwise none of them does, and the answer says what is wrong.
    /// (`into`: the call's writes, taken out of `self` while the guest's memory is read.)
    pub fn unpack(&self, into: &mut CallWrites, bucket: u16, packed: &[u8]) -> Result<(), KvError> {
        into.all_or_none(|w| self.unpack_into(w, bucket, packed), Result::is_ok)
    }

    /// [`Self::unpack`], leaving the writes before a bad one in `into` (the caller keeps
    /// all or none).
    pub fn unpack_into(
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

    /// A page of `bucket`'s keys after `cursor` (`list-keys`), with the call's own writes
    /// since the page was read, and the cursor of the next page (none: the last).
    pub fn list_keys(
        &mut self,
        bucket: u16,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), KvError> {
        let (mut keys, mut next) = self
            .part()?
            .list(bucket, cursor)
            .map_err(|e| KvError::Other(e.to_string()))?;
        let mut changed = false;
        for (slot, present) in self.writes.latest_keys() {
            if slot.0 != bucket || cursor.is_some_and(|c| &*slot.1 <= c) {
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
        Ok((keys, next))
    }

    /// Adds `delta` to the number `key` holds (8 little-endian bytes; none: 0) and stores the
    /// sum, which it answers (`increment`).
    pub fn increment(&mut self, bucket: u16, key: &str, delta: i64) -> Result<i64, KvError> {
        let now = match self.get(bucket, key)? {
            None => 0,
            Some(v) => i64::from_le_bytes(v.as_slice().try_into().map_err(|_| {
                KvError::Other(format!(
                    "key {key:?} holds {} bytes, not a number (increment stores 8 little-endian bytes)",
                    v.len()
                ))
            })?),
        };
        let sum = now.wrapping_add(delta);
        self.put(bucket, key, Some(&sum.to_le_bytes()))?;
        Ok(sum)
    }

    /// The write time of the call in progress (the clock read at its first write).
    fn write_time(&self) -> i64 {
        self.now.get().unwrap_or_else(|| {
            let t = now_ms();
            self.now.set(Some(t));
            t
        })
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
