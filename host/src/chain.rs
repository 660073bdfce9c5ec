//! One batch through every stage in order: keep/next/reject/fail bookkeeping, truncation at a
//! fail, and the batch-boundary plugin swap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::RolloutMode;
use crate::engine::{InstanceError, StageInstance, Verdict, WeirEngine};
pub use crate::message::Rejected;
use crate::message::{Envelope, Lane};
use crate::rollout::answer::{self, Candidate};
use crate::rollout::{Rollout, StageSlot};
use crate::schema::{Codecs, Scratch};

/// Outcome counts of one stage.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StageCounts {
    /// Messages the stage was given.
    pub input: u64,
    /// Answered `keep`.
    pub keep: u64,
    /// Answered `next` with one or more messages.
    pub next: u64,
    /// Answered `next` with no message (filtered out).
    pub dropped: u64,
    /// Messages emitted by `next` answers.
    pub emitted: u64,
    /// Answered `reject` (including traps under `on_trap: reject`).
    pub rejected: u64,
    /// Answered `fail` (including traps under `on_trap: fail`).
    pub failed: u64,
    /// Given after a message the stage failed on, in the same batch, and never answered
    /// (input = keep + next + dropped + rejected + failed + unanswered).
    pub unanswered: u64,
    /// Plugin versions swapped in while running.
    pub swaps: u64,
}

impl std::ops::AddAssign<&StageCounts> for StageCounts {
    fn add_assign(&mut self, o: &StageCounts) {
        self.input += o.input;
        self.keep += o.keep;
        self.next += o.next;
        self.dropped += o.dropped;
        self.emitted += o.emitted;
        self.rejected += o.rejected;
        self.failed += o.failed;
        self.unanswered += o.unanswered;
        self.swaps += o.swaps;
    }
}

/// The message a stage failed on: the pipeline stops before it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    /// The stage that failed.
    pub stage: String,
    /// Its plugin version (hash).
    pub plugin: String,
    /// Source offset of the failed message.
    pub offset: i64,
    /// Why.
    pub reason: String,
}

/// What one batch became.
#[derive(Debug, Default)]
pub struct ChainOutput {
    /// Messages that passed every stage, in order.
    pub outputs: Vec<Envelope>,
    /// Messages that were rejected, in order.
    pub rejects: Vec<Rejected>,
    /// Set when a stage failed: nothing at or after `failure.offset` is in the outputs or rejects.
    pub failure: Option<Failure>,
}

/// One stage's numbers at the end of a run.
#[derive(Debug, Clone)]
pub struct StageStats {
    /// Stage name.
    pub name: Arc<str>,
    /// Plugin version (hash) running at the end.
    pub plugin: String,
    /// Whether calls used the packed batch path.
    pub batch: bool,
    /// Outcome counts.
    pub counts: StageCounts,
    /// Sandbox events.
    pub sandbox: crate::engine::SandboxStats,
}

/// A stage's input: the batch of the run, lent (the caller keeps it, to run it again) or
/// handed over, or the messages the stage before passed on.
enum Input<'a> {
    Lent(&'a [Envelope]),
    Owned(Vec<Envelope>),
}

impl Input<'_> {
    fn messages(&self) -> &[Envelope] {
        match self {
            Input::Lent(batch) => batch,
            Input::Owned(batch) => batch,
        }
    }

    /// Message `i`: moved out when owned (an empty message is left in its place; each is
    /// taken once at most), copied when lent.
    fn take(&mut self, i: usize) -> Envelope {
        match self {
            Input::Lent(batch) => batch[i].clone(),
            Input::Owned(batch) => std::mem::take(&mut batch[i]),
        }
    }

    /// The messages that passed a stage, in order.
    fn pick(mut self, passed: Vec<Passed>) -> Vec<Envelope> {
        passed
            .into_iter()
            .map(|p| match p {
                Passed::Kept(i) => self.take(i),
                Passed::Made(env) => env,
            })
            .collect()
    }
}

