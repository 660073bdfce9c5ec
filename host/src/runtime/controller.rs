//! The controller: the only thread that touches the source.
//!
//! It polls the source (which reports to the [`Core`]: items into bounded lanes, assignments,
//! revocations as drain barriers, ends of input), turns completions into per-partition
//! watermarks, holds or pauses under pressure, commits on a tick, and runs the shutdown
//! sequence: stop taking messages → drivers drain (or stop after their batch when a stage
//! failed) → sinks flush under the rest of `drain_timeout` → the source is closed, which
//! revokes what it still owns: the final commit of what is done.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use super::driver::{DriverControl, DriverEvent};
use super::lanes::{Core, RuntimeError};
use crate::chain::Failure;
use crate::sink::Sink;
use crate::source::Source;

/// How the controller ended.
#[derive(Debug, Default)]
pub struct ControllerOutcome {
    /// Committed offset (the next to read) per `topic/partition`, as confirmed.
    pub committed: BTreeMap<String, i64>,
    /// Messages read.
    pub read: u64,
    /// Items the source rejected itself (malformed input).
    pub malformed: u64,
    /// A stage failure.
    pub failure: Option<Failure>,
    /// Another reason the pipeline stopped.
    pub error: Option<RuntimeError>,
    /// The source was drained to its end.
    pub reached_end: bool,
    /// Assignments and revocations seen.
    pub rebalances: u64,
    /// Completions from older generations, ignored.
    pub stale: u64,
    /// From the first message read until the loop ended: the time spent consuming.
    pub consuming: Duration,
    /// The process's CPU time (all threads) over the same span.
    pub consuming_cpu: Duration,
}

/// What the controller thread runs.
pub(super) struct Controller {
    pub(super) source: Box<dyn Source>,
    pub(super) core: Core,
    pub(super) events: Receiver<DriverEvent>,
    pub(super) sinks: Vec<Arc<dyn Sink>>,
    pub(super) stop: Arc<AtomicBool>,
    /// Exactly-once lanes fenced between revokes: their generation, their last commit, and
    /// until when they wait for a revoke.
    pub(super) fenced: std::collections::HashMap<crate::message::PartitionKey, (u64, i64, Instant)>,
    /// The shutdown sequence has begun: the drivers are stopping.
    pub(super) shutting_down: bool,
}

impl Controller {
    fn driver_event(&mut self, ev: DriverEvent, exited: &mut usize) {
        match ev {
            DriverEvent::Failed(f) => {
                self.core.failure.get_or_insert(f);
            }
            DriverEvent::Error(e) => self.core.fail(e.into()),
            DriverEvent::Committed { key, next } => {
                self.core
                    .metrics
                    .committed_offset
                    .with_label_values(&[&*key.topic, key.partition.to_string().as_str()])
                    .set(next);
                let c = self.core.txn_committed.entry(key).or_insert(next);
                *c = (*c).max(next);
            }
            DriverEvent::Rewind {
                key,
                generation,
                from,
                ask,
            } => self.rewind(key, generation, from, ask),
            DriverEvent::Fenced {
                key,
                generation,
                from,
            } => {
                if self.core.lane_generation(&key) == Some(generation) {
                    let until = Instant::now() + self.core.opts.fenced_hold;
                    self.fenced.insert(key, (generation, from, until));
                }
            }
            DriverEvent::Exited(d) => {
                *exited += 1;
                self.core.drivers[d].alive = false;
            }
        }
    }

    /// Fenced lanes still this member's after `fenced_hold` (a session and a margin: a
    /// member out of the group has learnt so, and revoked them, by then) are read again
    /// from their last commit; the others were revoked meanwhile, and are forgotten.
    fn release_fenced(&mut self) {
        if self.fenced.is_empty() {
            return;
        }
        let core = &self.core;
        self.fenced
            .retain(|key, (generation, _, _)| core.lane_generation(key) == Some(*generation));
        let now = Instant::now();
        let due: Vec<_> = self
            .fenced
            .iter()
            .filter(|(_, (_, _, until))| now >= *until)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (key, (generation, from, _)) in due {
            self.fenced.remove(&key);
            tracing::warn!(%key, from, "fenced, and still this member's a session later: read again from its last commit");
            self.rewind(key, generation, from, true);
        }
    }

    /// A lane whose transaction the group's move forced to abort: it is replaced by a new
    /// lane (a new generation; its state restored from the changelog) that reads the
    /// partition again from `from`. Nothing if the lane is gone already (revoked meanwhile).
    fn rewind(&mut self, key: crate::message::PartitionKey, generation: u64, from: i64, ask: bool) {
        if self.core.lane_generation(&key) != Some(generation) {
            return;
        }
        if self.shutting_down {
            // The drivers are stopping: a new lane would have none to run on (the run ended
            // with `no driver is running`). The aborted transaction left nothing visible and
            // the committed offset stands: the partition's next owner starts there.
            tracing::info!(%key, from, "stopping: the partition is not read again; its next owner starts at its last commit");
            return;
        }
        let from = if ask {
            self.source.settled(&key, from)
        } else {
            from
        };
        use crate::source::Handler as _;
        // The end the partition was to be read to (`stop_at_end`), if it was known already.
        let end = self.core.lane(&key).and_then(|l| l.end);
        let _ = self.core.revoked(std::slice::from_ref(&key));
        match self.source.rewind(&key, from, end) {
            Ok(()) => {
                self.core
                    .metrics
                    .rebalances
                    .with_label_values(&["rewind"])
                    .inc();
                self.core.assigned(std::slice::from_ref(&key));
                // The new lane starts unpaused: so must the partition, which backpressure
                // may have paused in the source (a seek keeps a pause; it stayed paused for
                // good, and the partition was read no more).
                self.source.resume(std::slice::from_ref(&key));
            }
            Err(e) => self.core.fail(e.into()),
        }
    }

