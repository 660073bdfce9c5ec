//! What a rollout has seen of its candidate, and the judgement: promote, roll back, or go on.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Observe, RolloutConfig, RolloutMode};

/// Rates (reject share, difference share, speed) are judged once the candidate has answered
/// this many messages, or at the end of the window if that comes first.
pub const MIN_SAMPLE: u64 = 100;

/// Counts for one batch or for a whole rollout.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Observation {
    /// Messages the candidate answered (its traps and fails included).
    pub messages: u64,
    /// Of those, rejected (a trap under `on_trap: reject` included).
    pub rejected: u64,
    /// `fail` answers.
    pub failed: u64,
    /// Traps, timeouts, memory and output caps, malformed answers.
    pub traps: u64,
    /// Messages the live version answered while the candidate was observed (shadow: the same
    /// messages; canary: the rest of the traffic).
    pub live_messages: u64,
    /// Of those, rejected.
    pub live_rejected: u64,
    /// Shadow: answers compared.
    pub compared: u64,
    /// Shadow: answers that agreed.
    pub agree: u64,
    /// Shadow: answers that differed, by the first way they differed.
    pub differ: BTreeMap<&'static str, u64>,
    /// Time in the candidate's calls, nanoseconds.
    pub candidate_ns: u64,
    /// Time in the live version's calls on the messages it answered, nanoseconds.
    pub live_ns: u64,
}

impl Observation {
    /// Adds another batch.
    pub fn add(&mut self, o: &Observation) {
        self.messages += o.messages;
        self.rejected += o.rejected;
        self.failed += o.failed;
        self.traps += o.traps;
        self.live_messages += o.live_messages;
        self.live_rejected += o.live_rejected;
        self.compared += o.compared;
        self.agree += o.agree;
        for (k, v) in &o.differ {
            *self.differ.entry(k).or_default() += v;
        }
        self.candidate_ns += o.candidate_ns;
        self.live_ns += o.live_ns;
    }

    /// Answers that differed, in all.
    pub fn differences(&self) -> u64 {
        self.differ.values().sum()
    }

    fn share(n: u64, of: u64) -> f64 {
        if of == 0 {
            0.0
        } else {
            n as f64 / of as f64
        }
    }

    /// The candidate's reject share minus the live version's, in points (0..1).
    pub fn reject_excess(&self) -> Option<f64> {
        (self.live_messages > 0).then(|| {
            Self::share(self.rejected, self.messages)
                - Self::share(self.live_rejected, self.live_messages)
        })
    }

    /// Share of compared answers that differed.
    pub fn diff_rate(&self) -> f64 {
        Self::share(self.differences(), self.compared)
    }

    /// Candidate time per message over live time per message.
    pub fn slowdown(&self) -> Option<f64> {
        let cand = Self::share(self.candidate_ns, self.messages);
        let live = Self::share(self.live_ns, self.live_messages);
        (self.messages > 0 && self.live_messages > 0 && live > 0.0).then(|| cand / live)
    }
}

/// How a rollout ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The candidate became the live version.
    Promote,
    /// The candidate was dropped; the live version runs on.
    Rollback,
}

impl Decision {
    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Promote => "promote",
            Decision::Rollback => "rollback",
        }
    }
}

/// A decision with its reason (the metric label) and a sentence for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// Promote or roll back.
    pub decision: Decision,
    /// `observed`, `trap`, `fail`, `reject_rate`, `diff_rate`, `slower`, `manual`, `error`.
    pub reason: &'static str,
    /// The figures behind it.
    pub detail: String,
}

fn rollback(reason: &'static str, detail: String) -> Option<Judgement> {
    Some(Judgement {
        decision: Decision::Rollback,
        reason,
        detail,
    })
}

