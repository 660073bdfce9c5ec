//! `delivery: exactly-once` on Kafka: one transactional producer per source partition.
//!
//! A partition's transactional id is `<prefix>.<topic>.<partition>` (the prefix is the sink's
//! `transactional.id` property, else `weir.<group>`), so whoever owns the partition owns the
//! id. The new owner's `init_transactions` fences the old one — a zombie's produce and commit
//! fail — and aborts the transaction the old one left open, on any broker, with or without
//! KIP-447's group-generation check. The partition's next offset goes into the same
//! transaction with the consumer's group metadata (`send_offsets_to_transaction`), so a broker
//! that has KIP-447 also refuses a member of an older generation.
//!
//! The sink and the reject path are two views ([`TxnSink`]) of one [`KafkaTransactions`]:
//! an output and a dead-letter record of the same partition go through the same producer,
//! into the same transaction.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::kafka::{dlq_headers, send};
use super::{Record, Role, Sink, SinkError, Ticket, Transactions, TxnError};
use crate::config::KafkaSink as KafkaSinkConfig;
use crate::kafka::fatal::FatalSlot;
use crate::kafka::group::GroupSlot;
use crate::kafka::record::headers_of;
use crate::message::Lane;
use crate::message::PartitionKey;
use crate::metrics::Metrics;

/// Longest one transactional request (init, commit, abort, offsets) may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a retriable commit error is retried.
const COMMIT_RETRIES: usize = 3;

/// A record on its way, and which destination it counts for.
pub struct TxnDelivery {
    /// None: a changelog record written just before the commit (the commit waits for it).
    ticket: Option<Arc<Ticket>>,
    /// None: a stage's changelog record.
    role: Option<Role>,
    /// A changelog record: where to note its offset, and its tag.
    change: Option<(Arc<super::ChangelogAcks>, i64)>,
}

/// Acknowledged records per destination.
#[derive(Default)]
struct Acked {
    sink: AtomicU64,
    dlq: AtomicU64,
}

impl Acked {
    fn of(&self, role: Role) -> &AtomicU64 {
        match role {
            Role::Sink => &self.sink,
            Role::Rejects => &self.dlq,
        }
    }
}

/// Settles tickets from one partition producer's delivery reports.
pub struct TxnContext {
    acked: Arc<Acked>,
    produced: [prometheus::IntCounter; 2],
    fatal: Arc<FatalSlot>,
    /// This producer's queue's share of `weir_kafka_queued_*{client="transactions"}`.
    queued: crate::kafka::queued::Queued,
}

impl ClientContext for TxnContext {
    fn stats(&self, s: rdkafka::statistics::Statistics) {
        self.queued.producer(&s);
    }
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::kafka::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        // A fenced producer's fatal error is part of the protocol (a new owner took the
        // partition) and handled where the transaction fails; credentials and missing topics
        // are not.
        let heals = error.rdkafka_error_code().is_none_or(|c| {
            crate::kafka::fatal::classify(c, reason)
                .is_none_or(|k| k == crate::kafka::fatal::FailureKind::Runtime)
        });
        if !heals
            && self
                .fatal
                .record("kafka transactional producer", &error, reason)
        {
            tracing::error!("transactional producer: {error}: {reason}");
        } else {
            tracing::warn!("transactional producer: {error}: {reason}");
        }
    }
}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = Box<TxnDelivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, d: Box<TxnDelivery>) {
        match result {
            Ok(m) => {
                if let Some(role) = d.role {
                    self.acked.of(role).fetch_add(1, Ordering::Relaxed);
                    self.produced[role as usize].inc();
                }
                if let Some((acks, tag)) = &d.change {
                    use rdkafka::Message as _;
                    acks.acked(m.topic(), m.partition(), *tag, m.offset());
                }
                if let Some(t) = &d.ticket {
                    t.settle(None);
                }
            }
            Err((e, _)) => {
                if let Some(t) = &d.ticket {
                    t.settle(Some(format!("delivery failed: {e}")));
                }
            }
        }
    }
}

type PartitionProducer = ThreadedProducer<TxnContext>;

/// One transactional producer per owned source partition.
pub struct KafkaTransactions {
    client: ClientConfig,
    prefix: String,
    sink_topic: Arc<str>,
    dlq_topic: Option<Arc<str>>,
    group: Arc<GroupSlot>,
    producers: Mutex<HashMap<PartitionKey, Arc<PartitionProducer>>>,
    acked: Arc<Acked>,
    produced: [prometheus::IntCounter; 2],
    fatal: Arc<FatalSlot>,
    /// Each partition producer gets its share of these gauges.
    queued: crate::kafka::queued::Queued,
}

