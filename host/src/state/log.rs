//! A partition's writes not yet in the store, in the order they were made, each tagged with
//! the source offset whose outcome it belongs to; and, per key, where its current value is:
//! its latest write in the log, or the store's value as last read (a cache).
//!
//! One log holds both the writes whose outcomes went out (the *kept* part) and, after them,
//! the writes of the chain run in progress (the *run*). A run that fails is rolled back
//! through each write's pointer to the key's previous write; a run that succeeds only moves
//! the boundary. So a write costs one map insert and a read one map lookup.
//!
//! A commit *settles* the writes below it: each key's last one moves to `pending` (the
//! committed values the store has not taken yet) and the rest are dropped, so the log holds
//! the writes since the last commit, not every write since the store last took them.

use std::collections::VecDeque;

use super::encoding::Encoded;

/// A bucket (its index in the stage's `state.buckets`) and a key (shared: a write's key is
/// held by the call's writes, the log, the map and its change record at once).
pub type Slot = (u16, std::sync::Arc<str>);

/// A map keyed by [`Slot`] with foldhash (randomly seeded per map: fast on short keys, and
/// keys chosen by whoever writes the input cannot be aimed at a known seed), not SipHash: the
/// state path hashes a slot at least once per read and per write.
pub type SlotMap<V> = hashbrown::HashMap<Slot, V, foldhash::fast::RandomState>;

/// A [`Slot`] borrowed for a lookup: a read needs no `Arc` of its key. It hashes as the
/// slot does (the bucket, then the key's text), so a [`SlotMap`] finds it.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlotRef<'a>(pub u16, pub &'a str);

impl<'a> SlotRef<'a> {
    /// The borrowed form of `slot`.
    pub fn of(slot: &'a Slot) -> Self {
        SlotRef(slot.0, &slot.1)
    }

    /// An owned slot with this bucket and key.
    pub fn to_slot(self) -> Slot {
        (self.0, self.1.into())
    }
}

impl hashbrown::Equivalent<Slot> for SlotRef<'_> {
    fn equivalent(&self, slot: &Slot) -> bool {
        self.0 == slot.0 && self.1 == &*slot.1
    }
}

/// No write (a sequence number no write has).
const NONE: u64 = u64::MAX;

/// Bytes a value held in memory counts for besides its key and value (its log entry or map
/// slot and the two shared allocations, roughly).
const HELD_OVERHEAD: usize = 112;

/// Bytes a value of `slot` held in memory counts for ([`Log::held_bytes`]).
fn held(slot: &Slot, value: &Option<Encoded>) -> usize {
    held_with_key(slot.1.len(), value)
}

/// [`held`] for a key of `klen` bytes.
fn held_with_key(klen: usize, value: &Option<Encoded>) -> usize {
    HELD_OVERHEAD + klen + value.as_ref().map_or(0, |v| v.len())
}

/// One write: `None` deletes. Values are stored encoded ([`super::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The first source offset of the call that made the write: the write belongs to every
    /// message of the call, so no commit may fall between `first` and `tag`.
    pub first: i64,
    /// The source offset whose outcome the write belongs to (a batch call's last offset).
    pub tag: i64,
    /// Which bucket and key.
    pub slot: Slot,
    /// The encoded value, or none for a delete.
    pub value: Option<Encoded>,
    /// Sequence numbers of the key's write before this one and after it ([`NONE`]: none in
    /// the log).
    prev: u64,
    next: u64,
}

impl Entry {
    /// A write (not yet in a log).
    pub fn new(first: i64, tag: i64, slot: Slot, value: Option<Encoded>) -> Self {
        Entry {
            first,
            tag,
            slot,
            value,
            prev: NONE,
            next: NONE,
        }
    }

    /// Whether no write of the same key follows this one before sequence number `end`.
    fn last_before(&self, end: u64) -> bool {
        self.next == NONE || self.next >= end
    }
}

/// Where a key's current value is, and the value (shared with its write: a read looks at
/// the map only).
#[derive(Debug)]
enum Latest {
    /// The write with this sequence number, in the log.
    Write(u64, Option<Encoded>),
    /// A committed write that left the log: its value, also in [`Log::pending`], not in the
    /// store yet.
    Committed(Option<Encoded>),
    /// The store's encoded value (none: absent), as read or as last flushed.
    Stored(Option<Encoded>),
}

