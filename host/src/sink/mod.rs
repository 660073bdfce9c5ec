//! Where results go: the sink for messages that passed the chain and the reject path.
//!
//! A [`Sink`] takes a batch's records. A record that waits for an acknowledgement carries a
//! [`Ticket`]: the sink settles it when the record is durable (Kafka: the broker's
//! acknowledgement). A sink that is done when `write` returns (a JSONL file, stdout: written
//! and flushed; discard) takes no tickets ([`Sink::acknowledges_later`] is false) and the
//! runtime settles those offsets itself.
//!
//! * [`kafka::KafkaSink`] — produce to a topic (or the topic a stage set); the dead-letter
//!   topic keeps the original message and adds `weir.*` headers saying why.
//! * [`line::LineSink`] — JSONL to a file or stdout, or discard (count and drop).
//! * [`transactional::KafkaTransactions`] — `delivery: exactly-once`: one transactional
//!   producer per source partition; the partition's outputs and dead-letter records and its
//!   next offset are committed in one Kafka transaction ([`Transactions`]).

pub mod changelog;
pub mod kafka;
pub mod line;
pub mod transactional;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::chain::Rejected;
use crate::config::SinkConfig;
use crate::message::{Lane, Message};
use crate::metrics::Metrics;
use crate::source::PartitionKey;

/// One or more source offsets of one lane are settled.
#[derive(Debug)]
pub struct Completion {
    /// The partition.
    pub key: PartitionKey,
    /// The assignment generation the messages were read in.
    pub generation: u64,
    /// The source offsets.
    pub offsets: Vec<i64>,
    /// How they were settled.
    pub outcome: Settled,
}

/// How a source offset was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Fully handled: every record it became is durable (or it became none).
    Done,
    /// A stage failed on it: the pipeline stops and never commits past it.
    Failed,
    /// A record it became could not be delivered: the pipeline stops, never past it.
    Undelivered(String),
}

/// The records one source offset became; when the last is acknowledged the offset is settled.
pub struct Ticket {
    key: PartitionKey,
    generation: u64,
    offset: i64,
    remaining: AtomicU32,
    error: Mutex<Option<String>>,
    done: Sender<Completion>,
}

impl Ticket {
    /// A ticket for `records` records of `offset`, reporting to `done`.
    pub fn new(
        key: PartitionKey,
        generation: u64,
        offset: i64,
        records: u32,
        done: Sender<Completion>,
    ) -> Arc<Self> {
        Arc::new(Ticket {
            key,
            generation,
            offset,
            remaining: AtomicU32::new(records),
            error: Mutex::new(None),
            done,
        })
    }

    /// One record is acknowledged (`None`) or lost (`Some(why)`).
    pub fn settle(&self, error: Option<String>) {
        if let Some(e) = error {
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let err = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
            let _ = self.done.send(Completion {
                key: self.key.clone(),
                generation: self.generation,
                offsets: vec![self.offset],
                outcome: err.map_or(Settled::Done, Settled::Undelivered),
            });
        }
    }
}

/// One record for a sink.
pub enum Record<'a> {
    /// A message that passed the chain.
    Output {
        /// The message.
        msg: &'a Message,
        /// Settled on acknowledgement (sinks that acknowledge later).
        ticket: Option<Arc<Ticket>>,
    },
    /// A rejected message, for the reject path.
    Reject {
        /// The message as the source delivered it (the stage may have seen a changed one).
        original: &'a Message,
        /// Who rejected it and why.
        rejected: &'a Rejected,
        /// Settled on acknowledgement (sinks that acknowledge later).
        ticket: Option<Arc<Ticket>>,
    },
}

/// A sink that cannot be opened, written or flushed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file or stdout.
    #[error("sink {what}: {source}")]
    Io {
        /// Which.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The Kafka producer refused.
    #[error("kafka sink `{topic}`: {source}")]
    Kafka {
        /// Default topic.
        topic: String,
        /// Why.
        source: rdkafka::error::KafkaError,
    },
    /// Records were not acknowledged in time.
    #[error("kafka sink `{topic}`: {records} records not acknowledged: {source}")]
    Unacknowledged {
        /// Default topic.
        topic: String,
        /// How many.
        records: u64,
        /// Why.
        source: rdkafka::error::KafkaError,
    },
}

