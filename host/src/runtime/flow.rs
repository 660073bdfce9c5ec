//! Flow control: hold (stop taking messages) first, pause partitions when pressure lasts.

use std::time::Instant;

use super::lanes::{list, Core, LaneState};
use crate::message::PartitionKey;

/// How long a lane that needed a pause keeps being paused at once when it backs up again.
const SLOW_MEMORY: std::time::Duration = std::time::Duration::from_secs(10);

impl Core {
    /// True while the controller takes messages from the source: not holding, or the hold
    /// has turned into pauses (then polling goes on for the group and for events).
    pub(super) fn reading(&self) -> bool {
        self.held_since
            .is_none_or(|t| t.elapsed() >= self.opts.hold)
    }

    /// Moves overflow into lanes and decides flow control: returns the partitions to pause and
    /// to resume.
    ///
    /// Pressure (the byte budget spent, or a lane backed up: a second lane's worth waiting
    /// behind a full lane) first **holds**: the controller stops taking messages, so
    /// the source's own bounded prefetch keeps them and nothing is fetched twice. A pause
    /// empties that prefetch, and a broker thread whose partitions are all paused sleeps up to a
    /// second before it notices a resume, so pausing at once on every short burst stalled the
    /// whole pipeline (measured: ~0.85 s gaps with nothing read). Pressure that outlasts
    /// `hold` becomes pauses, and polling goes on: every partition for the budget (resumed
    /// below half of it), the backed-up lanes otherwise (resumed once their overflow has
    /// drained). A lane that needed such a pause is paused at once the next time it backs
    /// up (for `SLOW_MEMORY`), so one slow partition does not hold the others again.
    pub(super) fn flow(&mut self) -> (Vec<PartitionKey>, Vec<PartitionKey>) {
        let now = Instant::now();
        if self.in_flight > self.opts.max_in_flight && !self.budget_spent {
            self.budget_spent = true;
            tracing::debug!(in_flight = self.in_flight, "byte budget spent: holding");
        } else if self.budget_spent && self.in_flight <= self.opts.max_in_flight / 2 {
            self.budget_spent = false;
            tracing::debug!(in_flight = self.in_flight, "below half the budget");
        }
        let cap = self.opts.lane_capacity;
        let backed = |l: &LaneState| {
            l.tx.is_some() && (l.overflow.len() >= cap || (l.paused && !l.overflow.is_empty()))
        };
        let slow = |l: &LaneState| l.slow_until.is_some_and(|t| now < t);
        let mut pressure = self.budget_spent;
        for ps in self.lanes.values_mut() {
            for lane in ps.values_mut() {
                if let Some(tx) = &lane.tx {
                    while let Some(env) = lane.overflow.pop_front() {
                        if let Err(e) = tx.try_send(env) {
                            lane.overflow.push_front(e.into_inner());
                            break;
                        }
                    }
                }
                pressure |= backed(lane) && !lane.paused && !slow(lane);
            }
        }
        if pressure {
            if self.held_since.is_none() {
                self.metrics.flow_control.with_label_values(&["hold"]).inc();
                self.held_since = Some(now);
            }
        } else {
            self.held_since = None;
        }
        let escalate = self
            .held_since
            .is_some_and(|t| now.duration_since(t) >= self.opts.hold);
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        let mut stopped = 0;
        let holding = self.held_since.is_some() && !escalate;
        for (t, ps) in &mut self.lanes {
            for (p, lane) in ps.iter_mut() {
                let want = if self.budget_spent {
                    escalate || lane.paused
                } else if backed(lane) {
                    if escalate && !lane.paused && !slow(lane) {
                        lane.slow_until = Some(now + SLOW_MEMORY);
                    }
                    lane.paused || slow(lane) || escalate
                } else {
                    false
                };
                let key = PartitionKey {
                    topic: t.clone(),
                    partition: *p,
                };
                if want && !lane.paused {
                    pause.push(key);
                } else if !want && lane.paused {
                    resume.push(key);
                }
                lane.paused = want;
                stopped += usize::from(want || holding);
                let state = if want { 2 } else { i64::from(holding) };
                if state != lane.reported_state {
                    lane.reported_state = state;
                    self.metrics
                        .partition_state
                        .with_label_values(&[t.as_ref(), p.to_string().as_str()])
                        .set(state);
                }
            }
        }
        self.metrics.paused_partitions.set(stopped as i64);
        if !pause.is_empty() || !resume.is_empty() {
            tracing::debug!(pause = %list(&pause), resume = %list(&resume), in_flight = self.in_flight, "flow control");
        }
        let counted = |action: &str, n: usize| {
            self.metrics
                .flow_control
                .with_label_values(&[action])
                .inc_by(n as u64);
        };
        counted("pause", pause.len());
        counted("resume", resume.len());
        (pause, resume)
    }
}
