//! A Kafka source: one consumer-group member (librdkafka).
//!
//! Rebalances are reported to the controller from inside [`Source::poll`], on its thread, and
//! the partitions change hands only after the handler returns: librdkafka's rebalance
//! callback just records the event; `poll` then tells the handler (a revoke is the drain
//! barrier: the handler returns once what was read is settled), commits synchronously while
//! the partitions are still owned, and only then calls (incremental) assign or unassign.
//!
//! With `stop_at_end`, the end of every newly assigned partition is read at assignment, for
//! all of them at once (one ListOffsets and one OffsetFetch request, not one per partition),
//! and reported to the handler once the last message before it was handed over.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::commit_queue::{CommitQueue, Confirmations};
use super::{Handler, Item, PartitionKey, Source, SourceError};
use crate::config::{KafkaSource as KafkaSourceConfig, StartFrom};
use crate::kafka::fatal::{is_topic_gone, ClientFailure, FatalSlot};
use crate::kafka::group::GroupSlot;
use crate::kafka::offsets::of as offsets;
use crate::message::Envelope;
use crate::metrics::Metrics;

/// How often the group metadata that transactions send is taken again from the consumer.
const GROUP_REFRESH: Duration = Duration::from_millis(100);
/// Most messages handed over per poll.
const BURST: usize = 1024;
/// Longest a blocking broker request (sync commit, end offsets) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a rewind asks for the group's committed offset of the partition (see
/// [`KafkaSource::settled_commit`]).
const SETTLE_PATIENCE: Duration = Duration::from_secs(15);

/// A rebalance librdkafka announced, waiting for `poll` to act on it.
enum Pending {
    Assign(TopicPartitionList),
    Revoke(TopicPartitionList),
    Error(String),
}

/// The consumer's context: it records rebalances (acted on after `poll` returns) and,
/// once the source is closing, carries them out at once.
pub struct SourceContext {
    pending: Mutex<Vec<Pending>>,
    closing: AtomicBool,
    fatal: Arc<FatalSlot>,
    /// The subscription has `^patterns`: a topic going away is not fatal (see
    /// [`PatternWatch`]).
    patterns: bool,
    /// The fetch queues' share of `weir_kafka_queued_*`.
    queued: crate::kafka::queued::Queued,
}

impl ClientContext for SourceContext {
    fn stats(&self, s: rdkafka::statistics::Statistics) {
        self.queued.consumer(&s);
    }
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::kafka::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            // With `stop_at_end` the end of a partition is news, not a problem (poll acts on it).
            tracing::debug!("consumer: {error}: {reason}");
        } else if self.patterns && is_topic_gone(&error) {
            tracing::warn!("consumer: {error}: {reason}");
        } else if self.fatal.record("kafka source", &error, reason) {
            tracing::error!("consumer: {error}: {reason}");
        } else {
            tracing::warn!("consumer: {error}: {reason}");
        }
    }
}

impl ConsumerContext for SourceContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let ev = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Pending::Assign(tpl.clone()),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Pending::Revoke(tpl.clone()),
            other => Pending::Error(rdkafka::error::RDKafkaErrorCode::from(other).to_string()),
        };
        if self.closing.load(Ordering::Relaxed) {
            // Leaving the group (or dropped): nothing is read any more; hand over at once.
            apply(consumer, &ev);
        } else {
            lock(&self.pending).push(ev);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Carries out a rebalance: assign, or release the partitions.
fn apply(consumer: &BaseConsumer<SourceContext>, ev: &Pending) {
    let cooperative = matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    );
    let r = match ev {
        Pending::Assign(tpl) if cooperative => consumer.incremental_assign(tpl),
        Pending::Assign(tpl) => consumer.assign(tpl),
        Pending::Revoke(tpl) if cooperative => consumer.incremental_unassign(tpl),
        Pending::Revoke(_) | Pending::Error(_) => consumer.unassign(),
    };
    if let Err(e) = r {
        tracing::warn!("carrying out a rebalance: {e}");
    }
}

fn keys_of(tpl: &TopicPartitionList) -> Vec<PartitionKey> {
    tpl.elements()
        .iter()
        .map(|e| PartitionKey::new(e.topic(), e.partition()))
        .collect()
}

fn tpl_of<'a>(keys: impl IntoIterator<Item = &'a PartitionKey>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for k in keys {
        tpl.add_partition(&k.topic, k.partition);
    }
    tpl
}

