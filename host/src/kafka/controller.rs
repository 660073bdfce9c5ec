//! The controller: the only thread that touches the consumer.
//!
//! It polls, splits messages by partition into bounded lanes, pauses partitions whose lane
//! is full or when the byte budget is spent (resuming below half of it), turns completions
//! into per-partition watermarks, commits them on a tick, and handles rebalances inside
//! librdkafka's callback: a revoke stops the lanes, waits (bounded) until what their drivers
//! already processed is acknowledged, and commits synchronously while the partitions are
//! still owned; an assign starts fresh lanes with new generations.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Headers, Message as _};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::commit_queue::{CommitQueue, Confirmations};
use super::output::KafkaProducer;
use super::{Completion, PartitionKey, Settled};
use crate::chain::Failure;
use crate::message::{Envelope, Header, Message};
use crate::metrics::Metrics;
use crate::watermark::Watermark;

/// What the controller tells a driver.
pub enum DriverControl {
    /// Run this lane from now on.
    Add(LaneHandle),
    /// Stop these lanes (partition and generation) at the next batch boundary and report,
    /// per lane, the last offset put through the chain.
    Revoke {
        /// The lanes.
        lanes: Vec<(PartitionKey, u64)>,
        /// Where to report.
        ack: Sender<Vec<(PartitionKey, Option<i64>)>>,
    },
    /// Stop: after the lanes are empty (`drain`), or after the current batch.
    Stop {
        /// Process what is queued first.
        drain: bool,
    },
}

/// A lane as a driver receives it.
pub struct LaneHandle {
    /// Partition.
    pub key: PartitionKey,
    /// Assignment generation.
    pub generation: u64,
    /// Its messages, in offset order.
    pub rx: Receiver<Envelope>,
}

/// What a driver tells the controller.
#[derive(Debug)]
pub enum DriverEvent {
    /// A stage failed on a message: stop.
    Failed(Failure),
    /// The driver cannot go on (an instance rebuild or a local sink broke).
    Error(String),
    /// The driver thread ended.
    Exited(usize),
}

/// Knobs of the controller.
pub struct ControllerOptions {
    /// Messages a lane holds before its partition is paused.
    pub lane_capacity: usize,
    /// Byte budget for read, not fully handled messages.
    pub max_in_flight: usize,
    /// How long a revoke waits for in-flight messages.
    pub revoke_timeout: Duration,
    /// How often to commit.
    pub commit_interval: Duration,
    /// Stop when every partition is handled up to its end at assignment.
    pub stop_at_end: bool,
    /// Longest the shutdown drain may take.
    pub drain_timeout: Duration,
    /// A partition without a committed offset starts at its end.
    pub start_latest: bool,
}

/// How the controller ended.
#[derive(Debug, Default)]
pub struct ControllerOutcome {
    /// Committed offset (the next to read) per `topic/partition`, as confirmed by the broker.
    pub committed: BTreeMap<String, i64>,
    /// Messages read.
    pub read: u64,
    /// A stage failure.
    pub failure: Option<Failure>,
    /// Another reason the pipeline stopped (delivery failure, driver error).
    pub error: Option<String>,
    /// The source was drained to its end (`stop_at_end`).
    pub reached_end: bool,
    /// Rebalance callbacks seen.
    pub rebalances: u64,
    /// Completions from older generations, ignored.
    pub stale: u64,
    /// From the first message read until the loop ended (the source drained, a signal, a
    /// failure): the time spent consuming.
    pub consuming: Duration,
}

struct LaneState {
    generation: u64,
    driver: usize,
    /// `None` once the lane is being revoked.
    tx: Option<Sender<Envelope>>,
    /// Started at the first offset read.
    watermark: Option<Watermark>,
    /// Dispatched offsets with their bytes, until the watermark passes them.
    bytes: VecDeque<(i64, usize)>,
    /// Messages read while the lane was full, in order.
    overflow: VecDeque<Envelope>,
    paused: bool,
    /// End offset when assigned (for `stop_at_end` and lag).
    end: Option<i64>,
    /// Where reading starts: the committed offset, else the reset point (for `stop_at_end`).
    start: Option<i64>,
}