impl KafkaTransactions {
    /// Transactions for `sink` (and `dlq`, on the same cluster), sending offsets for the
    /// consumer group `group` with the metadata in `slot`.
    pub fn new(
        sink: &KafkaSinkConfig,
        dlq: Option<&KafkaSinkConfig>,
        group: &str,
        slot: Arc<GroupSlot>,
        metrics: &Metrics,
        fatal: Arc<FatalSlot>,
    ) -> Self {
        let mut client = crate::kafka::client::producer_config(sink);
        crate::kafka::queued::enable(&mut client);
        let prefix = client
            .get("transactional.id")
            .map_or_else(|| format!("weir.{group}"), str::to_owned);
        client.remove("transactional.id");
        KafkaTransactions {
            client,
            prefix,
            sink_topic: sink.topic.as_str().into(),
            dlq_topic: dlq.map(|d| d.topic.as_str().into()),
            group: slot,
            producers: Mutex::new(HashMap::new()),
            acked: Arc::new(Acked::default()),
            produced: [
                metrics.produced.with_label_values(&[Role::Sink.label()]),
                metrics.produced.with_label_values(&[Role::Rejects.label()]),
            ],
            fatal,
            queued: crate::kafka::queued::Queued::of(metrics, "transactions"),
        }
    }

    /// The sink (`Role::Sink`) or reject path (`Role::Rejects`) view.
    pub fn sink(self: &Arc<Self>, role: Role) -> Arc<TxnSink> {
        Arc::new(TxnSink {
            txns: self.clone(),
            role,
        })
    }

    /// Stateful stages' changelog records of `lane` (each key's last write since the
    /// partition's last commit), into its partition's open transaction, just before it
    /// commits: the commit waits for their acknowledgements, and fails if one fails.
    pub fn write_changes(
        &self,
        lane: &Lane,
        records: &[super::ChangeRecord],
        acks: &Arc<super::ChangelogAcks>,
    ) -> Result<(), String> {
        let key = PartitionKey {
            topic: lane.topic.clone(),
            partition: lane.partition,
        };
        let producer = self
            .producer(&key)
            .ok_or_else(|| format!("{key}: no transactional producer is open"))?;
        for r in records {
            let d = Box::new(TxnDelivery {
                ticket: None,
                role: None,
                change: Some((acks.clone(), r.tag)),
            });
            crate::kafka::record::send_keyed(
                &producer,
                &r.topic,
                lane.partition,
                r.key.as_bytes(),
                r.value.as_ref().map(|v| &v[..]),
                d,
            )?;
        }
        Ok(())
    }

    /// The transactional id of a partition.
    pub fn transactional_id(&self, key: &PartitionKey) -> String {
        format!("{}.{}.{}", self.prefix, key.topic, key.partition)
    }