/// A message that passed a stage: one of its input's, kept as it was (by index), or one it
/// made.
enum Passed {
    Kept(usize),
    Made(Envelope),
}

impl Passed {
    fn offset(&self, input: &Input<'_>) -> i64 {
        match self {
            Passed::Kept(i) => input.messages()[*i].offset,
            Passed::Made(env) => env.offset,
        }
    }
}

struct StageRun {
    slot: Arc<StageSlot>,
    generation: u64,
    instance: StageInstance,
    /// The candidate of a rollout in progress, in its own sandbox.
    candidate: Option<Candidate>,
    counts: StageCounts,
}

impl StageRun {
    /// One answer per message of `batch` (stopping after a fail), from the live version or,
    /// during a rollout, as its mode says.
    fn answer(
        &mut self,
        lane: &Lane,
        batch: &[Envelope],
        out: &mut Vec<Verdict>,
        by_candidate: &mut Vec<bool>,
    ) -> Result<(), InstanceError> {
        let Some(c) = &mut self.candidate else {
            return self.instance.process(lane, batch, out);
        };
        let usable = match c.rollout.mode() {
            RolloutMode::Shadow => {
                answer::shadow(&mut self.instance, c, &self.slot, lane, batch, out)?
            }
            RolloutMode::Canary => answer::canary(
                &mut self.instance,
                c,
                &self.slot,
                lane,
                batch,
                out,
                by_candidate,
            )?,
            RolloutMode::Immediate => {
                self.candidate = None;
                return self.instance.process(lane, batch, out);
            }
        };
        if !usable {
            self.candidate = None;
        }
        Ok(())
    }

    /// The plugin that gave an answer.
    fn answered_by(&self, by_candidate: Option<&bool>) -> &Arc<crate::engine::Plugin> {
        match (&self.candidate, by_candidate) {
            (Some(c), Some(true)) => c.instance.plugin(),
            _ => self.instance.plugin(),
        }
    }
}

fn candidate(
    engine: &WeirEngine,
    slot: &Arc<StageSlot>,
    rollout: Arc<Rollout>,
) -> Option<Candidate> {
    answer::instantiate(engine, slot, rollout)
}

/// The stages of a pipeline as one thread runs them.
pub struct Chain {
    engine: WeirEngine,
    stages: Vec<StageRun>,
    verdicts: Vec<Verdict>,
    /// Per verdict of the current stage: answered by a canary candidate (empty: none was).
    by_candidate: Vec<bool>,
    timings: Vec<Duration>,
    /// Schema-registry decoding before the stages and encoding after them.
    codecs: Option<Arc<Codecs>>,
}

/// The name codec rejects carry as their stage.
pub const DECODE_STAGE: &str = "weir.decode";
/// The name encoding rejects carry as their stage.
pub const ENCODE_STAGE: &str = "weir.encode";

impl Chain {
    /// Instantiates every stage (calling `init`) from the current plugin of each slot.
    pub fn new(engine: &WeirEngine, slots: &[Arc<StageSlot>]) -> Result<Self, InstanceError> {
        let stages = slots
            .iter()
            .map(|slot| {
                let (generation, plugin, rollout) = slot.version();
                Ok(StageRun {
                    slot: slot.clone(),
                    generation,
                    instance: StageInstance::new(engine, slot.spec.clone(), plugin)?,
                    candidate: rollout.and_then(|r| candidate(engine, slot, r)),
                    counts: StageCounts::default(),
                })
            })
            .collect::<Result<_, InstanceError>>()?;
        Ok(Chain {
            engine: engine.clone(),
            timings: vec![Duration::ZERO; slots.len()],
            stages,
            verdicts: Vec::new(),
            by_candidate: Vec::new(),
            codecs: None,
        })
    }

    /// Decodes source records before the stages and encodes outputs after them.
    pub fn with_codecs(mut self, codecs: Option<Arc<Codecs>>) -> Self {
        self.codecs = codecs.filter(|c| !c.is_empty());
        self
    }

    /// The chain's codecs, if any.
    pub fn codecs(&self) -> Option<&Arc<Codecs>> {
        self.codecs.as_ref()
    }

