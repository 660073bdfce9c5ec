//! A stage's versions: the live plugin every driver runs, and the candidate of a rollout in
//! progress. Drivers compare one generation number at each batch boundary and swap when it
//! moved; the reloader, the admin API and the drivers' own observations change it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::observe::{judge, Decision, Judgement, Observation};
use crate::config::{RolloutConfig, RolloutMode};
use crate::engine::{Plugin, StageSpec};
use crate::metrics::Metrics;

/// The versions of one stage, shared by every driver.
pub struct StageSlot {
    /// The stage's settings.
    pub spec: Arc<StageSpec>,
    /// The plugin file.
    pub path: PathBuf,
    /// The stage's rollout policy from the YAML (what a replaced file or SIGHUP goes under).
    pub policy: RolloutConfig,
    state: Mutex<SlotState>,
    generation: AtomicU64,
    metrics: OnceLock<Arc<Metrics>>,
}

struct SlotState {
    live: Arc<Plugin>,
    /// The hash of the plugin file as last loaded: a reload acts only when the file changed
    /// (after a promotion from elsewhere, the file may still hold the older version).
    file_hash: String,
    rollout: Option<Arc<Rollout>>,
    /// The last candidate rolled back: the same file is not tried again by a reload.
    rolled_back: Option<String>,
    finished: Vec<RolloutRecord>,
    next_id: u64,
}

/// A rollout in progress.
pub struct Rollout {
    /// Unique within the stage.
    pub id: u64,
    /// The version being tried.
    pub candidate: Arc<Plugin>,
    /// The live version it is measured against.
    pub live: Arc<Plugin>,
    /// Its policy.
    pub policy: RolloutConfig,
    /// What started it: `start`, `file`, `sighup`, `api`.
    pub trigger: &'static str,
    started: Instant,
    started_unix_ms: u64,
    tracking: Mutex<Tracking>,
}

#[derive(Default)]
struct Tracking {
    seen: Observation,
    differences: Vec<Value>,
    file: Option<std::fs::File>,
}

impl Rollout {
    /// Shadow or canary.
    pub fn mode(&self) -> RolloutMode {
        self.policy.mode
    }

    fn tracking(&self) -> MutexGuard<'_, Tracking> {
        self.tracking.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many more differences it keeps.
    pub fn room_for_differences(&self) -> usize {
        self.policy
            .max_differences
            .saturating_sub(self.tracking().differences.len())
    }

    /// What it has seen so far.
    pub fn observation(&self) -> Observation {
        self.tracking().seen.clone()
    }

    /// The rollout as it stands, while in progress.
    pub fn in_progress(&self, stage: &str) -> RolloutRecord {
        self.record(stage, "in_progress", None)
    }

    fn record(&self, stage: &str, outcome: &str, j: Option<&Judgement>) -> RolloutRecord {
        let t = self.tracking();
        RolloutRecord {
            stage: stage.to_owned(),
            mode: self.policy.mode.name(),
            trigger: self.trigger,
            live: self.live.hash.clone(),
            candidate: self.candidate.hash.clone(),
            outcome: outcome.to_owned(),
            reason: j.map(|j| j.reason.to_owned()),
            detail: j.map(|j| j.detail.clone()),
            started_unix_ms: self.started_unix_ms,
            duration_ms: self.started.elapsed().as_millis() as u64,
            observed: t.seen.clone(),
            differences: t.differences.clone(),
        }
    }
}

/// A rollout as the report, `GET /stages` and `weir status` show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RolloutRecord {
    /// The stage.
    pub stage: String,
    /// `shadow` or `canary`.
    pub mode: &'static str,
    /// What started it.
    pub trigger: &'static str,
    /// The live version's hash when it started.
    pub live: String,
    /// The candidate's hash.
    pub candidate: String,
    /// `in_progress`, `promoted`, `rolled_back`, `replaced` (a newer candidate took its
    /// place) or `unfinished` (the run ended first).
    pub outcome: String,
    /// The decision's reason (`observed`, `trap`, `fail`, `reject_rate`, `diff_rate`,
    /// `slower`, `manual`, `error`).
    pub reason: Option<String>,
    /// The figures behind the decision.
    pub detail: Option<String>,
    /// When it started (Unix milliseconds).
    pub started_unix_ms: u64,
    /// How long it ran (or has run).
    pub duration_ms: u64,
    /// What the candidate did.
    pub observed: Observation,
    /// The first differences found (shadow).
    pub differences: Vec<Value>,
}

