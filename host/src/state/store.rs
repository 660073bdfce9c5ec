//! The embedded store of one stage: a redb file under `runtime.state_dir`, one table per bucket
//! and source partition, and a checkpoint per partition written in the same transaction as
//! the data it describes. A cache of the changelog (Kafka sources) or the state itself (local
//! sources).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::message::PartitionKey;

/// Checkpoints, by partition (`topic:partition`).
const CHECKPOINTS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("weir.checkpoints");

/// The store of one stage could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the file.
    #[error("stage `{stage}`: state store {path} is in use by another process (one process at a time may use a state dir)")]
    Locked {
        /// Stage name.
        stage: String,
        /// The file.
        path: PathBuf,
    },
    /// The folder or file cannot be created or opened.
    #[error("stage `{stage}`: state store {path}: {why}")]
    Open {
        /// Stage name.
        stage: String,
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A read or write failed.
    #[error("stage `{stage}`: state store: {why}")]
    Io {
        /// Stage name.
        stage: String,
        /// Why.
        why: String,
    },
}

/// What a partition's data in the store reflects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The source offset below which every message's writes are in the store.
    pub source_next: Option<i64>,
    /// Per bucket: the changelog offset after the last record applied.
    pub changelog_next: BTreeMap<String, i64>,
}

/// One write, as stored: bucket, key, value (`None` deletes).
pub type Change<'a> = (&'a str, &'a str, Option<&'a [u8]>);
/// One write within a bucket: key, value (`None` deletes).
type KeyChange<'a> = (&'a str, Option<&'a [u8]>);

/// An open read-only table, kept between reads until the next write (`None`: no such table).
type Reader = Option<redb::ReadOnlyTable<&'static str, &'static [u8]>>;

/// The store of one stage.
pub struct StageStore {
    stage: String,
    db: Database,
    path: PathBuf,
    /// Tables opened for reading, by partition and bucket: a read transaction per key costs microseconds,
    /// so one is kept until a write transaction commits.
    readers: std::sync::Mutex<HashMap<PartitionKey, HashMap<String, Reader>>>,
    /// Whether every commit is synced to disk. A store that is a cache of its changelog
    /// needs no sync per commit: after a crash it has an older consistent state (data and
    /// checkpoint together) and the restore catches it up. It syncs a commit every
    /// `sync_every`, and when dropped.
    durable: std::sync::atomic::AtomicBool,
    /// Where the changelog's records landed (when the store is a cache of one).
    acks: std::sync::OnceLock<std::sync::Arc<super::changelog::ChangelogAcks>>,
    /// A store that is a cache of its changelog syncs its first commit, and then the first
    /// commit this long after its last synced one, so a crash costs the restore at most about
    /// this much of the changelog to read again (not everything since the process started).
    sync_every: Duration,
    /// When a commit was last synced (`None`: none yet).
    synced: std::sync::Mutex<Option<Instant>>,
}

/// How often, at most, a store that is a cache of its changelog syncs a commit: in practice
/// each partition's flush (`state::partition`'s `FLUSH_EVERY`, 5 s), so a `kill -9` costs the
/// restore about a flush of the changelog (issue 50: syncing once a minute cost nothing
/// measurable less, and a restart re-read up to a minute of it; with 1,000,000 keys, all 1.06
/// million records read again where 0.29-0.49 million are now).
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

fn table_name(bucket: &str, key: &PartitionKey) -> String {
    format!("{bucket}@{}:{}", key.topic, key.partition)
}

fn part_name(key: &PartitionKey) -> String {
    format!("{}:{}", key.topic, key.partition)
}