    /// Swaps in newly published plugin versions, and starts or ends candidates. Called
    /// between batches only, so every message is answered by exactly one live version of
    /// each stage.
    pub fn swap_if_published(&mut self) {
        for s in &mut self.stages {
            if s.slot.generation() == s.generation {
                continue;
            }
            let started = Instant::now();
            let (generation, plugin, rollout) = s.slot.version();
            s.generation = generation;
            if !Arc::ptr_eq(s.instance.plugin(), &plugin) {
                let old = s.instance.plugin().short_hash().to_owned();
                // A promoted candidate is already running here: keep its instance.
                let promoted = s
                    .candidate
                    .take_if(|c| Arc::ptr_eq(c.instance.plugin(), &plugin))
                    .map(|c| c.instance);
                let new = match promoted {
                    Some(instance) => Ok(instance),
                    None => StageInstance::new(&self.engine, s.slot.spec.clone(), plugin.clone()),
                };
                match new {
                    Ok(new) => {
                        s.instance = new;
                        s.counts.swaps += 1;
                        tracing::info!(
                            stage = &*s.slot.spec.name,
                            from = %old,
                            to = plugin.short_hash(),
                            pause_us = started.elapsed().as_micros() as u64,
                            "plugin swapped"
                        );
                    }
                    Err(e) => {
                        tracing::error!(stage = &*s.slot.spec.name, keeping = %old, "swap refused: {e}")
                    }
                }
            }
            s.candidate = match rollout {
                Some(r) if s.candidate.as_ref().is_some_and(|c| c.rollout.id == r.id) => {
                    s.candidate.take()
                }
                Some(r) => candidate(&self.engine, &s.slot, r),
                None => None,
            };
        }
    }

    /// Runs one batch (all from `lane`, in offset order) through every stage.
    ///
    /// With stateful stages, the state writes of the batch follow its outcomes: when a stage
    /// fails at offset *o*, the writes of the run are dropped and the messages before *o* run
    /// again (a batch call's writes cannot be split by message), so that only the writes of
    /// the messages whose outcomes go out are kept. They become pending until the partition
    /// commits past them (see [`crate::state`]).
    ///
    /// With schema-registry codecs, records are decoded first (one that cannot be is
    /// rejected and never reaches a stage) and outputs encoded last (one that does not fit
    /// is rejected as the stages left it).
    pub fn run(&mut self, lane: &Lane, batch: Vec<Envelope>) -> Result<ChainOutput, InstanceError> {
        let Some(codecs) = self.codecs.clone() else {
            return self.run_stages(lane, batch);
        };
        let (batch, mut rejected, spare) = decode_batch(&codecs, batch);
        let mut out = self.run_stages(lane, batch)?;
        if let Some(f) = &out.failure {
            rejected.retain(|r| r.env.offset < f.offset);
        }
        if codecs.encode.is_some() || codecs.encode_key.is_some() {
            encode_outputs(&codecs, &mut out, spare);
        }
        out.rejects.append(&mut rejected);
        Ok(out)
    }

    fn run_stages(
        &mut self,
        lane: &Lane,
        batch: Vec<Envelope>,
    ) -> Result<ChainOutput, InstanceError> {
        let parts = self.state_of(lane)?;
        if parts.is_empty() {
            return Ok(self.run_once(lane, Input::Owned(batch))?.0);
        }
        if let Some(first) = batch.first() {
            for p in &parts {
                // Values past the TTL: deletes that ride with this run's writes.
                p.expire(first.offset)
                    .map_err(state_error(&p.spec().stage))?;
            }
        }
        // The batch is lent to the runs, not handed over (nor copied): when a stage fails,
        // the messages before it run again. The messages that pass are taken out of it last.
        let mut input = batch;
        let (mut out, mut passed) = self.run_once(lane, Input::Lent(&input))?;
        while let Some(failure) = out.failure.take() {
            if !parts.iter().any(|p| p.batch_wrote()) {
                out.failure = Some(failure);
                break;
            }
            for p in &parts {
                p.finish_batch(false);
            }
            input.retain(|e| e.offset < failure.offset);
            let (again, again_passed) = if input.is_empty() {
                (ChainOutput::default(), Vec::new())
            } else {
                tracing::debug!(
                    topic = &*lane.topic,
                    partition = lane.partition,
                    messages = input.len(),
                    "a stage failed at offset {}: the messages before it run again for their state writes",
                    failure.offset
                );
                self.run_once(lane, Input::Lent(&input))?
            };
            (out, passed) = (again, again_passed);
            if out.failure.is_none() {
                out.failure = Some(failure);
                break;
            }
        }
        for p in &parts {
            p.finish_batch(true);
        }
        if !passed.is_empty() {
            out.outputs = Input::Owned(input).pick(passed);
        }
        Ok(out)
    }