    /// A new transactional producer for the partition, connected to a broker of the cluster.
    fn new_producer(&self, key: &PartitionKey) -> Result<PartitionProducer, TxnError> {
        let mut client = self.client.clone();
        client.set("transactional.id", self.transactional_id(key));
        let producer = PartitionProducer::from_config_and_context(
            &client,
            TxnContext {
                acked: self.acked.clone(),
                produced: self.produced.clone(),
                fatal: self.fatal.clone(),
                queued: self.queued.another(),
            },
        )
        .map_err(|e| txn_error(key, "open", e))?;
        // A connection to a broker of the cluster first (the bootstrap connection is dropped
        // once the cluster's brokers are known): librdkafka looks for the transaction
        // coordinator at once, and with no usable broker it retries only on a 500 ms timer.
        // (A bootstrap connection answers as broker -1.)
        for _ in 0..5 {
            match producer
                .client()
                .fetch_metadata(Some(&self.sink_topic), TXN_TIMEOUT)
            {
                Ok(m) if m.orig_broker_id() >= 0 => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        Ok(producer)
    }

    fn producer(&self, key: &PartitionKey) -> Option<Arc<PartitionProducer>> {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    fn owned(
        &self,
        key: &PartitionKey,
        what: &'static str,
    ) -> Result<Arc<PartitionProducer>, TxnError> {
        self.producer(key).ok_or_else(|| TxnError::Failed {
            key: key.clone(),
            what,
            why: "no producer is open for this partition".into(),
        })
    }
}

/// A transactional call's error, as the runtime sees it: fencing (another producer took the
/// partition's transactional id, or this member is no longer in the group, so another may own
/// the partition), the group moved on (offsets sent with an older generation by a member that
/// is still in the group: under cooperative assignment and KIP-848 its partitions cannot
/// have moved without its revoke, so they are still its own, and the transaction is only
/// abortable), or another failure.
fn txn_error(key: &PartitionKey, what: &'static str, e: KafkaError) -> TxnError {
    let code = match &e {
        KafkaError::Transaction(t) => Some(t.code()),
        _ => None,
    };
    let (key, why) = (key.clone(), e.to_string());
    match code {
        Some(
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::FencedInstanceId
            | RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::FencedMemberEpoch,
        ) => TxnError::Fenced { key, why },
        Some(
            RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::RebalanceInProgress
            | RDKafkaErrorCode::StaleMemberEpoch,
        ) => TxnError::GroupMoved { key, why },
        // A request that timed out or met a coordinator on the move, after which the
        // transaction can only be aborted: like a group that moved on, the partition is
        // still this member's until its revoke. (Not a record that cannot be delivered:
        // reading it again would fail again.)
        Some(
            RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::CoordinatorLoadInProgress
            | RDKafkaErrorCode::NotEnoughReplicas
            | RDKafkaErrorCode::NotEnoughReplicasAfterAppend,
        ) if abortable(&e) => TxnError::Interrupted { key, why },
        _ => TxnError::Failed { key, what, why },
    }
}

/// How long opening a partition's transactional producer keeps asking while the cluster
/// answers with retriable errors (down, a coordinator moving).
const OPEN_PATIENCE: Duration = Duration::from_secs(120);

/// One `send_offsets_to_transaction` call's timeout: a few round trips when the group
/// coordinator is up; a call that times out is asked again (it is retriable).
const SEND_OFFSETS_TIMEOUT: Duration = Duration::from_secs(10);

/// How much longer than its own timeout a transactional call may take before it counts as
/// unanswered.
const UNANSWERED_MARGIN: Duration = Duration::from_secs(2);

/// `f` on a thread of its own, waited for at most `within`; `None` if it did not return
/// then (the thread is left behind with what it holds). librdkafka (up to 2.14 at least,
/// issues 5456 and 5511) may never return from a transactional call when a coordinator's
/// broker is gone: its coordinator request ignores the timeout.
fn answered<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("weir-txn-call".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(within).ok()
}

fn abortable(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.txn_requires_abort())
}

fn retriable(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.is_retriable())
}

impl Transactions for KafkaTransactions {
    fn open(&self, key: &PartitionKey) -> Result<(), TxnError> {
        // A cluster that is down (or whose coordinator is moving) answers with retriable
        // errors: ask again for a while, so a run rides out a short outage. A producer whose
        // `init_transactions` does not return (librdkafka can wait on a coordinator that is
        // gone for good, issue 5511) is left behind, and a new one asks afresh.
        let deadline = Instant::now() + OPEN_PATIENCE;
        loop {
            let producer = Arc::new(self.new_producer(key)?);
            let p = producer.clone();
            let answer = answered(TXN_TIMEOUT + UNANSWERED_MARGIN, move || {
                p.init_transactions(TXN_TIMEOUT)
            });
            let why = match answer {
                Some(Ok(())) => {
                    self.producers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key.clone(), producer);
                    return Ok(());
                }
                Some(Err(e)) if retriable(&e) => e.to_string(),
                Some(Err(e)) => return Err(txn_error(key, "open", e)),
                None => format!(
                    "init_transactions did not return within {} s",
                    (TXN_TIMEOUT + UNANSWERED_MARGIN).as_secs()
                ),
            };
            if Instant::now() >= deadline {
                return Err(TxnError::Failed {
                    key: key.clone(),
                    what: "open",
                    why: format!("{why}; gave up after {} s", OPEN_PATIENCE.as_secs()),
                });
            }
            tracing::warn!(%key, "opening the transactional producer: {why}; trying again");
        }
    }

    fn begin(&self, key: &PartitionKey) -> Result<(), TxnError> {
        self.owned(key, "begin")?
            .begin_transaction()
            .map_err(|e| txn_error(key, "begin", e))
    }

