//! The controller's state: one lane per owned partition (its generation, driver, queue,
//! watermark and byte account), the drivers, and what the run has seen. It is the
//! [`Handler`] a source reports to: items are dispatched into lanes, assignments start lanes,
//! a revocation is the drain barrier, the end of input marks a lane ended.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::driver::{DriverControl, DriverError, LaneHandle};
use super::watermark::Watermark;
use crate::chain::Failure;
use crate::metrics::Metrics;
use crate::sink::{Changelog, Completion, Settled, SinkError};
use crate::source::{Handler, Item, PartitionKey, SourceError};

/// Fixed cost counted per queued message on top of its payload (for the byte budget).
pub(super) const QUEUED_MESSAGE_COST: usize = 96;

/// Knobs of the controller.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Messages a lane holds before it counts as backed up.
    pub lane_capacity: usize,
    /// Byte budget for read, not fully handled messages.
    pub max_in_flight: usize,
    /// How long pressure (budget spent, a lane backed up) stops reading before it pauses
    /// partitions instead.
    pub hold: Duration,
    /// How long a revocation waits for in-flight messages.
    pub revoke_timeout: Duration,
    /// How often to commit.
    pub commit_interval: Duration,
    /// Stop when every partition is handled up to its end.
    pub stop_at_end: bool,
    /// Longest the shutdown drain may take.
    pub drain_timeout: Duration,
    /// Exactly-once: the drivers commit offsets in their transactions; the controller never
    /// commits through the source.
    pub transactional: bool,
    /// Exactly-once: how long a partition whose transaction was fenced between revokes
    /// waits for its revoke before it is read again from its last commit (the consumer's
    /// session and a margin).
    pub fenced_hold: Duration,
}

/// Where a lane's writes stand with the changelog (at-least-once with a changelog; the
/// commits that wait for it are in `logged.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Logged {
    /// The changelog holds (acknowledged) every write below it (none yet: `i64::MIN`).
    pub(super) through: i64,
    /// The commit point whose records are on their way.
    pub(super) sending: Option<i64>,
    /// A record was lost: nothing is committed past `through` any more (the run stops).
    pub(super) lost: bool,
    /// `through` moved since the partition last committed.
    pub(super) moved: bool,
}

impl Default for Logged {
    fn default() -> Self {
        Logged {
            through: i64::MIN,
            sending: None,
            lost: false,
            moved: false,
        }
    }
}

/// Why a run stopped other than a stage `fail` or a signal.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A driver could not go on.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The source broke.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A record could not be delivered.
    #[error("{key} offset {offset}: {why}")]
    Undelivered {
        /// The lane.
        key: PartitionKey,
        /// The source offset.
        offset: i64,
        /// Why.
        why: String,
    },
    /// A sink could not flush at shutdown.
    #[error("shutdown: {0}")]
    Flush(#[from] SinkError),
    /// Every driver is gone.
    #[error("no driver is running")]
    NoDriver,
    /// A stage's state could not be written to its store.
    #[error(transparent)]
    State(#[from] crate::state::StoreError),
}

impl RuntimeError {
    /// The Kafka client failure behind it, if that is what ended the run.
    pub fn client_failure(&self) -> Option<&crate::kafka::fatal::ClientFailure> {
        match self {
            RuntimeError::Source(SourceError::Client(f)) => Some(f),
            _ => None,
        }
    }
}

pub(super) struct LaneState {
    pub(super) generation: u64,
    pub(super) driver: usize,
    /// `None` once the lane is being revoked.
    pub(super) tx: Option<Sender<Item>>,
    /// Started at the first offset read.
    pub(super) watermark: Option<Watermark>,
    /// Dispatched offsets with their bytes, until the watermark passes them.
    pub(super) bytes: VecDeque<(i64, usize)>,
    /// Items read while the lane was full, in order.
    pub(super) overflow: VecDeque<Item>,
    pub(super) paused: bool,
    /// Until then a backed-up lane is paused at once instead of holding every partition
    /// (it needed a pause recently: it is slower than the rest).
    pub(super) slow_until: Option<Instant>,
    /// Where the input ends, once the source has said so.
    pub(super) end: Option<i64>,
    /// The flow state last written to `weir_partition_state` (0 reading, 1 held, 2 paused;
    /// -1 before the first).
    pub(super) reported_state: i64,
    /// At-least-once with a changelog: where its writes stand with the changelog.
    pub(super) logged: Logged,
}

pub(super) struct DriverSlot {
    pub(super) tx: Sender<DriverControl>,
    pub(super) lanes: usize,
    pub(super) alive: bool,
}

/// Everything the controller knows.
pub(super) struct Core {
    pub(super) lanes: BTreeMap<Arc<str>, BTreeMap<i32, LaneState>>,
    pub(super) next_generation: u64,
    pub(super) drivers: Vec<DriverSlot>,
    pub(super) completions: Receiver<Completion>,
    pub(super) opts: ControllerOptions,
    pub(super) in_flight: usize,
    /// Above the byte budget (until back below half of it).
    pub(super) budget_spent: bool,
    /// Since when the controller has stopped taking messages (flow control).
    pub(super) held_since: Option<Instant>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) read: u64,
    pub(super) malformed: u64,
    pub(super) failure: Option<Failure>,
    pub(super) error: Option<RuntimeError>,
    pub(super) rebalances: u64,
    pub(super) stale: u64,
    pub(super) assigned_once: bool,
    /// When the first message was read, and the process's CPU time then.
    pub(super) first_read: Option<(Instant, Duration)>,
    /// Exactly-once: offsets committed by transactions, per partition.
    pub(super) txn_committed: BTreeMap<PartitionKey, i64>,
    /// Stages' state: committed offsets apply their writes (at-least-once).
    pub(super) state: Option<Arc<crate::state::StateRegistry>>,
    /// At-least-once with stateful stages: their changelog, which holds every write below a
    /// committed offset (see [`super::logged`]).
    pub(super) changelog: Option<Arc<dyn Changelog>>,
    /// Acknowledgements of the changelog records sent at commits.
    pub(super) logged_tx: Sender<Completion>,
    pub(super) logged_rx: Receiver<Completion>,
    /// Some partition's changelog records were acknowledged since it last committed
    /// ([`LaneState::logged`] says which).
    pub(super) logged_moved: bool,
}