/// What the log knows of a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// Its latest write (none: a delete).
    Written(Option<&'a [u8]>),
    /// The store's value (none: absent in the store).
    Stored(Option<&'a [u8]>),
    /// Nothing: ask the store.
    Unknown,
}

/// A partition's writes in order, and where each key's value is.
#[derive(Debug, Default)]
pub struct Log {
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`.
    base: u64,
    /// Sequence number of the chain run's first write: the writes before it are kept.
    run: u64,
    map: SlotMap<Latest>,
    /// How many values of `map` are [`Latest::Stored`].
    stored: usize,
    /// Each key's last settled write ([`Self::settle_below`]): committed, not in the store yet.
    pending: SlotMap<Option<Encoded>>,
    /// Bytes the writes, the pending values and the remembered store values count for (a
    /// value shared by a write and the map counts once).
    held: usize,
}

impl Log {
    fn at_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        self.entries.get_mut(seq.checked_sub(self.base)? as usize)
    }

    /// Appends a write to the chain run in progress.
    pub fn push(&mut self, e: Entry) {
        self.push_ref(e.first, e.tag, SlotRef::of(&e.slot), e.value);
    }

    /// Appends a write of `slot` to the chain run in progress (see [`Entry`] for `first` and
    /// `tag`). A key the log knows is shared with it (no allocation of the key); a new one
    /// is copied once.
    pub fn push_ref(&mut self, first: i64, tag: i64, slot: SlotRef<'_>, value: Option<Encoded>) {
        let seq = self.end();
        self.held += held_with_key(slot.1.len(), &value);
        let latest = Latest::Write(seq, value.clone());
        let (slot, before) = match self.map.get_key_value_mut(&slot) {
            Some((known, l)) => (known.clone(), Some(std::mem::replace(l, latest))),
            None => {
                let slot = slot.to_slot();
                self.map.insert(slot.clone(), latest);
                (slot, None)
            }
        };
        let mut e = Entry::new(first, tag, slot, value);
        e.prev = match before {
            Some(Latest::Write(p, _)) => match self.at_mut(p) {
                Some(before) => {
                    before.next = seq;
                    p
                }
                None => NONE,
            },
            Some(Latest::Stored(before)) => {
                self.stored -= 1;
                self.held -= held(&e.slot, &before);
                NONE
            }
            Some(Latest::Committed(_)) | None => NONE,
        };
        e.next = NONE;
        self.entries.push_back(e);
    }

    /// What the log knows of `slot`'s value.
    pub fn get(&self, slot: SlotRef<'_>) -> Found<'_> {
        match self.map.get(&slot) {
            Some(Latest::Write(_, v) | Latest::Committed(v)) => Found::Written(v.as_deref()),
            Some(Latest::Stored(v)) => Found::Stored(v.as_deref()),
            None => Found::Unknown,
        }
    }

    /// Remembers the store's value of `slot`, read because the log did not know it; at most
    /// `cap` such values are kept (then they are all forgotten, and the cache starts over).
    pub fn remember(&mut self, slot: SlotRef<'_>, stored: Option<Encoded>, cap: usize) {
        if self.stored >= cap {
            self.forget_stored();
        }
        if self.map.get(&slot).is_none() {
            let slot = slot.to_slot();
            self.held += held(&slot, &stored);
            self.map.insert(slot, Latest::Stored(stored));
            self.stored += 1;
        }
    }

    /// Forgets every store value remembered (the store changed under the log).
    pub fn forget_stored(&mut self) {
        let mut freed = 0;
        self.map.retain(|slot, l| match l {
            Latest::Stored(v) => {
                freed += held(slot, v);
                false
            }
            _ => true,
        });
        self.held -= freed;
        self.stored = 0;
    }

    /// The chain run's writes are kept: they join the writes before them.
    pub fn keep_run(&mut self) {
        self.run = self.end();
    }

    /// The chain run's writes from sequence number `from` on are dropped (the run's earlier
    /// ones stay; 0: all of them): each key's value is again what it was before them.
    pub fn drop_from(&mut self, from: u64) {
        let from = from.max(self.run);
        while self.end() > from {
            let e = self.entries.pop_back().expect("a write of the run");
            self.held -= held(&e.slot, &e.value);
            match self.at_mut(e.prev) {
                Some(before) => {
                    before.next = NONE;
                    let value = before.value.clone();
                    self.map.insert(e.slot, Latest::Write(e.prev, value));
                }
                // The key's write before is settled (its value is pending) or in the store.
                None => match self.pending.get(&SlotRef::of(&e.slot)) {
                    Some(v) => {
                        let v = v.clone();
                        self.map.insert(e.slot, Latest::Committed(v));
                    }
                    None => {
                        self.map.remove(&SlotRef::of(&e.slot));
                    }
                },
            }
        }
    }

    /// Whether the chain run in progress wrote nothing.
    pub fn run_is_empty(&self) -> bool {
        self.end() == self.run
    }

    /// Each key's last write in the chain run in progress, in the order they were made.
    #[cfg(test)]
    pub fn run_latest(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .range((self.run - self.base) as usize..)
            .filter(|e| e.next == NONE)
    }

    /// The kept writes.
    fn kept(&self) -> std::collections::vec_deque::Iter<'_, Entry> {
        self.entries.range(..(self.run - self.base) as usize)
    }

    /// The offset to commit instead of `next` so that no call is split: the first offset of
    /// the earliest call with a kept write that answered messages on both sides of `next`
    /// (`next` itself when there is none). Tags never decrease, so those calls come right
    /// after the writes tagged below `next`.
    pub fn commit_point(&self, next: i64) -> i64 {
        let kept = (self.run - self.base) as usize;
        // Tags never decrease, over the run's writes too.
        let at = self.entries.partition_point(|e| e.tag < next).min(kept);
        self.entries
            .range(at..kept)
            .take_while(|e| e.first < next)
            .map(|e| e.first)
            .min()
            .map_or(next, |f| f.min(next))
    }

    /// The kept writes from sequence number `from` on (the log's start when those left)
    /// tagged below `next`, each key's last among them, in the order they were made; and the
    /// sequence number after them.
    pub fn changes_since(&self, from: u64, next: i64) -> (Vec<&Entry>, u64) {
        let from = from.max(self.base);
        let n = self
            .kept()
            .skip((from - self.base) as usize)
            .take_while(|e| e.tag < next)
            .count();
        let end = from + n as u64;
        let last = self
            .entries
            .range((from - self.base) as usize..(end - self.base) as usize)
            .filter(|e| e.last_before(end))
            .collect();
        (last, end)
    }

    /// The kept writes tagged below `next` (tags never decrease: a commit at `next`) leave
    /// the log: each key's last among them becomes its pending value, replacing the one
    /// before, and a read of a key whose latest write that was finds it there.
    pub fn settle_below(&mut self, next: i64) {
        let n = self.kept().take_while(|e| e.tag < next).count();
        if n == 0 {
            return;
        }
        let Log {
            entries,
            base,
            map,
            pending,
            held: bytes,
            ..
        } = self;
        let end = *base + n as u64;
        for (seq, e) in (*base..).zip(entries.drain(..n)) {
            if !e.last_before(end) {
                *bytes -= held(&e.slot, &e.value);
                continue;
            }
            if let Some(l) = map.get_mut(&SlotRef::of(&e.slot)) {
                if matches!(l, Latest::Write(s, _) if *s == seq) {
                    *l = Latest::Committed(e.value.clone());
                }
            }
            // (The write's bytes are the pending value's now.)
            let klen = e.slot.1.len();
            if let Some(before) = pending.insert(e.slot, e.value) {
                *bytes -= held_with_key(klen, &before);
            }
        }
        *base = end;
    }

    /// Settles the kept writes tagged below `next` ([`Self::settle_below`]) and hands every
    /// pending value to `apply`, sorted by bucket and key (the store takes them). When it
    /// succeeds they are no longer pending, and the map remembers them as the store's (while
    /// it holds fewer than `cap`; past that a key is forgotten and read from the store
    /// again); when it fails, they stay pending, for the next drain.
    pub fn drain_below<E>(
        &mut self,
        next: i64,
        cap: usize,
        apply: impl FnOnce(&[(&Slot, Option<&[u8]>)]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.settle_below(next);
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut changes: Vec<(Slot, Option<Encoded>)> = self.pending.drain().collect();
        changes.sort_unstable_by(|a, b| SlotRef::of(&a.0).cmp(&SlotRef::of(&b.0)));
        let view: Vec<(&Slot, Option<&[u8]>)> = changes
            .iter()
            .map(|(slot, v)| (slot, v.as_deref()))
            .collect();
        if let Err(e) = apply(&view) {
            self.pending.extend(changes);
            return Err(e);
        }
        for (slot, v) in changes {
            let at = SlotRef::of(&slot);
            let Some(l) = self
                .map
                .get_mut(&at)
                .filter(|l| matches!(l, Latest::Committed(_)))
            else {
                // A later write is the key's value.
                self.held -= held(&slot, &v);
                continue;
            };
            if self.stored < cap {
                // (Its bytes are the remembered value's now.)
                *l = Latest::Stored(v);
                self.stored += 1;
            } else {
                self.held -= held(&slot, &v);
                self.map.remove(&at);
            }
        }
        Ok(())
    }

    /// The sequence number of the oldest write still in the log (every write ever pushed
    /// counts).
    pub fn start(&self) -> u64 {
        self.base
    }

    /// The sequence number the next write will get.
    pub fn end(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of writes (kept and of the run).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Number of settled writes the store has not taken.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Bytes of the writes, the pending values and the remembered store values held (keys
    /// and values, and 112 bytes each: an estimate).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// [`Self::held_bytes`] counted anew.
    #[cfg(test)]
    fn recount(&self) -> usize {
        let writes: usize = self.entries.iter().map(|e| held(&e.slot, &e.value)).sum();
        let pending: usize = self.pending.iter().map(|(s, v)| held(s, v)).sum();
        let stored: usize = self
            .map
            .iter()
            .map(|(s, l)| match l {
                Latest::Stored(v) => held(s, v),
                _ => 0,
            })
            .sum();
        writes + pending + stored
    }

    /// Number of store values remembered.
    pub fn remembered(&self) -> usize {
        self.stored
    }

    /// Keys of `bucket` with their latest write (kept or of the run), for listing.
    pub fn latest_of(&self, bucket: u16) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        self.map
            .iter()
            .filter(move |(s, _)| s.0 == bucket)
            .filter_map(|(s, l)| match l {
                Latest::Write(_, v) | Latest::Committed(v) => Some((&*s.1, v.as_deref())),
                Latest::Stored(_) => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: i64, k: &str, v: Option<&str>) -> Entry {
        Entry::new(tag, tag, (0, k.into()), v.map(|v| v.as_bytes().into()))
    }

    fn written(v: &str) -> Found<'_> {
        Found::Written(Some(v.as_bytes()))
    }

    /// Drains `l` below `next` into a store that takes everything: what it was given.
    fn drain(l: &mut Log, next: i64) -> Vec<(String, Option<Vec<u8>>)> {
        let mut applied = Vec::new();
        l.drain_below(next, 10, |c| {
            applied = c
                .iter()
                .map(|(s, v)| (s.1.to_string(), v.map(<[u8]>::to_vec)))
                .collect();
            Ok::<_, ()>(())
        })
        .unwrap();
        applied
    }

    fn kept(writes: &[(i64, &str, Option<&str>)]) -> Log {
        let mut l = Log::default();
        for &(tag, k, v) in writes {
            l.push(e(tag, k, v));
        }
        l.keep_run();
        l
    }

    #[test]
    fn the_bytes_held_follow_every_operation() {
        // A seeded walk over every operation that adds or drops a value: after each, the
        // count kept as they happen equals the count made anew.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut l = Log::default();
        let mut tag = 0;
        let mut marks = Vec::new();
        for step in 0..20_000 {
            let key = format!("k{}", next(40));
            match next(12) {
                0..=4 => {
                    let value = match next(4) {
                        0 => None,
                        n => Some(Encoded::from(vec![7u8; (n * 5) as usize])),
                    };
                    tag += next(2) as i64;
                    l.push(Entry::new(tag, tag, (0, key.into()), value));
                }
                5 => l.keep_run(),
                6 => marks.push(l.end()),
                7 => l.drop_from(marks.pop().unwrap_or(0)),
                8 => l.settle_below(tag - next(3) as i64),
                9 => {
                    let fails = next(3) == 0;
                    let _ = l.drain_below(tag - next(3) as i64, 8, |_| {
                        if fails {
                            Err(())
                        } else {
                            Ok(())
                        }
                    });
                }
                10 => l.remember(SlotRef(0, &key), Some(Encoded::from(&b"stored"[..])), 8),
                _ => l.forget_stored(),
            }
            assert_eq!(l.held_bytes(), l.recount(), "after step {step}");
        }
        assert!(l.held_bytes() > 0);
    }

    #[test]
    fn a_borrowed_slot_finds_what_its_owned_slot_was_stored_under() {
        let mut m: SlotMap<u32> = SlotMap::default();
        for (i, k) in ["a", "b", "", "a longer key with ünïcode"]
            .iter()
            .enumerate()
        {
            m.insert((i as u16 % 2, (*k).into()), i as u32);
        }
        assert_eq!(m.get(&SlotRef(0, "a")), Some(&0));
        assert_eq!(m.get(&SlotRef(1, "b")), Some(&1));
        assert_eq!(m.get(&SlotRef(0, "")), Some(&2));
        assert_eq!(m.get(&SlotRef(1, "a longer key with ünïcode")), Some(&3));
        assert_eq!(m.get(&SlotRef(1, "a")), None, "same key, other bucket");
        assert_eq!(m.get(&SlotRef(0, "b")), None);
        assert_eq!(SlotRef(1, "b").to_slot(), (1, "b".into()));
    }

    #[test]
    fn a_commit_point_never_splits_a_call() {
        let mut l = Log::default();
        let call =
            |first, tag, k: &str| Entry::new(first, tag, (0, k.into()), Some(b"v"[..].into()));
        l.push(call(0, 9, "a"));
        l.push(call(10, 19, "a"));
        l.push(call(10, 19, "b"));
        l.push(call(20, 29, "c"));
        assert_eq!(l.commit_point(25), 25, "the run's writes are not kept yet");
        l.keep_run();
        l.push(call(30, 39, "d"));
        assert_eq!(l.commit_point(10), 10, "between two calls");
        assert_eq!(l.commit_point(15), 10, "inside the second call");
        assert_eq!(l.commit_point(20), 20);
        assert_eq!(
            l.commit_point(29),
            20,
            "the last message of a call is not done yet"
        );
        assert_eq!(l.commit_point(30), 30);
        assert_eq!(l.commit_point(35), 35, "the run in progress does not count");
        assert_eq!(l.commit_point(5), 0, "inside the first call");
        l.drain_below(20, 10, |_| Ok::<_, ()>(())).unwrap();
        assert_eq!(l.commit_point(25), 20, "after a drain");
    }

    #[test]
    fn writes_dropped_from_a_mark_leave_the_runs_earlier_writes() {
        let mut l = kept(&[(1, "a", Some("1"))]);
        l.push(e(2, "a", Some("2")));
        l.push(e(2, "b", Some("2")));
        let mark = l.end();
        l.push(e(3, "a", Some("3")));
        l.push(e(3, "c", Some("3")));
        l.drop_from(mark);
        assert_eq!(
            l.get(SlotRef(0, "a")),
            written("2"),
            "the run's earlier write"
        );
        assert_eq!(l.get(SlotRef(0, "b")), written("2"));
        assert_eq!(l.get(SlotRef(0, "c")), Found::Unknown);
        assert_eq!(
            l.run_latest()
                .map(|e| (e.tag, &*e.slot.1))
                .collect::<Vec<_>>(),
            [(2, "a"), (2, "b")]
        );
        l.drop_from(0);
        assert_eq!(
            l.get(SlotRef(0, "a")),
            written("1"),
            "never past the kept writes"
        );
        assert!(l.run_is_empty());
    }

    #[test]
    fn a_dropped_run_gives_every_key_its_value_from_before_it() {
        let mut l = kept(&[(1, "a", Some("1")), (2, "b", Some("2"))]);
        l.remember(SlotRef(0, "s"), Some(b"stored"[..].into()), 10);
        l.push(e(3, "a", Some("3")));
        l.push(e(3, "a", None));
        l.push(e(4, "c", Some("4")));
        l.push(e(4, "s", Some("5")));
        assert_eq!(
            l.get(SlotRef(0, "a")),
            Found::Written(None),
            "read your writes"
        );
        assert_eq!(l.get(SlotRef(0, "c")), written("4"));
        assert_eq!(l.get(SlotRef(0, "s")), written("5"));
        assert_eq!(
            l.run_latest()
                .map(|e| (e.tag, &*e.slot.1))
                .collect::<Vec<_>>(),
            [(3, "a"), (4, "c"), (4, "s")],
            "each key's last write of the run, in order"
        );
        l.drop_from(0);
        assert!(l.run_is_empty());
        assert_eq!(l.get(SlotRef(0, "a")), written("1"));
        assert_eq!(l.get(SlotRef(0, "b")), written("2"));
        assert_eq!(l.get(SlotRef(0, "c")), Found::Unknown);
        assert_eq!(
            l.get(SlotRef(0, "s")),
            Found::Unknown,
            "a stored value a dropped write replaced is read again from the store"
        );
        assert_eq!(l.len(), 2);
        // The kept writes still chain: a new run and a drop again.
        l.push(e(5, "a", Some("6")));
        l.keep_run();
        l.push(e(6, "a", Some("7")));
        l.drop_from(0);
        assert_eq!(l.get(SlotRef(0, "a")), written("6"));
        let (changes, _) = l.changes_since(0, 100);
        let tags: Vec<i64> = changes.iter().map(|e| e.tag).collect();
        assert_eq!(tags, [2, 5], "a's write at 1 was replaced at 5");
    }

    #[test]
    fn changes_since_give_each_keys_last_write_in_range_in_order() {
        let mut l = kept(&[
            (1, "a", Some("1")),
            (2, "b", Some("2")),
            (3, "a", None),
            (4, "c", Some("4")),
            (5, "b", Some("5")),
        ]);
        l.push(e(6, "c", Some("run")));
        let keys = |c: &[&Entry]| {
            c.iter()
                .map(|e| (e.tag, e.slot.1.to_string()))
                .collect::<Vec<_>>()
        };
        let (c, end) = l.changes_since(0, 5);
        assert_eq!(
            keys(&c),
            [(2, "b".into()), (3, "a".into()), (4, "c".into())]
        );
        assert_eq!(end, 4);
        let (c, end) = l.changes_since(end, 100);
        assert_eq!(keys(&c), [(5, "b".into())], "not the run's write of c");
        assert_eq!(end, 5);
        l.keep_run();
        l.drain_below(3, 10, |_| Ok::<_, ()>(())).unwrap();
        assert_eq!(l.start(), 2);
        let (c, end) = l.changes_since(0, 100);
        assert_eq!(
            keys(&c),
            [(3, "a".into()), (5, "b".into()), (6, "c".into())],
            "a start that left the log reads from the log's start"
        );
        assert_eq!(end, 6);
    }

    #[test]
    fn a_drain_applies_each_keys_last_write_and_remembers_it_as_stored() {
        let mut l = kept(&[
            (1, "a", Some("1")),
            (2, "b", Some("2")),
            (3, "a", Some("3")),
            (4, "b", Some("4")),
        ]);
        let v = |k: &str, v: &str| (k.to_string(), Some(v.as_bytes().to_vec()));
        assert_eq!(drain(&mut l, 4), [v("a", "3"), v("b", "2")], "by key");
        assert_eq!(l.get(SlotRef(0, "a")), Found::Stored(Some(b"3")));
        assert_eq!(
            l.get(SlotRef(0, "b")),
            written("4"),
            "its later write stays"
        );
        assert_eq!(l.remembered(), 1);
        assert_eq!(l.len(), 1);
        l.push(e(5, "a", Some("5")));
        assert_eq!(l.remembered(), 0, "a write replaces the stored value");
        l.drop_from(0);
        assert_eq!(l.get(SlotRef(0, "a")), Found::Unknown);
        // A store that fails: the values stay pending, reads see them, the next drain
        // applies them.
        l.push(e(6, "c", Some("6")));
        l.keep_run();
        assert_eq!(
            l.drain_below(100, 10, |_| Err("disk full")),
            Err("disk full")
        );
        assert_eq!(l.get(SlotRef(0, "b")), written("4"));
        assert_eq!(l.get(SlotRef(0, "c")), written("6"));
        assert!(l.is_empty());
        assert_eq!(l.pending(), 2);
        assert_eq!(drain(&mut l, 100), [v("b", "4"), v("c", "6")]);
        assert_eq!(l.pending(), 0);
        assert_eq!(l.get(SlotRef(0, "c")), Found::Stored(Some(b"6")));
    }

    #[test]
    fn a_commit_settles_each_keys_last_write_below_it_and_reads_and_rollbacks_see_it() {
        let mut l = kept(&[
            (1, "a", Some("1")),
            (2, "a", Some("2")),
            (2, "b", Some("2")),
            (3, "a", Some("3")),
        ]);
        l.remember(SlotRef(0, "s"), Some(b"stored"[..].into()), 10);
        l.settle_below(3);
        assert_eq!(l.len(), 1, "only the write at 3 is left in the log");
        assert_eq!(l.pending(), 2, "a's write at 2 and b's");
        assert_eq!(l.get(SlotRef(0, "a")), written("3"), "its later write");
        assert_eq!(
            l.get(SlotRef(0, "b")),
            written("2"),
            "settled, not stored yet"
        );
        l.forget_stored();
        assert_eq!(l.get(SlotRef(0, "s")), Found::Unknown);
        assert_eq!(
            l.get(SlotRef(0, "b")),
            written("2"),
            "a settled value is not a cached one: it is not forgotten"
        );
        let mut listed: Vec<_> = l.latest_of(0).collect();
        listed.sort();
        assert_eq!(
            listed,
            [("a", Some(&b"3"[..])), ("b", Some(&b"2"[..]))],
            "settled values are listed (the store has not got them)"
        );
        // A run that writes b and is dropped: b is its settled value again.
        l.push(e(4, "b", None));
        assert_eq!(l.get(SlotRef(0, "b")), Found::Written(None));
        l.drop_from(0);
        assert_eq!(l.get(SlotRef(0, "b")), written("2"));
        // A commit past a's write at 3, then a's run write dropped: a is 3 again.
        l.settle_below(4);
        assert!(l.is_empty());
        l.push(e(5, "a", Some("5")));
        l.drop_from(0);
        assert_eq!(l.get(SlotRef(0, "a")), written("3"));
        let v = |k: &str, v: &str| (k.to_string(), Some(v.as_bytes().to_vec()));
        assert_eq!(
            drain(&mut l, 100),
            [v("a", "3"), v("b", "2")],
            "each key once, its last value"
        );
        assert_eq!(l.get(SlotRef(0, "a")), Found::Stored(Some(b"3")));
    }

    #[test]
    fn flushed_values_are_remembered_only_up_to_the_bound() {
        let mut l = kept(&[
            (1, "a", Some("1")),
            (2, "b", Some("2")),
            (3, "c", Some("3")),
        ]);
        l.remember(SlotRef(0, "read"), None, 10);
        l.drain_below(100, 2, |_| Ok::<_, ()>(())).unwrap();
        assert_eq!(
            l.remembered(),
            2,
            "a stage that only writes does not grow the map"
        );
        assert_eq!(l.get(SlotRef(0, "a")), Found::Stored(Some(b"1")));
        assert_eq!(
            l.get(SlotRef(0, "b")),
            Found::Unknown,
            "past the bound: the store"
        );
        assert_eq!(l.get(SlotRef(0, "c")), Found::Unknown);
        assert!(l.is_empty());
    }

    #[test]
    fn remembered_store_values_are_bounded_and_writes_stay() {
        let mut l = kept(&[(1, "w", Some("1"))]);
        for i in 0..3 {
            l.remember(SlotRef(0, &format!("k{i}")), None, 3);
        }
        assert_eq!(l.get(SlotRef(0, "k0")), Found::Stored(None));
        assert_eq!(l.remembered(), 3);
        l.remember(SlotRef(0, "k3"), Some(b"x"[..].into()), 3);
        assert_eq!(l.remembered(), 1, "the cache started over");
        assert_eq!(l.get(SlotRef(0, "k0")), Found::Unknown);
        assert_eq!(l.get(SlotRef(0, "k3")), Found::Stored(Some(b"x")));
        assert_eq!(
            l.get(SlotRef(0, "w")),
            written("1"),
            "a write is never forgotten"
        );
        let mut listed: Vec<_> = l.latest_of(0).collect();
        listed.sort();
        assert_eq!(
            listed,
            [("w", Some(&b"1"[..]))],
            "stored values are not listed"
        );
    }
}