struct DriverSlot {
    tx: Sender<DriverControl>,
    lanes: usize,
    alive: bool,
}

/// Everything the controller knows, behind the consumer context's lock. The lock is never
/// held across a call into librdkafka that can run a callback which takes it.
struct State {
    lanes: BTreeMap<Arc<str>, BTreeMap<i32, LaneState>>,
    next_generation: u64,
    drivers: Vec<DriverSlot>,
    completions: Receiver<Completion>,
    producers: Vec<Arc<KafkaProducer>>,
    opts: ControllerOptions,
    in_flight: usize,
    budget_paused: bool,
    metrics: Arc<Metrics>,
    read: u64,
    stopping: bool,
    error: Option<String>,
    rebalances: u64,
    stale: u64,
    assigned_once: bool,
    confirmed: Arc<Confirmations>,
    /// When the first message was read.
    first_read: Option<Instant>,
}

/// The consumer's context: rebalance callbacks act on the controller state.
pub struct WeirConsumerContext {
    state: Mutex<State>,
    /// Confirmed commits.
    confirmed: Arc<Confirmations>,
    metrics: Arc<Metrics>,
}

/// The consumer type.
pub type WeirConsumer = BaseConsumer<WeirConsumerContext>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientContext for WeirConsumerContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        super::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!("consumer: {error}: {reason}");
    }
}

impl ConsumerContext for WeirConsumerContext {
    fn pre_rebalance(&self, consumer: &WeirConsumer, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.metrics.rebalances.with_label_values(&["revoke"]).inc();
                let keys = keys_of(tpl);
                lock(&self.state).revoke(consumer, &keys);
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => {
                self.metrics.rebalances.with_label_values(&["error"]).inc();
                tracing::warn!("rebalance error: {e}");
            }
        }
    }

    fn post_rebalance(&self, consumer: &WeirConsumer, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.metrics.rebalances.with_label_values(&["assign"]).inc();
            let keys = keys_of(tpl);
            lock(&self.state).assign(consumer, &keys);
        }
    }
}

fn keys_of(tpl: &TopicPartitionList) -> Vec<PartitionKey> {
    tpl.elements()
        .iter()
        .map(|e| PartitionKey {
            topic: e.topic().into(),
            partition: e.partition(),
        })
        .collect()
}

fn tpl_of<'a>(keys: impl IntoIterator<Item = &'a PartitionKey>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for k in keys {
        tpl.add_partition(&k.topic, k.partition);
    }
    tpl
}

/// The message as the chain sees it.
fn to_message(m: &BorrowedMessage<'_>) -> Message {
    let headers = m.headers().map_or_else(Vec::new, |hs| {
        hs.iter()
            .map(|h| Header {
                key: h.key.to_owned(),
                value: h.value.map(<[u8]>::to_vec),
            })
            .collect()
    });
    Message {
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
        timestamp: m.timestamp().to_millis(),
        topic: None,
    }
}

/// Fixed cost counted per message on top of its payload.
const MESSAGE_OVERHEAD: usize = 96;

impl State {
    fn lane(&mut self, key: &PartitionKey) -> Option<&mut LaneState> {
        self.lanes.get_mut(&*key.topic)?.get_mut(&key.partition)
    }

    fn each_lane(&self) -> impl Iterator<Item = (PartitionKey, &LaneState)> {
        self.lanes.iter().flat_map(|(t, ps)| {
            ps.iter().map(move |(p, l)| {
                (
                    PartitionKey {
                        topic: t.clone(),
                        partition: *p,
                    },
                    l,
                )
            })
        })
    }