    fn commit(&self, key: &PartitionKey, next: i64) -> Result<(), TxnError> {
        let producer = self.owned(key, "commit")?;
        let group = self.group.get().ok_or_else(|| TxnError::Failed {
            key: key.clone(),
            what: "commit",
            why: "the consumer has no group metadata yet".into(),
        })?;
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&key.topic, key.partition, Offset::Offset(next))
            .map_err(|e| txn_error(key, "commit", e))?;
        // Retriable refusals (a coordinator on the move) are asked again, up to the
        // transaction timeout.
        let deadline = Instant::now() + TXN_TIMEOUT;
        loop {
            let (p, offsets, group) = (producer.clone(), offsets.clone(), group.clone());
            let answer = answered(SEND_OFFSETS_TIMEOUT + UNANSWERED_MARGIN, move || {
                p.send_offsets_to_transaction(&offsets, &group, SEND_OFFSETS_TIMEOUT)
            });
            match answer {
                Some(Ok(())) => break,
                Some(Err(e)) if retriable(&e) && Instant::now() < deadline => {}
                // Still refused after the transaction timeout (the cluster is down): the
                // transaction is given up, and the partition read again from its last commit
                // once the cluster answers.
                Some(Err(e)) if retriable(&e) => {
                    return Err(TxnError::Interrupted {
                        key: key.clone(),
                        why: format!("offsets refused for {} s: {e}", TXN_TIMEOUT.as_secs()),
                    })
                }
                Some(Err(e)) => return Err(txn_error(key, "commit", e)),
                None => {
                    return Err(TxnError::Abandoned {
                        key: key.clone(),
                        why: format!(
                            "the client's send_offsets_to_transaction did not return within {} s (librdkafka issues 5456 and 5511: the group coordinator's broker is gone)",
                            (SEND_OFFSETS_TIMEOUT + UNANSWERED_MARGIN).as_secs()
                        ),
                    })
                }
            }
        }
        // Wait for the acknowledgements here: rdkafka's `commit_transaction` flushes first,
        // and its flush, racing the producer's own polling thread for the delivery reports,
        // sleeps in steps of 100 ms.
        let deadline = Instant::now() + TXN_TIMEOUT;
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut tries = 0;
        loop {
            match producer.commit_transaction(TXN_TIMEOUT) {
                Ok(()) => return Ok(()),
                Err(e) if retriable(&e) && tries < COMMIT_RETRIES => tries += 1,
                Err(e) => return Err(txn_error(key, "commit", e)),
            }
        }
    }

    fn abort(&self, key: &PartitionKey) -> Result<(), TxnError> {
        let producer = self.owned(key, "abort")?;
        // A fenced producer is dead: the broker has aborted its transaction already, and
        // asking it again would only wait for the timeout.
        if let Some((_, why)) = producer.client().fatal_error() {
            return Err(TxnError::Fenced {
                key: key.clone(),
                why,
            });
        }
        producer
            .abort_transaction(TXN_TIMEOUT)
            .map_err(|e| txn_error(key, "abort", e))
    }

    fn close(&self, key: &PartitionKey) {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// The sink or the reject path of exactly-once delivery: a lane's records go to its
/// partition's producer, in its open transaction.
pub struct TxnSink {
    txns: Arc<KafkaTransactions>,
    role: Role,
}

impl Sink for TxnSink {
    fn write(&self, lane: &Lane, records: Vec<Record<'_>>) -> Result<(), SinkError> {
        if records.is_empty() {
            return Ok(());
        }
        let key = PartitionKey {
            topic: lane.topic.clone(),
            partition: lane.partition,
        };
        let producer = self.txns.producer(&key);
        let default_topic = match self.role {
            Role::Sink => &self.txns.sink_topic,
            Role::Rejects => self
                .txns
                .dlq_topic
                .as_ref()
                .unwrap_or(&self.txns.sink_topic),
        };
        for r in records {
            let (to, msg, headers, ticket) = match r {
                Record::Output {
                    msg,
                    ticket: Some(t),
                } => (
                    msg.topic.as_deref().unwrap_or(default_topic),
                    msg,
                    headers_of(msg),
                    t,
                ),
                Record::Reject {
                    original,
                    rejected,
                    ticket: Some(t),
                } => (
                    &**default_topic,
                    original,
                    Some(dlq_headers(original, rejected, lane)),
                    t,
                ),
                _ => unreachable!("records for a Kafka sink carry tickets"),
            };
            let Some(producer) = &producer else {
                ticket.settle(Some(format!("{key}: no transactional producer is open")));
                continue;
            };
            let d = Box::new(TxnDelivery {
                ticket: Some(ticket),
                role: Some(self.role),
                change: None,
            });
            if let Err((d, why)) = send(producer, to, msg, headers, d) {
                if let Some(t) = &d.ticket {
                    t.settle(Some(why));
                }
            }
        }
        Ok(())
    }

    fn acknowledges_later(&self) -> bool {
        true
    }

    fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        let producers: Vec<_> = self
            .txns
            .producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for p in producers {
            p.flush(timeout)
                .map_err(|source| SinkError::Unacknowledged {
                    topic: self.txns.sink_topic.to_string(),
                    records: p.in_flight_count().max(0) as u64,
                    source,
                })?;
        }
        Ok(())
    }

    fn delivered(&self) -> u64 {
        self.txns.acked.of(self.role).load(Ordering::Relaxed)
    }
}
