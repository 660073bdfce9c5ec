//! The run report: what a run did, printed as a summary and optionally written as JSON.

use serde::Serialize;

use crate::chain::{Failure, StageCounts};
use crate::engine::SandboxStats;
use crate::reload::ReloadStats;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitState {
    /// The source ended and everything was handled.
    Completed,
    /// SIGINT/SIGTERM: what was read was drained, then the run stopped.
    Interrupted,
    /// A stage said `fail` (or trapped under `on_trap: fail`), or a sink broke.
    Failed,
}

/// One stage's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// Stage name.
    pub name: String,
    /// Plugin version (hash) running at the end.
    pub plugin: String,
    /// `batch` or `typed`.
    pub contract: &'static str,
    /// Outcome counts.
    #[serde(flatten)]
    pub counts: StageCounts,
    /// Sandbox events.
    pub sandbox: SandboxStats,
}

/// Kafka transactions of an exactly-once run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TransactionCounts {
    /// Committed: their records visible, their offsets committed.
    pub committed: u64,
    /// Aborted: nothing of them visible (a stage fail, an undeliverable record, fenced, a
    /// stop without draining).
    pub aborted: u64,
}

/// Everything a run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Pipeline name.
    pub pipeline: String,
    /// How it ended.
    pub state: ExitState,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Messages read from the source.
    pub read: u64,
    /// Source lines that were not messages (sent to the reject path).
    pub malformed: u64,
    /// Messages written to the sink.
    pub written: u64,
    /// Messages written to the reject path.
    pub rejected: u64,
    /// Committed offset per `topic/partition` (a local source has one, `TOPIC/0`): the next
    /// offset to read; everything below it was fully handled. For Kafka, as the broker
    /// confirmed.
    pub committed: std::collections::BTreeMap<String, i64>,
    /// Kafka partition assignments and revocations (absent for a file or stdin source, which
    /// has one partition from start to end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebalances: Option<u64>,
    /// `delivery: exactly-once`: Kafka transactions committed and aborted (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionCounts>,
    /// Completions from an older assignment, ignored.
    pub stale_completions: u64,
    /// The source was drained to its end (always, for a local source read to its end).
    pub reached_end: bool,
    /// Milliseconds from the first message read until consuming stopped.
    pub consuming_ms: f64,
    /// The process's CPU time, user and system, all threads, over the same span: what
    /// consuming cost, whatever else the machine ran meanwhile.
    pub consuming_cpu_ms: f64,
    /// Batches the drivers ran (messages read / batches = the mean batch size).
    pub batches: u64,
    /// Per stage, in chain order.
    pub stages: Vec<StageReport>,
    /// Plugin reloads.
    pub reloads: ReloadStats,
    /// Rollouts of this run, per stage in order: decided, replaced, or unfinished at exit.
    pub rollouts: Vec<crate::rollout::RolloutRecord>,
    /// Set when a stage failed.
    pub failure: Option<Failure>,
    /// Set when a sink or the source broke.
    pub error: Option<String>,
    /// With `error`, when a Kafka client could not go on: `configuration`, `credentials`
    /// (exit 2) or `runtime` (exit 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::kafka::fatal::FailureKind>,
}

impl RunReport {
    /// The report of a pipeline that did not start: state `failed`, nothing read, `error`
    /// says why.
    pub fn not_started(
        pipeline: &str,
        took: std::time::Duration,
        error: String,
        error_kind: Option<crate::kafka::fatal::FailureKind>,
    ) -> Self {
        RunReport {
            pipeline: pipeline.to_owned(),
            state: ExitState::Failed,
            duration_ms: took.as_millis() as u64,
            read: 0,
            malformed: 0,
            written: 0,
            rejected: 0,
            committed: Default::default(),
            rebalances: None,
            transactions: None,
            stale_completions: 0,
            reached_end: false,
            consuming_ms: 0.0,
            consuming_cpu_ms: 0.0,
            batches: 0,
            stages: Vec::new(),
            reloads: Default::default(),
            rollouts: Vec::new(),
            failure: None,
            error: Some(error),
            error_kind,
        }
    }

