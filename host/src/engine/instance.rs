//! One stage instance: a `Store` owned by one driver thread, its exports, and the sandbox rules
//! (memory cap, deadline, output cap, trap recovery).

use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Store, Trap};

use super::bindings::{BatchGuest, StageGuest, WitHeader, WitMessage, WitMetadata, WitOutcome};
use super::state::MemoryLimitExceeded;
use super::{Plugin, StageState, WeirEngine, EPOCH_TICK};
use crate::config::{ContractChoice, Grants, StageConfig, TrapPolicy};
use crate::message::{Envelope, Header, Lane, Message};

/// The parts of a stage's YAML an instance needs.
#[derive(Debug, Clone)]
pub struct StageSpec {
    /// Stage name.
    pub name: Arc<str>,
    /// `init` config pairs.
    pub config: Vec<(String, String)>,
    /// Memory cap in bytes.
    pub memory: usize,
    /// Per-call deadline.
    pub timeout: Duration,
    /// Most bytes emitted per input message.
    pub max_output: usize,
    /// What a trap does to the message involved.
    pub on_trap: TrapPolicy,
    /// Which contract to call.
    pub contract: ContractChoice,
    /// Files, environment and network the sandbox grants (nothing by default).
    pub grants: Arc<Grants>,
    /// The stage's buckets, when it declares state (none: `open` answers `access-denied`).
    pub state: Option<Arc<crate::state::StageBuckets>>,
}

impl From<&StageConfig> for StageSpec {
    fn from(c: &StageConfig) -> Self {
        StageSpec {
            name: c.name.as_str().into(),
            config: c.config_pairs(),
            memory: c.limits.memory.bytes(),
            timeout: c.limits.timeout,
            max_output: c.limits.max_output.bytes(),
            on_trap: c.on_trap,
            contract: c.contract,
            grants: Arc::new(c.allow.clone()),
            state: None,
        }
    }
}

/// What a stage decided for one input message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Continue unchanged.
    Keep,
    /// Continue as these messages (none: filtered out).
    Next(Vec<Message>),
    /// To the reject path with this reason.
    Reject(String),
    /// Stop the pipeline with this reason.
    Fail(String),
}

/// Sandbox events an instance has seen.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SandboxStats {
    /// Traps of any kind (including deadlines and memory).
    pub traps: u64,
    /// Calls stopped by the deadline.
    pub timeouts: u64,
    /// Calls stopped by the memory cap.
    pub memory_exceeded: u64,
    /// Messages whose output exceeded `max_output`.
    pub oversized: u64,
    /// Malformed packed results.
    pub malformed: u64,
    /// Times the instance was rebuilt after a trap.
    pub restarts: u64,
    /// Times an instance that had answered before reached the memory cap and was replaced by a
    /// fresh one, the call retried there (a garbage-collected runtime's heap, or a slow leak,
    /// outgrowing the cap: not the message's fault). Not counted in `traps` or
    /// `memory_exceeded`; a retry that traps the fresh instance is.
    pub recycled: u64,
    /// The largest linear memory an instance of the stage reached, bytes (the cap is
    /// `limits.memory`): whether a long-running stage's memory stays flat.
    pub peak_memory: u64,
}

impl std::ops::AddAssign<&SandboxStats> for SandboxStats {
    fn add_assign(&mut self, o: &SandboxStats) {
        self.traps += o.traps;
        self.timeouts += o.timeouts;
        self.memory_exceeded += o.memory_exceeded;
        self.oversized += o.oversized;
        self.malformed += o.malformed;
        self.restarts += o.restarts;
        self.recycled += o.recycled;
        self.peak_memory = self.peak_memory.max(o.peak_memory);
    }
}