    fn dispatch(&mut self, m: &BorrowedMessage<'_>) {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let Some(lane) = self
            .lanes
            .get_mut(topic)
            .and_then(|ps| ps.get_mut(&partition))
        else {
            tracing::debug!(
                topic,
                partition,
                offset,
                "message for a partition not assigned here; dropped"
            );
            return;
        };
        let Some(tx) = &lane.tx else { return };
        let w = lane
            .watermark
            .get_or_insert_with(|| Watermark::new(lane.generation, offset));
        if let Err(e) = w.track(offset) {
            tracing::warn!(topic, partition, "{e}; message skipped");
            return;
        }
        let env = Envelope {
            offset,
            msg: to_message(m),
        };
        let bytes = env.msg.byte_len() + MESSAGE_OVERHEAD;
        lane.bytes.push_back((offset, bytes));
        self.in_flight += bytes;
        self.read += 1;
        self.first_read.get_or_insert_with(Instant::now);
        self.metrics.consumed.inc();
        if !lane.overflow.is_empty() {
            lane.overflow.push_back(env);
            return;
        }
        match tx.try_send(env) {
            Ok(()) => {}
            Err(TrySendError::Full(env)) => lane.overflow.push_back(env),
            Err(TrySendError::Disconnected(_)) => {
                self.error
                    .get_or_insert_with(|| format!("the driver of {topic}/{partition} is gone"));
            }
        }
    }

    fn apply(&mut self, c: Completion) {
        let lane = self
            .lanes
            .get_mut(&*c.key.topic)
            .and_then(|ps| ps.get_mut(&c.key.partition))
            .filter(|l| l.generation == c.generation);
        let Some(lane) = lane else {
            self.metrics.stale_completions.inc();
            self.stale += 1;
            return;
        };
        let Some(w) = lane.watermark.as_mut() else {
            return;
        };
        let r = match &c.outcome {
            Settled::Done => w.complete(c.generation, c.offset),
            Settled::Failed => w.fail(c.generation, c.offset),
            Settled::Undelivered(why) => {
                let e = format!("{} offset {}: {why}", c.key, c.offset);
                tracing::error!("{e}; stopping (not committed past it)");
                self.error.get_or_insert(e);
                w.fail(c.generation, c.offset)
            }
        };
        if let Err(e) = r {
            tracing::warn!(key = %c.key, offset = c.offset, "completion refused: {e}");
        }
    }

    /// Applies every completion that has arrived and releases bytes below the watermarks.
    fn settle(&mut self) {
        while let Ok(c) = self.completions.try_recv() {
            self.apply(c);
        }
        self.release();
    }

    fn release(&mut self) {
        let mut freed = 0;
        for ps in self.lanes.values_mut() {
            for lane in ps.values_mut() {
                let Some(w) = &lane.watermark else { continue };
                let below = w.committable();
                while lane.bytes.front().is_some_and(|(o, _)| *o < below) {
                    freed += lane.bytes.pop_front().map_or(0, |(_, b)| b);
                }
            }
        }
        self.in_flight -= freed;
        self.metrics.in_flight_bytes.set(self.in_flight as i64);
    }

    /// Moves overflow into lanes and pauses/resumes partitions (lane full, byte budget).
    fn flow(&mut self, consumer: &WeirConsumer) {
        if self.in_flight > self.opts.max_in_flight && !self.budget_paused {
            self.budget_paused = true;
            tracing::debug!(in_flight = self.in_flight, "byte budget spent: pausing");
        } else if self.budget_paused && self.in_flight <= self.opts.max_in_flight / 2 {
            self.budget_paused = false;
            tracing::debug!(
                in_flight = self.in_flight,
                "below half the budget: resuming"
            );
        }
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        let mut paused = 0;
        for (t, ps) in &mut self.lanes {
            for (p, lane) in ps.iter_mut() {
                if let Some(tx) = &lane.tx {
                    while let Some(env) = lane.overflow.pop_front() {
                        if let Err(e) = tx.try_send(env) {
                            lane.overflow.push_front(e.into_inner());
                            break;
                        }
                    }
                }
                // Pause when a second lane's worth waits behind a full lane; resume once it
                // has drained (every pause makes librdkafka drop its prefetch, so not at once).
                let cap = self.opts.lane_capacity;
                let want = self.budget_paused
                    || lane.overflow.len() >= cap
                    || (lane.paused && !lane.overflow.is_empty());
                let key = PartitionKey {
                    topic: t.clone(),
                    partition: *p,
                };
                if want && !lane.paused {
                    pause.push(key);
                } else if !want && lane.paused {
                    resume.push(key);
                }
                lane.paused = want;
                paused += usize::from(want);
            }
        }
        self.metrics.paused_partitions.set(paused as i64);
        if !pause.is_empty() || !resume.is_empty() {
            tracing::debug!(pause = %list(&pause), resume = %list(&resume), in_flight = self.in_flight, "flow control");
        }
        if !pause.is_empty() {
            if let Err(e) = consumer.pause(&tpl_of(&pause)) {
                tracing::warn!("pause failed: {e}");
            }
        }
        if !resume.is_empty() {
            if let Err(e) = consumer.resume(&tpl_of(&resume)) {
                tracing::warn!("resume failed: {e}");
            }
        }
    }