/// The judgement after `o`, `elapsed` into the rollout: a rollback the moment one condition
/// is met; promotion when the window is over; else nothing yet.
pub fn judge(o: &Observation, policy: &RolloutConfig, elapsed: Duration) -> Option<Judgement> {
    let w = &policy.rollback_when;
    if w.trap > 0 && o.traps >= w.trap {
        return rollback(
            "trap",
            format!("{} trap(s) in {} messages", o.traps, o.messages),
        );
    }
    if w.fail > 0 && o.failed >= w.fail {
        return rollback(
            "fail",
            format!("{} fail answer(s) in {} messages", o.failed, o.messages),
        );
    }
    let over = match policy.observe {
        Observe::Messages(n) => o.messages >= n,
        Observe::Time(d) => elapsed >= d,
    };
    if o.messages >= MIN_SAMPLE || (over && o.messages > 0) {
        if let (Some(limit), Some(excess)) = (w.reject_rate, o.reject_excess()) {
            if excess > limit.0 {
                return rollback(
                    "reject_rate",
                    format!(
                        "rejects {:.2}% vs {:.2}% live (+{:.2} points, limit +{})",
                        100.0 * o.rejected as f64 / o.messages as f64,
                        100.0 * o.live_rejected as f64 / o.live_messages as f64,
                        100.0 * excess,
                        limit
                    ),
                );
            }
        }
        if let Some(limit) = w.diff_rate.filter(|_| policy.mode == RolloutMode::Shadow) {
            let rate = o.diff_rate();
            if rate > limit.0 {
                return rollback(
                    "diff_rate",
                    format!(
                        "{} of {} answers differ ({:.2}%, limit {})",
                        o.differences(),
                        o.compared,
                        100.0 * rate,
                        limit
                    ),
                );
            }
        }
        if let (Some(limit), Some(ratio)) = (w.slower, o.slowdown()) {
            if ratio > limit.0 {
                return rollback(
                    "slower",
                    format!("{ratio:.2}x the live version's time per message (limit {limit})"),
                );
            }
        }
    }
    // A candidate that answered nothing has shown nothing: it is not promoted on time alone.
    (over && o.messages > 0).then(|| Judgement {
        decision: Decision::Promote,
        reason: "observed",
        detail: format!(
            "{} messages observed over {:.1} s with no rollback condition met",
            o.messages,
            elapsed.as_secs_f64()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Percent;

    fn policy(mode: RolloutMode, n: u64) -> RolloutConfig {
        RolloutConfig {
            mode,
            observe: Observe::Messages(n),
            ..RolloutConfig::default()
        }
    }

    #[test]
    fn a_trap_rolls_back_at_once_and_a_clean_window_promotes() {
        let p = policy(RolloutMode::Canary, 1000);
        let mut o = Observation {
            messages: 10,
            live_messages: 10,
            ..Observation::default()
        };
        assert_eq!(judge(&o, &p, Duration::ZERO), None);
        o.traps = 1;
        assert_eq!(judge(&o, &p, Duration::ZERO).unwrap().reason, "trap");
        o.traps = 0;
        o.messages = 1000;
        let v = judge(&o, &p, Duration::ZERO).unwrap();
        assert_eq!((v.decision, v.reason), (Decision::Promote, "observed"));
        let timed = RolloutConfig {
            observe: Observe::Time(Duration::from_secs(60)),
            ..p.clone()
        };
        let idle = Observation::default();
        assert_eq!(
            judge(&idle, &timed, Duration::from_secs(61)),
            None,
            "nothing answered yet"
        );
        assert_eq!(
            judge(&o, &timed, Duration::from_secs(61)).unwrap().decision,
            Decision::Promote
        );
    }

    #[test]
    fn rates_wait_for_a_sample_then_compare_with_the_live_version() {
        let mut p = policy(RolloutMode::Shadow, 10_000);
        p.rollback_when.reject_rate = Some(Percent(0.02));
        let mut o = Observation {
            messages: 50,
            rejected: 10,
            live_messages: 50,
            live_rejected: 0,
            ..Observation::default()
        };
        assert_eq!(
            judge(&o, &p, Duration::ZERO),
            None,
            "too few to judge a rate"
        );
        o.messages = 100;
        o.live_messages = 100;
        o.live_rejected = 9;
        assert_eq!(judge(&o, &p, Duration::ZERO), None, "+1 point is within +2");
        o.live_rejected = 7;
        assert_eq!(judge(&o, &p, Duration::ZERO).unwrap().reason, "reject_rate");
        o.live_rejected = 10;
        o.compared = 100;
        o.differ.insert("differ_value", 2);
        assert_eq!(judge(&o, &p, Duration::ZERO).unwrap().reason, "diff_rate");
    }
}