/// An instance could not be built or rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// Instantiation failed.
    #[error("stage `{stage}` (plugin {hash}): cannot instantiate: {reason}")]
    Instantiate {
        /// Stage name.
        stage: String,
        /// Plugin version.
        hash: String,
        /// Why.
        reason: String,
    },
    /// `init` returned an error or trapped.
    #[error("stage `{stage}` (plugin {hash}): init failed: {reason}")]
    Init {
        /// Stage name.
        stage: String,
        /// Plugin version.
        hash: String,
        /// What the stage said.
        reason: String,
    },
    /// The stage's state could not be read.
    #[error("stage `{stage}`: state: {reason}")]
    State {
        /// Stage name.
        stage: String,
        /// Why.
        reason: String,
    },
    /// The component lacks the contract the YAML asked for.
    #[error("stage `{stage}`: `contract: batch` was asked for, but plugin {hash} only exports the typed contract")]
    NoBatch {
        /// Stage name.
        stage: String,
        /// Plugin version.
        hash: String,
    },
}

struct Live {
    store: Store<StageState>,
    stage: StageGuest,
    batch: Option<BatchGuest>,
    /// Calls that returned since this instance was built.
    calls: u64,
}

/// One instance of one stage, owned by one thread.
pub struct StageInstance {
    spec: Arc<StageSpec>,
    plugin: Arc<Plugin>,
    engine: WeirEngine,
    live: Live,
    buf: Vec<u8>,
    /// Positions in the last `process` call's output of the verdicts a trap decided (or an
    /// output over the cap), not the stage.
    trapped_at: Vec<usize>,
    /// Sandbox events so far.
    pub stats: SandboxStats,
    /// The stage's state for the lane of the call in progress.
    part: Option<Arc<crate::state::PartitionState>>,
    /// A shadow candidate: its state writes are thrown away after each call.
    throwaway: bool,
}

impl StageInstance {
    /// Instantiates `plugin` for `spec` and calls `init`.
    pub fn new(
        engine: &WeirEngine,
        spec: Arc<StageSpec>,
        plugin: Arc<Plugin>,
    ) -> Result<Self, InstanceError> {
        Self::with_state(engine, spec, plugin, false)
    }

    /// [`Self::new`]; a `throwaway` instance (a shadow candidate) reads the stage's state
    /// and its writes are never kept.
    pub fn with_state(
        engine: &WeirEngine,
        spec: Arc<StageSpec>,
        plugin: Arc<Plugin>,
        throwaway: bool,
    ) -> Result<Self, InstanceError> {
        if spec.contract == ContractChoice::Batch && plugin.batch_indices.is_none() {
            return Err(InstanceError::NoBatch {
                stage: spec.name.to_string(),
                hash: plugin.short_hash().to_owned(),
            });
        }
        let live = instantiate(engine, &spec, &plugin, throwaway)?;
        Ok(StageInstance {
            spec,
            plugin,
            engine: engine.clone(),
            live,
            buf: Vec::new(),
            trapped_at: Vec::new(),
            stats: SandboxStats::default(),
            part: None,
            throwaway,
        })
    }

    /// The plugin this instance runs.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// The stage's spec.
    pub fn spec(&self) -> &Arc<StageSpec> {
        &self.spec
    }

    /// Positions in the output of the last [`process`](Self::process) call whose verdicts
    /// came from a trap (or an output over the cap) rather than from the stage.
    pub fn trapped_at(&self) -> &[usize] {
        &self.trapped_at
    }

    /// The partition's state that the instance's calls on `lane` write to, when the lane's
    /// partition is this process's (none: the stage keeps no state, or the run raced a
    /// revoke and writes to a detached state that nothing commits).
    pub fn partition_state(&self, lane: &Lane) -> Option<Arc<crate::state::PartitionState>> {
        self.spec.state.as_ref()?.assigned(
            &crate::message::PartitionKey::new(&lane.topic, lane.partition),
            lane.generation,
        )
    }

    /// True when calls go through the packed batch path.
    pub fn uses_batch(&self) -> bool {
        self.live.batch.is_some()
    }

