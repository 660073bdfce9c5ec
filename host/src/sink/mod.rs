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

use std::sync::Arc;
use std::time::Duration;

pub use crate::ack::{Completion, Settled, Ticket};
use crate::config::SinkConfig;
use crate::message::PartitionKey;
use crate::message::Rejected;
use crate::message::{Lane, Message};
use crate::metrics::Metrics;
pub use crate::state::changelog::{ApplyRecord, ChangeRecord, Changelog, ChangelogAcks};

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
    /// A request timed out or met a coordinator on the move, and the transaction can only
    /// be aborted (a broker or the cluster was down for a while).
    #[error("{key}: the transaction was interrupted ({why}); nothing of it is visible")]
    Interrupted {
        /// The partition.
        key: PartitionKey,
        /// What the client said.
        why: String,
    },
    /// The client did not answer (a librdkafka call that ignores its timeout): the
    /// producer is abandoned; its transaction never commits, and the broker aborts it when
    /// the partition's next producer opens (or when it times out).
    #[error("{key}: the transaction's producer is abandoned: {why}; nothing of the open transaction is visible")]
    Abandoned {
        /// The partition.
        key: PartitionKey,
        /// Why.
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

impl TxnError {
    /// After this error between revokes, the run goes on and the partition is read again
    /// from its last commit (at once, or once it is clear it is still this member's):
    /// everything but [`TxnError::Failed`].
    pub fn partition_stays(&self) -> bool {
        !matches!(self, TxnError::Failed { .. })
    }
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