    /// Commits every partition (or `only` these) whose watermark moved past its last commit:
    /// through `queue` (asynchronously), or synchronously, which also re-commits the rest so
    /// the broker confirms every offset.
    fn commit(
        &mut self,
        consumer: &WeirConsumer,
        queue: Option<&CommitQueue>,
        only: Option<&[PartitionKey]>,
    ) {
        let sync = queue.is_none();
        // Defence in depth: never commit for a partition this member does not own now.
        let owned = consumer.assignment().ok();
        let mut tpl = TopicPartitionList::new();
        let mut issued = Vec::new();
        for (t, ps) in &self.lanes {
            for (p, lane) in ps {
                if only.is_some_and(|o| !o.iter().any(|k| *k.topic == **t && k.partition == *p)) {
                    continue;
                }
                let Some(w) = &lane.watermark else { continue };
                if owned
                    .as_ref()
                    .is_some_and(|o| o.find_partition(t, *p).is_none())
                {
                    tracing::error!(topic = %t, partition = p, "refusing to commit: the partition is not assigned to this member");
                    continue;
                }
                let next = w.committable();
                // Until the broker confirms an offset it is committed again at every tick.
                if !sync && self.confirmed.get(t, *p).is_some_and(|c| c >= next) {
                    continue;
                }
                let _ = tpl.add_partition_offset(t, *p, Offset::Offset(next));
                issued.push((t.clone(), *p, next));
                if let Some(end) = lane.end {
                    self.metrics
                        .consumer_lag
                        .with_label_values(&[t.as_ref(), p.to_string().as_str()])
                        .set((end - next).max(0));
                }
            }
        }
        if issued.is_empty() {
            return;
        }
        let result = match queue {
            Some(q) => q.commit(&tpl),
            None => consumer.commit(&tpl, CommitMode::Sync),
        };
        match result {
            Ok(()) => {
                if sync {
                    self.metrics.commits.with_label_values(&["ok"]).inc();
                    for (t, p, next) in issued {
                        self.confirmed.confirm(&t, p, next);
                    }
                }
            }
            Err(e) => {
                self.metrics.commits.with_label_values(&["error"]).inc();
                tracing::warn!("offset commit failed: {e}");
            }
        }
    }