    /// A partition was assigned: each stateful stage opens its state from the store and, with
    /// a changelog, catches it up with the changelog, before the partition's first message.
    /// (Runs on a partition that is not open write to a state nothing commits.)
    pub fn restore_state(
        &self,
        key: &crate::message::PartitionKey,
        generation: u64,
        changelog: Option<&dyn crate::state::changelog::Changelog>,
    ) -> Result<crate::state::Restored, InstanceError> {
        restore_state(&self.state(), key, generation, changelog)
    }

    /// The state of every stateful stage for `lane`'s partition.
    fn state_of(
        &self,
        lane: &Lane,
    ) -> Result<Vec<Arc<crate::state::PartitionState>>, InstanceError> {
        let mut parts = Vec::new();
        for s in &self.stages {
            if let Some(b) = &s.slot.spec.state {
                let key = crate::message::PartitionKey::new(&lane.topic, lane.partition);
                parts.push(
                    b.current(&key, lane.generation)
                        .map_err(state_error(&s.slot.spec.name))?,
                );
            }
        }
        Ok(parts)
    }

    /// [`Self::run`] without the state bookkeeping. When only the first stage ran on a lent
    /// batch, the messages that passed are still in it: they are returned (the caller takes
    /// them out with [`Input::pick`]) and `outputs` is empty; otherwise they are in `outputs`
    /// and none are returned.
    fn run_once(
        &mut self,
        lane: &Lane,
        batch: Input<'_>,
    ) -> Result<(ChainOutput, Vec<Passed>), InstanceError> {
        let mut input = batch;
        let mut passed = Vec::new();
        let mut out = ChainOutput::default();
        self.timings.fill(Duration::ZERO);
        for (k, (s, took)) in self.stages.iter_mut().zip(&mut self.timings).enumerate() {
            if k > 0 {
                input = Input::Owned(input.pick(std::mem::take(&mut passed)));
            }
            let current = input.messages();
            if current.is_empty() {
                break;
            }
            self.verdicts.clear();
            self.by_candidate.clear();
            let started = Instant::now();
            s.answer(lane, current, &mut self.verdicts, &mut self.by_candidate)?;
            *took = started.elapsed();
            let given = current.len();
            s.counts.input += given as u64;
            let mut answered = 0;
            passed.reserve(given);
            for (i, v) in self.verdicts.drain(..).enumerate() {
                answered += 1;
                match v {
                    Verdict::Keep => {
                        s.counts.keep += 1;
                        passed.push(Passed::Kept(i));
                    }
                    Verdict::Next(msgs) if msgs.is_empty() => s.counts.dropped += 1,
                    Verdict::Next(msgs) => {
                        s.counts.next += 1;
                        s.counts.emitted += msgs.len() as u64;
                        let offset = input.messages()[i].offset;
                        passed.extend(
                            msgs.into_iter()
                                .map(|msg| Passed::Made(Envelope { offset, msg })),
                        );
                    }
                    Verdict::Reject(reason) => {
                        s.counts.rejected += 1;
                        out.rejects.push(Rejected {
                            env: input.take(i),
                            stage: s.slot.spec.name.clone(),
                            plugin: s.answered_by(self.by_candidate.get(i)).hash.clone(),
                            reason,
                        });
                    }
                    Verdict::Fail(reason) => {
                        s.counts.failed += 1;
                        let offset = input.messages()[i].offset;
                        let earlier = out.failure.as_ref().is_none_or(|f| offset < f.offset);
                        if earlier {
                            out.failure = Some(Failure {
                                stage: s.slot.spec.name.to_string(),
                                plugin: s.answered_by(self.by_candidate.get(i)).hash.clone(),
                                offset,
                                reason,
                            });
                        }
                        break;
                    }
                }
            }
            s.counts.unanswered += (given - answered) as u64;
            if let Some(f) = &out.failure {
                // Nothing at or after the failed message may count as done.
                passed.retain(|p| p.offset(&input) < f.offset);
                out.rejects.retain(|r| r.env.offset < f.offset);
            }
        }
        if self.stages.is_empty() {
            // No stage: every message passes.
            passed = (0..input.messages().len()).map(Passed::Kept).collect();
        }
        if let Input::Owned(_) = input {
            out.outputs = input.pick(std::mem::take(&mut passed));
        }
        Ok((out, passed))
    }

