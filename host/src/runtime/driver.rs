//! A driver thread: its own lanes and its own stage instances. Poll lanes → batch per lane
//! (count, bytes, linger) → swap check → chain → outputs. Per-partition order is kept: one
//! lane is only ever on one driver, and its batches go through the chain one at a time. An
//! item the source already rejected (malformed input) ends its batch and goes to the reject
//! path after the batch's own rejects.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};

use super::deliver::{LaneRef, Outputs};
use crate::chain::{Chain, Failure, Rejected, StageStats};
use crate::config::BatchConfig;
use crate::engine::InstanceError;
use crate::message::{Envelope, Lane};
use crate::metrics::Metrics;
use crate::sink::{SinkError, Transactions, TxnError};
use crate::source::{Item, PartitionKey};

/// Exactly-once: producers opened at the same time. Every open makes new connections to the
/// cluster, and a broker's listen backlog is small and shared by all its clients (librdkafka's
/// mock cluster: 5; Kafka's `socket.listen.backlog.size`: 50): a connection it drops waits
/// for the kernel's SYN retry, one second. Measured on the mock cluster with 8 partitions:
/// all 8 at once stalled about one assignment in ten for ~1 s (docs/exactly-once.md).
pub const OPENS_AT_ONCE: usize = 4;

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
    /// Its items, in offset order.
    pub rx: Receiver<Item>,
}