/// The Kafka source.
pub struct KafkaSource {
    // Dropped before the consumer it belongs to.
    queue: CommitQueue,
    consumer: BaseConsumer<SourceContext>,
    confirmed: Arc<Confirmations>,
    metrics: Arc<Metrics>,
    stop_at_end: bool,
    start: StartFrom,
    /// With `stop_at_end`: the end each partition had at assignment, until it is reported.
    ends: RefCell<HashMap<PartitionKey, i64>>,
    /// The group metadata (for exactly-once delivery): taken at every rebalance and every
    /// [`GROUP_REFRESH`], since a rebalance that moves nothing of this member's still moves
    /// the group's generation on, and offsets sent with an older one are refused
    /// (`ILLEGAL_GENERATION`).
    group: Arc<GroupSlot>,
    /// When `group` was last taken.
    group_taken: std::time::Instant,
    /// The run's first client error that retrying cannot heal (shared with the sinks).
    fatal: Arc<FatalSlot>,
    /// With `^patterns` among the topics: what they match, checked again every refresh.
    patterns: Option<PatternWatch>,
    /// The whole group's stalled partitions, watched on a thread of its own.
    _watch: Option<super::group_watch::GroupWatch>,
}

/// Re-matches `^pattern` subscriptions. librdkafka 2.12 matches a pattern when the
/// subscription is made, but neither its periodic metadata refresh nor subscribing again
/// with the same list brings in topics created later (seen against the mock cluster and
/// tansu: its metadata cache never takes them in). So Weir lists the topics itself every
/// `topic.metadata.refresh.interval.ms` (default 5 min) and, when the matches changed,
/// subscribes to the patterns plus, by name, every topic they match now (cooperative: only
/// the new partitions move). A matched topic that disappears gives an unknown-topic error,
/// which here means "match again now", not the end of the run.
struct PatternWatch {
    topics: Vec<String>,
    patterns: Vec<regex_lite::Regex>,
    every: Duration,
    next: std::time::Instant,
    matched: Option<std::collections::BTreeSet<String>>,
}

impl PatternWatch {
    fn new(cfg: &KafkaSourceConfig) -> Option<Self> {
        let patterns = cfg.patterns();
        if patterns.is_empty() {
            return None;
        }
        let every = cfg
            .properties
            .get("topic.metadata.refresh.interval.ms")
            .and_then(|v| crate::config::property_text(v).parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map_or(Duration::from_secs(300), Duration::from_millis);
        Some(PatternWatch {
            topics: cfg.topics.clone(),
            patterns,
            every,
            next: std::time::Instant::now(),
            matched: None,
        })
    }

    /// What to subscribe to: the configured topics (names and patterns) and, by name, every
    /// topic the patterns match now.
    fn subscription(&self, matched: &std::collections::BTreeSet<String>) -> Vec<String> {
        let mut topics = self.topics.clone();
        topics.extend(matched.iter().filter(|t| !self.topics.contains(t)).cloned());
        topics
    }

    /// The topics the patterns match in `meta` (internal ones never).
    fn matching(&self, meta: &rdkafka::metadata::Metadata) -> std::collections::BTreeSet<String> {
        meta.topics()
            .iter()
            .map(|t| t.name())
            .filter(|n| crate::config::pattern_matches(&self.patterns, n))
            .map(str::to_owned)
            .collect()
    }
}

fn kafka(what: impl Into<String>) -> impl FnOnce(KafkaError) -> SourceError {
    let what = what.into();
    move |source| SourceError::Kafka { what, source }
}

impl KafkaSource {
    /// Creates the consumer and subscribes to the topics (names, and `^patterns`). Errors
    /// that cannot heal, of this client or of any other that shares `fatal`, end `poll`.
    pub fn open(
        cfg: &KafkaSourceConfig,
        metrics: Arc<Metrics>,
        fatal: Arc<FatalSlot>,
    ) -> Result<Self, SourceError> {
        let mut client = crate::kafka::client::consumer_config(cfg);
        if cfg.stop_at_end {
            client.set("enable.partition.eof", "true");
        }
        crate::kafka::queued::enable(&mut client);
        let consumer = BaseConsumer::from_config_and_context(
            &client,
            SourceContext {
                pending: Mutex::new(Vec::new()),
                closing: AtomicBool::new(false),
                fatal: fatal.clone(),
                patterns: cfg.topics.iter().any(|t| crate::config::is_pattern(t)),
                queued: crate::kafka::queued::Queued::of(&metrics, "source"),
            },
        )
        .map_err(kafka(format!("consumer for group `{}`", cfg.group)))?;
        // Patterns: the topics they match now are subscribed to by name as well. librdkafka
        // matches a pattern against the metadata it happens to hold when it joins, and that
        // was sometimes one matching topic of two (the first assignment then lacked the
        // other, and `stop_at_end` stopped before the second came).
        let mut patterns = PatternWatch::new(cfg);
        let mut topics: Vec<String> = cfg.topics.clone();
        if let Some(w) = &mut patterns {
            match consumer.fetch_metadata(None, REQUEST_TIMEOUT) {
                Ok(meta) => {
                    let matched = w.matching(&meta);
                    topics = w.subscription(&matched);
                    w.matched = Some(matched);
                    w.next = std::time::Instant::now() + w.every;
                }
                Err(e) => tracing::warn!("listing topics for the subscription's patterns: {e}"),
            }
        }
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(kafka(format!("subscribing to {}", topics.join(","))))?;
        let confirmed = Confirmations::new(metrics.clone());
        let watch = super::group_watch::GroupWatch::start(cfg, metrics.clone());
        Ok(KafkaSource {
            queue: CommitQueue::new(&consumer, confirmed.clone()),
            consumer,
            confirmed,
            metrics,
            stop_at_end: cfg.stop_at_end,
            start: cfg.start,
            ends: RefCell::new(HashMap::new()),
            group: Arc::new(GroupSlot::default()),
            group_taken: std::time::Instant::now(),
            fatal,
            patterns,
            _watch: watch,
        })
    }