/// Where records go.
pub trait Sink: Send + Sync {
    /// Takes a batch's records from `lane`.
    fn write(&self, lane: &Lane, records: Vec<Record<'_>>) -> Result<(), SinkError>;
    /// True when records are durable only once acknowledged (they carry tickets).
    fn acknowledges_later(&self) -> bool;
    /// Waits up to `timeout` until everything written is durable.
    fn flush(&self, timeout: Duration) -> Result<(), SinkError>;
    /// Records written (line sinks) or acknowledged (Kafka).
    fn delivered(&self) -> u64;
}

/// A transaction could not be opened, committed or aborted.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// Another member owns the partition now (its producer took over the transactional id):
    /// this one's transaction cannot commit.
    #[error("{key}: fenced: another member owns this partition now ({why}); nothing of the open transaction is visible")]
    Fenced {
        /// The partition.
        key: PartitionKey,
        /// What the broker said.
        why: String,
    },
    /// The group moved on (a rebalance since this member's group metadata): the broker
    /// refused the transaction's offsets, and the transaction can only be aborted.
    #[error("{key}: the group moved on, the transaction's offsets were refused ({why}); nothing of the open transaction is visible")]
    GroupMoved {
        /// The partition.
        key: PartitionKey,
        /// What the broker said.
        why: String,
    },
    /// The broker or the client refused.
    #[error("{key}: transaction {what}: {why}")]
    Failed {
        /// The partition.
        key: PartitionKey,
        /// `open`, `begin`, `commit` or `abort`.
        what: &'static str,
        /// Why.
        why: String,
    },
}

/// Transactions per source partition (`delivery: exactly-once`). The driver that owns a
/// partition's lane calls these, between batches; the partition's records go to the sinks
/// as usual, and the sinks put them in its open transaction.
pub trait Transactions: Send + Sync {
    /// Readies the partition's transactional producer. Blocking. Any older owner of the
    /// partition is fenced, and its open transaction aborted, by the broker.
    fn open(&self, key: &PartitionKey) -> Result<(), TxnError>;
    /// Starts a transaction for the partition's next records.
    fn begin(&self, key: &PartitionKey) -> Result<(), TxnError>;
    /// Commits the open transaction with `next` (the partition's next offset to read) as
    /// the group's committed offset: its records become visible and the offset committed,
    /// together or not at all. Blocking: waits until every record is acknowledged.
    fn commit(&self, key: &PartitionKey, next: i64) -> Result<(), TxnError>;
    /// Aborts the open transaction: none of its records ever become visible.
    fn abort(&self, key: &PartitionKey) -> Result<(), TxnError>;
    /// Releases the partition's producer (after a commit or an abort).
    fn close(&self, key: &PartitionKey);
}

/// One state write on its way to a stage's changelog topic (see [`crate::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The changelog topic (`<pipeline>.<stage>.<bucket>.changelog`).
    pub topic: Arc<str>,
    /// The bucket's key.
    pub key: Arc<str>,
    /// The encoded value (write time, then the stage's bytes; shared with the state's log);
    /// none: a tombstone.
    pub value: Option<crate::state::Encoded>,
    /// The source offset whose outcome the write belongs to (see [`ChangelogAcks`]).
    pub tag: i64,
}

/// Where acknowledged changelog records landed, so a store's checkpoint can move past them
/// when it applies their writes (a restart then re-reads only what came after): per
/// changelog topic and partition, `(tag, offset)` in acknowledgement order.
#[derive(Debug, Default)]
pub struct ChangelogAcks {
    /// By topic (looked up by `&str`: a delivery allocates nothing), then partition.
    acked: Mutex<HashMap<Arc<str>, HashMap<i32, AckQueue>>>,
}

/// `(tag, offset)` of acknowledged records, in acknowledgement order.
type AckQueue = std::collections::VecDeque<(i64, i64)>;

impl ChangelogAcks {
    /// A record of the write tagged `tag` is at `offset` of `topic`'s `partition`.
    pub fn acked(&self, topic: &str, partition: i32, tag: i64, offset: i64) {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        let parts = match a.get_mut(topic) {
            Some(parts) => parts,
            None => a.entry(topic.into()).or_default(),
        };
        parts.entry(partition).or_default().push_back((tag, offset));
    }

    /// The offset after the last acknowledged record of the writes tagged below `next`,
    /// taking them out; `None` when there is none. It stops at the first record tagged
    /// `next` or later, so a record acknowledged out of order only holds the answer back.
    pub fn settled_below(&self, topic: &str, partition: i32, next: i64) -> Option<i64> {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        let q = a.get_mut(topic)?.get_mut(&partition)?;
        let mut last = None;
        while let Some(&(tag, offset)) = q.front() {
            if tag >= next {
                break;
            }
            last = Some(last.map_or(offset, |l: i64| l.max(offset)));
            q.pop_front();
        }
        last.map(|o| o + 1)
    }

