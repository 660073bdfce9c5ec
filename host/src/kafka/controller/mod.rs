//! The controller: the only thread that touches the consumer.
//!
//! It polls, splits messages by partition into bounded lanes, pauses partitions whose lane
//! is full or when the byte budget is spent (resuming below half of it), turns completions
//! into per-partition watermarks, commits them on a tick, and handles rebalances inside
//! librdkafka's callback: a revoke stops the lanes, waits (bounded) until what their drivers
//! already processed is acknowledged, and commits synchronously while the partitions are
//! still owned; an assign starts fresh lanes with new generations.

mod rebalance;
mod state;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientContext, TopicPartitionList};

use self::state::{DriverSlot, State};
use super::commit_queue::{CommitQueue, Confirmations};
use super::output::KafkaProducer;
use super::{Completion, PartitionKey};
use crate::chain::Failure;
use crate::message::Envelope;
use crate::metrics::Metrics;

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
    /// How long pressure (budget spent, a lane backed up) stops reading before it pauses
    /// partitions instead.
    pub hold: Duration,
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

/// The consumer's context: rebalance callbacks act on the controller state.
pub struct WeirConsumerContext {
    state: Mutex<State>,
    /// Confirmed commits.
    confirmed: Arc<Confirmations>,
    metrics: Arc<Metrics>,
}

/// The consumer type.
pub type WeirConsumer = BaseConsumer<WeirConsumerContext>;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

pub(super) fn tpl_of<'a>(keys: impl IntoIterator<Item = &'a PartitionKey>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for k in keys {
        tpl.add_partition(&k.topic, k.partition);
    }
    tpl
}

pub(super) fn list(keys: &[PartitionKey]) -> String {
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
        budget_spent: false,
        held_since: None,
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

/// Up to 1024 messages, each dispatched under the lock (callbacks run in poll, unlocked); stops
/// early at the byte budget, an end of partition, an error or an empty poll.
fn read_burst(consumer: &WeirConsumer, ctx: &WeirConsumerContext) {
    let mut timeout = Duration::from_millis(10);
    for _ in 0..1024 {
        match consumer.poll(timeout) {
            Some(Ok(m)) => {
                let mut s = lock(&ctx.state);
                s.dispatch(&m);
                if s.in_flight > s.opts.max_in_flight {
                    break; // flow control holds before reading more
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
        let completions = lock(&ctx.state).completions.clone();
        let mut last_commit = Instant::now();
        let mut last_end_check = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // Take a burst of messages, unless flow control holds: then wait for completions.
            if lock(&ctx.state).reading() {
                read_burst(&consumer, &ctx);
            } else {
                let mut sel = Select::new();
                sel.recv(&completions);
                sel.recv(&events);
                let _ = sel.ready_timeout(Duration::from_millis(2));
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
                s.update_lag(&consumer);
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