/// A rollout could not start, or there was none to end.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// One is already running.
    #[error("stage `{stage}` already has a {mode} rollout of {candidate} in progress: promote or roll it back first")]
    InProgress {
        /// The stage.
        stage: String,
        /// Its mode.
        mode: &'static str,
        /// Its candidate (short hash).
        candidate: String,
    },
    /// There is none.
    #[error("stage `{0}` has no rollout in progress")]
    NoRollout(String),
    /// An immediate "rollout" is a plain reload.
    #[error("a rollout needs `mode: shadow` or `mode: canary`")]
    Immediate,
    /// The differences file cannot be written.
    #[error("cannot write the differences file {path}: {reason}")]
    DifferencesFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What a reload did with a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// It replaced the live version (`immediate`).
    Published,
    /// A shadow or canary rollout started.
    RolloutStarted,
    /// It is the candidate rolled back last; not tried again.
    RolledBackBefore,
}

impl StageSlot {
    /// A slot whose live version is `plugin`.
    pub fn new(
        spec: Arc<StageSpec>,
        path: PathBuf,
        policy: RolloutConfig,
        plugin: Arc<Plugin>,
    ) -> Self {
        StageSlot {
            spec,
            path,
            policy,
            state: Mutex::new(SlotState {
                file_hash: plugin.hash.clone(),
                live: plugin,
                rollout: None,
                rolled_back: None,
                finished: Vec::new(),
                next_id: 1,
            }),
            generation: AtomicU64::new(0),
            metrics: OnceLock::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where rollout state and decisions are reported (set once, when the run starts).
    pub fn attach_metrics(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
        self.report_state(self.state().rollout.as_deref());
    }

    /// Bumped on every change of version or rollout; drivers compare it at batch boundaries
    /// (one atomic load).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The live version and the generation.
    pub fn current(&self) -> (u64, Arc<Plugin>) {
        let s = self.state();
        (self.generation(), s.live.clone())
    }

    /// The live version, the rollout in progress, and the generation they belong to.
    pub fn version(&self) -> (u64, Arc<Plugin>, Option<Arc<Rollout>>) {
        let s = self.state();
        (self.generation(), s.live.clone(), s.rollout.clone())
    }

    /// The hash of the plugin file as last loaded.
    pub fn file_hash(&self) -> String {
        self.state().file_hash.clone()
    }

    /// Records that the plugin file now holds the version with `hash`.
    pub fn set_file_hash(&self, hash: &str) {
        self.state().file_hash = hash.to_owned();
    }

    /// The rollout in progress.
    pub fn rollout(&self) -> Option<Arc<Rollout>> {
        self.state().rollout.clone()
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Makes `plugin` the live version at once (ending any rollout as replaced).
    pub(crate) fn publish(&self, plugin: Arc<Plugin>) {
        let mut s = self.state();
        if let Some(old) = s.rollout.take() {
            s.finished
                .push(old.record(&self.spec.name, "replaced", None));
        }
        s.live = plugin;
        self.bump();
        self.report_state(None);
    }

    /// A new version from a replaced file or SIGHUP, under the stage's own policy: published
    /// at once (`immediate`), or tried as a shadow or canary (a rollout in progress is
    /// replaced by the newer candidate).
    pub fn offer(
        &self,
        plugin: Arc<Plugin>,
        trigger: &'static str,
    ) -> Result<Offered, RolloutError> {
        if self.policy.mode == RolloutMode::Immediate {
            self.publish(plugin);
            return Ok(Offered::Published);
        }
        {
            let s = self.state();
            if s.rolled_back.as_deref() == Some(&plugin.hash) {
                return Ok(Offered::RolledBackBefore);
            }
        }
        self.begin(plugin, self.policy.clone(), trigger, true)?;
        Ok(Offered::RolloutStarted)
    }

    /// Starts a rollout of `plugin` under `policy` (the admin API, or a candidate in the
    /// YAML). Refused while one is in progress.
    pub fn start_rollout(
        &self,
        plugin: Arc<Plugin>,
        policy: RolloutConfig,
        trigger: &'static str,
    ) -> Result<Arc<Rollout>, RolloutError> {
        self.begin(plugin, policy, trigger, false)
    }

    fn begin(
        &self,
        plugin: Arc<Plugin>,
        policy: RolloutConfig,
        trigger: &'static str,
        replace: bool,
    ) -> Result<Arc<Rollout>, RolloutError> {
        if policy.mode == RolloutMode::Immediate {
            return Err(RolloutError::Immediate);
        }
        let mut s = self.state();
        if let Some(r) = &s.rollout {
            if !replace {
                return Err(RolloutError::InProgress {
                    stage: self.spec.name.to_string(),
                    mode: r.mode().name(),
                    candidate: r.candidate.short_hash().to_owned(),
                });
            }
        }
        let file = match &policy.differences {
            Some(path) if policy.mode == RolloutMode::Shadow => Some(
                std::fs::File::create(path).map_err(|e| RolloutError::DifferencesFile {
                    path: path.clone(),
                    reason: e.to_string(),
                })?,
            ),
            _ => None,
        };
        if let Some(old) = s.rollout.take() {
            tracing::warn!(
                stage = &*self.spec.name,
                old = old.candidate.short_hash(),
                new = plugin.short_hash(),
                "a newer candidate replaces the rollout in progress"
            );
            s.finished
                .push(old.record(&self.spec.name, "replaced", None));
        }
        let rollout = Arc::new(Rollout {
            id: s.next_id,
            candidate: plugin,
            live: s.live.clone(),
            policy,
            trigger,
            started: Instant::now(),
            started_unix_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
            tracking: Mutex::new(Tracking {
                file,
                ..Tracking::default()
            }),
        });
        s.next_id += 1;
        tracing::info!(
            stage = &*self.spec.name,
            mode = rollout.mode().name(),
            live = rollout.live.short_hash(),
            candidate = rollout.candidate.short_hash(),
            trigger,
            observe = %rollout.policy.observe,
            "rollout started"
        );
        s.rollout = Some(rollout.clone());
        self.bump();
        self.report_state(Some(&rollout));
        Ok(rollout)
    }

    /// Adds what a driver saw in one batch (and the differences it found) to `rollout`, and
    /// applies the judgement if there is one. Returns whether the rollout ended.
    pub fn observe(&self, rollout: &Rollout, batch: &Observation, differences: Vec<Value>) -> bool {
        let judgement = {
            let mut t = rollout.tracking();
            t.seen.add(batch);
            for d in differences {
                if t.differences.len() >= rollout.policy.max_differences {
                    break;
                }
                if let Some(f) = &mut t.file {
                    if let Err(e) = writeln!(f, "{d}").and_then(|()| f.flush()) {
                        tracing::warn!(stage = &*self.spec.name, "cannot write a difference: {e}");
                        t.file = None;
                    }
                }
                t.differences.push(d);
            }
            judge(&t.seen, &rollout.policy, rollout.started.elapsed())
        };
        if let Some(m) = self.metrics.get() {
            let differ = batch.differ.iter().map(|(k, v)| (*k, *v));
            m.add_shadow_outcomes(
                &self.spec.name,
                std::iter::once(("agree", batch.agree)).chain(differ),
            );
        }
        match judgement {
            Some(j) => self.decide(rollout.id, &j),
            None => false,
        }
    }

    /// Time-based windows end without traffic too: called a few times a second.
    pub fn tick(&self) {
        let Some(r) = self.rollout() else { return };
        let j = judge(&r.observation(), &r.policy, r.started.elapsed());
        if let Some(j) = j {
            self.decide(r.id, &j);
        }
    }

    /// Ends rollout `id` (if it is still the one in progress). Returns whether it did.
    pub fn decide(&self, id: u64, j: &Judgement) -> bool {
        let mut s = self.state();
        let Some(r) = s.rollout.clone().filter(|r| r.id == id) else {
            return false;
        };
        s.rollout = None;
        let outcome = match j.decision {
            Decision::Promote => {
                s.live = r.candidate.clone();
                "promoted"
            }
            Decision::Rollback => {
                s.rolled_back = Some(r.candidate.hash.clone());
                "rolled_back"
            }
        };
        s.finished.push(r.record(&self.spec.name, outcome, Some(j)));
        let stage = &*self.spec.name;
        // The metrics change before the lock is let go: whoever sees the outcome in the
        // status (which takes the lock) sees it in the metrics too.
        if let Some(m) = self.metrics.get() {
            m.rollout_decisions
                .with_label_values(&[stage, j.decision.name(), j.reason])
                .inc();
            if j.decision == Decision::Promote {
                m.move_plugin(stage, r.live.short_hash(), r.candidate.short_hash());
            }
        }
        self.report_state(None);
        self.bump();
        drop(s);
        let (live, cand) = (r.live.short_hash(), r.candidate.short_hash());
        match j.decision {
            Decision::Promote => tracing::info!(
                stage,
                from = live,
                to = cand,
                reason = j.reason,
                "rollout promoted: {}",
                j.detail
            ),
            Decision::Rollback => tracing::warn!(
                stage,
                keeping = live,
                candidate = cand,
                reason = j.reason,
                "rollout rolled back: {}",
                j.detail
            ),
        }
        true
    }

    /// Ends the rollout in progress by hand.
    pub fn end_by_hand(&self, decision: Decision) -> Result<RolloutRecord, RolloutError> {
        let r = self
            .rollout()
            .ok_or_else(|| RolloutError::NoRollout(self.spec.name.to_string()))?;
        let j = Judgement {
            decision,
            reason: "manual",
            detail: format!("{} by request", decision.name()),
        };
        if !self.decide(r.id, &j) {
            return Err(RolloutError::NoRollout(self.spec.name.to_string()));
        }
        Ok(self
            .state()
            .finished
            .last()
            .cloned()
            .expect("decide recorded it"))
    }

    /// Every rollout of this run: finished ones, then the one in progress.
    pub fn records(&self) -> Vec<RolloutRecord> {
        let s = self.state();
        let mut out = s.finished.clone();
        if let Some(r) = &s.rollout {
            out.push(r.in_progress(&self.spec.name));
        }
        out
    }

    /// The stage as `GET /stages` shows it.
    pub fn status(&self) -> Value {
        let (live, rollout, last) = {
            let s = self.state();
            (
                s.live.clone(),
                s.rollout.clone(),
                s.finished.last().cloned(),
            )
        };
        serde_json::json!({
            "name": &*self.spec.name,
            "plugin": self.path,
            "live": live.hash,
            "policy": self.policy.mode.name(),
            "rollout": rollout.map(|r| r.in_progress(&self.spec.name)),
            "last_rollout": last,
        })
    }

    fn report_state(&self, rollout: Option<&Rollout>) {
        if let Some(m) = self.metrics.get() {
            let state = match rollout.map(Rollout::mode) {
                Some(RolloutMode::Shadow) => 1,
                Some(RolloutMode::Canary) => 2,
                _ => 0,
            };
            m.rollout_state
                .with_label_values(&[&self.spec.name])
                .set(state);
        }
    }
}

/// Ends every rollout still in progress when the run ends (so the report says so).
pub fn unfinished(slots: &[Arc<StageSlot>]) -> Vec<RolloutRecord> {
    let mut out = Vec::new();
    for s in slots {
        out.extend(s.records().into_iter().map(|mut r| {
            if r.outcome == "in_progress" {
                r.outcome = "unfinished".into();
            }
            r
        }));
    }
    out
}

/// Sets `weir_plugin_info` to what every slot runs now.
pub fn publish_plugin_info(slots: &[Arc<StageSlot>], metrics: &Metrics) {
    let current: Vec<(Arc<str>, Arc<Plugin>)> = slots
        .iter()
        .map(|s| (s.spec.name.clone(), s.current().1))
        .collect();
    metrics.set_plugins(current.iter().map(|(n, p)| (&**n, p.short_hash())));
}
