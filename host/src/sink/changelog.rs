//! Stateful stages' changelogs on Kafka: one compacted topic per stage and bucket,
//! partitioned like the source (`<pipeline>.<stage>.<bucket>.changelog`, partition = source
//! partition). At-least-once a plain idempotent producer sends the records; exactly-once the
//! partition's transactional producer does, in its open transaction. A restore reads a
//! partition from an offset to its end with an assign-only consumer (`read_committed` under
//! exactly-once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::transactional::KafkaTransactions;
use super::ChangelogAcks;
use super::{ChangeRecord, Changelog, SinkError, Ticket};
use crate::config::KafkaSource;
use crate::kafka::fatal::FatalSlot;
use crate::kafka::retry::{any_of, asked_again};
use crate::message::Lane;

/// Longest a restore waits without a record or the end before it gives up.
const RESTORE_STALL: Duration = Duration::from_secs(60);
/// Longest a metadata request may take.
const REQUEST: Duration = Duration::from_secs(30);
/// How long a restore stays quiet at what looks like the end before it asks the broker again
/// whether that is the end.
const END_CHECK: Duration = Duration::from_millis(50);
/// How long a restore that found nothing to read waits before it asks for the end again.
const EMPTY_CHECK: Duration = Duration::from_millis(10);
/// Longest a topic creation may take.
const CREATE: Duration = Duration::from_secs(10);

/// Settles the batch tickets of changelog records and notes where each landed.
pub struct ChangelogContext {
    fatal: Arc<FatalSlot>,
    acks: Arc<ChangelogAcks>,
    /// Its queue's share of `weir_kafka_queued_*{client="changelog"}` (none: not counted).
    queued: Option<crate::kafka::queued::Queued>,
}

impl ClientContext for ChangelogContext {
    fn stats(&self, s: rdkafka::statistics::Statistics) {
        if let Some(q) = &self.queued {
            q.producer(&s);
        }
    }
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::kafka::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if self
            .fatal
            .record("kafka changelog producer", &error, reason)
        {
            tracing::error!("changelog producer: {error}: {reason}");
        } else {
            tracing::warn!("changelog producer: {error}: {reason}");
        }
    }
}

impl ProducerContext for ChangelogContext {
    /// The batch's ticket and the record's tag (the source offset its write belongs to).
    type DeliveryOpaque = Box<(Arc<Ticket>, i64)>;

    fn delivery(&self, result: &DeliveryResult<'_>, d: Box<(Arc<Ticket>, i64)>) {
        let (ticket, tag) = *d;
        match result {
            Ok(m) => {
                self.acks.acked(m.topic(), m.partition(), tag, m.offset());
                ticket.settle(None)
            }
            Err((e, _)) => ticket.settle(Some(format!("changelog record not delivered: {e}"))),
        }
    }
}

/// A restore consumer's client events: the end of the partition is how a restore ends, not
/// an error worth a log line.
struct RestoreContext;

impl ClientContext for RestoreContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::kafka::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!("changelog restore: {error}: {reason}");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for RestoreContext {}

enum Writer {
    Plain(ThreadedProducer<ChangelogContext>),
    Transactional(Arc<KafkaTransactions>),
}

/// The changelogs of a pipeline's stateful stages on its source's cluster.
pub struct KafkaChangelog {
    writer: Writer,
    acks: Arc<ChangelogAcks>,
    /// Restore consumers' settings.
    consumer: ClientConfig,
    /// Restore consumers not in use: one is made when a restore finds none and kept (a new
    /// one costs a bootstrap connection and a metadata request: about 100 ms on the mock
    /// cluster), so there are as many as restores ran at once.
    restorers: std::sync::Mutex<Vec<BaseConsumer<RestoreContext>>>,
    /// Asks where changelog partitions end, for every restore (see [`KafkaChangelog::probe`]).
    probe: std::sync::Mutex<Option<Arc<BaseConsumer<RestoreContext>>>>,
}

