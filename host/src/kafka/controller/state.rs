//! The controller's state: lanes and their watermarks, dispatch, completions, flow control
//! (pause/resume), commits, and the end-of-input check.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::{list, tpl_of, ControllerOptions, DriverControl, WeirConsumer};
use crate::kafka::commit_queue::{CommitQueue, Confirmations};
use crate::kafka::output::KafkaProducer;
use crate::kafka::{Completion, PartitionKey, Settled};
use crate::message::Envelope;
use crate::metrics::Metrics;
use crate::watermark::Watermark;

pub(super) struct LaneState {
    pub(super) generation: u64,
    pub(super) driver: usize,
    /// `None` once the lane is being revoked.
    pub(super) tx: Option<Sender<Envelope>>,
    /// Started at the first offset read.
    pub(super) watermark: Option<Watermark>,
    /// Dispatched offsets with their bytes, until the watermark passes them.
    pub(super) bytes: VecDeque<(i64, usize)>,
    /// Messages read while the lane was full, in order.
    pub(super) overflow: VecDeque<Envelope>,
    pub(super) paused: bool,
    /// Until then a backed-up lane is paused at once instead of holding every partition
    /// (it needed a pause recently: it is slower than the rest).
    pub(super) slow_until: Option<Instant>,
    /// End offset when assigned (for `stop_at_end` and lag).
    pub(super) end: Option<i64>,
    /// Where reading starts: the committed offset, else the reset point (for `stop_at_end`).
    pub(super) start: Option<i64>,
}

pub(super) struct DriverSlot {
    pub(super) tx: Sender<DriverControl>,
    pub(super) lanes: usize,
    pub(super) alive: bool,
}

/// Everything the controller knows, behind the consumer context's lock. The lock is never
/// held across a call into librdkafka that can run a callback which takes it.
pub(super) struct State {
    pub(super) lanes: BTreeMap<Arc<str>, BTreeMap<i32, LaneState>>,
    pub(super) next_generation: u64,
    pub(super) drivers: Vec<DriverSlot>,
    pub(super) completions: Receiver<Completion>,
    pub(super) producers: Vec<Arc<KafkaProducer>>,
    pub(super) opts: ControllerOptions,
    pub(super) in_flight: usize,
    /// Above the byte budget (until back below half of it).
    pub(super) budget_spent: bool,
    /// Since when the controller has stopped taking messages from librdkafka (flow control).
    pub(super) held_since: Option<Instant>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) read: u64,
    pub(super) stopping: bool,
    pub(super) error: Option<String>,
    pub(super) rebalances: u64,
    pub(super) stale: u64,
    pub(super) assigned_once: bool,
    pub(super) confirmed: Arc<Confirmations>,
    /// When the first message was read.
    pub(super) first_read: Option<Instant>,
}

/// Fixed cost counted per message on top of its payload.
pub(super) const MESSAGE_OVERHEAD: usize = 96;

/// How long a lane that needed a pause keeps being paused at once when it backs up again.
const SLOW_MEMORY: Duration = Duration::from_secs(10);

impl State {
    pub(super) fn lane(&mut self, key: &PartitionKey) -> Option<&mut LaneState> {
        self.lanes.get_mut(&*key.topic)?.get_mut(&key.partition)
    }

