//! One batch through every stage in order: keep/next/reject/fail bookkeeping, truncation at a
//! fail, and the batch-boundary plugin swap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::StageSlot;
use crate::engine::{InstanceError, StageInstance, Verdict, WeirEngine};
use crate::message::{Envelope, Lane};

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

/// A message that left the chain for the reject path.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The message as the rejecting stage received it.
    pub env: Envelope,
    /// The stage that rejected it.
    pub stage: Arc<str>,
    /// That stage's plugin version (hash).
    pub plugin: String,
    /// Why.
    pub reason: String,
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

struct StageRun {
    slot: Arc<StageSlot>,
    generation: u64,
    instance: StageInstance,
    counts: StageCounts,
}

/// The stages of a pipeline as one thread runs them.
pub struct Chain {
    engine: WeirEngine,
    stages: Vec<StageRun>,
    verdicts: Vec<Verdict>,
    timings: Vec<Duration>,
}

impl Chain {
    /// Instantiates every stage (calling `init`) from the current plugin of each slot.
    pub fn new(engine: &WeirEngine, slots: &[Arc<StageSlot>]) -> Result<Self, InstanceError> {
        let stages = slots
            .iter()
            .map(|slot| {
                let (generation, plugin) = slot.current();
                Ok(StageRun {
                    slot: slot.clone(),
                    generation,
                    instance: StageInstance::new(engine, slot.spec.clone(), plugin)?,
                    counts: StageCounts::default(),
                })
            })
            .collect::<Result<_, InstanceError>>()?;
        Ok(Chain {
            engine: engine.clone(),
            timings: vec![Duration::ZERO; slots.len()],
            stages,
            verdicts: Vec::new(),
        })
    }

    /// Swaps in newly published plugin versions. Called between batches only, so every
    /// message is processed by exactly one version of each stage.
    pub fn swap_if_published(&mut self) {
        for s in &mut self.stages {
            if s.slot.generation() == s.generation {
                continue;
            }
            let started = Instant::now();
            let (generation, plugin) = s.slot.current();
            s.generation = generation;
            let old = s.instance.plugin().short_hash().to_owned();
            match StageInstance::new(&self.engine, s.slot.spec.clone(), plugin.clone()) {
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
    }

    /// Runs one batch (all from `lane`, in offset order) through every stage.
    pub fn run(&mut self, lane: &Lane, batch: Vec<Envelope>) -> Result<ChainOutput, InstanceError> {
        let mut current = batch;
        let mut out = ChainOutput::default();
        self.timings.fill(Duration::ZERO);
        for (s, took) in self.stages.iter_mut().zip(&mut self.timings) {
            if current.is_empty() {
                break;
            }
            self.verdicts.clear();
            let started = Instant::now();
            s.instance.process(lane, &current, &mut self.verdicts)?;
            *took = started.elapsed();
            s.counts.input += current.len() as u64;
            let given = current.len();
            let mut answered = 0;
            let mut next = Vec::with_capacity(current.len());
            for (env, v) in current.into_iter().zip(self.verdicts.drain(..)) {
                answered += 1;
                match v {
                    Verdict::Keep => {
                        s.counts.keep += 1;
                        next.push(env);
                    }
                    Verdict::Next(msgs) if msgs.is_empty() => s.counts.dropped += 1,
                    Verdict::Next(msgs) => {
                        s.counts.next += 1;
                        s.counts.emitted += msgs.len() as u64;
                        let offset = env.offset;
                        next.extend(msgs.into_iter().map(|msg| Envelope { offset, msg }));
                    }
                    Verdict::Reject(reason) => {
                        s.counts.rejected += 1;
                        out.rejects.push(Rejected {
                            env,
                            stage: s.slot.spec.name.clone(),
                            plugin: s.instance.plugin().hash.clone(),
                            reason,
                        });
                    }
                    Verdict::Fail(reason) => {
                        s.counts.failed += 1;
                        let earlier = out.failure.as_ref().is_none_or(|f| env.offset < f.offset);
                        if earlier {
                            out.failure = Some(Failure {
                                stage: s.slot.spec.name.to_string(),
                                plugin: s.instance.plugin().hash.clone(),
                                offset: env.offset,
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
                next.retain(|e| e.offset < f.offset);
                out.rejects.retain(|r| r.env.offset < f.offset);
            }
            current = next;
        }
        out.outputs = current;
        Ok(out)
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