impl KafkaChangelog {
    /// Changelogs on `src`'s cluster, written by a plain producer (at-least-once) or by the
    /// partitions' transactional producers in `txns` (exactly-once). The plain producer's
    /// queue counts in `queued`.
    pub fn open(
        src: &KafkaSource,
        txns: Option<Arc<KafkaTransactions>>,
        fatal: Arc<FatalSlot>,
        queued: Option<crate::kafka::queued::Queued>,
    ) -> Result<Self, SinkError> {
        let mut consumer = crate::kafka::client::consumer_config(src);
        consumer
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // A restore reads to the end and stops: no waiting on the broker for more.
            .set("fetch.wait.max.ms", "10")
            .set(
                "isolation.level",
                if txns.is_some() {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            );
        // librdkafka's assign needs a group id; the restore consumer never joins or commits.
        consumer.set("group.id", format!("{}.weir-restore", src.group));
        consumer.remove("partition.assignment.strategy");
        crate::kafka::queued::disable(&mut consumer);
        let acks = Arc::new(ChangelogAcks::default());
        let writer = match txns {
            Some(t) => Writer::Transactional(t),
            None => {
                let mut p = producer_settings(src);
                p.set("acks", "all").set("enable.idempotence", "true");
                if queued.is_some() {
                    crate::kafka::queued::enable(&mut p);
                }
                let context = ChangelogContext {
                    fatal,
                    acks: acks.clone(),
                    queued,
                };
                let producer =
                    ThreadedProducer::from_config_and_context(&p, context).map_err(|source| {
                        SinkError::Kafka {
                            topic: "changelog".into(),
                            source,
                        }
                    })?;
                Writer::Plain(producer)
            }
        };
        Ok(KafkaChangelog {
            writer,
            acks,
            consumer,
            restorers: std::sync::Mutex::new(Vec::new()),
            probe: std::sync::Mutex::new(None),
        })
    }

    /// Creates the changelog topics that do not exist yet, compacted, with `partitions`
    /// partitions (the source topic's count). Errors name the topic.
    pub fn ensure_topics(src: &KafkaSource, topics: &[String]) -> Result<(), String> {
        if topics.is_empty() {
            return Ok(());
        }
        let admin: AdminClient<DefaultClientContext> = producer_settings(src)
            .create()
            .map_err(|e| format!("changelog topics: {e}"))?;
        let source_topic = src.topics.first().map(String::as_str).unwrap_or_default();
        let md = admin
            .inner()
            .fetch_metadata(Some(source_topic), REQUEST)
            .map_err(|e| format!("changelog topics: reading `{source_topic}`: {e}"))?;
        let partitions = md
            .topics()
            .iter()
            .find(|t| t.name() == source_topic)
            .map_or(0, |t| t.partitions().len());
        if partitions == 0 {
            return Err(format!(
                "changelog topics: source topic `{source_topic}` has no partitions"
            ));
        }
        let all = admin
            .inner()
            .fetch_metadata(None, REQUEST)
            .map_err(|e| format!("changelog topics: {e}"))?;
        let missing: Vec<&String> = topics
            .iter()
            .filter(|t| {
                !all.topics()
                    .iter()
                    .any(|m| m.name() == t.as_str() && !m.partitions().is_empty())
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let new: Vec<NewTopic<'_>> = missing
            .iter()
            .map(|t| {
                NewTopic::new(t, partitions as i32, TopicReplication::Fixed(-1))
                    .set("cleanup.policy", "compact")
            })
            .collect();
        let opts = AdminOptions::new()
            .request_timeout(Some(CREATE))
            .operation_timeout(Some(CREATE));
        let created = futures_executor::block_on(admin.create_topics(&new, &opts));
        let results = match created {
            Ok(r) => r,
            // Some brokers (librdkafka's mock cluster) do not answer CreateTopics.
            Err(e) => {
                return Err(format!(
                    "changelog topics {} cannot be created ({e}): create them with {partitions} partitions and cleanup.policy=compact",
                    list(&missing)
                ))
            }
        };
        for r in results {
            match r {
                Ok(t) => tracing::info!(topic = %t, partitions, "changelog topic created"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => {
                    return Err(format!(
                        "changelog topic `{t}` cannot be created ({e}): create it with {partitions} partitions and cleanup.policy=compact"
                    ))
                }
            }
        }
        Ok(())
    }
}

fn list(topics: &[&String]) -> String {
    topics
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl KafkaChangelog {
    /// The partitions of a changelog topic.
    pub fn partitions(src: &KafkaSource, topic: &str) -> Result<Vec<i32>, String> {
        let c: BaseConsumer = producer_settings(src)
            .create()
            .map_err(|e| format!("changelog `{topic}`: {e}"))?;
        let md = c
            .fetch_metadata(Some(topic), REQUEST)
            .map_err(|e| format!("changelog `{topic}`: {e}"))?;
        let parts: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if parts.is_empty() {
            return Err(format!("changelog topic `{topic}` does not exist"));
        }
        Ok(parts)
    }

    /// How many members the source's consumer group has now.
    pub fn group_members(src: &KafkaSource) -> Result<usize, String> {
        let c: BaseConsumer = producer_settings(src)
            .create()
            .map_err(|e| format!("group `{}`: {e}", src.group))?;
        let groups = c
            .fetch_group_list(Some(&src.group), REQUEST)
            .map_err(|e| format!("group `{}`: {e}", src.group))?;
        Ok(groups
            .groups()
            .iter()
            .filter(|g| g.name() == src.group)
            .map(|g| g.members().len())
            .sum())
    }
}

/// Producer and admin settings from the source's connection (brokers, security, the user's
/// properties that apply to any client).
fn producer_settings(src: &KafkaSource) -> ClientConfig {
    let c = crate::kafka::client::consumer_config(src);
    let mut p = ClientConfig::new();
    for (k, v) in c.config_map() {
        let consumer_only = [
            "group.id",
            "auto.offset.reset",
            "partition.assignment.strategy",
            "queued.max.messages.kbytes",
            "fetch.queue.backoff.ms",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "isolation.level",
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "max.poll.interval.ms",
            "group.instance.id",
            "enable.partition.eof",
            "fetch.wait.max.ms",
            "fetch.min.bytes",
            "fetch.max.bytes",
            "max.partition.fetch.bytes",
            "topic.metadata.refresh.interval.ms",
        ];
        if !consumer_only.contains(&k) {
            p.set(k, v);
        }
    }
    p.set("linger.ms", "5");
    p
}

impl Changelog for KafkaChangelog {
    fn write(&self, lane: &Lane, records: &[ChangeRecord], ticket: &Arc<Ticket>) {
        match &self.writer {
            Writer::Transactional(t) => {
                // Into the open transaction: its commit is what makes them count.
                let result = t.write_changes(lane, records, &self.acks);
                for _ in records {
                    ticket.settle(result.clone().err());
                }
            }
            Writer::Plain(p) => {
                for r in records {
                    let d = Box::new((ticket.clone(), r.tag));
                    if let Err(why) = crate::kafka::record::send_keyed(
                        p,
                        &r.topic,
                        lane.partition,
                        r.key.as_bytes(),
                        r.value.as_ref().map(|v| &v[..]),
                        d,
                    ) {
                        ticket.settle(Some(why));
                    }
                }
            }
        }
    }

    fn write_to_transaction(&self, lane: &Lane, records: &[ChangeRecord]) -> Result<(), String> {
        match &self.writer {
            Writer::Transactional(t) => t.write_changes(lane, records, &self.acks),
            Writer::Plain(_) => Err("the changelog producer is not transactional".into()),
        }
    }

    fn acks(&self) -> &Arc<ChangelogAcks> {
        &self.acks
    }

    fn restore(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        apply: &mut super::ApplyRecord<'_>,
    ) -> Result<i64, String> {
        // Where the partition ends, asked with the probe (many restores at once may share it).
        let probe = self.probe(topic)?;
        let watermarks = || marks(&probe, topic, partition);
        let (low, mut high) = watermarks()?;
        if from > high {
            return Ok(high);
        }
        if from == high {
            // Nothing after the checkpoint (a new or caught-up partition), unless the end
            // offset lags: asked again a moment later (a short one: it is paid per partition).
            std::thread::sleep(EMPTY_CHECK);
            let (_, again) = watermarks()?;
            if again == high {
                return Ok(high);
            }
            high = again;
        }
        // Records to read: a consumer of its own (partitions restore side by side), kept
        // for the next (a new one costs a bootstrap connection).
        let kept = self
            .restorers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let consumer = match kept {
            Some(c) => c,
            None => self.new_consumer(topic)?,
        };
        let restored = read_to_end(&consumer, topic, partition, from.max(low), high, apply);
        // The next restore assigns its own partition.
        let _ = consumer.unassign();
        self.restorers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(consumer);
        restored
    }
}

impl KafkaChangelog {
    /// The consumer that asks where partitions end (made at the first restore, never
    /// assigned).
    fn probe(&self, topic: &str) -> Result<Arc<BaseConsumer<RestoreContext>>, String> {
        let mut probe = self.probe.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = &*probe {
            return Ok(p.clone());
        }
        let p = Arc::new(self.new_consumer(topic)?);
        *probe = Some(p.clone());
        Ok(p)
    }

    /// A restore consumer (a restore of `topic` asked for it).
    fn new_consumer(&self, topic: &str) -> Result<BaseConsumer<RestoreContext>, String> {
        self.consumer
            .create_with_context(RestoreContext)
            .map_err(|e| format!("changelog `{topic}`: {e}"))
    }
}

/// The low and high watermarks of `topic`'s `partition`, asked again (for up to [`REQUEST`])
/// while the partition has no leader yet: a changelog topic created a moment ago answers
/// `NotLeaderForPartition` until its leaders are elected (a loaded broker took over a second),
/// and a restore that gave up then stopped the pipeline.
fn marks(
    consumer: &BaseConsumer<RestoreContext>,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), String> {
    asked_again(REQUEST, any_of(NOT_READY), |left| {
        consumer.fetch_watermarks(topic, partition, left)
    })
    .map_err(|e| format!("changelog `{topic}` partition {partition}: {e}"))
}

/// Answers that a changelog partition gives while it is being made ready: no leader elected
/// yet, or not yet known to the broker asked (the topic was just created).
const NOT_READY: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::NotLeaderForPartition,
    RDKafkaErrorCode::LeaderNotAvailable,
    RDKafkaErrorCode::UnknownTopicOrPartition,
];

/// Reads `topic`'s `partition` from `position` (the end was `high` when asked), handing each
/// record to `apply`; returns the end.
fn read_to_end(
    consumer: &BaseConsumer<RestoreContext>,
    topic: &str,
    partition: i32,
    mut position: i64,
    mut high: i64,
    apply: &mut super::ApplyRecord<'_>,
) -> Result<i64, String> {
    let watermarks = || marks(consumer, topic, partition);
    // The end is the end once the broker says the same twice, a moment apart, and no
    // record came in between: a broker's end offset can lag behind records it has
    // acknowledged (tansu 0.6's does, and its end-of-partition events with it), and a
    // restore that stopped there would lose the last writes.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(position))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut last_progress = Instant::now();
    let mut quiet_since: Option<Instant> = (position >= high).then(Instant::now);
    loop {
        match consumer.poll(Duration::from_millis(20)) {
            Some(Ok(m)) => {
                last_progress = Instant::now();
                let key = m.key().map(String::from_utf8_lossy).unwrap_or_default();
                apply(m.offset(), &key, m.payload());
                position = m.offset() + 1;
                quiet_since = (position >= high).then(Instant::now);
            }
            // The end as the last fetch saw it (transaction markers, which a consumer
            // never sees, may follow the last record).
            Some(Err(KafkaError::PartitionEOF(_))) => {
                quiet_since.get_or_insert_with(Instant::now);
            }
            Some(Err(e)) => {
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::OffsetOutOfRange) {
                    return Err(format!("changelog `{topic}` partition {partition}: {e}"));
                }
                tracing::warn!(topic, partition, "restoring: {e}");
            }
            None => {}
        }
        if quiet_since.is_some_and(|q| q.elapsed() >= END_CHECK) {
            let (_, again) = watermarks()?;
            if again <= high {
                return Ok(high.max(position));
            }
            high = again;
            quiet_since = (position >= high).then(Instant::now);
        }
        if last_progress.elapsed() > RESTORE_STALL {
            return Err(format!(
                    "changelog `{topic}` partition {partition}: no record for {}s while restoring (at offset {position} of {high})",
                    RESTORE_STALL.as_secs()
                ));
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;

    /// A changelog partition whose leader is still being elected (the topic was created a
    /// moment ago) is asked again instead of failing the restore: three `ListOffsets`
    /// answers of "not leader", then the real end (without asking again: the error).
    #[test]
    fn a_partition_without_a_leader_yet_is_asked_again_until_it_has_one() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("log", 2, 1).expect("topic");
        let consumer: BaseConsumer<RestoreContext> = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "restore")
            .create_with_context(RestoreContext)
            .expect("consumer");
        assert_eq!(marks(&consumer, "log", 1), Ok((0, 0)));
        let not_leader = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION;
        cluster.request_errors(RDKafkaApiKey::ListOffsets, &[not_leader; 3]);
        assert_eq!(marks(&consumer, "log", 1), Ok((0, 0)));
        // (Other answers are final: `kafka::retry`'s tests.)
    }
}