    /// Forgets `partition` of `topic` (it left this process).
    pub fn forget(&self, topic: &str, partition: i32) {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(parts) = a.get_mut(topic) {
            parts.remove(&partition);
        }
    }
}

/// What a restore hands each changelog record to: its offset, key and value (none: a
/// tombstone).
pub type ApplyRecord<'a> = dyn FnMut(i64, &str, Option<&[u8]>) + 'a;

/// Where stages' state writes are made durable: a compacted changelog topic per stage and
/// bucket, partitioned like the source. At-least-once its records carry a ticket of the
/// batch, so no offset commits before they are acknowledged; exactly-once each key's last
/// write of a transaction goes into it just before it commits (Kafka Streams' record cache:
/// one record per key per transaction, not per write).
pub trait Changelog: Send + Sync {
    /// Sends the writes of a batch of `lane` to the changelog partition of the lane's
    /// partition; each acknowledgement settles `ticket` once and is noted in [`Changelog::acks`]
    /// with its offset.
    fn write(&self, lane: &Lane, records: &[ChangeRecord], ticket: &Arc<Ticket>);
    /// Exactly-once: puts `records` (each key's last write since the partition's last
    /// commit) into the open transaction of `lane`'s partition, just before it commits. Its
    /// commit waits for their acknowledgements (noted in [`Changelog::acks`]).
    fn write_to_transaction(&self, lane: &Lane, records: &[ChangeRecord]) -> Result<(), String>;
    /// Where the acknowledged records landed.
    fn acks(&self) -> &Arc<ChangelogAcks>;
    /// Reads partition `partition` of `topic` from offset `from` to its end (committed
    /// records only, under exactly-once), handing each record to `apply` (offset, key,
    /// value). Returns the offset after the last record (the end), or why it could not.
    fn restore(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        apply: &mut ApplyRecord<'_>,
    ) -> Result<i64, String>;
}

/// Which destination a sink is, for its metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Messages that passed the chain.
    Sink,
    /// The reject path (dead-letter queue).
    Rejects,
}

impl Role {
    /// The label of [`Metrics::produced`](crate::metrics::Metrics).
    pub fn label(self) -> &'static str {
        match self {
            Role::Sink => "sink",
            Role::Rejects => "dlq",
        }
    }

    /// How errors name its Kafka client.
    pub fn client_name(self) -> &'static str {
        match self {
            Role::Sink => "kafka sink",
            Role::Rejects => "kafka reject path",
        }
    }
}

impl SinkConfig {
    /// Opens the sink this configures. A Kafka sink records client errors that retrying
    /// cannot heal in `fatal` (the run's source ends the run with them).
    pub fn build(
        &self,
        role: Role,
        metrics: &Metrics,
        fatal: Arc<crate::kafka::fatal::FatalSlot>,
    ) -> Result<Arc<dyn Sink>, SinkError> {
        Ok(match self {
            SinkConfig::Kafka(k) => Arc::new(kafka::KafkaSink::open(
                k,
                (
                    metrics.produced.with_label_values(&[role.label()]),
                    crate::kafka::queued::Queued::of(
                        metrics,
                        match role {
                            Role::Sink => "sink",
                            Role::Rejects => "reject",
                        },
                    ),
                ),
                (role, fatal),
            )?),
            other => Arc::new(line::LineSink::open(other)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changelog_checkpoint_moves_past_the_records_of_committed_writes_only() {
        let acks = ChangelogAcks::default();
        let t: Arc<str> = "c".into();
        for (tag, offset) in [(1, 10), (1, 11), (3, 12), (5, 13), (4, 14), (6, 15)] {
            acks.acked("c", 0, tag, offset);
        }
        acks.acked("c", 1, 1, 99);
        assert_eq!(acks.settled_below(&t, 0, 1), None, "nothing below 1");
        assert_eq!(
            acks.settled_below(&t, 0, 4),
            Some(13),
            "after offset 12 (tags 1, 1, 3)"
        );
        // Tag 4 was acknowledged after tag 5: commit 5 stops at tag 5, holding 4 back.
        assert_eq!(acks.settled_below(&t, 0, 5), None);
        assert_eq!(acks.settled_below(&t, 0, 7), Some(16));
        assert_eq!(acks.settled_below(&t, 1, 7), Some(100), "partitions apart");
        acks.acked("c", 1, 8, 100);
        acks.forget(&t, 1);
        assert_eq!(acks.settled_below(&t, 1, 9), None, "forgotten");
    }
}
