//! A driver thread: its own lanes and its own stage instances. Poll lanes → batch per lane
//! (count, bytes, linger) → swap check → chain → outputs. Per-partition order is kept: one
//! lane is only ever on one driver, and its batches go through the chain one at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};

use super::controller::{DriverControl, DriverEvent, LaneHandle};
use super::output::{LaneRef, Outputs};
use super::PartitionKey;
use crate::chain::{Chain, StageStats};
use crate::config::BatchConfig;
use crate::message::{Envelope, Lane};
use crate::metrics::Metrics;

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
}

struct DriverLane {
    key: PartitionKey,
    generation: u64,
    rx: Receiver<Envelope>,
    lane: Lane,
    pending: Vec<Envelope>,
    bytes: usize,
    since: Option<Instant>,
    last_processed: Option<i64>,
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
            };
            d.run();
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
}

impl Driver {
    fn run(&mut self) {
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
            if stopping == Some(false) {
                return;
            }
            let draining = stopping == Some(true);
            let now = Instant::now();
            let mut ran = false;
            for i in 0..self.lanes.len() {
                self.fill(i);
                let l = &self.lanes[i];
                let full = l.pending.len() >= self.s.batch.max_messages
                    || l.bytes >= self.s.batch.max_bytes.bytes();
                let due = l.since.is_some_and(|t| now >= t + self.s.batch.linger);
                if !l.pending.is_empty() && (full || due || draining) {
                    ran = true;
                    if !self.run_batch(i) {
                        return;
                    }
                }
            }
            if draining
                && self
                    .lanes
                    .iter()
                    .all(|l| l.pending.is_empty() && l.rx.is_empty())
            {
                return;
            }
            if !ran {
                self.wait();
            }
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
                },
                key,
                generation,
                rx,
                pending: Vec::new(),
                bytes: 0,
                since: None,
                last_processed: None,
            }),
            DriverControl::Revoke { lanes, ack } => {
                let mut done = Vec::new();
                self.lanes.retain(|l| {
                    let revoked = lanes.iter().any(|(k, g)| *k == l.key && *g == l.generation);
                    if revoked {
                        done.push((l.key.clone(), l.last_processed));
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

    /// Moves what the lane has queued into its pending batch, up to the batch limits.
    fn fill(&mut self, i: usize) {
        let max = self.s.batch.max_messages;
        let max_bytes = self.s.batch.max_bytes.bytes();
        let l = &mut self.lanes[i];
        while l.pending.len() < max && l.bytes < max_bytes {
            match l.rx.try_recv() {
                Ok(env) => {
                    l.bytes += env.msg.byte_len();
                    l.since.get_or_insert_with(Instant::now);
                    l.pending.push(env);
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
            .filter_map(|l| l.since)
            .map(|t| (t + linger).saturating_duration_since(Instant::now()))
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

    /// One batch of lane `i` through the chain and out. False when the driver must stop.
    fn run_batch(&mut self, i: usize) -> bool {
        let l = &mut self.lanes[i];
        let batch = std::mem::take(&mut l.pending);
        l.bytes = 0;
        l.since = None;
        let offsets: Vec<i64> = batch.iter().map(|e| e.offset).collect();
        let originals = self.s.keep_originals.then(|| batch.clone());
        self.s.chain.swap_if_published();
        let out = match self.s.chain.run(&l.lane, batch) {
            Ok(out) => out,
            Err(e) => {
                let _ = self
                    .s
                    .events
                    .send(DriverEvent::Error(format!("{}: {e}", l.key)));
                return false;
            }
        };
        let lane = LaneRef {
            key: &l.key,
            generation: l.generation,
            lane: &l.lane,
        };
        if let Err(e) = self
            .s
            .outputs
            .deliver(lane, &offsets, &out, originals.as_deref())
        {
            let _ = self.s.events.send(DriverEvent::Error(e));
            return false;
        }
        l.last_processed = offsets.last().copied();
        let m = &self.s.metrics;
        m.batch_size.observe(offsets.len() as f64);
        for ((name, _, _), t) in self.s.chain.counts().zip(self.s.chain.timings()) {
            if !t.is_zero() {
                m.stage_seconds
                    .with_label_values(&[name])
                    .observe(t.as_secs_f64());
            }
        }
        m.add_stage_counts(self.s.chain.counts(), &mut self.last_counts);
        if let Some(f) = out.failure {
            tracing::error!(stage = %f.stage, key = %l.key, offset = f.offset, "stage failed: {}; stopping", f.reason);
            let _ = self.s.events.send(DriverEvent::Failed(f));
            return false;
        }
        true
    }
}
