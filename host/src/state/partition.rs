//! One stage's state for one source partition: the log of writes not yet in the store, the
//! store's checkpoint, restores from the changelog, commits, flushes and the TTL sweep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::changelog::{ChangeRecord, Changelog};
use super::log::{Entry, Found, Log, SlotRef};
use super::{
    decode, now_ms, store, Checkpoint, Encoded, Restored, StageStore, StateSpec, StoreError, PAGE,
};
use crate::message::PartitionKey;

/// Most store values remembered per partition before the cache starts over.
const CACHE_ENTRIES: usize = 100_000;

/// The next [`PartitionState::uid`].
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// Changelog records applied to a store per transaction while restoring.
const RESTORE_CHUNK: usize = 10_000;
/// Keys a TTL sweep looks at per bucket and chain run.
const EXPIRE_PAGE: usize = 256;
/// A store backed by a changelog takes the committed writes at most this often (each such
/// flush synced: a restart after `kill -9` reads about this much of the changelog again; a
/// flush every second cost 14 % more per get + set at 100,000 keys, issue 50)...
const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// ... or when this many writes wait in memory (committed or not).
const FLUSH_WRITES: usize = 200_000;

/// One stage's state for one source partition.
pub struct PartitionState {
    /// The partition.
    pub key: PartitionKey,
    /// The assignment generation that opened it (a detached state: the generation of the run
    /// that made it).
    pub(super) generation: u64,
    /// This state's number among all the process opened (a partition assigned again, or a
    /// detached state, gets a new one).
    uid: u64,
    spec: Arc<StateSpec>,
    store: Arc<StageStore>,
    inner: Mutex<Inner>,
    /// The stage's bytes held in memory over its partitions ([`StageBuckets::held_bytes`]):
    /// each release of `inner` adds what its log's changed by.
    held: Arc<AtomicI64>,
}

/// `inner`, locked: when released, the stage's count of bytes held moves by what the log's
/// changed by.
struct Locked<'a> {
    g: MutexGuard<'a, Inner>,
    held: &'a AtomicI64,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.g
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.g
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let now = self.g.log.held_bytes();
        if now != self.g.reported {
            self.held
                .fetch_add(now as i64 - self.g.reported as i64, Ordering::Relaxed);
            self.g.reported = now;
        }
    }
}

#[derive(Default)]
struct Inner {
    /// Writes not yet in the store (kept, then the chain run's), and store values read.
    log: Log,
    /// Exactly-once: the kept writes from this sequence number on are not in the changelog
    /// yet.
    unsent: u64,
    checkpoint: Checkpoint,
    /// The TTL sweep: per bucket, the last key looked at (none: the sweep is at the start),
    /// and when the next sweep may start.
    expire_after: BTreeMap<u16, String>,
    next_sweep: Option<std::time::Instant>,
    /// When the store last took the committed writes (none: not yet).
    flushed: Option<std::time::Instant>,
    /// A commit came since the store last took the committed writes.
    dirty: bool,
    /// Counts the changes to the values a read sees ([`PartitionState::version`]).
    version: u64,
    /// The log's bytes held as last added to the stage's count ([`Locked`]).
    reported: usize,
}

impl Drop for PartitionState {
    /// The process ends (or the partition left): what was committed goes to the store.
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        self.held
            .fetch_sub(std::mem::take(&mut g.reported) as i64, Ordering::Relaxed);
        if !g.dirty {
            return;
        }
        let mut g = std::mem::take(g);
        if let Err(e) = self.flush_locked(&mut g) {
            tracing::warn!(stage = %self.spec.stage, partition = %self.key,
                "state store: the committed writes stay in the changelog only: {e}");
        }
    }
}

impl PartitionState {
    /// The state of stage `spec` for partition `key` in assignment `generation`, from the
    /// store's checkpoint; its bytes held in memory count in `held` (the stage's).
    pub(super) fn open(
        key: &PartitionKey,
        generation: u64,
        spec: &Arc<StateSpec>,
        store: &Arc<StageStore>,
        held: &Arc<AtomicI64>,
    ) -> Result<Self, StoreError> {
        let checkpoint = store.checkpoint(key)?;
        Ok(PartitionState {
            key: key.clone(),
            generation,
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            spec: spec.clone(),
            store: store.clone(),
            inner: Mutex::new(Inner {
                checkpoint,
                // The first commits need not reach the store at once either.
                flushed: Some(std::time::Instant::now()),
                ..Inner::default()
            }),
            held: held.clone(),
        })
    }

