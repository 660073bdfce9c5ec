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
