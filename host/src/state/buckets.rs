//! The stateful stages of a run: each stage's buckets over the partitions this process owns
//! ([`StageBuckets`]), and all of them ([`StateRegistry`]), which the controller commits,
//! restores and releases partition by partition.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use super::changelog::{self, ChangeRecord, Changelog};
use super::{PartitionState, Restored, StageStore, StateSpec, StoreError};
use crate::config::PipelineConfig;
use crate::message::PartitionKey;

/// One stage's buckets over all the partitions this process owns.
pub struct StageBuckets {
    /// What the stage declared.
    pub spec: Arc<StateSpec>,
    store: Arc<StageStore>,
    parts: Mutex<HashMap<PartitionKey, Arc<PartitionState>>>,
    /// Bytes its partitions' states hold in memory ([`Self::held_bytes`]).
    held: Arc<AtomicI64>,
}

impl StageBuckets {
    /// The stage's state for partition `key` in assignment `generation`, opened from the
    /// store when new here: the partition is this process's now (a lane's assignment;
    /// [`Self::release`] ends it). A state left open by an earlier generation is closed first.
    pub fn partition(
        &self,
        key: &PartitionKey,
        generation: u64,
    ) -> Result<Arc<PartitionState>, StoreError> {
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        match parts.get(key) {
            Some(p) if p.generation == generation => return Ok(p.clone()),
            Some(old) => {
                // Assigned again without a release in between: what the old one committed
                // goes to the store; the new one reads the store.
                old.flush().map_err(|e| {
                    tracing::warn!(stage = %self.spec.stage, partition = %key, "{e}");
                    e
                })?;
            }
            None => {}
        }
        let p = self.detached(key, generation)?;
        parts.insert(key.clone(), p.clone());
        Ok(p)
    }

    /// The state a chain run on `key` in assignment `generation` writes to: the partition's,
    /// or, when the partition is not (or no longer, or again, in a later generation) this
    /// process's, a state of its own that nothing commits. Such a run raced a revoke: its
    /// messages are replayed by the next owner, so its writes must reach neither the store
    /// nor the state of a later assignment (which another driver may be running).
    pub fn current(
        &self,
        key: &PartitionKey,
        generation: u64,
    ) -> Result<Arc<PartitionState>, StoreError> {
        match self.assigned(key, generation) {
            Some(p) => Ok(p),
            None => self.detached(key, generation),
        }
    }

    /// The partition's state when it is this process's in assignment `generation` (none:
    /// a run on it writes to a detached state, [`Self::current`]).
    pub fn assigned(&self, key: &PartitionKey, generation: u64) -> Option<Arc<PartitionState>> {
        self.owned(key).filter(|p| p.generation == generation)
    }

    fn detached(
        &self,
        key: &PartitionKey,
        generation: u64,
    ) -> Result<Arc<PartitionState>, StoreError> {
        PartitionState::open(key, generation, &self.spec, &self.store, &self.held).map(Arc::new)
    }

    /// Bytes the stage's state holds in memory over the partitions (and runs) open now:
    /// writes since the last commit, committed values the store has not taken, store values
    /// read and remembered (keys, values and 112 bytes each: an estimate, [`super::log::Log::held_bytes`]).
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed).max(0) as u64
    }

    /// The partition left this process: what it had not committed is dropped (the next
    /// owner replays those messages).
    pub fn release(&self, key: &PartitionKey) {
        let gone = self
            .parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(p) = gone {
            // What it committed goes to the store now (what it did not is dropped).
            if let Err(e) = p.flush() {
                tracing::warn!(stage = %self.spec.stage, partition = %key,
                    "state store: the committed writes stay in the changelog only: {e}");
            }
        }
        if let Some(acks) = self.store.changelog_acks() {
            for topic in &self.spec.changelogs {
                acks.forget(topic, key.partition);
            }
        }
    }

    fn owned(&self, key: &PartitionKey) -> Option<Arc<PartitionState>> {
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// The stage's store.
    pub fn store(&self) -> &Arc<StageStore> {
        &self.store
    }
}

impl std::fmt::Debug for StageBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageBuckets")
            .field("spec", &self.spec)
            .field("store", &self.store.path())
            .finish_non_exhaustive()
    }
}

/// Every stateful stage of a pipeline run.
#[derive(Default)]
pub struct StateRegistry {
    stages: Vec<Arc<StageBuckets>>,
}