    /// Decides every message of `batch`, in order, appending one verdict per message to `out`,
    /// and stopping after the first `Fail`. An `Err` means the instance could not be rebuilt
    /// after a trap, which stops the pipeline.
    pub fn process(
        &mut self,
        lane: &Lane,
        batch: &[Envelope],
        out: &mut Vec<Verdict>,
    ) -> Result<(), InstanceError> {
        let done = self.answer(lane, batch, out);
        self.note_memory();
        done
    }

    /// [`Self::process`] without the bookkeeping.
    fn answer(
        &mut self,
        lane: &Lane,
        batch: &[Envelope],
        out: &mut Vec<Verdict>,
    ) -> Result<(), InstanceError> {
        self.trapped_at.clear();
        if batch.is_empty() {
            return Ok(());
        }
        self.part = match &self.spec.state {
            None => None,
            Some(s) => match s.current(
                &crate::message::PartitionKey::new(&lane.topic, lane.partition),
                lane.generation,
            ) {
                Ok(p) => Some(p),
                Err(e) => {
                    return Err(InstanceError::State {
                        stage: self.spec.name.to_string(),
                        reason: e.to_string(),
                    })
                }
            },
        };
        self.live.store.data_mut().kv.begin_batch();
        if self.live.batch.is_some() {
            let start = out.len();
            let recycles = self.stats.recycled;
            let mut called = self.call_batch(lane, batch, out);
            if called.is_err() && self.stats.recycled > recycles {
                // A used instance outgrew its memory: the whole batch again, on a fresh one.
                out.truncate(start);
                self.restart()?;
                called = self.call_batch(lane, batch, out);
            }
            match called {
                Ok(()) => {
                    self.live.calls += 1;
                    return Ok(());
                }
                Err(reason) => {
                    out.truncate(start);
                    tracing::warn!(
                        stage = &*self.spec.name,
                        plugin = self.plugin.short_hash(),
                        topic = &*lane.topic,
                        partition = lane.partition,
                        first_offset = batch[0].offset,
                        messages = batch.len(),
                        "batch call failed ({reason}); retrying its messages one by one"
                    );
                    self.restart()?;
                }
            }
        }
        // One message per call: always on the typed path; on the batch path after a failed batch
        // call, to isolate the culprit. Each message is tried once; a trap rebuilds the store.
        // A memory trap on an instance that has run before may come from the heap it built up
        // (a garbage-collected runtime settles above the cap now and then), not from this
        // message: such a message gets one more try on the fresh instance.
        for env in batch {
            let start = out.len();
            let mut fresh = self.live.calls == 0;
            loop {
                let recycles = self.stats.recycled;
                let Err(reason) = self.call_one(lane, env, out) else {
                    break;
                };
                out.truncate(start);
                self.restart()?;
                if fresh || self.stats.recycled == recycles {
                    tracing::warn!(
                        stage = &*self.spec.name,
                        plugin = self.plugin.short_hash(),
                        topic = &*lane.topic,
                        partition = lane.partition,
                        offset = env.offset,
                        on_trap = ?self.spec.on_trap,
                        "stage trapped: {reason}"
                    );
                    self.trapped_at.push(out.len());
                    out.push(self.trapped(reason));
                    break;
                }
                tracing::debug!(
                    stage = &*self.spec.name,
                    topic = &*lane.topic,
                    partition = lane.partition,
                    offset = env.offset,
                    "{reason}: retrying the message on a fresh instance"
                );
                fresh = true;
            }
            if matches!(out.last(), Some(Verdict::Fail(_))) {
                break;
            }
        }
        Ok(())
    }

    /// One message in one call, on whichever path the instance uses.
    fn call_one(
        &mut self,
        lane: &Lane,
        env: &Envelope,
        out: &mut Vec<Verdict>,
    ) -> Result<(), String> {
        let called = if self.live.batch.is_some() {
            self.call_batch(lane, std::slice::from_ref(env), out)
        } else {
            self.call_typed(lane, env, out)
        };
        if called.is_ok() {
            self.live.calls += 1;
        }
        called
    }