    fn revoke(&mut self, consumer: &WeirConsumer, keys: &[PartitionKey]) {
        self.rebalances += 1;
        tracing::info!(partitions = %list(keys), "partitions revoked");
        // 1. Stop the lanes: nothing more is dispatched; drivers drop what is queued.
        let (ack_tx, ack_rx) = crossbeam_channel::unbounded();
        let mut per_driver: BTreeMap<usize, Vec<(PartitionKey, u64)>> = BTreeMap::new();
        for k in keys {
            if let Some(lane) = self.lane(k) {
                lane.tx = None;
                lane.overflow.clear();
                per_driver
                    .entry(lane.driver)
                    .or_default()
                    .push((k.clone(), lane.generation));
            }
        }
        let mut waiting = 0;
        for (d, lanes) in per_driver {
            let slot = &self.drivers[d];
            if slot.alive
                && slot
                    .tx
                    .send(DriverControl::Revoke {
                        lanes,
                        ack: ack_tx.clone(),
                    })
                    .is_ok()
            {
                waiting += 1;
            }
        }
        let deadline = Instant::now() + self.opts.revoke_timeout;
        let mut last: Vec<(PartitionKey, i64)> = Vec::new();
        while waiting > 0 {
            match ack_rx.recv_deadline(deadline) {
                Ok(lanes) => {
                    waiting -= 1;
                    last.extend(lanes.into_iter().filter_map(|(k, o)| Some((k, o?))));
                }
                Err(_) => {
                    tracing::warn!("revoke: drivers did not stop their lanes in time");
                    break;
                }
            }
        }
        // 2. Wait until what the drivers processed is acknowledged (or the deadline).
        loop {
            self.settle();
            let pending = last.iter().any(|(k, o)| {
                self.lanes
                    .get(&*k.topic)
                    .and_then(|ps| ps.get(&k.partition))
                    .and_then(|l| l.watermark.as_ref())
                    .is_some_and(|w| !w.settled_through(*o))
            });
            if !pending {
                break;
            }
            match self.completions.recv_deadline(deadline) {
                Ok(c) => self.apply(c),
                Err(_) => {
                    tracing::warn!("revoke: in-flight messages not acknowledged in time; committing what is done");
                    break;
                }
            }
        }
        self.settle();
        // 3. Commit while the partitions are still ours, then forget them.
        self.commit(consumer, None, Some(keys));
        for k in keys {
            let removed = self
                .lanes
                .get_mut(&*k.topic)
                .and_then(|ps| ps.remove(&k.partition));
            if let Some(lane) = removed {
                self.in_flight -= lane.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[lane.driver].lanes -= 1;
            }
        }
        self.lanes.retain(|_, ps| !ps.is_empty());
        self.metrics.in_flight_bytes.set(self.in_flight as i64);
    }

    fn assign(&mut self, consumer: &WeirConsumer, keys: &[PartitionKey]) {
        self.rebalances += 1;
        self.assigned_once = true;
        tracing::info!(partitions = %list(keys), "partitions assigned");
        let mut pause = Vec::new();
        for k in keys {
            self.next_generation += 1;
            let generation = self.next_generation;
            let Some(driver) = (0..self.drivers.len())
                .filter(|&d| self.drivers[d].alive)
                .min_by_key(|&d| self.drivers[d].lanes)
            else {
                self.error
                    .get_or_insert_with(|| "no driver is running".into());
                return;
            };
            let (tx, rx) = crossbeam_channel::bounded(self.opts.lane_capacity);
            let handle = LaneHandle {
                key: k.clone(),
                generation,
                rx,
            };
            if self.drivers[driver]
                .tx
                .send(DriverControl::Add(handle))
                .is_err()
            {
                self.drivers[driver].alive = false;
                self.error
                    .get_or_insert_with(|| format!("driver {driver} is gone"));
                continue;
            }
            self.drivers[driver].lanes += 1;
            if self.budget_paused {
                pause.push(k.clone());
            }
            let old = self.lanes.entry(k.topic.clone()).or_default().insert(
                k.partition,
                LaneState {
                    generation,
                    driver,
                    tx: Some(tx),
                    watermark: None,
                    bytes: VecDeque::new(),
                    overflow: VecDeque::new(),
                    paused: self.budget_paused,
                    end: None,
                    start: None,
                },
            );
            if let Some(old) = old {
                tracing::warn!(key = %k, "assigned again without a revoke; the old lane is dropped");
                self.in_flight -= old.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[old.driver].lanes -= 1;
            }
        }
        // A partition can come back still paused from an earlier assignment; start it afresh.
        let fresh: Vec<&PartitionKey> = keys.iter().filter(|k| !pause.contains(k)).collect();
        if !fresh.is_empty() {
            let _ = consumer.resume(&tpl_of(fresh));
        }
        if !pause.is_empty() {
            let _ = consumer.pause(&tpl_of(&pause));
        }
    }