impl StateRegistry {
    /// Opens the store of every stage that declares state, under
    /// `runtime.state_dir/<pipeline>/`. None when no stage does.
    pub fn open(cfg: &PipelineConfig) -> Result<Option<Arc<Self>>, StoreError> {
        let dir = cfg
            .runtime
            .state_dir
            .clone()
            .unwrap_or_else(|| "weir-state".into())
            .join(&cfg.name);
        let specs: Vec<StateSpec> = cfg
            .stages
            .iter()
            .filter_map(|s| StateSpec::of(&cfg.name, s))
            .collect();
        if specs.is_empty() {
            return Ok(None);
        }
        Self::open_specs(&dir, specs).map(|r| Some(Arc::new(r)))
    }

    /// Opens the stores of these stages in `dir`.
    pub fn open_specs(dir: &Path, specs: Vec<StateSpec>) -> Result<Self, StoreError> {
        let stages = specs
            .into_iter()
            .map(|spec| {
                let store = StageStore::open(dir, &spec.stage)?;
                Ok(Arc::new(StageBuckets {
                    spec: Arc::new(spec),
                    store: Arc::new(store),
                    parts: Mutex::new(HashMap::new()),
                    held: Arc::default(),
                }))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(StateRegistry { stages })
    }

    /// A registry of these stages' buckets.
    pub fn of_stages(stages: Vec<Arc<StageBuckets>>) -> Self {
        StateRegistry { stages }
    }

    /// The stores are caches of changelogs whose acknowledged records are noted in `acks`:
    /// their commits need not be synced one by one, and they move the changelog checkpoints.
    /// The changelogs get each key's last write per commit ([`Self::take_changes`]).
    pub fn set_cache_of_changelog(&self, acks: &Arc<changelog::ChangelogAcks>) {
        for s in &self.stages {
            s.store.set_cache_of_changelog(acks.clone());
        }
    }

    /// Just before partition `key`'s transaction of assignment `generation`
    /// commits at `next`: every stage's changelog records for it (see
    /// [`PartitionState::take_changes`]).
    pub fn take_changes(
        &self,
        key: &PartitionKey,
        generation: u64,
        next: i64,
    ) -> Vec<ChangeRecord> {
        let mut changes = Vec::new();
        for s in &self.stages {
            if let Some(p) = s.owned(key).filter(|p| p.generation == generation) {
                p.take_changes(next, &mut changes);
            }
        }
        changes
    }

    /// Every stage's changelog topics.
    pub fn changelog_topics(&self) -> Vec<String> {
        self.stages
            .iter()
            .flat_map(|s| s.spec.changelogs.iter().map(|t| t.to_string()))
            .collect()
    }

    /// Whether no stage keeps state.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The buckets of stage `name`, when it declared state.
    pub fn stage(&self, name: &str) -> Option<Arc<StageBuckets>> {
        self.stages.iter().find(|s| s.spec.stage == name).cloned()
    }

    /// The offset at or below `next` that partition `key` may commit: none of its stages'
    /// pending calls split (see [`PartitionState::commit_point`]).
    pub fn commit_point(&self, key: &PartitionKey, next: i64) -> i64 {
        self.stages
            .iter()
            .filter_map(|s| s.owned(key))
            .map(|p| p.commit_point(next))
            .min()
            .map_or(next, |c| c.min(next))
    }

    /// The partition's offsets below `next` are committed: every stage's writes below it go
    /// to its store.
    pub fn commit(&self, key: &PartitionKey, next: i64) -> Result<(), StoreError> {
        for s in &self.stages {
            if let Some(p) = s.owned(key) {
                p.commit(next)?;
            }
        }
        Ok(())
    }

    /// Partition `key` is this process's in assignment `generation`: every stage opens its
    /// state from the store and, with a changelog, catches it up with the changelog
    /// ([`PartitionState::restore`]). An error names the stage.
    pub fn restore(
        &self,
        key: &PartitionKey,
        generation: u64,
        changelog: Option<&dyn Changelog>,
    ) -> Result<Restored, (String, StoreError)> {
        let mut all = Restored::default();
        for s in &self.stages {
            let failed = |e| (s.spec.stage.clone(), e);
            let part = s.partition(key, generation).map_err(failed)?;
            if let Some(changelog) = changelog {
                let r = part.restore(changelog).map_err(failed)?;
                all.records += r.records;
                all.rebuilt |= r.rebuilt;
            }
        }
        Ok(all)
    }

    /// The partition left this process.
    pub fn release(&self, key: &PartitionKey) {
        for s in &self.stages {
            s.release(key);
        }
    }
}