impl Core {
    pub(super) fn new(
        drivers: Vec<Sender<DriverControl>>,
        completions: Receiver<Completion>,
        opts: ControllerOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        metrics
            .in_flight_budget
            .set(i64::try_from(opts.max_in_flight).unwrap_or(i64::MAX));
        let (logged_tx, logged_rx) = crossbeam_channel::unbounded();
        Core {
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
            opts,
            in_flight: 0,
            budget_spent: false,
            held_since: None,
            metrics,
            read: 0,
            malformed: 0,
            failure: None,
            error: None,
            rebalances: 0,
            stale: 0,
            assigned_once: false,
            first_read: None,
            txn_committed: BTreeMap::new(),
            state: None,
            changelog: None,
            logged_tx,
            logged_rx,
            logged_moved: false,
        }
    }

    /// With stages' state.
    pub(super) fn with_state(mut self, state: Option<Arc<crate::state::StateRegistry>>) -> Self {
        self.state = state;
        self
    }

    /// At-least-once with stateful stages: their changelog.
    pub(super) fn with_changelog(mut self, changelog: Option<Arc<dyn Changelog>>) -> Self {
        self.changelog = changelog;
        self
    }

    /// At-least-once: `next` is committed for `key` (every offset below it settled, its
    /// changelog records acknowledged): the stages' writes below it go to their stores. A
    /// store that cannot be written stops the run.
    pub(super) fn commit_state(&mut self, key: &PartitionKey, next: i64) {
        let Some(state) = &self.state else { return };
        if let Err(e) = state.commit(key, next) {
            tracing::error!(%key, next, "{e}; stopping");
            self.fail(RuntimeError::State(e));
        }
    }

    pub(super) fn lane(&mut self, key: &PartitionKey) -> Option<&mut LaneState> {
        self.lanes.get_mut(&*key.topic)?.get_mut(&key.partition)
    }

    /// The generation of the partition's lane, while it has one that takes messages.
    pub(super) fn lane_generation(&self, key: &PartitionKey) -> Option<u64> {
        let lane = self.lanes.get(&*key.topic)?.get(&key.partition)?;
        lane.tx.is_some().then_some(lane.generation)
    }

    pub(super) fn keys(&self) -> Vec<PartitionKey> {
        self.lanes
            .iter()
            .flat_map(|(t, ps)| {
                ps.keys().map(move |p| PartitionKey {
                    topic: t.clone(),
                    partition: *p,
                })
            })
            .collect()
    }

    pub(super) fn fail(&mut self, e: RuntimeError) {
        self.error.get_or_insert(e);
    }

