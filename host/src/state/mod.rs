//! Stages' durable state: buckets per stage and source partition (`wasi:keyvalue`), kept in
//! step with the delivered outcomes.
//!
//! A write goes to the partition's log ([`log::Log`]) when the call that made it returned (a
//! call that traps, times out or fails leaves nothing there: the instance keeps its call's
//! writes until then), tagged with the source offset it belongs to, as a write of the chain
//! run in progress. When the run's outcomes go to the sinks its writes are kept; when a stage
//! failed they are rolled back. When the controller commits offset `next` for the partition,
//! the kept writes tagged below `next` go to the store ([`store::StageStore`]) with a
//! checkpoint, in one transaction. Reads see the log's latest write of the key, then the
//! store (whose values read are remembered in the log's map): read-your-writes. See
//! docs/state.md.

mod buckets;
pub mod changelog;
mod encoding;
pub mod kv;
pub mod log;
mod partition;
pub mod store;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use self::encoding::{decode, encode, encode_shared, Encoded};
pub use self::store::{Checkpoint, StageStore, StoreError};
use crate::config::StageConfig;
// The parts this module assembles (named without `self::`: they import what this file
// defines, tests/tests/layers.rs).
pub use buckets::{StageBuckets, StateRegistry};
pub use partition::PartitionState;

/// Keys per `list-keys` page.
pub const PAGE: usize = 1000;

/// A stage's `state` block, as the host uses it.
#[derive(Debug, Clone)]
pub struct StateSpec {
    /// Stage name.
    pub stage: String,
    /// Declared bucket names; a bucket is known by its index here.
    pub buckets: Vec<String>,
    /// Values older than this read as absent.
    pub ttl: Option<Duration>,
    /// Largest value, bytes.
    pub max_value: usize,
    /// Per bucket: its changelog topic (`<pipeline>.<stage>.<bucket>.changelog`).
    pub changelogs: Vec<Arc<str>>,
}

impl StateSpec {
    /// The spec of a stage's YAML in pipeline `pipeline`, when it declares state.
    pub fn of(pipeline: &str, c: &StageConfig) -> Option<Self> {
        c.state.as_ref().map(|s| StateSpec {
            stage: c.name.clone(),
            buckets: s.buckets.clone(),
            ttl: s.ttl,
            max_value: s.max_value.bytes(),
            changelogs: s
                .buckets
                .iter()
                .map(|b| changelog_topic(pipeline, &c.name, b).into())
                .collect(),
        })
    }

    /// The index of a declared bucket.
    pub fn bucket(&self, name: &str) -> Option<u16> {
        self.buckets
            .iter()
            .position(|b| b == name)
            .map(|i| i as u16)
    }
}

/// The changelog topic of a stage's bucket.
pub fn changelog_topic(pipeline: &str, stage: &str, bucket: &str) -> String {
    format!("{pipeline}.{stage}.{bucket}.changelog")
}

/// What a restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Changelog records applied.
    pub records: u64,
    /// Whether the store was wiped first (its checkpoint was ahead of the changelog).
    pub rebuilt: bool,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::log::SlotRef;
    use super::*;
    use crate::message::PartitionKey;

    #[test]
    fn a_shared_encoding_is_the_encoding_for_short_and_long_values() {
        for len in [0, 1, 247, 248, 249, 5000] {
            let value: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let shared = encode_shared(-3, &value);
            assert_eq!(&*shared, &encode(-3, &value)[..], "{len} bytes");
            assert_eq!(decode(&shared), (-3, &value[..]));
        }
    }

    #[test]
    fn the_bytes_a_stage_holds_follow_its_partitions_writes_rollbacks_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StateSpec {
            stage: "s".into(),
            buckets: vec!["b".into()],
            ttl: None,
            max_value: 1 << 20,
            changelogs: vec!["t.s.b.changelog".into()],
        };
        let reg = StateRegistry::open_specs(dir.path(), vec![spec]).unwrap();
        let stage = reg.stage("s").unwrap();
        let write = |k: &'static str, v: &[u8]| (SlotRef(0, k), Some(encode_shared(1, v)));
        let (k0, k1) = (PartitionKey::new("in", 0), PartitionKey::new("in", 1));
        let p0 = stage.partition(&k0, 0).unwrap();
        let p1 = stage.partition(&k1, 0).unwrap();
        assert_eq!(stage.held_bytes(), 0);
        p0.add_call(0, 0, [write("a", b"1"), write("b", &[7; 1000])]);
        let two = stage.held_bytes();
        assert!(two > 1000, "{two}");
        p1.add_call(0, 0, [write("a", b"1")]);
        let three = stage.held_bytes();
        assert!(three > two, "{three} after {two}");
        p1.finish_batch(false);
        assert_eq!(
            stage.held_bytes(),
            two,
            "a rolled-back run's writes are gone"
        );
        // Kept and committed into the store (a local store takes every commit): the values
        // are remembered as the store's, and still held.
        p0.finish_batch(true);
        p0.commit(1).unwrap();
        let remembered = stage.held_bytes();
        assert!(remembered > 1000, "{remembered}");
        drop((p0, p1));
        stage.release(&k0);
        stage.release(&k1);
        assert_eq!(stage.held_bytes(), 0, "released partitions hold nothing");
    }
}