    fn lock(&self) -> Locked<'_> {
        Locked {
            g: self.inner.lock().unwrap_or_else(|p| p.into_inner()),
            held: &self.held,
        }
    }

    /// The stage's spec.
    pub fn spec(&self) -> &StateSpec {
        &self.spec
    }

    /// This state's number among all the process opened: a partition assigned again (or a
    /// run's detached state) has another.
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// A number that changes whenever a value a read sees may have changed: a call's writes
    /// ([`Self::add_call`] says which number they made), a run rolled back, a TTL sweep's
    /// deletes, a restore, a store that lost a flush. While it stays the same, every value
    /// is what the last read of it (or the last write) said. (An instance keeps reads
    /// between its calls by it: [`super::kv`].)
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// The value of `slot` (the stage's bytes), as the next message sees it.
    pub fn get(&self, slot: SlotRef<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let mut g = self.lock();
        if let Found::Written(v) | Found::Stored(v) = g.log.get(slot) {
            return Ok(v.and_then(|s| self.live(s)).map(<[u8]>::to_vec));
        }
        let v = self
            .store
            .get(&self.key, &self.spec.buckets[slot.0 as usize], slot.1)?;
        let out = v.as_deref().and_then(|s| self.live(s)).map(<[u8]>::to_vec);
        g.log.remember(slot, v.map(Encoded::from), CACHE_ENTRIES);
        Ok(out)
    }

    /// Deletes, tagged `tag`, of the values past the stage's TTL among the next keys of the
    /// store's sweep (`EXPIRE_PAGE` per bucket); returns how many. A sweep goes over every
    /// key a page per chain run, then waits a quarter of the TTL (1 s to 60 s) before the
    /// next. The deletes travel as the stage's writes do (changelog tombstones, the store at
    /// the commit): a read hides an expired value already, so whether they are kept or
    /// dropped with a failed run changes nothing a stage sees; they only free the space.
    pub fn expire(&self, tag: i64) -> Result<usize, StoreError> {
        let Some(ttl) = self.spec.ttl else {
            return Ok(0);
        };
        let mut g = self.lock();
        let now = std::time::Instant::now();
        if g.expire_after.is_empty() && g.next_sweep.is_some_and(|t| now < t) {
            return Ok(0);
        }
        let cutoff = now_ms().saturating_sub(ttl.as_millis() as i64);
        let mut expired = 0;
        for (b, bucket) in self.spec.buckets.iter().enumerate() {
            let b = b as u16;
            let after = g.expire_after.remove(&b);
            let page = self
                .store
                .scan(&self.key, bucket, after.as_deref(), EXPIRE_PAGE)?;
            if page.len() == EXPIRE_PAGE {
                let last = page.last().map(|(k, _)| k.clone()).expect("a full page");
                g.expire_after.insert(b, last);
            }
            for (key, stored) in page {
                let slot = (b, Arc::<str>::from(key));
                // A newer write in the logs is what a read sees.
                let at = SlotRef::of(&slot);
                let written = match g.log.get(at) {
                    Found::Written(Some(v)) => decode(v).0,
                    Found::Written(None) => continue,
                    Found::Stored(_) | Found::Unknown => decode(&stored).0,
                };
                if written < cutoff {
                    g.log.push(Entry::new(tag, tag, slot, None));
                    expired += 1;
                }
            }
        }
        if g.expire_after.is_empty() {
            let wait = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
            g.next_sweep = Some(now + wait);
        }
        if expired > 0 {
            g.version += 1;
        }
        Ok(expired)
    }

    /// The stage's bytes of an encoded value, unless it outlived the TTL.
    fn live<'a>(&self, stored: &'a [u8]) -> Option<&'a [u8]> {
        let (at, v) = decode(stored);
        match self.spec.ttl {
            Some(ttl) if now_ms().saturating_sub(at) > ttl.as_millis() as i64 => None,
            _ => Some(v),
        }
    }

    /// One page of `bucket`'s keys after `cursor`, in byte order, and the next page's cursor.
    pub fn list(
        &self,
        bucket: u16,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let g = self.lock();
        let from_store = self.store.scan(
            &self.key,
            &self.spec.buckets[bucket as usize],
            cursor,
            PAGE + 1,
        )?;
        // Past the last store key scanned the store may hold keys not read: stop there.
        let bound = (from_store.len() > PAGE).then(|| from_store[PAGE].0.clone());
        let mut merged: BTreeMap<String, bool> = from_store
            .into_iter()
            .map(|(k, v)| {
                let live = self.live(&v).is_some();
                (k, live)
            })
            .collect();
        // The log's latest writes win over the store.
        for (k, v) in g.log.latest_of(bucket) {
            if cursor.is_none_or(|c| k > c) {
                merged.insert(k.to_owned(), v.is_some_and(|v| self.live(v).is_some()));
            }
        }
        let store_full = bound.is_some();
        let keys: Vec<String> = merged
            .into_iter()
            .filter(|(k, _)| bound.as_ref().is_none_or(|b| k < b))
            .filter(|(_, live)| *live)
            .map(|(k, _)| k)
            .take(PAGE)
            .collect();
        let more = store_full || keys.len() == PAGE;
        let next = if more { keys.last().cloned() } else { None };
        Ok((keys, next))
    }

    /// A call that returned, on messages `first..=tag`: its writes join the chain run in
    /// progress. Returns the [`Self::version`] before and after them.
    pub fn add_call<'a>(
        &self,
        first: i64,
        tag: i64,
        writes: impl IntoIterator<Item = (SlotRef<'a>, Option<Encoded>)>,
    ) -> (u64, u64) {
        let mut g = self.lock();
        let before = g.version;
        let end = g.log.end();
        for (slot, value) in writes {
            g.log.push_ref(first, tag, slot, value);
        }
        if g.log.end() > end {
            g.version += 1;
        }
        (before, g.version)
    }

    /// The offset at or below `next` that a commit may take without splitting a call whose
    /// writes are pending (a batch call's writes belong to all its messages: a commit
    /// between them would keep the writes of the messages above it out of the store, or put
    /// those of messages not yet done in).
    pub fn commit_point(&self, next: i64) -> i64 {
        self.lock().log.commit_point(next)
    }

    /// Where the chain run's writes end now: [`Self::drop_since`] undoes the ones after.
    pub fn mark(&self) -> u64 {
        self.lock().log.end()
    }

    /// Undoes the chain run's writes made since `mark` (a canary candidate's call whose
    /// answers are not all delivered).
    pub fn drop_since(&self, mark: u64) {
        Self::undo(&mut self.lock(), mark);
    }

    /// Drops the chain run's writes from sequence number `from` on; the values a read sees
    /// change when there were any.
    fn undo(g: &mut Inner, from: u64) {
        let end = g.log.end();
        g.log.drop_from(from);
        if g.log.end() < end {
            g.version += 1;
        }
    }

    /// Whether the chain run in progress wrote anything.
    pub fn batch_wrote(&self) -> bool {
        !self.lock().log.run_is_empty()
    }

    /// Ends the chain run in progress: its writes are kept (`keep`; a changelog gets them at
    /// the next commit, [`Self::take_changes`]) or rolled back.
    pub fn finish_batch(&self, keep: bool) {
        let mut g = self.lock();
        if keep {
            g.log.keep_run();
        } else {
            Self::undo(&mut g, 0);
        }
    }

    fn change_record(&self, e: &Entry) -> ChangeRecord {
        ChangeRecord {
            topic: self.spec.changelogs[e.slot.0 as usize].clone(),
            key: e.slot.1.clone(),
            value: e.value.clone(),
            tag: e.tag,
        }
    }

    /// Just before the partition commits at `next` (exactly-once: into its transaction;
    /// at-least-once: sent, the offsets committed once they are acknowledged): the changelog
    /// records of the kept writes tagged below `next` that are not in the changelog yet,
    /// each key's last (the earlier values of a key since the last commit would only be
    /// compacted away), in the order they were made.
    pub fn take_changes(&self, next: i64, changes: &mut Vec<ChangeRecord>) {
        let mut g = self.lock();
        let (last, end) = g.log.changes_since(g.unsent, next);
        changes.extend(last.into_iter().map(|e| self.change_record(e)));
        g.unsent = end;
    }

    /// Brings the store up to the end of the changelog, from its checkpoint (all of it when
    /// there is none, or when the checkpoint is ahead of the changelog: then the store's data
    /// of the partition is wiped first, not trusted). Called before the partition's first
    /// message.
    pub fn restore(&self, changelog: &dyn Changelog) -> Result<Restored, StoreError> {
        let mut g = self.lock();
        let mut done = Restored::default();
        let io = |why: String| StoreError::Io {
            stage: self.spec.stage.clone(),
            why,
        };
        for (b, bucket) in self.spec.buckets.iter().enumerate() {
            let topic = &self.spec.changelogs[b];
            let mut from = g
                .checkpoint
                .changelog_next
                .get(bucket)
                .copied()
                .unwrap_or(0);
            loop {
                let mut chunk: Vec<(i64, String, Option<Vec<u8>>)> = Vec::new();
                let mut failed = None;
                let mut cp = g.checkpoint.clone();
                let end = changelog
                    .restore(topic, self.key.partition, from, &mut |o, k, v| {
                        if failed.is_some() {
                            return;
                        }
                        chunk.push((o, k.to_owned(), v.map(<[u8]>::to_vec)));
                        if chunk.len() >= RESTORE_CHUNK {
                            cp.changelog_next.insert(bucket.clone(), o + 1);
                            if let Err(e) = self.apply_restored(bucket, &chunk, &cp) {
                                failed = Some(e);
                            }
                            done.records += chunk.len() as u64;
                            chunk.clear();
                        }
                    })
                    .map_err(io)?;
                if let Some(e) = failed {
                    return Err(e);
                }
                if end < from {
                    // The store says it applied records the changelog does not have.
                    tracing::warn!(stage = %self.spec.stage, bucket = %bucket, partition = %self.key,
                        checkpoint = from, changelog_end = end,
                        "state store is ahead of its changelog: rebuilding it from the changelog");
                    self.store
                        .wipe_bucket(&self.key, bucket, &mut g.checkpoint)?;
                    done.rebuilt = true;
                    from = 0;
                    continue;
                }
                done.records += chunk.len() as u64;
                cp.changelog_next.insert(bucket.clone(), end);
                self.apply_restored(bucket, &chunk, &cp)?;
                g.checkpoint = cp;
                break;
            }
        }
        g.log.forget_stored();
        g.version += 1;
        Ok(done)
    }

    fn apply_restored(
        &self,
        bucket: &str,
        chunk: &[(i64, String, Option<Vec<u8>>)],
        cp: &Checkpoint,
    ) -> Result<(), StoreError> {
        let changes: Vec<store::Change<'_>> = chunk
            .iter()
            .map(|(_, k, v)| (bucket, k.as_str(), v.as_deref()))
            .collect();
        self.store.apply(&self.key, &changes, cp)
    }

    /// The partition's offsets below `next` are committed: their writes go to the store. A
    /// store backed by a changelog takes them in larger, rarer transactions (every
    /// `FLUSH_EVERY`, at `FLUSH_WRITES` writes waiting, when the partition leaves, and
    /// when the process ends), each key's last write only; until then each key's last
    /// committed write waits in memory (the log's pending values: the commit settles the
    /// writes below it), where reads find it. A crash in between loses nothing: the store's
    /// checkpoint says where the changelog picks up. A local source's store (no changelog) is
    /// the state itself and takes every commit.
    pub fn commit(&self, next: i64) -> Result<(), StoreError> {
        let mut g = self.lock();
        // (No check against the checkpoint's offset: a local source reads its file from the
        // start on every run, so its offsets repeat.)
        g.checkpoint.source_next = Some(next);
        g.dirty = true;
        if let Some(acks) = self.store.changelog_acks() {
            // Every write below `next` goes to the store with this checkpoint, so the
            // changelog records of those writes need not be read again at a restart.
            for (bucket, topic) in self.spec.buckets.iter().zip(&self.spec.changelogs) {
                if let Some(after) = acks.settled_below(topic, self.key.partition, next) {
                    let at = g
                        .checkpoint
                        .changelog_next
                        .entry(bucket.clone())
                        .or_insert(after);
                    *at = (*at).max(after);
                }
            }
        }
        // The committed writes leave the log: each key's last waits for the store.
        g.log.settle_below(next);
        let due = !self.store.has_changelog()
            || g.log.len() + g.log.pending() >= FLUSH_WRITES
            || g.flushed.is_none_or(|t| t.elapsed() >= FLUSH_EVERY);
        if due {
            self.flush_locked(&mut g)?;
        }
        Ok(())
    }

    /// Writes the committed writes (each key's last) and the checkpoint to the store, in one
    /// transaction.
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut g = self.lock();
        self.flush_locked(&mut g)
    }

    fn flush_locked(&self, g: &mut Inner) -> Result<(), StoreError> {
        g.flushed = Some(std::time::Instant::now());
        g.dirty = false;
        let Some(next) = g.checkpoint.source_next else {
            return Ok(());
        };
        let Inner {
            log, checkpoint, ..
        } = g;
        let drained = log.drain_below(next, CACHE_ENTRIES, |last| {
            let changes: Vec<store::Change<'_>> = last
                .iter()
                .map(|(slot, value)| {
                    (
                        self.spec.buckets[slot.0 as usize].as_str(),
                        &*slot.1,
                        *value,
                    )
                })
                .collect();
            self.store.apply(&self.key, &changes, checkpoint)
        });
        if drained.is_err() {
            // The writes stay pending (reads see them): the next flush tries again.
            g.dirty = true;
        }
        drained
    }

    /// Writes not yet in the store (kept and in progress).
    pub fn uncommitted(&self) -> usize {
        self.lock().log.len()
    }
}