    /// With `^patterns`: every refresh interval, lists the topics and subscribes again when
    /// the set they match changed.
    fn rematch_patterns(&mut self) {
        let Some(w) = &mut self.patterns else {
            return;
        };
        let now = std::time::Instant::now();
        if now < w.next {
            return;
        }
        w.next = now + w.every;
        let meta = match self
            .consumer
            .fetch_metadata(None, REQUEST_TIMEOUT.min(w.every))
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("listing topics for the subscription's patterns: {e}");
                return;
            }
        };
        let now_matched = w.matching(&meta);
        let before = w.matched.replace(now_matched.clone());
        let Some(before) = before else {
            return;
        };
        if before == now_matched {
            return;
        }
        let added: Vec<&String> = now_matched.difference(&before).collect();
        let removed: Vec<&String> = before.difference(&now_matched).collect();
        tracing::info!(
            ?added,
            ?removed,
            "topics matching the subscription's patterns changed; subscribing again"
        );
        let topics = w.subscription(&now_matched);
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        if let Err(e) = self.consumer.subscribe(&topics) {
            tracing::warn!("subscribing again: {e}");
        }
    }

    /// With `^patterns`, an unknown topic is one that matched and went away: match again at
    /// the next poll instead of ending the run.
    fn pattern_topic_gone(&mut self, e: &KafkaError) -> bool {
        let Some(w) = &mut self.patterns else {
            return false;
        };
        let gone = is_topic_gone(e);
        if gone {
            tracing::warn!("{e}: a topic the patterns matched is gone; matching again");
            w.next = std::time::Instant::now();
        }
        gone
    }

    /// The consumer's group metadata, kept current at every rebalance: what transactions
    /// send with their offsets (`delivery: exactly-once`).
    pub fn group_slot(&self) -> Arc<GroupSlot> {
        self.group.clone()
    }

    /// Acts on the rebalances librdkafka announced during the last poll.
    fn rebalances(&self, to: &mut dyn Handler) {
        let pending = std::mem::take(&mut *lock(&self.consumer.context().pending));
        for mut ev in pending {
            let mut starts = HashMap::new();
            if let Pending::Assign(tpl) = &mut ev {
                if self.start.is_positional() {
                    starts = self.positional_starts(tpl);
                }
            }
            self.group.set(self.consumer.group_metadata());
            match &ev {
                Pending::Revoke(tpl) => {
                    self.metrics.rebalances.with_label_values(&["revoke"]).inc();
                    let keys = keys_of(tpl);
                    let offsets = to.revoked(&keys);
                    if let Err(e) = self.commit_now(&offsets) {
                        tracing::warn!("commit before releasing partitions: {e}");
                    }
                    for k in &keys {
                        self.ends.borrow_mut().remove(k);
                    }
                }
                Pending::Assign(_) => {
                    self.metrics.rebalances.with_label_values(&["assign"]).inc();
                }
                Pending::Error(e) => {
                    self.metrics.rebalances.with_label_values(&["error"]).inc();
                    tracing::warn!("rebalance error: {e}; releasing every partition");
                    self.release_all(to);
                }
            }
            apply(&self.consumer, &ev);
            self.group.set(self.consumer.group_metadata());
            if let Pending::Assign(tpl) = &ev {
                let keys = keys_of(tpl);
                // A partition can come back still paused from an earlier assignment.
                let _ = self.consumer.resume(tpl);
                to.assigned(&keys);
                if self.stop_at_end {
                    self.read_ends(&keys, &starts, to);
                }
            }
        }
    }

    /// The end of every partition in `keys`, in one request for all of them (and where
    /// reading starts, in one more each for committed offsets and the reset point). A
    /// partition with nothing to read is reported ended at once.
    fn read_ends(
        &self,
        keys: &[PartitionKey],
        starts: &HashMap<PartitionKey, i64>,
        to: &mut dyn Handler,
    ) {
        let query = |at: Offset| -> HashMap<PartitionKey, i64> {
            let mut tpl = TopicPartitionList::new();
            for k in keys {
                let _ = tpl.add_partition_offset(&k.topic, k.partition, at);
            }
            let out = self.consumer.offsets_for_times(tpl, REQUEST_TIMEOUT);
            offsets(out.ok().as_ref())
        };
        let high = query(Offset::End);
        let reset = match self.start {
            StartFrom::Earliest => query(Offset::Beginning),
            StartFrom::Latest => high.clone(),
            _ => starts.clone(),
        };
        let committed = offsets(
            self.consumer
                .committed_offsets(tpl_of(keys), REQUEST_TIMEOUT)
                .ok()
                .as_ref(),
        );
        for k in keys {
            let Some(&end) = high.get(k) else {
                tracing::warn!(key = %k, "end offset unknown; this partition never counts as ended");
                continue;
            };
            let start = committed.get(k).or(reset.get(k)).copied().unwrap_or(0);
            if start >= end {
                to.end(k, start);
            } else {
                self.ends.borrow_mut().insert(k.clone(), end);
            }
        }
    }
}