    /// For `stop_at_end`: true once every assigned partition is handled up to its end.
    fn at_end(&mut self, consumer: &WeirConsumer) -> bool {
        if !self.assigned_once || self.lanes.is_empty() {
            return false;
        }
        let keys: Vec<PartitionKey> = self.each_lane().map(|(k, _)| k).collect();
        let mut positions: Option<TopicPartitionList> = None;
        for k in keys {
            let need_end = self.lane(&k).is_some_and(|l| l.end.is_none());
            if need_end {
                let Ok((lo, hi)) =
                    consumer.fetch_watermarks(&k.topic, k.partition, Duration::from_secs(2))
                else {
                    return false;
                };
                let committed = consumer
                    .committed_offsets(tpl_of([&k]), Duration::from_secs(2))
                    .ok()
                    .and_then(
                        |c| match c.find_partition(&k.topic, k.partition)?.offset() {
                            Offset::Offset(o) => Some(o),
                            _ => None,
                        },
                    );
                let start = committed.unwrap_or(if self.opts.start_latest { hi } else { lo });
                if let Some(l) = self.lane(&k) {
                    l.end = Some(hi);
                    l.start = Some(start);
                }
            }
            let Some(lane) = self.lane(&k) else {
                return false;
            };
            let end = lane.end.unwrap_or(i64::MAX);
            if !lane.overflow.is_empty() {
                return false;
            }
            let done = match &lane.watermark {
                Some(w) => w.in_flight() == 0 && w.committable() >= end,
                None if lane.start.is_some_and(|s| s >= end) => true,
                None => {
                    let pos = positions.get_or_insert_with(|| {
                        consumer
                            .position()
                            .unwrap_or_else(|_| TopicPartitionList::new())
                    });
                    matches!(
                        pos.find_partition(&k.topic, k.partition).map(|e| e.offset()),
                        Some(Offset::Offset(o)) if o >= end
                    )
                }
            };
            if !done {
                return false;
            }
        }
        true
    }
}