    /// Writes the report as JSON (creating the folder); a failure is logged, not fatal.
    pub fn write(&self, path: &std::path::Path) {
        let json = serde_json::to_string_pretty(self).expect("report serializes");
        let json = crate::redact::redact(&json).into_owned();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = std::fs::write(path, json + "\n") {
            tracing::error!(path = %path.display(), "cannot write the run report: {e}");
        }
    }

    /// The human summary printed at the end of a run.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "weir: pipeline `{}` {:?} in {} ms: read {}, written {}, rejected {}",
            self.pipeline, self.state, self.duration_ms, self.read, self.written, self.rejected
        );
        if self.malformed > 0 {
            s.push_str(&format!(" ({} malformed input lines)", self.malformed));
        }
        s.push('\n');
        for st in &self.stages {
            let c = &st.counts;
            s.push_str(&format!(
                "  stage {:<16} in {:>8}  keep {:>8}  next {:>8} (emitted {})  dropped {:>8}  rejected {:>6}  failed {} (unanswered after it {})  traps {}{}  memory peak {}  [{} {} ]\n",
                st.name, c.input, c.keep, c.next, c.emitted, c.dropped, c.rejected, c.failed, c.unanswered, st.sandbox.traps,
                match st.sandbox.recycled {
                    0 => String::new(),
                    n => format!(" (instance recycled {n}× at the memory cap)"),
                },
                crate::config::ByteSize(st.sandbox.peak_memory),
                st.contract, &st.plugin[..12.min(st.plugin.len())]
            ));
        }
        for r in &self.rollouts {
            let o = &r.observed;
            s.push_str(&format!(
                "  rollout {:<14} {} {} → {}: {}{}  ({} messages, {} traps, {} differences)\n",
                r.stage,
                r.mode,
                &r.live[..12.min(r.live.len())],
                &r.candidate[..12.min(r.candidate.len())],
                r.outcome,
                r.reason
                    .as_deref()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default(),
                o.messages,
                o.traps,
                o.differences(),
            ));
        }
        if let Some(f) = &self.failure {
            s.push_str(&format!(
                "  failed at offset {} in stage `{}`: {}\n",
                f.offset, f.stage, f.reason
            ));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!("  error: {e}\n"));
        }
        let c: Vec<String> = self
            .committed
            .iter()
            .map(|(p, o)| format!("{p}@{o}"))
            .collect();
        match self.rebalances {
            Some(n) => s.push_str(&format!(
                "  committed {}  ({n} partition assignments and revocations)\n",
                c.join(" ")
            )),
            None => s.push_str(&format!("  committed {}\n", c.join(" "))),
        }
        if let Some(t) = &self.transactions {
            s.push_str(&format!(
                "  transactions {} committed, {} aborted (exactly-once)\n",
                t.committed, t.aborted
            ));
        }
        s
    }
}

/// The CPU time this process has used so far, user and system, all threads.
pub fn process_cpu_time() -> std::time::Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or_default()
}

/// A CPU-time clock's reading (none: the clock cannot be read).
#[allow(unsafe_code)]
fn cpu_clock(clock: libc::clockid_t) -> Option<std::time::Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; the CPU-time clocks exist on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut t) };
    (rc == 0).then(|| std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    /// This thread's CPU time (a part of the process's).
    fn thread_cpu_time() -> std::time::Duration {
        super::cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID).expect("CLOCK_THREAD_CPUTIME_ID")
    }

    #[test]
    fn process_cpu_time_grows_with_work() {
        // Spins until this thread has used 20 ms of CPU (not 20 ms of wall time: on a loaded
        // machine the thread may get a fraction of that), which the process's time includes.
        let before = super::process_cpu_time();
        let thread_before = thread_cpu_time();
        let wall = std::time::Instant::now();
        let mut n = 0u64;
        while thread_cpu_time() - thread_before < std::time::Duration::from_millis(20) {
            assert!(
                wall.elapsed() < std::time::Duration::from_secs(30),
                "no CPU time in 30 s"
            );
            for _ in 0..10_000 {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        let spun = thread_cpu_time() - thread_before;
        let used = super::process_cpu_time().saturating_sub(before);
        assert!(
            used >= spun,
            "the process's CPU time grew by {used:?} while one of its threads used {spun:?}"
        );
    }
}