impl StageStore {
    /// Opens (creating when missing) the store of `stage` in `dir`.
    pub fn open(dir: &Path, stage: &str) -> Result<Self, StoreError> {
        let path = dir.join(format!("{stage}.redb"));
        let open = |why: String| StoreError::Open {
            stage: stage.to_owned(),
            path: path.clone(),
            why,
        };
        std::fs::create_dir_all(dir).map_err(|e| open(format!("cannot create the folder: {e}")))?;
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Locked {
                    stage: stage.to_owned(),
                    path,
                })
            }
            Err(e) => return Err(open(e.to_string())),
        };
        Ok(StageStore {
            stage: stage.to_owned(),
            db,
            path,
            readers: Default::default(),
            durable: std::sync::atomic::AtomicBool::new(true),
            acks: Default::default(),
            sync_every: SYNC_EVERY,
            synced: std::sync::Mutex::new(None),
        })
    }

    /// The store is a cache of a changelog whose acknowledged records are noted in `acks`:
    /// commits are not synced one by one, and they move the changelog checkpoint.
    pub fn set_cache_of_changelog(&self, acks: std::sync::Arc<super::changelog::ChangelogAcks>) {
        self.durable
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = self.acks.set(acks);
    }

    /// Where the changelog's acknowledged records landed (a cache of a changelog only).
    pub fn changelog_acks(&self) -> Option<&std::sync::Arc<super::changelog::ChangelogAcks>> {
        self.acks.get()
    }

    /// Whether the store is a cache of a changelog (the state's writes also go there).
    pub fn has_changelog(&self) -> bool {
        !self.durable.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A store that is a cache of its changelog syncs a commit every `every` (and when it
    /// is dropped) instead of [`SYNC_EVERY`].
    pub fn set_sync_every(&mut self, every: Duration) {
        self.sync_every = every;
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction, StoreError> {
        let mut w = self.db.begin_write().map_err(|e| self.io(e))?;
        if !self.durable.load(std::sync::atomic::Ordering::Relaxed) {
            let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
            if synced.is_some_and(|t| t.elapsed() < self.sync_every) {
                w.set_durability(redb::Durability::None)
                    .map_err(|e| self.io(e))?;
            } else {
                // This one is synced, and with it every unsynced commit before it.
                *synced = Some(Instant::now());
            }
        }
        Ok(w)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Io {
            stage: self.stage.clone(),
            why: e.to_string(),
        }
    }

    /// The stored value of `key` in `bucket` for partition `part`.
    pub fn get(
        &self,
        part: &PartitionKey,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up without formatting the table's name (a read per message lands here).
        let of_part = match readers.get_mut(part) {
            Some(m) => m,
            None => readers.entry(part.clone()).or_default(),
        };
        if !of_part.contains_key(bucket) {
            let name = table_name(bucket, part);
            let def: TableDefinition<&str, &[u8]> = TableDefinition::new(&name);
            let r = self.db.begin_read().map_err(|e| self.io(e))?;
            let table = match r.open_table(def) {
                Ok(t) => Some(t),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(self.io(e)),
            };
            of_part.insert(bucket.to_owned(), table);
        }
        let Some(Some(t)) = of_part.get(bucket) else {
            return Ok(None);
        };
        let v = t.get(key).map_err(|e| self.io(e))?;
        Ok(v.map(|g| g.value().to_vec()))
    }

    /// A write committed: readers opened before it would not see it.
    fn forget_readers(&self) {
        self.readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Up to `limit` keys of `bucket` after `after` (exclusive), in byte order, with values.
    pub fn scan(
        &self,
        part: &PartitionKey,
        bucket: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let name = table_name(bucket, part);
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(&name);
        let r = self.db.begin_read().map_err(|e| self.io(e))?;
        let t = match r.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.io(e)),
        };
        use std::ops::Bound;
        let low: Bound<&str> = after.map_or(Bound::Unbounded, Bound::Excluded);
        let range = t
            .range((low, Bound::<&str>::Unbounded))
            .map_err(|e| self.io(e))?;
        let mut out = Vec::new();
        for item in range.take(limit) {
            let (k, v) = item.map_err(|e| self.io(e))?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// The partition's checkpoint (default: nothing applied).
    pub fn checkpoint(&self, part: &PartitionKey) -> Result<Checkpoint, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.io(e))?;
        let t = match r.open_table(CHECKPOINTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Checkpoint::default()),
            Err(e) => return Err(self.io(e)),
        };
        let v = t.get(part_name(part).as_str()).map_err(|e| self.io(e))?;
        match v {
            None => Ok(Checkpoint::default()),
            Some(g) => serde_json::from_slice(g.value()).map_err(|e| self.io(e)),
        }
    }

    /// Applies `changes` of partition `part` and sets its checkpoint, in one durable
    /// transaction: after a crash the store has both or neither.
    pub fn apply(
        &self,
        part: &PartitionKey,
        changes: &[Change<'_>],
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let w = self.begin_write()?;
        {
            let mut by_bucket: BTreeMap<&str, Vec<KeyChange<'_>>> = BTreeMap::new();
            for (b, k, v) in changes {
                by_bucket.entry(b).or_default().push((k, *v));
            }
            for (bucket, kvs) in by_bucket {
                let name = table_name(bucket, part);
                let def: TableDefinition<&str, &[u8]> = TableDefinition::new(&name);
                let mut t = w.open_table(def).map_err(|e| self.io(e))?;
                for (k, v) in kvs {
                    match v {
                        Some(v) => t.insert(k, v).map(drop),
                        None => t.remove(k).map(drop),
                    }
                    .map_err(|e| self.io(e))?;
                }
            }
            let mut t = w.open_table(CHECKPOINTS).map_err(|e| self.io(e))?;
            let cp = serde_json::to_vec(checkpoint).expect("a checkpoint serializes");
            t.insert(part_name(part).as_str(), cp.as_slice())
                .map_err(|e| self.io(e))?;
        }
        w.commit().map_err(|e| self.io(e))?;
        self.forget_readers();
        Ok(())
    }

    /// Removes everything of partition `part` (its buckets' data and its checkpoint).
    pub fn wipe(&self, part: &PartitionKey, buckets: &[String]) -> Result<(), StoreError> {
        let w = self.begin_write()?;
        for b in buckets {
            let name = table_name(b, part);
            let def: TableDefinition<&str, &[u8]> = TableDefinition::new(&name);
            w.delete_table(def).map_err(|e| self.io(e))?;
        }
        {
            let mut t = w.open_table(CHECKPOINTS).map_err(|e| self.io(e))?;
            t.remove(part_name(part).as_str()).map_err(|e| self.io(e))?;
        }
        w.commit().map_err(|e| self.io(e))?;
        self.forget_readers();
        Ok(())
    }

    /// Removes one bucket's data of partition `part` and its changelog position (the
    /// checkpoint `cp` is updated and written in the same transaction).
    pub fn wipe_bucket(
        &self,
        part: &PartitionKey,
        bucket: &str,
        cp: &mut Checkpoint,
    ) -> Result<(), StoreError> {
        cp.changelog_next.remove(bucket);
        let w = self.begin_write()?;
        let name = table_name(bucket, part);
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(&name);
        w.delete_table(def).map_err(|e| self.io(e))?;
        {
            let mut t = w.open_table(CHECKPOINTS).map_err(|e| self.io(e))?;
            let v = serde_json::to_vec(&*cp).expect("a checkpoint serializes");
            t.insert(part_name(part).as_str(), v.as_slice())
                .map_err(|e| self.io(e))?;
        }
        w.commit().map_err(|e| self.io(e))?;
        self.forget_readers();
        Ok(())
    }

    /// The partitions that have a checkpoint.
    pub fn partitions(&self) -> Result<Vec<String>, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.io(e))?;
        let t = match r.open_table(CHECKPOINTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.io(e)),
        };
        let mut out = Vec::new();
        for item in t.iter().map_err(|e| self.io(e))? {
            let (k, _) = item.map_err(|e| self.io(e))?;
            out.push(k.value().to_owned());
        }
        Ok(out)
    }
}