impl KafkaSource {
    /// With `start` a time or an offset: where each newly assigned partition without a
    /// committed offset starts, set in `tpl` (one request for the committed offsets, one for
    /// the times or the ends). A partition whose look-up fails starts as librdkafka's
    /// `auto.offset.reset` says (earliest for an offset, latest for a time).
    ///
    /// Committed offsets that cannot be read leave every partition where the group's
    /// committed offset puts it: a start position never takes the place of an offset that
    /// may exist. (The broker holds back a group's offsets while a transaction holding some
    /// of them is open, as a member killed inside its commit leaves one until this member's
    /// producer fences it; starting those partitions at the configured position read
    /// everything after it again.)
    fn positional_starts(&self, tpl: &mut TopicPartitionList) -> HashMap<PartitionKey, i64> {
        let keys = keys_of(tpl);
        let committed = match self
            .consumer
            .committed_offsets(tpl_of(&keys), REQUEST_TIMEOUT)
        {
            Ok(c) => offsets(Some(&c)),
            Err(e) => {
                tracing::warn!(
                    "committed offsets unknown ({e}): the newly assigned partitions start at \
                     their committed offsets, else as `auto.offset.reset` says, not at `start`"
                );
                return HashMap::new();
            }
        };
        let fresh: Vec<&PartitionKey> = keys
            .iter()
            .filter(|k| !committed.contains_key(*k))
            .collect();
        if fresh.is_empty() {
            return HashMap::new();
        }
        let mut query = TopicPartitionList::new();
        let at = match self.start {
            StartFrom::Offset(_) => Offset::End,
            other => Offset::Offset(
                other
                    .timestamp_ms(std::time::SystemTime::now())
                    .unwrap_or_default(),
            ),
        };
        for k in &fresh {
            let _ = query.add_partition_offset(&k.topic, k.partition, at);
        }
        let found = self.consumer.offsets_for_times(query, REQUEST_TIMEOUT);
        if let Err(e) = &found {
            tracing::warn!("looking up where to start: {e}");
        }
        let found = found.ok();
        let mut starts = HashMap::new();
        for k in fresh {
            let looked_up = found
                .as_ref()
                .and_then(|f| f.find_partition(&k.topic, k.partition))
                .map(|e| e.offset());
            let start = match (self.start, looked_up) {
                // `offsets_for_times` with `End` answers the partition's end offset.
                (StartFrom::Offset(n), Some(Offset::Offset(end))) => n.min(end),
                (StartFrom::Offset(n), _) => n,
                (_, Some(Offset::Offset(o))) => o,
                // No message at or after the time: the end.
                (_, Some(Offset::End)) | (_, Some(Offset::Invalid)) => {
                    match self
                        .consumer
                        .fetch_watermarks(&k.topic, k.partition, REQUEST_TIMEOUT)
                    {
                        Ok((_, high)) => high,
                        Err(_) => continue,
                    }
                }
                _ => continue,
            };
            tracing::info!(key = %k, offset = start, "no committed offset: starting at the configured `start`");
            let _ = tpl.set_partition_offset(&k.topic, k.partition, Offset::Offset(start));
            starts.insert(k.clone(), start);
        }
        starts
    }
}