    fn commit(&mut self) {
        if self.core.opts.transactional {
            // The drivers' transactions commit the offsets.
            let source = &self.source;
            self.core.update_lag(|k| source.high_watermark(k));
            return;
        }
        let due = self.core.committable();
        // (At-least-once with a changelog: what it holds the writes below.)
        let due = self.core.through_changelog(due);
        self.commit_offsets(due);
        let source = &self.source;
        self.core.update_lag(|k| source.high_watermark(k));
    }

    /// At-least-once with a changelog: commits the partitions whose changelog records were
    /// just acknowledged, without waiting for the next tick.
    fn commit_logged(&mut self) {
        if self.core.opts.transactional || !self.core.logged_moved {
            return;
        }
        let due = self.core.logged_commits();
        self.commit_offsets(due);
    }

    /// Commits these offsets through the source (those not committed yet), then applies the
    /// stages' writes below them to their stores.
    fn commit_offsets(&mut self, due: Vec<(crate::message::PartitionKey, i64)>) {
        let source = &self.source;
        let due: Vec<_> = due
            .into_iter()
            // Until the commit is confirmed it is sent again at every tick.
            .filter(|(k, next)| source.committed(k).is_none_or(|c| c < *next))
            .collect();
        if !due.is_empty() {
            if let Err(e) = self.source.commit(&due) {
                self.core
                    .metrics
                    .commits
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!("{e}");
            }
            for (k, next) in &due {
                self.core.commit_state(k, *next);
            }
        }
    }

    /// The poll loop, then the shutdown sequence. Returns when everything is committed.
    pub(super) fn run(mut self) -> ControllerOutcome {
        let mut reached_end = false;
        let mut exited = 0usize;
        let n_drivers = self.core.drivers.len();
        let mut last_commit = Instant::now();
        let completions = self.core.completions.clone();
        let events = self.events.clone();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            // Take a burst of messages, unless flow control holds: then wait for completions.
            if self.core.reading() {
                if let Err(e) = self.source.poll(&mut self.core, Duration::from_millis(10)) {
                    self.core.fail(e.into());
                }
            } else {
                let mut sel = Select::new();
                sel.recv(&completions);
                sel.recv(&events);
                let _ = sel.ready_timeout(Duration::from_millis(2));
            }
            while let Ok(ev) = events.try_recv() {
                self.driver_event(ev, &mut exited);
            }
            self.core.settle();
            self.release_fenced();
            self.commit_logged();
            let (pause, resume) = self.core.flow();
            if !pause.is_empty() {
                self.source.pause(&pause);
            }
            if !resume.is_empty() {
                self.source.resume(&resume);
            }
            if last_commit.elapsed() >= self.core.opts.commit_interval {
                self.commit();
                last_commit = Instant::now();
            }
            if self.core.assigned_once {
                self.core.metrics.set_ready(true);
            }
            if self.core.failure.is_some() || self.core.error.is_some() || exited == n_drivers {
                break;
            }
            if self.core.opts.stop_at_end && self.core.at_end() {
                tracing::info!("every partition is handled up to its end; stopping");
                reached_end = true;
                break;
            }
        }
        let (consuming, consuming_cpu) =
            self.core
                .first_read
                .map_or((Duration::ZERO, Duration::ZERO), |(t, cpu)| {
                    let now = crate::report::process_cpu_time();
                    (t.elapsed(), now.saturating_sub(cpu))
                });

        // Shutdown: stop fetching, drain drivers, wait for acknowledgements, final commit.
        self.shutting_down = true;
        let deadline = Instant::now() + self.core.opts.drain_timeout;
        let drain = self.core.failure.is_none() && self.core.error.is_none();
        let all = self.core.keys();
        if !all.is_empty() {
            self.source.pause(&all);
        }
        for d in &self.core.drivers {
            let _ = d.tx.send(DriverControl::Stop { drain });
        }
        while exited < n_drivers {
            let Ok(ev) = events.recv_deadline(deadline) else {
                tracing::error!("drivers did not stop in time; committing what is done");
                break;
            };
            self.driver_event(ev, &mut exited);
        }
        for s in &self.sinks {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = s.flush(left.max(Duration::from_millis(100))) {
                tracing::error!(
                    "shutdown: {e}; those offsets stay uncommitted and replay on restart"
                );
                if drain {
                    self.core.fail(e.into());
                }
            }
        }
        self.core.settle();
        // Closing revokes what the source still owns: the final synchronous commit.
        self.core.opts.revoke_timeout = Duration::ZERO;
        self.source.close(&mut self.core);
        let committed = if self.core.opts.transactional {
            std::mem::take(&mut self.core.txn_committed)
                .into_iter()
                .map(|(k, o)| (k.to_string(), o))
                .collect()
        } else {
            self.source.committed_all()
        };
        ControllerOutcome {
            committed,
            read: self.core.read,
            malformed: self.core.malformed,
            failure: self.core.failure.take(),
            error: self.core.error.take(),
            reached_end,
            rebalances: self.core.rebalances,
            stale: self.core.stale,
            consuming,
            consuming_cpu,
        }
    }
}