impl Drop for StageStore {
    /// Syncs what unsynced commits left (a cache of a changelog syncs only here).
    fn drop(&mut self) {
        if self.durable.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let synced = self
            .db
            .begin_write()
            .map_err(|e| e.to_string())
            .and_then(|w| w.commit().map_err(|e| e.to_string()));
        if let Err(e) = synced {
            tracing::warn!(stage = %self.stage, "state store not synced at close: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Checkpoint, StageStore};
    use crate::message::PartitionKey;

    /// Set in the child process of [`a_store_of_a_changelog_syncs_a_commit_a_while_after_the_last`]:
    /// the state dir and the sync interval in ms.
    const CHILD: &str = "WEIR_TEST_STORE_CHILD";

    /// In a child process: two commits to a changelog's store (the second `every` after the
    /// first) then an abort, as `kill -9` would end it: nothing is synced at a drop.
    fn commit_twice_and_crash(dir: &str, every: Duration) -> ! {
        let mut store = StageStore::open(std::path::Path::new(dir), "s").expect("opens");
        store.set_sync_every(every);
        store.set_cache_of_changelog(Default::default());
        let part = PartitionKey::new("in", 0);
        for n in [1i64, 2] {
            if n == 2 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let cp = Checkpoint {
                source_next: Some(n),
                ..Checkpoint::default()
            };
            let v = n.to_string();
            store
                .apply(&part, &[("b", "k", Some(v.as_bytes()))], &cp)
                .expect("commits");
        }
        std::process::abort();
    }

    /// What a store left by a crashed child holds: the checkpoint's source offset and `k`.
    fn after_crash(every: Duration) -> (Option<i64>, Option<Vec<u8>>) {
        let dir = tempfile::tempdir().expect("dir");
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "state::store::tests::a_store_of_a_changelog_syncs_a_commit_a_while_after_the_last",
                "--nocapture",
            ])
            .env(
                CHILD,
                format!("{}|{}", dir.path().display(), every.as_millis()),
            )
            .status()
            .expect("the child runs");
        assert!(!status.success(), "the child was to abort: {status}");
        let store = StageStore::open(dir.path(), "s").expect("reopens");
        let part = PartitionKey::new("in", 0);
        let cp = store.checkpoint(&part).expect("checkpoint");
        let v = store.get(&part, "b", "k").expect("reads");
        (cp.source_next, v)
    }

    #[test]
    fn a_store_of_a_changelog_syncs_a_commit_a_while_after_the_last() {
        if let Ok(child) = std::env::var(CHILD) {
            let (dir, ms) = child.split_once('|').expect("dir|ms");
            commit_twice_and_crash(dir, Duration::from_millis(ms.parse().expect("ms")));
        }
        // The interval is longer than the run: the first commit was synced (a store's first
        // always is), the crash lost the second.
        let (next, v) = after_crash(Duration::from_secs(3600));
        assert_eq!(next, Some(1));
        assert_eq!(v.as_deref(), Some(&b"1"[..]));
        // The second commit came 300 ms after the store opened, past the 100 ms interval:
        // it was synced, with the data and the checkpoint together.
        let (next, v) = after_crash(Duration::from_millis(100));
        assert_eq!(next, Some(2));
        assert_eq!(v.as_deref(), Some(&b"2"[..]));
    }
}