    fn trapped(&self, reason: String) -> Verdict {
        match self.spec.on_trap {
            TrapPolicy::Reject => Verdict::Reject(reason),
            TrapPolicy::Fail => Verdict::Fail(reason),
        }
    }

    /// The live instance's linear memory now, bytes (a wasm memory never shrinks, so this is
    /// the size it last grew to).
    pub fn memory_now(&self) -> u64 {
        self.live.store.data().limits.peak as u64
    }

    /// Folds the live instance's memory high-water mark into the stats.
    fn note_memory(&mut self) {
        let peak = self.live.store.data().limits.peak as u64;
        self.stats.peak_memory = self.stats.peak_memory.max(peak);
    }

    /// Drops the poisoned store and builds a fresh instance of the same plugin.
    fn restart(&mut self) -> Result<(), InstanceError> {
        self.note_memory();
        self.stats.restarts += 1;
        self.live = instantiate(&self.engine, &self.spec, &self.plugin, self.throwaway)?;
        Ok(())
    }

    fn arm_deadline(&mut self) {
        self.live.store.set_epoch_deadline(ticks(self.spec.timeout));
    }

    /// One packed call, appending its verdicts to `out`. `Err` carries the reason when the
    /// store must be rebuilt (the caller drops whatever was appended).
    fn call_batch(
        &mut self,
        lane: &Lane,
        batch: &[Envelope],
        out: &mut Vec<Verdict>,
    ) -> Result<(), String> {
        let mut w = weir_abi::BatchWriter::new(&mut self.buf, &lane.topic, lane.partition);
        for e in batch {
            let m = &e.msg;
            w.push(
                e.offset,
                m.timestamp,
                m.key.as_deref(),
                m.value.as_deref(),
                m.header_pairs(),
            );
        }
        w.finish();
        self.arm_deadline();
        self.live.store.data_mut().kv.begin_call(self.part.clone());
        let guest = self.live.batch.as_ref().expect("checked by caller");
        let result = guest.call_process_batch(&mut self.live.store, &self.buf);
        let bytes = match result {
            Ok(b) => b,
            Err(e) => return Err(self.describe(&e)),
        };
        let reader = match weir_abi::ResultReader::new(&bytes, batch.len()) {
            Ok(r) => r,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(format!("stage returned a {e}"));
            }
        };
        // The call's writes belong to the messages it answered, up to its last one.
        if let Some(last) = reader.len().checked_sub(1) {
            self.live
                .store
                .data_mut()
                .kv
                .end_call(batch[0].offset, batch[last].offset);
        }
        let max = self.spec.max_output;
        out.reserve(batch.len());
        if reader.len() == batch.len() && reader.all_keep() {
            out.extend(std::iter::repeat_with(|| Verdict::Keep).take(batch.len()));
            return Ok(());
        }
        for v in reader {
            let at = out.len();
            out.push(match v {
                weir_abi::Verdict::Keep => Verdict::Keep,
                weir_abi::Verdict::Next(msgs)
                    // The encoded size bounds the counted size from above (24 fixed bytes per
                    // message plus 8): only then is the exact count needed.
                    if msgs.byte_len() + 8 * msgs.len() > max && payload_len(&msgs) > max =>
                {
                    self.stats.oversized += 1;
                    self.trapped_at.push(at);
                    self.trapped(oversize(payload_len(&msgs), max))
                }
                weir_abi::Verdict::Next(msgs) => Verdict::Next(
                    msgs.iter()
                        .map(|o| Message {
                            key: o.key.map(<[u8]>::to_vec),
                            value: o.value.map(<[u8]>::to_vec),
                            headers: o
                                .headers
                                .iter()
                                .map(|(k, v)| Header {
                                    key: k.to_owned().into(),
                                    value: v.map(|v| v.to_vec().into()),
                                })
                                .collect(),
                            timestamp: o.timestamp,
                            topic: o.topic.map(str::to_owned),
                        })
                        .collect(),
                ),
                weir_abi::Verdict::Reject(r) => Verdict::Reject(r.to_owned()),
                weir_abi::Verdict::Fail(r) => Verdict::Fail(r.to_owned()),
            });
        }
        Ok(())
    }

    /// One typed call, appending its verdict to `out`. `Err` carries the reason when the store
    /// must be rebuilt.
    fn call_typed(
        &mut self,
        lane: &Lane,
        env: &Envelope,
        out: &mut Vec<Verdict>,
    ) -> Result<(), String> {
        let m = &env.msg;
        let headers: Vec<WitHeader<'_>> = m
            .headers
            .iter()
            .map(|h| WitHeader {
                key: &h.key,
                value: h.value.as_deref(),
            })
            .collect();
        let msg = WitMessage {
            key: m.key.as_deref(),
            value: m.value.as_deref(),
            headers: &headers,
            timestamp: m.timestamp,
            topic: None,
        };
        let meta = WitMetadata {
            topic: &lane.topic,
            partition: lane.partition,
            offset: env.offset,
        };
        self.arm_deadline();
        self.live.store.data_mut().kv.begin_call(self.part.clone());
        let outcome = match self
            .live
            .stage
            .call_process(&mut self.live.store, msg, meta)
        {
            Ok(o) => o,
            Err(e) => return Err(self.describe(&e)),
        };
        self.live
            .store
            .data_mut()
            .kv
            .end_call(env.offset, env.offset);
        let verdict = match outcome {
            WitOutcome::Keep => Verdict::Keep,
            WitOutcome::Next(msgs) => {
                let msgs: Vec<Message> = msgs
                    .into_iter()
                    .map(|w| Message {
                        key: w.key,
                        value: w.value,
                        headers: w
                            .headers
                            .into_iter()
                            .map(|h| Header {
                                key: h.key.into(),
                                value: h.value.map(Into::into),
                            })
                            .collect(),
                        timestamp: w.timestamp,
                        topic: w.topic,
                    })
                    .collect();
                let size = output_len(&msgs);
                if size > self.spec.max_output {
                    self.stats.oversized += 1;
                    self.trapped_at.push(out.len());
                    self.trapped(oversize(size, self.spec.max_output))
                } else {
                    Verdict::Next(msgs)
                }
            }
            WitOutcome::Reject(r) => Verdict::Reject(r),
            WitOutcome::Fail(r) => Verdict::Fail(r),
        };
        out.push(verdict);
        Ok(())
    }

    /// Turns a trap into a reason naming the limit it hit, with the guest's stderr.
    fn describe(&mut self, err: &wasmtime::Error) -> String {
        let memory = err.downcast_ref::<MemoryLimitExceeded>().is_some();
        if memory && self.live.calls > 0 {
            // The caller retries on a fresh instance: only a trap there is the message's.
            self.stats.recycled += 1;
            return format!(
                "memory limit of {} reached by an instance after {} calls; recycled",
                crate::config::ByteSize(self.spec.memory as u64),
                self.live.calls
            );
        }
        self.stats.traps += 1;
        let what = if matches!(err.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
            self.stats.timeouts += 1;
            format!(
                "deadline of {} exceeded",
                humantime::format_duration(self.spec.timeout)
            )
        } else if memory {
            self.stats.memory_exceeded += 1;
            format!(
                "memory limit of {} exceeded",
                crate::config::ByteSize(self.spec.memory as u64)
            )
        } else {
            let trap = err.downcast_ref::<Trap>().map(|t| t.to_string());
            trap.unwrap_or_else(|| err.root_cause().to_string())
        };
        let stderr = self.live.store.data().stderr_tail();
        if stderr.is_empty() {
            format!("trap: {what}")
        } else {
            format!("trap: {what}; stderr: {stderr}")
        }
    }
}