    /// The stateful stages' buckets (empty: no stage keeps state).
    pub fn state(&self) -> crate::state::StateRegistry {
        crate::state::StateRegistry::of_stages(
            self.stages
                .iter()
                .filter_map(|s| s.slot.spec.state.clone())
                .collect(),
        )
    }

    /// How long each stage took in the last batch (zero: the stage had nothing to do).
    pub fn timings(&self) -> &[Duration] {
        &self.timings
    }

    /// The number of stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the chain has no stages (a pass-through).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Stage names in chain order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.stages.iter().map(|s| &*s.slot.spec.name)
    }

    /// Per stage, in chain order: name and tally for the metrics (keep, next, dropped,
    /// reject, fail, traps, timeouts); cheap enough to read after every batch.
    pub fn tallies(&self) -> impl ExactSizeIterator<Item = (&str, [u64; 7])> + '_ {
        self.stages.iter().map(|s| {
            let (c, sandbox) = (&s.counts, &s.instance.stats);
            (
                &*s.slot.spec.name,
                [
                    c.keep,
                    c.next,
                    c.dropped,
                    c.rejected,
                    c.failed,
                    sandbox.traps,
                    sandbox.timeouts,
                ],
            )
        })
    }

    /// Per stage, in chain order: its live instance's linear memory now (bytes) and how many
    /// times an instance was recycled at the memory cap.
    pub fn memory(&self) -> impl ExactSizeIterator<Item = (&str, u64, u64)> + '_ {
        self.stages.iter().map(|s| {
            (
                &*s.slot.spec.name,
                s.instance.memory_now(),
                s.instance.stats.recycled,
            )
        })
    }

    /// Per stage that keeps state, in chain order: the bytes its state holds in the host's
    /// memory over this process's partitions ([`crate::state::StageBuckets::held_bytes`]).
    pub fn state_memory(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.stages.iter().filter_map(|s| {
            let b = s.slot.spec.state.as_ref()?;
            Some((&*s.slot.spec.name, b.held_bytes()))
        })
    }

    /// Per-stage counts and sandbox events, in chain order.
    pub fn stats(&self) -> Vec<StageStats> {
        self.stages
            .iter()
            .map(|s| StageStats {
                name: s.slot.spec.name.clone(),
                plugin: s.instance.plugin().hash.clone(),
                batch: s.instance.uses_batch(),
                counts: s.counts.clone(),
                sandbox: s.instance.stats.clone(),
            })
            .collect()
    }
}

/// [`Chain::restore_state`] with the chain's [`Chain::state`] (which, unlike the chain,
/// other threads may use: partitions restore side by side).
pub fn restore_state(
    state: &crate::state::StateRegistry,
    key: &crate::message::PartitionKey,
    generation: u64,
    changelog: Option<&dyn crate::state::changelog::Changelog>,
) -> Result<crate::state::Restored, InstanceError> {
    state
        .restore(key, generation, changelog)
        .map_err(|(stage, e)| state_error(&stage)(e))
}