impl Source for KafkaSource {
    fn rewind(&mut self, key: &PartitionKey, at: i64, end: Option<i64>) -> Result<(), SourceError> {
        if let Some(end) = end {
            self.ends.borrow_mut().insert(key.clone(), end);
        }
        // librdkafka drops what it fetched before the seek (its fetch version moves on).
        self.consumer
            .seek(
                &key.topic,
                key.partition,
                Offset::Offset(at),
                REQUEST_TIMEOUT,
            )
            .map_err(|source| SourceError::Kafka {
                what: format!("seek {key} to {at}"),
                source,
            })
    }

    fn settled(&mut self, key: &PartitionKey, at: i64) -> i64 {
        self.settled_commit(key, at)
    }

    fn poll(&mut self, to: &mut dyn Handler, timeout: Duration) -> Result<(), SourceError> {
        if let Some(f) = self.fatal.get() {
            return Err(SourceError::Client(f));
        }
        self.rematch_patterns();
        self.queue.serve(0);
        // Only while transactions hold the slot (exactly-once): nothing else reads it.
        if Arc::strong_count(&self.group) > 1 && self.group_taken.elapsed() >= GROUP_REFRESH {
            self.group.set(self.consumer.group_metadata());
            self.group_taken = std::time::Instant::now();
        }
        let mut timeout = timeout;
        for _ in 0..BURST {
            let polled = self.consumer.poll(timeout);
            timeout = Duration::ZERO;
            self.rebalances(to);
            match polled {
                Some(Ok(m)) => {
                    let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
                    let env = Envelope {
                        offset,
                        msg: crate::kafka::record::message_of(&m),
                    };
                    let more = to.item(topic, partition, Item::Message(env));
                    let mut ends = self.ends.borrow_mut();
                    if !ends.is_empty() {
                        let key = PartitionKey::new(topic, partition);
                        if ends.get(&key).is_some_and(|&end| offset + 1 >= end) {
                            let end = ends.remove(&key).unwrap_or(offset + 1);
                            drop(ends);
                            to.end(&key, end);
                        }
                    }
                    if !more {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // The fetcher reached the end of partition `p` (of some topic): a tail of
                    // transaction markers leaves the last message below the end offset.
                    let mut ends = self.ends.borrow_mut();
                    let mut of_p = ends.keys().filter(|k| k.partition == p);
                    if let (Some(k), None) = (of_p.next().cloned(), of_p.next()) {
                        let end = ends.remove(&k).unwrap_or_default();
                        drop(ends);
                        to.end(&k, end);
                    }
                }
                Some(Err(e)) => {
                    if self.pattern_topic_gone(&e) {
                        break;
                    }
                    if self.fatal.record("kafka source", &e, "") {
                        let f = self.fatal.get().unwrap_or_else(|| ClientFailure {
                            client: "kafka source".into(),
                            kind: crate::kafka::fatal::FailureKind::Runtime,
                            message: e.to_string(),
                        });
                        return Err(SourceError::Client(f));
                    }
                    tracing::warn!("consume: {e}");
                    break;
                }
                None => break,
            }
        }
        Ok(())
    }

    fn commit(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        let tpl = self.owned(offsets);
        if tpl.count() == 0 {
            return Ok(());
        }
        self.queue.commit(&tpl).map_err(kafka("offset commit"))
    }

    fn commit_sync(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        self.commit_now(offsets)
    }

    fn committed(&self, key: &PartitionKey) -> Option<i64> {
        self.confirmed.get(&key.topic, key.partition)
    }

    fn committed_all(&self) -> BTreeMap<String, i64> {
        self.confirmed.snapshot()
    }

    fn pause(&mut self, keys: &[PartitionKey]) {
        if let Err(e) = self.consumer.pause(&tpl_of(keys)) {
            tracing::warn!("pause failed: {e}");
        }
    }

    fn resume(&mut self, keys: &[PartitionKey]) {
        if let Err(e) = self.consumer.resume(&tpl_of(keys)) {
            tracing::warn!("resume failed: {e}");
        }
        // A broker thread whose partitions were all paused notices a resume only when it
        // next wakes (up to a second later: measured, a 1 s stall cost 2-3 s in all). A seek
        // to where each partition stands (the next offset `poll` returns; a pause emptied the
        // prefetch, so nothing is skipped or read twice) wakes it now.
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        for k in keys {
            let at = positions
                .find_partition(&k.topic, k.partition)
                .map(|p| p.offset());
            if let Some(Offset::Offset(o)) = at {
                // Asynchronous (no wait): an error means the fetcher restarts on its own.
                if let Err(e) =
                    self.consumer
                        .seek(&k.topic, k.partition, Offset::Offset(o), Duration::ZERO)
                {
                    tracing::debug!(partition = %k, "seek after resume: {e}");
                }
            }
        }
    }

    fn high_watermark(&self, key: &PartitionKey) -> Option<i64> {
        super::high_watermark::cached_high(&self.consumer, &key.topic, key.partition)
    }

    fn close(&mut self, to: &mut dyn Handler) {
        // Leaving the group revokes everything: settle and commit it first.
        self.release_all(to);
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Relaxed);
        lock(&self.consumer.context().pending).clear();
        self.queue.serve(100);
        self.consumer.unsubscribe();
    }
}