/// What each emitted message counts towards `max_output` besides its payload, so that a flood
/// of empty messages is capped too.
const OUTPUT_MESSAGE_COST: usize = 32;

/// `max_output` size of a typed `next` answer: payload plus [`OUTPUT_MESSAGE_COST`] per message.
fn output_len(msgs: &[Message]) -> usize {
    msgs.iter()
        .map(|m| m.byte_len() + OUTPUT_MESSAGE_COST)
        .sum()
}

/// `max_output` size of a packed `next` answer, counted as [`output_len`] counts it.
fn payload_len(msgs: &weir_abi::OutMessages<'_>) -> usize {
    msgs.iter()
        .map(|o| {
            OUTPUT_MESSAGE_COST
                + o.key.map_or(0, <[u8]>::len)
                + o.value.map_or(0, <[u8]>::len)
                + o.topic.map_or(0, str::len)
                + o.headers
                    .iter()
                    .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
                    .sum::<usize>()
        })
        .sum()
}

fn oversize(size: usize, max: usize) -> String {
    format!(
        "output of {} exceeds max_output of {}",
        crate::config::ByteSize(size as u64),
        crate::config::ByteSize(max as u64)
    )
}

/// Epoch ticks for a deadline (one extra: the current tick is partly over).
fn ticks(d: Duration) -> u64 {
    (d.as_nanos() / EPOCH_TICK.as_nanos()) as u64 + 1
}