    /// Applies one completion to its lane's watermark (a completion from an older generation
    /// is counted and ignored).
    pub(super) fn apply(&mut self, c: Completion) {
        let lane = self
            .lanes
            .get_mut(&*c.key.topic)
            .and_then(|ps| ps.get_mut(&c.key.partition))
            .filter(|l| l.generation == c.generation);
        // Exactly-once: a lane being let go has had its transaction committed or aborted;
        // a record of it that is refused now (a fenced producer's, in flight when it was
        // fenced) belongs to an aborted transaction, never visible, and stops nothing.
        let released = self.opts.transactional && lane.as_ref().is_some_and(|l| l.tx.is_none());
        let Some(w) = lane.and_then(|l| l.watermark.as_mut()) else {
            self.metrics.stale_completions.inc();
            self.stale += 1;
            return;
        };
        let mut error = None;
        for &offset in &c.offsets {
            let r = match &c.outcome {
                Settled::Done => w.complete(c.generation, offset),
                Settled::Failed => w.fail(c.generation, offset),
                Settled::Undelivered(why) if self.opts.transactional => {
                    // Exactly-once: its transaction was let go with the partition, or cannot
                    // commit now; the driver's commit finds out, and stops the run or reads
                    // the partition again.
                    let what = if released {
                        "its transaction was let go with the partition"
                    } else {
                        "its transaction cannot commit"
                    };
                    tracing::debug!(
                        topic = &*c.key.topic,
                        partition = c.key.partition,
                        offset,
                        "{why} ({what})"
                    );
                    w.fail(c.generation, offset)
                }
                Settled::Undelivered(why) => {
                    tracing::error!(
                        topic = &*c.key.topic,
                        partition = c.key.partition,
                        offset,
                        "{why}; stopping (not committed past it)"
                    );
                    error.get_or_insert(RuntimeError::Undelivered {
                        key: c.key.clone(),
                        offset,
                        why: why.clone(),
                    });
                    w.fail(c.generation, offset)
                }
            };
            if let Err(e) = r {
                tracing::warn!(
                    topic = &*c.key.topic,
                    partition = c.key.partition,
                    offset,
                    "completion refused: {e}"
                );
            }
        }
        if let Some(e) = error {
            self.fail(e);
        }
    }