/// Why a driver stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A stage instance could not be rebuilt after a trap.
    #[error("{key}: {source}")]
    Instance {
        /// The lane.
        key: PartitionKey,
        /// Why.
        source: InstanceError,
    },
    /// The sink or the reject path refused a batch.
    #[error("{key}: {source}")]
    Delivery {
        /// The lane.
        key: PartitionKey,
        /// Why.
        source: SinkError,
    },
    /// A partition's transaction could not be opened or committed (exactly-once): it was
    /// aborted, nothing of it is visible, the run stops.
    #[error(transparent)]
    Transaction(#[from] TxnError),
    /// A stage's state could not be written to its store.
    #[error(transparent)]
    State(#[from] crate::state::StoreError),
    /// The driver thread panicked (a bug): its lanes cannot progress, so the run stops.
    #[error("driver {driver} panicked: {reason}")]
    Panicked {
        /// Which driver.
        driver: usize,
        /// The panic's message.
        reason: String,
    },
}

/// What a driver tells the controller.
#[derive(Debug)]
pub enum DriverEvent {
    /// A stage failed on a message: stop.
    Failed(Failure),
    /// The driver cannot go on.
    Error(DriverError),
    /// A partition's transaction committed: `next` is its committed offset (exactly-once).
    Committed {
        /// The partition.
        key: PartitionKey,
        /// The next offset to read.
        next: i64,
    },
    /// A partition's transaction could only be aborted because the group moved on
    /// (exactly-once, mid-rebalance): the lane processes nothing more, and the partition is
    /// to be read again from `from`, its last committed offset, in a new lane.
    Rewind {
        /// The partition.
        key: PartitionKey,
        /// The lane's generation.
        generation: u64,
        /// The offset the aborted transaction began at.
        from: i64,
        /// Whether the transaction may have committed after all (its commit call failed, not
        /// its producer abandoned): the source is asked where the partition stands first.
        ask: bool,
    },
    /// A partition's transaction was fenced between revokes (exactly-once): another
    /// producer took its transactional id, the broker timed the transaction out, or the
    /// member is out of the group (`UNKNOWN_MEMBER_ID`, `FENCED_MEMBER_EPOCH`). Nothing of it
    /// is visible; the lane processes nothing more. The controller lets the partition go at
    /// the revoke that follows, or reads it again from `from` if it is still this member's
    /// a session later.
    Fenced {
        /// The partition.
        key: PartitionKey,
        /// The lane's generation.
        generation: u64,
        /// The offset the fenced transaction began at (the partition's last commit).
        from: i64,
    },
    /// The driver thread ended.
    Exited(usize),
}

/// Most partitions a driver restores side by side.
const RESTORES_AT_ONCE: usize = 8;

/// Exactly-once delivery: the lanes' transactions and when they commit.
#[derive(Clone)]
pub struct TxnSetup {
    /// Begin, commit, abort per partition.
    pub api: Arc<dyn Transactions>,
    /// A transaction commits at the first batch boundary this long after it began...
    pub interval: Duration,
    /// ...or once the input it holds reaches this many bytes.
    pub max_bytes: usize,
}

/// What a driver needs.
pub struct DriverSetup {
    /// Driver number (for events and thread names).
    pub index: usize,
    /// Its chain.
    pub chain: Chain,
    /// Where results go.
    pub outputs: Outputs,
    /// Batch limits.
    pub batch: BatchConfig,
    /// Control from the controller.
    pub control: Receiver<DriverControl>,
    /// Events to the controller.
    pub events: Sender<DriverEvent>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The core to pin to.
    pub core: Option<usize>,
    /// Keep the source messages of a batch for the dead-letter records (chains of 2+ stages).
    pub keep_originals: bool,
    /// Exactly-once delivery (`None`: at-least-once, the controller commits).
    pub transactions: Option<TxnSetup>,
    /// Stages' state: exactly-once, a committed transaction applies its writes.
    pub state: Option<Arc<crate::state::StateRegistry>>,
}

/// A lane's open transaction.
struct OpenTxn {
    since: Instant,
    /// The offset of the first message put in it (where a rewind starts).
    first: Option<i64>,
    /// Input bytes in it.
    bytes: usize,
    /// The offset after the last one put in it.
    next: Option<i64>,
}

struct DriverLane {
    key: PartitionKey,
    generation: u64,
    rx: Receiver<Item>,
    lane: Lane,
    pending: Vec<Envelope>,
    /// Items the source rejected, at the end of the pending batch.
    pre_rejected: Vec<Rejected>,
    bytes: usize,
    since: Option<Instant>,
    last_processed: Option<i64>,
    /// Exactly-once: the transaction the lane's records go into.
    txn: Option<OpenTxn>,
    /// Its partition's producer is ready (always, at-least-once).
    opened: bool,
    /// Its stages' state is open (caught up with their changelogs, when there are some).
    restored: bool,
    /// Holding for an unreachable schema registry: until when, and the wait after that.
    held: Option<(Instant, Duration)>,
    /// Its transaction was aborted because the group moved on: it drops what comes until
    /// the controller replaces it (the partition is read again from the last commit).
    rewinding: bool,
}

/// Starts the driver thread; it returns its stage numbers when it ends.
pub fn spawn(setup: DriverSetup) -> std::thread::JoinHandle<Vec<StageStats>> {
    std::thread::Builder::new()
        .name(format!("weir-driver-{}", setup.index))
        .spawn(move || {
            if let Some(core) = setup.core {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                    tracing::warn!(driver = setup.index, core, "could not pin to the core");
                }
            }
            let index = setup.index;
            let events = setup.events.clone();
            let mut d = Driver {
                s: setup,
                lanes: Vec::new(),
                last_counts: Vec::new(),
                last_memory: Vec::new(),
                last_state_memory: Vec::new(),
                broken: false,
            };
            // A panic must not leave the controller waiting on lanes nobody serves: it is
            // reported as an error, which stops the run without committing past unfinished work.
            let run = std::panic::catch_unwind(AssertUnwindSafe(|| d.run()));
            // Open transactions commit after a clean drain and abort otherwise.
            let clean = matches!(run, Ok(true));
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| d.finish(clean)));
            if let Err(panic) = run {
                let reason = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".to_owned());
                let _ = events.send(DriverEvent::Error(DriverError::Panicked {
                    driver: index,
                    reason,
                }));
            }
            let stats = d.s.chain.stats();
            let _ = events.send(DriverEvent::Exited(index));
            stats
        })
        .expect("spawning a driver")
}

struct Driver {
    s: DriverSetup,
    lanes: Vec<DriverLane>,
    last_counts: Vec<[u64; 7]>,
    /// Each stage's memory and recycles as last reported to the metrics.
    last_memory: Vec<(u64, u64)>,
    /// Each stateful stage's state memory as this driver last set it in the metrics.
    last_state_memory: Vec<u64>,
    /// A transaction failed while serving a control message: stop.
    broken: bool,
}