fn instantiate(
    engine: &WeirEngine,
    spec: &StageSpec,
    plugin: &Plugin,
    throwaway: bool,
) -> Result<Live, InstanceError> {
    let stage = spec.name.to_string();
    let hash = plugin.short_hash().to_owned();
    let mut store = Store::new(
        engine.engine(),
        StageState::new(
            spec.name.clone(),
            spec.memory,
            &spec.grants,
            crate::state::kv::Kv::new(
                spec.state.as_ref().map(|s| s.spec.clone()),
                throwaway,
                spec.memory,
            ),
        )
        .map_err(|reason| InstanceError::Instantiate {
            stage: stage.clone(),
            hash: hash.clone(),
            reason,
        })?,
    );
    store.limiter(|s| &mut s.limits);
    // `init` may build tables or load data: give it ten call deadlines, at least five seconds.
    store.set_epoch_deadline(ticks((spec.timeout * 10).max(Duration::from_secs(5))));
    let fail = |reason: String| InstanceError::Instantiate {
        stage: stage.clone(),
        hash: hash.clone(),
        reason,
    };
    let instance = plugin
        .pre
        .instantiate(&mut store)
        .map_err(|e| fail(format!("{e:#}")))?;
    let guest = plugin
        .stage_indices
        .load(&mut store, &instance)
        .map_err(|e| fail(format!("{e:#}")))?;
    let batch = match (&plugin.batch_indices, spec.contract) {
        (Some(idx), ContractChoice::Auto | ContractChoice::Batch) => Some(
            idx.load(&mut store, &instance)
                .map_err(|e| fail(format!("{e:#}")))?,
        ),
        _ => None,
    };
    let config: Vec<(&str, &str)> = spec
        .config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    match guest.call_init(&mut store, &config) {
        Ok(Ok(())) => Ok(Live {
            store,
            stage: guest,
            batch,
            calls: 0,
        }),
        Ok(Err(reason)) => Err(InstanceError::Init {
            stage,
            hash,
            reason,
        }),
        Err(e) => {
            let stderr = store.data().stderr_tail();
            let reason = if stderr.is_empty() {
                format!("trap: {e:#}")
            } else {
                format!("trap: {e:#}; stderr: {stderr}")
            };
            Err(InstanceError::Init {
                stage,
                hash,
                reason,
            })
        }
    }
}
