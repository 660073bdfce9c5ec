//! Writes not yet in the store, in the order they were made, each tagged with the source
//! offset whose outcome they belong to, and the latest value of each key among them.

use std::collections::VecDeque;

/// A bucket (its index in the stage's `state.buckets`) and a key (shared: a write's key is
/// held by the call's writes, the logs, the read cache and its change record at once).
pub type Slot = (u16, std::sync::Arc<str>);

/// A map keyed by [`Slot`] with foldhash (randomly seeded per map: fast on short keys, and
/// keys chosen by whoever writes the input cannot be aimed at a known seed), not SipHash: the
/// state path hashes a slot several times per message.
pub type SlotMap<V> = hashbrown::HashMap<Slot, V, foldhash::fast::RandomState>;

/// A [`Slot`] borrowed for a lookup: a read needs no `Arc` of its key. It hashes as the
/// slot does (the bucket, then the key's text), so a [`SlotMap`] finds it.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
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
    pub value: Option<Vec<u8>>,
}

/// Writes in order, with the latest per key.
#[derive(Debug, Default)]
pub struct Log {
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`.
    base: u64,
    latest: SlotMap<u64>,
}

impl Log {
    /// Appends a write.
    pub fn push(&mut self, e: Entry) {
        let seq = self.base + self.entries.len() as u64;
        self.latest.insert(e.slot.clone(), seq);
        self.entries.push_back(e);
    }

    /// The latest write of `slot` still in the log: `Some(None)` is a delete.
    pub fn get(&self, slot: SlotRef<'_>) -> Option<Option<&[u8]>> {
        let seq = *self.latest.get(&slot)?;
        let e = self.entries.get(seq.checked_sub(self.base)? as usize)?;
        Some(e.value.as_deref())
    }

    /// The offset to commit instead of `next` so that no call is split: the first offset of
    /// the earliest call with a write that answered messages on both sides of `next`
    /// (`next` itself when there is none). Tags never decrease, so those calls come right
    /// after the writes tagged below `next`.
    pub fn commit_point(&self, next: i64) -> i64 {
        let at = self.entries.partition_point(|e| e.tag < next);
        self.entries
            .range(at..)
            .take_while(|e| e.first < next)
            .map(|e| e.first)
            .min()
            .map_or(next, |f| f.min(next))
    }

    /// Removes and returns the writes tagged below `next`, oldest first (tags never decrease).
    pub fn drain_below(&mut self, next: i64) -> Vec<Entry> {
        let n = self.entries.iter().take_while(|e| e.tag < next).count();
        let out: Vec<Entry> = self.entries.drain(..n).collect();
        self.base += n as u64;
        if !out.is_empty() {
            let base = self.base;
            self.latest.retain(|_, s| *s >= base);
        }
        out
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.base += self.entries.len() as u64;
        self.entries.clear();
        self.latest.clear();
    }

    /// Moves every write of `other` to the end of this log.
    pub fn append(&mut self, other: &mut Log) {
        for e in other.entries.drain(..) {
            self.push(e);
        }
        other.clear();
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

    /// The writes from sequence number `seq` on (those still in the log), oldest first.
    pub fn since(&self, seq: u64) -> impl Iterator<Item = &Entry> {
        self.entries.range(seq.saturating_sub(self.base) as usize..)
    }

    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The writes, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Each key's last write, in the order they were made (the writes a later one of the
    /// same key replaced are left out).
    pub fn latest_writes(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .enumerate()
            .filter(move |(i, e)| self.latest.get(&e.slot).copied() == Some(self.base + *i as u64))
            .map(|(_, e)| e)
    }

    /// Keys of `bucket` with their latest write, for listing.
    pub fn latest_of(&self, bucket: u16) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        self.latest
            .iter()
            .filter(move |(s, _)| s.0 == bucket)
            .filter_map(|(s, &seq)| {
                let e = self.entries.get(seq.checked_sub(self.base)? as usize)?;
                Some((&*s.1, e.value.as_deref()))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: i64, k: &str, v: Option<&str>) -> Entry {
        Entry {
            first: tag,
            tag,
            slot: (0, k.into()),
            value: v.map(|v| v.as_bytes().to_vec()),
        }
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
        let call = |first, tag, k: &str| Entry {
            first,
            tag,
            slot: (0, k.into()),
            value: Some(b"v".to_vec()),
        };
        l.push(call(0, 9, "a"));
        l.push(call(10, 19, "a"));
        l.push(call(10, 19, "b"));
        l.push(call(20, 29, "c"));
        assert_eq!(l.commit_point(10), 10, "between two calls");
        assert_eq!(l.commit_point(15), 10, "inside the second call");
        assert_eq!(l.commit_point(20), 20);
        assert_eq!(
            l.commit_point(29),
            20,
            "the last message of a call is not done yet"
        );
        assert_eq!(l.commit_point(30), 30);
        assert_eq!(l.commit_point(5), 0, "inside the first call");
        l.drain_below(20);
        assert_eq!(l.commit_point(25), 20, "after a drain");
    }

    #[test]
    fn sequence_numbers_count_every_write_across_drains() {
        let mut l = Log::default();
        for (i, k) in ["a", "b", "a", "c"].iter().enumerate() {
            l.push(e(i as i64, k, Some("v")));
        }
        assert_eq!((l.start(), l.end()), (0, 4));
        let tags = |l: &Log, seq| l.since(seq).map(|e| e.tag).collect::<Vec<_>>();
        assert_eq!(tags(&l, 2), [2, 3]);
        l.drain_below(2);
        assert_eq!((l.start(), l.end()), (2, 4), "a drain moves the start only");
        assert_eq!(tags(&l, 3), [3]);
        assert_eq!(
            tags(&l, 0),
            [2, 3],
            "a sequence number drained is the start"
        );
        assert_eq!(tags(&l, 4), Vec::<i64>::new());
    }

    #[test]
    fn latest_writes_leave_out_the_replaced_ones_and_keep_the_order() {
        let mut l = Log::default();
        l.push(e(1, "a", Some("1")));
        l.push(e(2, "b", Some("2")));
        l.push(e(3, "a", None));
        l.push(e(4, "c", Some("4")));
        let keys: Vec<(i64, &str)> = l.latest_writes().map(|e| (e.tag, &*e.slot.1)).collect();
        assert_eq!(keys, [(2, "b"), (3, "a"), (4, "c")]);
    }

    #[test]
    fn latest_wins_and_draining_keeps_later_writes_of_the_same_key() {
        let mut l = Log::default();
        l.push(e(1, "a", Some("1")));
        l.push(e(2, "b", Some("2")));
        l.push(e(3, "a", Some("3")));
        assert_eq!(l.get(SlotRef(0, "a")), Some(Some(&b"3"[..])));
        let drained = l.drain_below(3);
        assert_eq!(drained, vec![e(1, "a", Some("1")), e(2, "b", Some("2"))]);
        assert_eq!(
            l.get(SlotRef(0, "a")),
            Some(Some(&b"3"[..])),
            "a's later write stays"
        );
        assert_eq!(l.get(SlotRef(0, "b")), None, "b's write left the log");
        l.push(e(4, "b", None));
        assert_eq!(
            l.get(SlotRef(0, "b")),
            Some(None),
            "a delete reads as a delete"
        );
        let mut other = Log::default();
        other.push(e(5, "c", Some("5")));
        l.append(&mut other);
        assert!(other.is_empty());
        assert_eq!(l.len(), 3);
        l.clear();
        assert_eq!(l.get(SlotRef(0, "a")), None);
    }
}
