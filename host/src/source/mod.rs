//! Where messages come from: the control side of a source, as the one controller drives it.
//!
//! A [`Source`] is polled by the controller thread only. It reports what happens through a
//! [`Handler`] while it is polled: partitions assigned, partitions revoked (a **drain barrier**:
//! the handler returns only once what was read from them is settled, with the offsets to
//! commit before they are released), messages, and the end of a partition's input. Commits,
//! pause and resume go back through the source.
//!
//! * [`kafka::KafkaSource`] — a consumer-group member (librdkafka): partitions come and go.
//! * [`jsonl::JsonlSource`] — a JSONL file or standard input: one partition, assigned once,
//!   ended at end of input; a commit is remembered, not sent anywhere.

mod commit_queue;
pub mod group_watch;
mod high_watermark;
pub mod jsonl;
pub mod kafka;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::config::SourceConfig;
pub use crate::message::PartitionKey;
use crate::message::{Envelope, Rejected};
use crate::metrics::Metrics;

/// One item a source read.
#[derive(Debug)]
pub enum Item {
    /// A message for the chain.
    Message(Envelope),
    /// Input that is not a message (a malformed line): already rejected, it goes to the
    /// reject path in its place, never silently lost.
    Rejected(Rejected),
}

impl Item {
    /// The source offset.
    pub fn offset(&self) -> i64 {
        match self {
            Item::Message(e) => e.offset,
            Item::Rejected(r) => r.env.offset,
        }
    }

    /// Payload bytes (for batch and budget limits).
    pub fn byte_len(&self) -> usize {
        match self {
            Item::Message(e) => e.msg.byte_len(),
            Item::Rejected(r) => r.env.msg.byte_len(),
        }
    }
}

/// What the controller does with what a source reports. Called from [`Source::poll`] on the
/// controller thread.
pub trait Handler {
    /// These partitions are read from now on (each gets a fresh lane and generation).
    fn assigned(&mut self, keys: &[PartitionKey]);
    /// These partitions are being taken away: stop their lanes, wait (bounded) until what was
    /// read from them is settled, and return the offsets to commit before they go.
    fn revoked(&mut self, keys: &[PartitionKey]) -> Vec<(PartitionKey, i64)>;
    /// A message (or an already rejected item) read from `topic`/`partition`. Returns false
    /// when the handler wants no more in this poll (its byte budget is spent).
    fn item(&mut self, topic: &str, partition: i32, item: Item) -> bool;
    /// Everything of the partition below `next` has been handed over; there is no more now.
    fn end(&mut self, key: &PartitionKey, next: i64);
}

/// A source that failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A local input could not be opened or read.
    #[error("source {what}: {source}")]
    Io {
        /// The file, or `stdin`.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The Kafka client refused.
    #[error("kafka source: {what}: {source}")]
    Kafka {
        /// What was being done.
        what: String,
        /// Why.
        source: rdkafka::error::KafkaError,
    },
    /// The source cannot read a partition again from an offset.
    #[error("the source cannot read {key} again from offset {offset}")]
    CannotRewind {
        /// The partition.
        key: PartitionKey,
        /// Where it was to read from.
        offset: i64,
    },
    /// A client error retrying cannot heal (authentication, TLS, authorization, a missing
    /// topic, a corrupt batch, a codec missing from the build).
    #[error(transparent)]
    Client(#[from] crate::kafka::fatal::ClientFailure),
}

/// The control side of a source.
pub trait Source: Send {
    /// Reads what is there (up to a burst), waiting up to `timeout` for the first event, and
    /// reports it to `to`. Rebalances are reported from inside this call.
    fn poll(&mut self, to: &mut dyn Handler, timeout: Duration) -> Result<(), SourceError>;
    /// Starts committing `offsets` (the next offset to read, per partition) without waiting;
    /// confirmations show in [`Source::committed`].
    fn commit(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError>;
    /// Commits `offsets` and waits for the result.
    fn commit_sync(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError>;
    /// The highest confirmed commit of one partition.
    fn committed(&self, key: &PartitionKey) -> Option<i64>;
    /// Every confirmed commit, by `topic/partition`.
    fn committed_all(&self) -> BTreeMap<String, i64>;
    /// Stops fetching these partitions.
    fn pause(&mut self, keys: &[PartitionKey]);
    /// Fetches these partitions again.
    fn resume(&mut self, keys: &[PartitionKey]);
    /// The partition's end offset as last seen, without a round trip (for lag).
    fn high_watermark(&self, key: &PartitionKey) -> Option<i64>;
    /// Leaves: reports the last revocation through `to` and releases the source.
    fn close(&mut self, to: &mut dyn Handler);
    /// Reads the partition again from `at` (its last committed offset: exactly-once
    /// delivery after a transaction that could only be aborted). Messages fetched before are
    /// not delivered. `end`, the end already reported for it (`stop_at_end`), is reported
    /// again once the partition is read up to it. Only a Kafka source can.
    fn rewind(
        &mut self,
        key: &PartitionKey,
        at: i64,
        _end: Option<i64>,
    ) -> Result<(), SourceError> {
        Err(SourceError::CannotRewind {
            key: key.clone(),
            offset: at,
        })
    }
    /// Where a partition whose transaction failed (and may have committed after all) really
    /// stands: `at`, or further if the source knows better (a Kafka group's committed offset,
    /// asked once the transaction is settled). Asked before [`Source::rewind`] when the
    /// transaction's outcome is the broker's to say.
    fn settled(&mut self, _key: &PartitionKey, at: i64) -> i64 {
        at
    }
}

impl SourceConfig {
    /// Opens the source this configures. `stop_at_end` sources end the run at the end of
    /// their input; a Kafka source subscribes here.
    pub fn build(
        &self,
        metrics: Arc<Metrics>,
        fatal: Arc<crate::kafka::fatal::FatalSlot>,
    ) -> Result<Box<dyn Source>, SourceError> {
        Ok(match self {
            SourceConfig::Kafka(k) => Box::new(kafka::KafkaSource::open(k, metrics, fatal)?),
            other => Box::new(jsonl::JsonlSource::open(other)?),
        })
    }

    /// A short description for logs.
    pub fn describe(&self) -> String {
        match self {
            SourceConfig::Kafka(k) => format!("kafka {} (group {})", k.topics.join(","), k.group),
            SourceConfig::Jsonl(j) => format!("jsonl {}", j.path.display()),
            SourceConfig::Stdin(_) => "stdin".into(),
        }
    }

    /// Whether the run ends when every partition is handled up to its end.
    pub fn stops_at_end(&self) -> bool {
        match self {
            SourceConfig::Kafka(k) => k.stop_at_end,
            SourceConfig::Jsonl(_) | SourceConfig::Stdin(_) => true,
        }
    }
}