fn list(keys: &[PartitionKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What the controller thread needs.
pub struct Controller {
    /// The consumer, subscribed.
    pub consumer: WeirConsumer,
    /// Drivers' events.
    pub events: Receiver<DriverEvent>,
    /// Set by signals.
    pub stop: Arc<AtomicBool>,
}

/// Builds the consumer with its context.
#[allow(clippy::too_many_arguments)]
pub fn consumer(
    config: &rdkafka::ClientConfig,
    drivers: Vec<Sender<DriverControl>>,
    completions: Receiver<Completion>,
    producers: Vec<Arc<KafkaProducer>>,
    opts: ControllerOptions,
    metrics: Arc<Metrics>,
) -> KafkaResult<WeirConsumer> {
    let confirmed = Confirmations::new(metrics.clone());
    let state = State {
        lanes: BTreeMap::new(),
        next_generation: 0,
        drivers: drivers
            .into_iter()
            .map(|tx| DriverSlot {
                tx,
                lanes: 0,
                alive: true,
            })
            .collect(),
        completions,
        producers,
        opts,
        in_flight: 0,
        budget_paused: false,
        metrics: metrics.clone(),
        read: 0,
        stopping: false,
        error: None,
        rebalances: 0,
        stale: 0,
        assigned_once: false,
        confirmed: confirmed.clone(),
        first_read: None,
    };
    config.create_with_context(WeirConsumerContext {
        state: Mutex::new(state),
        confirmed,
        metrics,
    })
}

impl Controller {
    /// The poll loop, then the shutdown sequence. Returns when everything is committed.
    pub fn run(self) -> ControllerOutcome {
        let Controller {
            consumer,
            events,
            stop,
        } = self;
        let ctx = consumer.context().clone();
        let mut failure: Option<Failure> = None;
        let mut reached_end = false;
        let mut exited = 0usize;
        let (commit_every, stop_at_end, drain_timeout, n_drivers) = {
            let s = lock(&ctx.state);
            (
                s.opts.commit_interval,
                s.opts.stop_at_end,
                s.opts.drain_timeout,
                s.drivers.len(),
            )
        };
        let queue = CommitQueue::new(&consumer, ctx.confirmed.clone());
        let mut last_commit = Instant::now();
        let mut last_end_check = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // A burst of messages, each dispatched under the lock (callbacks run in poll, unlocked).
            let mut timeout = Duration::from_millis(10);
            for _ in 0..1024 {
                match consumer.poll(timeout) {
                    Some(Ok(m)) => {
                        let mut s = lock(&ctx.state);
                        s.dispatch(&m);
                        if s.in_flight > s.opts.max_in_flight {
                            break; // pause before reading more
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) => break,
                    Some(Err(e)) => {
                        tracing::warn!("consume: {e}");
                        break;
                    }
                    None => break,
                }
                timeout = Duration::ZERO;
            }
            while let Ok(ev) = events.try_recv() {
                match ev {
                    DriverEvent::Failed(f) => {
                        failure.get_or_insert(f);
                    }
                    DriverEvent::Error(e) => {
                        lock(&ctx.state).error.get_or_insert(e);
                    }
                    DriverEvent::Exited(d) => {
                        exited += 1;
                        lock(&ctx.state).drivers[d].alive = false;
                    }
                }
            }
            queue.serve(0);
            let mut s = lock(&ctx.state);
            s.settle();
            s.flow(&consumer);
            if last_commit.elapsed() >= commit_every {
                s.commit(&consumer, Some(&queue), None);
                last_commit = Instant::now();
            }
            if s.assigned_once {
                ctx.metrics.ready.store(true, Ordering::Relaxed);
            }
            if failure.is_some() || s.error.is_some() || exited == n_drivers {
                break;
            }
            if stop_at_end && last_end_check.elapsed() >= Duration::from_millis(10) {
                last_end_check = Instant::now();
                if s.at_end(&consumer) {
                    tracing::info!("every partition is handled up to its end; stopping");
                    reached_end = true;
                    break;
                }
            }
        }

        let consuming = lock(&ctx.state)
            .first_read
            .map_or(Duration::ZERO, |t| t.elapsed());
        // Shutdown: stop fetching, drain drivers, wait for acknowledgements, final commit.
        let deadline = Instant::now() + drain_timeout;
        let drain = failure.is_none() && lock(&ctx.state).error.is_none();
        {
            let mut s = lock(&ctx.state);
            s.stopping = true;
            let all: Vec<PartitionKey> = s.each_lane().map(|(k, _)| k).collect();
            if !all.is_empty() {
                let _ = consumer.pause(&tpl_of(&all));
            }
            for d in &s.drivers {
                let _ = d.tx.send(DriverControl::Stop { drain });
            }
        }
        while exited < n_drivers {
            let Ok(ev) = events.recv_deadline(deadline) else {
                tracing::error!("drivers did not stop in time; committing what is done");
                break;
            };
            match ev {
                DriverEvent::Failed(f) => {
                    failure.get_or_insert(f);
                }
                DriverEvent::Error(e) => {
                    lock(&ctx.state).error.get_or_insert(e);
                }
                DriverEvent::Exited(_) => exited += 1,
            }
        }
        let producers = lock(&ctx.state).producers.clone();
        for p in &producers {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = super::output::flush(p, left.max(Duration::from_millis(100))) {
                tracing::error!(
                    "shutdown: {e}; those offsets stay uncommitted and replay on restart"
                );
            }
        }
        let mut out = {
            let mut s = lock(&ctx.state);
            s.settle();
            s.commit(&consumer, None, None);
            ControllerOutcome {
                committed: BTreeMap::new(),
                read: s.read,
                failure,
                error: s.error.clone(),
                reached_end,
                rebalances: s.rebalances,
                stale: s.stale,
                consuming,
            }
        };
        // Leaving the group runs the revoke callback once more (nothing left to wait for).
        drop(queue);
        consumer.unsubscribe();
        drop(consumer);
        out.committed = ctx.confirmed.snapshot();
        out
    }
}