    pub(super) fn each_lane(&self) -> impl Iterator<Item = (PartitionKey, &LaneState)> {
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

    pub(super) fn dispatch(&mut self, m: &BorrowedMessage<'_>) {
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
            msg: crate::kafka::record::message_of(m),
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

    pub(super) fn apply(&mut self, c: Completion) {
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
    pub(super) fn settle(&mut self) {
        while let Ok(c) = self.completions.try_recv() {
            self.apply(c);
        }
        self.release();
    }

    pub(super) fn release(&mut self) {
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

    /// True while the controller takes messages from librdkafka: not holding, or the hold
    /// has turned into pauses (then polling goes on for the group and for events).
    pub(super) fn reading(&self) -> bool {
        self.held_since
            .is_none_or(|t| t.elapsed() >= self.opts.hold)
    }

    /// True when the byte budget is spent and has been for longer than the hold: every
    /// partition is paused (also the ones assigned now).
    pub(super) fn budget_paused(&self) -> bool {
        self.budget_spent && self.reading()
    }

    /// Moves overflow into lanes and decides flow control.
    ///
    /// Pressure (the byte budget spent, or a lane backed up: a second lane's worth waiting
    /// behind a full lane) first **holds**: the controller stops taking messages, so
    /// librdkafka's own bounded prefetch keeps them and nothing is fetched twice. A pause
    /// empties that prefetch, and a broker thread whose partitions are all paused sleeps up to a
    /// second before it notices a resume, so pausing at once on every short burst stalled the
    /// whole pipeline (measured: ~0.85 s gaps with nothing read). Pressure that outlasts
    /// `hold` becomes pauses, and polling goes on: every partition for the budget (resumed
    /// below half of it), the backed-up lanes otherwise (resumed once their overflow has
    /// drained). A lane that needed such a pause is paused at once the next time it backs
    /// up (for `SLOW_MEMORY`), so one slow partition does not hold the others again.
    pub(super) fn flow(&mut self, consumer: &WeirConsumer) {
        let now = Instant::now();
        if self.in_flight > self.opts.max_in_flight && !self.budget_spent {
            self.budget_spent = true;
            tracing::debug!(in_flight = self.in_flight, "byte budget spent: holding");
        } else if self.budget_spent && self.in_flight <= self.opts.max_in_flight / 2 {
            self.budget_spent = false;
            tracing::debug!(in_flight = self.in_flight, "below half the budget");
        }
        let cap = self.opts.lane_capacity;
        let backed = |l: &LaneState| {
            l.tx.is_some() && (l.overflow.len() >= cap || (l.paused && !l.overflow.is_empty()))
        };
        let slow = |l: &LaneState| l.slow_until.is_some_and(|t| now < t);
        let mut pressure = self.budget_spent;
        for ps in self.lanes.values_mut() {
            for lane in ps.values_mut() {
                if let Some(tx) = &lane.tx {
                    while let Some(env) = lane.overflow.pop_front() {
                        if let Err(e) = tx.try_send(env) {
                            lane.overflow.push_front(e.into_inner());
                            break;
                        }
                    }
                }
                pressure |= backed(lane) && !lane.paused && !slow(lane);
            }
        }
        if pressure {
            if self.held_since.is_none() {
                self.metrics.flow_control.with_label_values(&["hold"]).inc();
                self.held_since = Some(now);
            }
        } else {
            self.held_since = None;
        }
        let escalate = self
            .held_since
            .is_some_and(|t| now.duration_since(t) >= self.opts.hold);
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        let mut stopped = 0;
        let holding = self.held_since.is_some() && !escalate;
        for (t, ps) in &mut self.lanes {
            for (p, lane) in ps.iter_mut() {
                let want = if self.budget_spent {
                    escalate || lane.paused
                } else if backed(lane) {
                    if escalate && !lane.paused && !slow(lane) {
                        lane.slow_until = Some(now + SLOW_MEMORY);
                    }
                    lane.paused || slow(lane) || escalate
                } else {
                    false
                };
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
                stopped += usize::from(want || holding);
            }
        }
        self.metrics.paused_partitions.set(stopped as i64);
        if !pause.is_empty() || !resume.is_empty() {
            tracing::debug!(pause = %list(&pause), resume = %list(&resume), in_flight = self.in_flight, "flow control");
        }
        let counted = |action: &str, n: usize| {
            self.metrics
                .flow_control
                .with_label_values(&[action])
                .inc_by(n as u64);
        };
        counted("pause", pause.len());
        counted("resume", resume.len());
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

    /// Sets `weir_consumer_lag` for every owned partition: the high watermark librdkafka last
    /// saw (or the end offset read at assignment) minus the offset that would be committed.
    pub(super) fn update_lag(&self, consumer: &WeirConsumer) {
        for (t, parts) in &self.lanes {
            for (p, lane) in parts {
                let next = match (&lane.watermark, lane.start) {
                    (Some(w), _) => w.committable(),
                    (None, Some(start)) => start,
                    (None, None) => continue,
                };
                let high = crate::kafka::watermarks::cached_high(consumer, t, *p).or(lane.end);
                if let Some(high) = high {
                    self.metrics
                        .consumer_lag
                        .with_label_values(&[t.as_ref(), p.to_string().as_str()])
                        .set((high - next).max(0));
                }
            }
        }
    }

    /// Commits every partition (or `only` these) whose watermark moved past its last commit:
    /// through `queue` (asynchronously), or synchronously, which also re-commits the rest so
    /// the broker confirms every offset.
    pub(super) fn commit(
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

    /// For `stop_at_end`: true once every assigned partition is handled up to its end.
    pub(super) fn at_end(&mut self, consumer: &WeirConsumer) -> bool {
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
