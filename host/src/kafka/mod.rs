//! Weir on Kafka: a consumer-group member whose partitions become lanes, driver threads
//! that run the chain over them, a producer for outputs and the dead-letter topic, and
//! at-least-once offset commits.
//!
//! ```text
//! main ──── starts everything, waits, writes the exit report
//!  ├─ weir-controller  owns the consumer: poll → split by partition into lanes (bounded),
//!  │                   pause/resume (lane full, byte budget), completions → watermarks,
//!  │                   commit tick, rebalance (revoke: stop lanes, drain, sync commit)
//!  ├─ weir-driver-N    own lanes + own stage instances: lane → batch → chain → produce
//!  ├─ librdkafka       producer delivery reports → per-offset tickets → completions
//!  └─ weir-metrics     /metrics, /healthz, /readyz
//! ```
//!
//! An offset is done when everything it became is acknowledged by the broker (outputs and
//! dead-letter records), or it was filtered out. The controller commits, per partition, the
//! offset below which everything is done ([`crate::watermark`]). Every assignment of a
//! partition gets a new generation; a completion from an older one is ignored.

pub mod client;
pub mod commit_queue;
pub mod controller;
pub mod driver;
pub mod embedded;
pub mod output;
pub mod record;
pub mod runtime;
pub mod watermarks;

use std::sync::Arc;

/// One partition of a source topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// One source offset is settled: done, or failed (the pipeline stops before it).
#[derive(Debug)]
pub struct Completion {
    /// The partition.
    pub key: PartitionKey,
    /// The assignment generation the message was read in.
    pub generation: u64,
    /// The source offset.
    pub offset: i64,
    /// How it was settled.
    pub outcome: Settled,
}

/// How a source offset was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Fully handled: every record it became is acknowledged (or it became none).
    Done,
    /// A stage failed on it: the pipeline stops and never commits past it.
    Failed,
    /// A record it became could not be delivered: the pipeline stops, never past it.
    Undelivered(String),
}