impl KafkaSource {
    /// Revokes every owned partition through the handler and commits what it returns.
    fn release_all(&self, to: &mut dyn Handler) {
        let owned = self
            .consumer
            .assignment()
            .map(|a| keys_of(&a))
            .unwrap_or_default();
        if !owned.is_empty() {
            let offsets = to.revoked(&owned);
            if let Err(e) = self.commit_now(&offsets) {
                tracing::warn!("commit before releasing every partition: {e}");
            }
        }
    }

    /// Commits synchronously (while the partitions are still owned).
    /// Where a partition whose transaction failed really stands: `at` (its transaction's
    /// first offset), or the group's committed offset if that is further. A commit that
    /// timed out can still complete (its coordinator had written the decision before it went
    /// away, and the next one finishes it): its records are then visible and its offsets
    /// committed, and reading again from `at` would deliver them twice. The group's offset is
    /// asked for as a `read_committed` client asks (stable offsets: once the transaction is
    /// settled), for up to [`SETTLE_PATIENCE`]; without an answer, `at`.
    fn settled_commit(&self, key: &PartitionKey, at: i64) -> i64 {
        let answer = crate::kafka::retry::asked_again(
            SETTLE_PATIENCE,
            |_| true,
            |left| self.consumer.committed_offsets(tpl_of([key]), left),
        );
        match answer.map(|tpl| offsets(Some(&tpl)).get(key).copied()) {
            Ok(Some(c)) if c > at => {
                tracing::warn!(%key, at, committed = c, "the transaction thought failed did commit: reading again from the group's committed offset");
                c
            }
            Ok(_) => at,
            Err(e) => {
                tracing::warn!(%key, at, "the committed offset is unknown ({e}); reading again from the transaction's start");
                at
            }
        }
    }

    fn commit_now(&self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        let tpl = self.owned(offsets);
        if tpl.count() == 0 {
            return Ok(());
        }
        match self.consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                self.metrics.commits.with_label_values(&["ok"]).inc();
                for e in tpl.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        self.confirmed.confirm(e.topic(), e.partition(), o);
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.metrics.commits.with_label_values(&["error"]).inc();
                Err(SourceError::Kafka {
                    what: "offset commit".into(),
                    source: e,
                })
            }
        }
    }

    /// The offsets of partitions this member owns now (never commit for one it lost).
    fn owned(&self, offsets: &[(PartitionKey, i64)]) -> TopicPartitionList {
        let owned = self.consumer.assignment().ok();
        let mut tpl = TopicPartitionList::new();
        for (k, o) in offsets {
            if owned
                .as_ref()
                .is_some_and(|a| a.find_partition(&k.topic, k.partition).is_none())
            {
                tracing::error!(key = %k, "refusing to commit: the partition is not assigned to this member");
                continue;
            }
            let _ = tpl.add_partition_offset(&k.topic, k.partition, Offset::Offset(*o));
        }
        tpl
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // Dropping the consumer leaves the group; its revoke must not wait for a poll.
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Relaxed);
    }
}