impl Driver {
    /// Runs until told to stop or until it cannot go on. True when it stopped after a clean
    /// drain (everything queued was put through).
    fn run(&mut self) -> bool {
        // Its instances take memory from the start, batches or not.
        self.s
            .metrics
            .add_stage_memory(self.s.chain.memory(), &mut self.last_memory);
        self.s
            .metrics
            .set_state_memory(self.s.chain.state_memory(), &mut self.last_state_memory);
        let mut stopping: Option<bool> = None;
        loop {
            loop {
                match self.s.control.try_recv() {
                    Ok(c) => self.control(c, &mut stopping),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stopping.get_or_insert(false);
                        break;
                    }
                }
            }
            if self.broken
                || stopping == Some(false)
                || !self.open_new_lanes()
                || !self.restore_new_lanes()
            {
                return false;
            }
            let draining = stopping == Some(true);
            let now = Instant::now();
            let mut ran = false;
            for i in 0..self.lanes.len() {
                if self.lanes[i].rewinding {
                    self.drop_queued(i);
                    continue;
                }
                self.fill(i);
                let l = &self.lanes[i];
                let full = l.pending.len() >= self.s.batch.max_messages
                    || l.bytes >= self.s.batch.max_bytes.bytes()
                    || !l.pre_rejected.is_empty();
                let due = l.since.is_some_and(|t| now >= t + self.s.batch.linger);
                let waiting = !l.pending.is_empty() || !l.pre_rejected.is_empty();
                if waiting && (full || due || draining) && self.schemas_ready(i, now) {
                    ran = true;
                    if !self.run_batch(i) {
                        return false;
                    }
                }
            }
            if !self.commit_due() {
                return false;
            }
            if draining
                && self
                    .lanes
                    .iter()
                    .all(|l| l.pending.is_empty() && l.pre_rejected.is_empty() && l.rx.is_empty())
            {
                return true;
            }
            if !ran {
                self.wait();
            }
        }
    }

    /// Exactly-once: opens the producers of newly added lanes, [`OPENS_AT_ONCE`] at a time
    /// (each open is a few broker round trips, and an assignment often brings many
    /// partitions). Opening one fences the partition's previous owner and aborts what it left
    /// open. False when one cannot be opened (the run stops).
    fn open_new_lanes(&mut self) -> bool {
        let Some(t) = &self.s.transactions else {
            return true;
        };
        let lanes = &self.lanes;
        let pending: Vec<usize> = (0..lanes.len()).filter(|&i| !lanes[i].opened).collect();
        let next = AtomicUsize::new(0);
        let opened: Vec<(usize, Result<(), TxnError>, Duration)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..pending.len().min(OPENS_AT_ONCE))
                .map(|_| {
                    let (api, pending, next) = (&t.api, &pending, &next);
                    scope.spawn(move || {
                        let mut done = Vec::new();
                        while let Some(&i) = pending.get(next.fetch_add(1, Ordering::Relaxed)) {
                            let t0 = Instant::now();
                            done.push((i, api.open(&lanes[i].key), t0.elapsed()));
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|h| h.join().expect("opening a producer panicked"))
                .collect()
        });
        for (i, r, took) in opened {
            let key = &self.lanes[i].key;
            match r {
                Ok(()) => {
                    tracing::debug!(%key, ms = took.as_millis() as u64, "transactional producer opened");
                    self.lanes[i].opened = true;
                }
                Err(e) => {
                    tracing::error!("{e}; stopping");
                    let _ = self.s.events.send(DriverEvent::Error(e.into()));
                    return false;
                }
            }
        }
        true
    }

    /// Opens the state of newly added lanes and brings it up to their changelogs, when there
    /// are some (after their producers
    /// opened, exactly-once: that fences the old owner and aborts what it left open, so a
    /// `read_committed` restore reads to the end). The lane's first batch waits for it.
    /// False when a store cannot be restored (the run stops).
    fn restore_new_lanes(&mut self) -> bool {
        let todo: Vec<usize> = (0..self.lanes.len())
            .filter(|&i| !self.lanes[i].restored && self.lanes[i].opened)
            .collect();
        if todo.is_empty() {
            return true;
        }
        let changelog = self.s.outputs.changelog.clone();
        let state = self.s.chain.state();
        // Side by side: a restore mostly waits on the broker (a partition with nothing to
        // read still asks for its end twice, a moment apart).
        for chunk in todo.chunks(RESTORES_AT_ONCE) {
            let jobs: Vec<(usize, PartitionKey, u64)> = chunk
                .iter()
                .map(|&i| (i, self.lanes[i].key.clone(), self.lanes[i].generation))
                .collect();
            let m = &self.s.metrics;
            let results: Vec<_> = std::thread::scope(|scope| {
                let running: Vec<_> = jobs
                    .iter()
                    .map(|(_, key, generation)| {
                        let (state, changelog) = (&state, changelog.as_deref());
                        scope.spawn(move || {
                            if changelog.is_some() {
                                m.state_restoring.inc();
                            }
                            let t0 = Instant::now();
                            let r = crate::chain::restore_state(state, key, *generation, changelog);
                            if changelog.is_some() {
                                m.state_restoring.dec();
                            }
                            (r, t0.elapsed())
                        })
                    })
                    .collect();
                running
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            });
            for ((i, key, _), (r, took)) in jobs.into_iter().zip(results) {
                match r {
                    Ok(r) => {
                        if changelog.is_some() {
                            m.state_restored.inc_by(r.records);
                            let secs = took.as_secs_f64();
                            tracing::info!(partition = %key, records = r.records, rebuilt = r.rebuilt,
                                ms = (secs * 1e3) as u64,
                                records_per_s = (r.records as f64 / secs.max(1e-6)) as u64,
                                "state restored from the changelog");
                        }
                        self.lanes[i].restored = true;
                    }
                    Err(source) => {
                        tracing::error!(partition = %key, "{source}; stopping");
                        let _ = self
                            .s
                            .events
                            .send(DriverEvent::Error(DriverError::Instance { key, source }));
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Exactly-once: commits every lane's transaction that is due (its interval passed or
    /// its bytes reached). False when one could not commit (it is aborted; the run stops).
    fn commit_due(&mut self) -> bool {
        let Some(t) = &self.s.transactions else {
            return true;
        };
        let (interval, max_bytes) = (t.interval, t.max_bytes);
        let due: Vec<usize> = (0..self.lanes.len())
            .filter(|&i| {
                self.lanes[i]
                    .txn
                    .as_ref()
                    .is_some_and(|x| x.since.elapsed() >= interval || x.bytes >= max_bytes)
            })
            .collect();
        self.commit_lanes(&due, false)
    }

    /// Commits the open transactions of these lanes. On a failure that transaction is
    /// aborted and the error reported; false then. When the lanes are `revoking`, a failure
    /// is no error: the partition goes to its next owner, which starts at its last committed
    /// offset, and this transaction's records, aborted, are never visible (its
    /// transactional id is the partition's, so the next owner's producer finishes whatever
    /// this one left open). A commit refused because the group moved on mid-rebalance
    /// (`ILLEGAL_GENERATION` from Apache Kafka under cooperative-sticky) ends so.
    fn commit_lanes(&mut self, lanes: &[usize], revoking: bool) -> bool {
        let Some(t) = self.s.transactions.clone() else {
            return true;
        };
        let mut jobs = Vec::new();
        for &i in lanes {
            let l = &mut self.lanes[i];
            let Some(txn) = l.txn.take() else { continue };
            match txn.next {
                Some(next) => jobs.push((i, next, txn.since, txn.first)),
                // Begun, nothing put in: nothing to commit.
                None => {
                    abort(&t, &l.key, &self.s.metrics);
                }
            }
        }
        // One after another: once its records are acknowledged a commit is a round trip or
        // two (~1 ms on the mock cluster).
        // The state's changelog records of every one go in first: their producers send them
        // side by side, and each commit then waits only for what is still unacknowledged.
        let prepared: Vec<Result<(), TxnError>> = jobs
            .iter()
            .map(|&(i, next, _, _)| self.changes_into_transaction(i, next))
            .collect();
        let mut ok = true;
        for ((i, next, since, first), prepared) in jobs.into_iter().zip(prepared) {
            let t0 = Instant::now();
            let result = prepared.and_then(|()| t.api.commit(&self.lanes[i].key, next));
            let took = t0.elapsed();
            let key = self.lanes[i].key.clone();
            let m = &self.s.metrics;
            tracing::debug!(%key, next, ms = took.as_millis() as u64, "transaction commit");
            match result {
                Ok(()) => {
                    m.transactions.with_label_values(&["committed"]).inc();
                    m.transaction_seconds.observe(since.elapsed().as_secs_f64());
                    // The transaction holds the state's changelog records: its writes are
                    // committed, and go to the stores.
                    if let Some(Err(e)) = self.s.state.as_ref().map(|s| s.commit(&key, next)) {
                        tracing::error!(%key, "{e}; stopping");
                        let _ = self.s.events.send(DriverEvent::Error(e.into()));
                        ok = false;
                    }
                    let _ = self.s.events.send(DriverEvent::Committed { key, next });
                }
                Err(e) if !revoking && first.is_some() && e.partition_stays() => {
                    // Nothing of the transaction is visible, and the partition processes
                    // nothing more in this lane. The group moved on, or a request timed out
                    // while a coordinator moved: the partition is still this member's, so it
                    // is read again from the transaction's start (`Rewind`). The client hung:
                    // the same, with a new producer (whose opening fences the abandoned one
                    // and aborts its transaction). Fenced: it waits for its revoke, or is read
                    // again if it is still this member's a session later (`Fenced`).
                    let from = first.unwrap_or_default();
                    tracing::warn!(from, "{e}; the partition is read again from its last commit (fenced: once it is clear it is still this member's)");
                    if matches!(e, TxnError::Abandoned { .. }) {
                        m.transactions.with_label_values(&["aborted"]).inc();
                        t.api.close(&key);
                    } else {
                        abort(&t, &key, m);
                    }
                    let l = &mut self.lanes[i];
                    l.rewinding = true;
                    let generation = l.generation;
                    self.drop_queued(i);
                    let _ = self.s.events.send(if matches!(e, TxnError::Fenced { .. }) {
                        DriverEvent::Fenced {
                            key,
                            generation,
                            from,
                        }
                    } else {
                        DriverEvent::Rewind {
                            key,
                            generation,
                            from,
                            // An abandoned producer's transaction never commits (its commit
                            // was never asked for); any other may have.
                            ask: !matches!(e, TxnError::Abandoned { .. }),
                        }
                    });
                }
                Err(e) => {
                    if revoking {
                        tracing::warn!("{e}; the partition is let go with its transaction aborted: its next owner starts at its last commit");
                    } else {
                        tracing::error!("{e}; aborting it, stopping");
                    }
                    if matches!(e, TxnError::Fenced { .. } | TxnError::Abandoned { .. }) {
                        // The new owner's producer took over the id: the broker aborted it.
                        m.transactions.with_label_values(&["aborted"]).inc();
                    } else {
                        abort(&t, &key, m);
                    }
                    if !revoking {
                        let _ = self.s.events.send(DriverEvent::Error(e.into()));
                        ok = false;
                    }
                }
            }
        }
        ok
    }

    /// Exactly-once: the state writes of lane `i`'s open transaction (each key's last) go
    /// into it, just before it commits at `next`.
    fn changes_into_transaction(&self, i: usize, next: i64) -> Result<(), TxnError> {
        let (Some(state), Some(changelog)) = (&self.s.state, &self.s.outputs.changelog) else {
            return Ok(());
        };
        let l = &self.lanes[i];
        let changes = state.take_changes(&l.key, l.generation, next);
        if changes.is_empty() {
            return Ok(());
        }
        self.s.metrics.state_writes.inc_by(changes.len() as u64);
        changelog
            .write_to_transaction(&l.lane, &changes)
            .map_err(|why| TxnError::Failed {
                key: l.key.clone(),
                what: "commit",
                why: format!("state changelog: {why}"),
            })
    }

    /// At the end: after a clean drain every open transaction commits; otherwise (a stage
    /// failed, a record was not delivered, the run stops without draining) each is aborted.
    fn finish(&mut self, clean: bool) {
        let Some(t) = self.s.transactions.clone() else {
            return;
        };
        if clean {
            let all: Vec<usize> = (0..self.lanes.len()).collect();
            self.commit_lanes(&all, false);
        }
        for l in self.lanes.iter_mut() {
            if l.txn.take().is_some() {
                abort(&t, &l.key, &self.s.metrics);
            }
            t.api.close(&l.key);
        }
    }

    fn control(&mut self, c: DriverControl, stopping: &mut Option<bool>) {
        match c {
            DriverControl::Add(LaneHandle {
                key,
                generation,
                rx,
            }) => self.lanes.push(DriverLane {
                lane: Lane {
                    topic: key.topic.clone(),
                    partition: key.partition,
                    generation,
                },
                key,
                generation,
                rx,
                pending: Vec::new(),
                pre_rejected: Vec::new(),
                bytes: 0,
                since: None,
                last_processed: None,
                txn: None,
                opened: self.s.transactions.is_none(),
                restored: false,
                held: None,
                rewinding: false,
            }),
            DriverControl::Revoke { lanes, ack } => {
                // Exactly-once: the lane's transaction commits (everything in it acknowledged)
                // or aborts before the partition is let go.
                let revoked: Vec<usize> = (0..self.lanes.len())
                    .filter(|&i| {
                        let l = &self.lanes[i];
                        lanes.iter().any(|(k, g)| *k == l.key && *g == l.generation)
                    })
                    .collect();
                if !self.commit_lanes(&revoked, true) {
                    self.broken = true;
                }
                let mut done = Vec::new();
                let txns = self.s.transactions.clone();
                let metrics = self.s.metrics.clone();
                self.lanes.retain(|l| {
                    let revoked = lanes.iter().any(|(k, g)| *k == l.key && *g == l.generation);
                    if revoked {
                        if l.held.is_some() {
                            metrics.schema_held_lanes.dec();
                        }
                        done.push((l.key.clone(), l.last_processed));
                        if let Some(t) = &txns {
                            t.api.close(&l.key);
                        }
                    }
                    !revoked
                });
                let _ = ack.send(done);
            }
            DriverControl::Stop { drain } => {
                stopping.get_or_insert(drain);
            }
        }
    }

    /// Drops everything lane `i` has queued or pending (a rewinding lane: it is all read again).
    fn drop_queued(&mut self, i: usize) {
        let l = &mut self.lanes[i];
        l.pending.clear();
        l.pre_rejected.clear();
        l.bytes = 0;
        l.since = None;
        while l.rx.try_recv().is_ok() {}
    }

    /// Moves what the lane has queued into its pending batch, up to the batch limits.
    fn fill(&mut self, i: usize) {
        let max = self.s.batch.max_messages;
        let max_bytes = self.s.batch.max_bytes.bytes();
        let l = &mut self.lanes[i];
        while l.pending.len() < max && l.bytes < max_bytes && l.pre_rejected.is_empty() {
            match l.rx.try_recv() {
                Ok(item) => {
                    l.bytes += item.byte_len();
                    l.since.get_or_insert_with(Instant::now);
                    match item {
                        Item::Message(env) => l.pending.push(env),
                        Item::Rejected(r) => l.pre_rejected.push(r),
                    }
                }
                Err(_) => break,
            }
        }
    }

    /// Blocks until a lane or the control channel has something, or the earliest linger ends.
    fn wait(&self) {
        let linger = self.s.batch.linger;
        let timeout = self
            .lanes
            .iter()
            .filter_map(|l| {
                let due = l.since? + linger;
                Some(l.held.map_or(due, |(until, _)| until.max(due)))
            })
            .map(|t| t.saturating_duration_since(Instant::now()))
            .chain(self.s.transactions.as_ref().into_iter().flat_map(|t| {
                self.lanes
                    .iter()
                    .filter_map(|l| l.txn.as_ref())
                    .map(|x| (x.since + t.interval).saturating_duration_since(Instant::now()))
            }))
            .min()
            .unwrap_or(Duration::from_millis(100));
        let mut sel = Select::new();
        sel.recv(&self.s.control);
        for l in &self.lanes {
            if l.pending.len() < self.s.batch.max_messages {
                sel.recv(&l.rx);
            }
        }
        let _ = sel.ready_timeout(timeout);
    }

    /// Whether the schemas lane `i`'s pending records need are at hand (fetched from the
    /// registry when not cached). While the registry cannot be reached the lane holds: its
    /// records wait (none is rejected for it), it asks again with backoff up to 5 s, and
    /// the driver's other lanes go on.
    fn schemas_ready(&mut self, i: usize, now: Instant) -> bool {
        let Some(codecs) = self.s.chain.codecs().cloned() else {
            return true;
        };
        let l = &mut self.lanes[i];
        if l.held.is_some_and(|(until, _)| now < until) {
            return false;
        }
        match codecs.fetch(l.pending.iter().map(|e| &e.msg)) {
            Ok(()) => {
                if l.held.take().is_some() {
                    self.s.metrics.schema_held_lanes.dec();
                    tracing::info!(
                        topic = &*l.key.topic,
                        partition = l.key.partition,
                        "the schema registry answers again: the lane goes on"
                    );
                }
                true
            }
            Err(why) => {
                let wait = l.held.map_or(Duration::from_millis(100), |(_, w)| {
                    (w * 2).min(Duration::from_secs(5))
                });
                if l.held.is_none() {
                    self.s.metrics.schema_held_lanes.inc();
                    tracing::warn!(topic = &*l.key.topic, partition = l.key.partition, "{why}: the schema registry cannot be reached; the lane holds (its records wait) and asks again");
                }
                l.held = Some((now + wait, wait));
                false
            }
        }
    }

    /// One batch of lane `i` through the chain and out. False when the driver must stop.
    fn run_batch(&mut self, i: usize) -> bool {
        let l = &mut self.lanes[i];
        let batch = std::mem::take(&mut l.pending);
        let pre_rejected = std::mem::take(&mut l.pre_rejected);
        let batch_bytes = l.bytes;
        l.bytes = 0;
        l.since = None;
        let mut offsets: Vec<i64> = batch.iter().map(|e| e.offset).collect();
        offsets.extend(pre_rejected.iter().map(|r| r.env.offset));
        let originals = self.s.keep_originals.then(|| batch.clone());
        self.s.chain.swap_if_published();
        let out = match self.s.chain.run(&l.lane, batch) {
            Ok(out) => out,
            Err(source) => {
                let key = l.key.clone();
                let _ = self
                    .s
                    .events
                    .send(DriverEvent::Error(DriverError::Instance { key, source }));
                return false;
            }
        };
        if let Some(t) = &self.s.transactions {
            if l.txn.is_none() {
                if let Err(e) = t.api.begin(&l.key) {
                    tracing::error!("{e}; stopping");
                    let _ = self.s.events.send(DriverEvent::Error(e.into()));
                    return false;
                }
                l.txn = Some(OpenTxn {
                    since: Instant::now(),
                    first: offsets.first().copied(),
                    bytes: 0,
                    next: None,
                });
            }
        }
        let lane = LaneRef {
            key: &l.key,
            generation: l.generation,
            lane: &l.lane,
        };
        if let Err(source) =
            self.s
                .outputs
                .deliver(lane, &offsets, &out, &pre_rejected, originals.as_deref())
        {
            let key = l.key.clone();
            let _ = self
                .s
                .events
                .send(DriverEvent::Error(DriverError::Delivery { key, source }));
            return false;
        }
        l.last_processed = offsets.last().copied();
        if let Some(txn) = &mut l.txn {
            txn.bytes += batch_bytes;
            if out.failure.is_none() {
                txn.next = offsets.iter().max().map(|o| o + 1);
            }
        }
        let m = &self.s.metrics;
        m.batch_size.observe(offsets.len() as f64);
        for (name, t) in self.s.chain.names().zip(self.s.chain.timings()) {
            if !t.is_zero() {
                m.stage_seconds
                    .with_label_values(&[name])
                    .observe(t.as_secs_f64());
            }
        }
        m.add_stage_counts(self.s.chain.tallies(), &mut self.last_counts);
        m.add_stage_memory(self.s.chain.memory(), &mut self.last_memory);
        m.set_state_memory(self.s.chain.state_memory(), &mut self.last_state_memory);
        if let Some(f) = out.failure {
            // Exactly-once: nothing of the partition's open transaction becomes visible.
            if let (Some(t), Some(_)) = (&self.s.transactions, l.txn.take()) {
                abort(t, &l.key, m);
            }
            tracing::error!(stage = %f.stage, topic = &*l.key.topic, partition = l.key.partition, offset = f.offset, "stage failed: {}; stopping", f.reason);
            let _ = self.s.events.send(DriverEvent::Failed(f));
            return false;
        }
        true
    }
}

/// Aborts a lane's transaction, counting it. True when the abort went through.
fn abort(t: &TxnSetup, key: &PartitionKey, metrics: &Metrics) -> bool {
    metrics.transactions.with_label_values(&["aborted"]).inc();
    match t.api.abort(key) {
        Ok(()) => true,
        Err(e) => {
            // The broker aborts it anyway: when the transaction times out, or when the
            // partition's next owner opens its producer.
            tracing::warn!("{e}");
            false
        }
    }
}