    /// Applies every completion that has arrived and releases bytes below the watermarks.
    pub(super) fn settle(&mut self) {
        while let Ok(c) = self.completions.try_recv() {
            self.apply(c);
        }
        self.take_logged();
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

    /// Per lane with a watermark: the offset to commit (everything below it is done).
    pub(super) fn committable(&self) -> Vec<(PartitionKey, i64)> {
        let mut out = Vec::new();
        for (t, ps) in &self.lanes {
            for (p, lane) in ps {
                if let Some(w) = &lane.watermark {
                    let key = PartitionKey {
                        topic: t.clone(),
                        partition: *p,
                    };
                    let next = self.commit_point(&key, w.committable());
                    out.push((key, next));
                }
            }
        }
        out
    }

    /// `next`, or below it the first offset of a stateful stage's call that answered
    /// messages on both sides of it: a call's writes belong to all its messages, so a commit
    /// never splits one (the messages above the commit run again, with the call's writes).
    fn commit_point(&self, key: &PartitionKey, next: i64) -> i64 {
        match &self.state {
            Some(s) => s.commit_point(key, next),
            None => next,
        }
    }

    /// Sets `weir_consumer_lag` for every owned partition: its end (as the source last saw
    /// it, else as it reported) minus the offset that would be committed.
    pub(super) fn update_lag(&self, high: impl Fn(&PartitionKey) -> Option<i64>) {
        for (t, parts) in &self.lanes {
            for (p, lane) in parts {
                let Some(w) = &lane.watermark else { continue };
                let key = PartitionKey {
                    topic: t.clone(),
                    partition: *p,
                };
                if let Some(high) = high(&key).or(lane.end) {
                    self.metrics
                        .consumer_lag
                        .with_label_values(&[t.as_ref(), p.to_string().as_str()])
                        .set((high - w.committable()).max(0));
                }
            }
        }
    }

    /// True once every owned partition's input has ended and everything read is settled.
    pub(super) fn at_end(&self) -> bool {
        self.assigned_once
            && !self.lanes.is_empty()
            && self.lanes.values().flat_map(|ps| ps.values()).all(|l| {
                l.end.is_some()
                    && l.overflow.is_empty()
                    && l.watermark.as_ref().is_none_or(|w| w.in_flight() == 0)
            })
    }

    /// Stops these lanes, waits (bounded by `revoke_timeout`) until what their drivers put
    /// through the chain is settled, and forgets them. Returns the offsets to commit.
    fn release(&mut self, keys: &[PartitionKey]) -> Vec<(PartitionKey, i64)> {
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
            let ack = ack_tx.clone();
            if slot.alive && slot.tx.send(DriverControl::Revoke { lanes, ack }).is_ok() {
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
        // 2. Wait until what the drivers processed is settled (or the deadline).
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
        // 3. What to commit while the partitions are still ours (at-least-once with a
        // changelog: once it holds the writes below); then forget them.
        // (Within the revocation's wait; the shutdown's final one, which has none, since its
        // drivers have stopped, gets the drain's.)
        let logged_by = if self.opts.revoke_timeout.is_zero() {
            Instant::now() + self.opts.drain_timeout
        } else {
            deadline
        };
        let mut commit = Vec::new();
        for k in keys {
            let Some(next) = self
                .lane(k)
                .and_then(|l| l.watermark.as_ref())
                .map(|w| w.committable())
            else {
                continue;
            };
            let next = self.commit_point(k, next);
            if self.opts.transactional {
                commit.push((k.clone(), next));
            } else if let Some(next) = self.logged_before_revoke(k, next, logged_by) {
                commit.push((k.clone(), next));
            }
        }
        for k in keys {
            let removed = self
                .lanes
                .get_mut(&*k.topic)
                .and_then(|ps| ps.remove(&k.partition));
            if let Some(lane) = removed {
                self.metrics.forget_partition(&k.topic, k.partition);
                self.in_flight -= lane.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[lane.driver].lanes -= 1;
            }
        }
        self.lanes.retain(|_, ps| !ps.is_empty());
        self.metrics.in_flight_bytes.set(self.in_flight as i64);
        commit
    }
}

impl Handler for Core {
    fn assigned(&mut self, keys: &[PartitionKey]) {
        self.rebalances += 1;
        self.assigned_once = true;
        tracing::info!(partitions = %list(keys), "partitions assigned");
        for k in keys {
            self.next_generation += 1;
            let generation = self.next_generation;
            let again = self
                .lanes
                .get(&k.topic)
                .is_some_and(|ps| ps.contains_key(&k.partition));
            if let (true, Some(s)) = (again, &self.state) {
                // Assigned again without a revoke: nothing of the old lane is committed now,
                // so its stages' writes are dropped (before the new lane's driver opens the
                // partition's state again).
                s.release(k);
            }
            let Some(driver) = (0..self.drivers.len())
                .filter(|&d| self.drivers[d].alive)
                .min_by_key(|&d| self.drivers[d].lanes)
            else {
                self.fail(RuntimeError::NoDriver);
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
                self.fail(RuntimeError::NoDriver);
                continue;
            }
            self.drivers[driver].lanes += 1;
            let old = self.lanes.entry(k.topic.clone()).or_default().insert(
                k.partition,
                LaneState {
                    generation,
                    driver,
                    tx: Some(tx),
                    watermark: None,
                    bytes: VecDeque::new(),
                    overflow: VecDeque::new(),
                    paused: false,
                    slow_until: None,
                    end: None,
                    reported_state: -1,
                    logged: Logged::default(),
                },
            );
            if let Some(old) = old {
                tracing::warn!(key = %k, "assigned again without a revoke; the old lane is dropped");
                self.in_flight -= old.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[old.driver].lanes -= 1;
            }
        }
    }

    fn revoked(&mut self, keys: &[PartitionKey]) -> Vec<(PartitionKey, i64)> {
        self.rebalances += 1;
        tracing::info!(partitions = %list(keys), "partitions revoked");
        let commit = self.release(keys);
        if self.opts.transactional {
            // The drivers committed the partitions' transactions, offsets included (and
            // applied their state).
            if let Some(s) = &self.state {
                keys.iter().for_each(|k| s.release(k));
            }
            return Vec::new();
        }
        for (k, next) in &commit {
            self.commit_state(k, *next);
        }
        if let Some(s) = &self.state {
            keys.iter().for_each(|k| s.release(k));
        }
        commit
    }

    fn item(&mut self, topic: &str, partition: i32, item: Item) -> bool {
        let offset = item.offset();
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
            return true;
        };
        let Some(tx) = &lane.tx else { return true };
        let w = lane
            .watermark
            .get_or_insert_with(|| Watermark::new(lane.generation, offset));
        if let Err(e) = w.track(offset) {
            tracing::warn!(topic, partition, "{e}; message skipped");
            return true;
        }
        let bytes = item.byte_len() + QUEUED_MESSAGE_COST;
        lane.bytes.push_back((offset, bytes));
        self.in_flight += bytes;
        match item {
            Item::Message(_) => self.read += 1,
            Item::Rejected(_) => self.malformed += 1,
        }
        self.first_read
            .get_or_insert_with(|| (Instant::now(), crate::report::process_cpu_time()));
        self.metrics.consumed.inc();
        if !lane.overflow.is_empty() {
            lane.overflow.push_back(item);
        } else {
            match tx.try_send(item) {
                Ok(()) => {}
                Err(TrySendError::Full(item)) => lane.overflow.push_back(item),
                Err(TrySendError::Disconnected(_)) => self.fail(RuntimeError::NoDriver),
            }
        }
        self.in_flight <= self.opts.max_in_flight
    }

    fn end(&mut self, key: &PartitionKey, next: i64) {
        tracing::debug!(key = %key, next, "end of input");
        if let Some(lane) = self.lane(key) {
            lane.end = Some(next);
        }
    }
}

pub(super) fn list(keys: &[PartitionKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