/// A stage's state store failed: the chain's error naming the stage.
fn state_error(stage: &str) -> impl Fn(crate::state::StoreError) -> InstanceError + '_ {
    move |e| InstanceError::State {
        stage: stage.to_owned(),
        reason: e.to_string(),
    }
}

/// Decodes each record; those that cannot be are rejected with the reason (the others stay
/// where they are: the batch is not copied). Also gives the decoded values' old buffers, for
/// the outputs' encoding.
fn decode_batch(
    codecs: &Codecs,
    mut batch: Vec<Envelope>,
) -> (Vec<Envelope>, Vec<Rejected>, Vec<Vec<u8>>) {
    let mut decoding = codecs.decoding();
    let mut reasons = Vec::new();
    let failed: Vec<Envelope> = batch
        .extract_if(.., |e| match decoding.decode(&mut e.msg) {
            Ok(()) => false,
            Err(r) => {
                reasons.push(r.text);
                true
            }
        })
        .collect();
    let rejected = failed
        .into_iter()
        .zip(reasons)
        .map(|(env, reason)| Rejected {
            env,
            stage: DECODE_STAGE.into(),
            plugin: "host".into(),
            reason,
        })
        .collect();
    (batch, rejected, decoding.take_spare())
}

/// Encodes each output's key and value (each side its encoder has); one whose key or value
/// does not fit goes to the rejects as the stages left it (nothing half-encoded). While the
/// registry cannot be reached for an output's subject, the lane holds here and asks again with
/// backoff (nothing is rejected for it). Values are encoded into the `spare` buffers first.
fn encode_outputs(codecs: &Codecs, out: &mut ChainOutput, spare: Vec<Vec<u8>>) {
    let side = |enc: &Option<crate::schema::Encoder>,
                msg: &crate::message::Message,
                scratch: &mut Scratch| {
        enc.as_ref()
            .map(|enc| encode_held(enc, msg, scratch))
            .transpose()
    };
    let (mut key_scratch, mut value_scratch) = (Scratch::default(), Scratch::with_spare(spare));
    let mut reasons = Vec::new();
    let failed: Vec<Envelope> = out
        .outputs
        .extract_if(.., |e| {
            // Both sides first: neither is applied unless both fit.
            let encoded = side(&codecs.encode_key, &e.msg, &mut key_scratch)
                .and_then(|key| Ok((key, side(&codecs.encode, &e.msg, &mut value_scratch)?)));
            match encoded {
                Ok((key, value)) => {
                    if let Some(key) = key {
                        e.msg.key = key;
                    }
                    if let Some(value) = value {
                        e.msg.value = value;
                    }
                    e.msg.headers.retain(|h| !h.key.starts_with("weir.schema."));
                    false
                }
                Err(r) => {
                    reasons.push(r.text);
                    true
                }
            }
        })
        .collect();
    out.rejects.extend(
        failed
            .into_iter()
            .zip(reasons)
            .map(|(env, reason)| Rejected {
                env,
                stage: ENCODE_STAGE.into(),
                plugin: "host".into(),
                reason,
            }),
    );
}

/// One side of one output encoded, holding (with backoff) while the registry is unreachable.
fn encode_held(
    enc: &crate::schema::Encoder,
    msg: &crate::message::Message,
    scratch: &mut Scratch,
) -> Result<Option<Vec<u8>>, crate::schema::CodecReject> {
    let mut wait = Duration::from_millis(100);
    let mut held = false;
    let encoded = loop {
        match enc.encode_after(msg, scratch) {
            Err(Err(why)) => {
                if !held {
                    held = true;
                    enc.held(true);
                    tracing::warn!(
                        "{why}: the schema registry cannot be reached; holding until it answers"
                    );
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Ok(bytes) => break Ok(bytes),
            Err(Ok(r)) => break Err(r),
        }
    };
    if held {
        enc.held(false);
    }
    encoded
}
