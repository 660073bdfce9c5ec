//! At-least-once commits of stateful stages backed by a changelog: a partition's offsets are
//! committed only once the changelog holds every write below them.
//!
//! The changelog gets each key's last write below a commit point, sent when a commit first
//! reaches that point (as exactly-once puts them in its transaction), not each run's writes
//! as they are made: a key written many times between two commits is one record, not many.
//! The offsets below the point are committed once those records are acknowledged (at a later
//! commit tick, or at once when there were none); until then a partition commits what the
//! changelog already holds. A revocation (and the shutdown's final one) sends and waits.

use std::time::Instant;

use super::lanes::{Core, RuntimeError};
use crate::message::Lane;
use crate::message::PartitionKey;
use crate::sink::{Completion, Settled, Ticket};

impl Core {
    /// Of `due` (partitions and the offsets they could commit), what may be committed now:
    /// each offset whose writes below it the changelog holds, else the partition's last such
    /// offset. Sends the records of a partition's commit point when none are on their way.
    pub(super) fn through_changelog(
        &mut self,
        due: Vec<(PartitionKey, i64)>,
    ) -> Vec<(PartitionKey, i64)> {
        if self.changelog.is_none() {
            return due;
        }
        self.take_logged();
        let mut out = Vec::with_capacity(due.len());
        for (key, next) in due {
            let Some(mut l) = self.lane(&key).map(|l| l.logged) else {
                continue;
            };
            if l.through < next && l.sending.is_none() {
                if self.send_changes(&key, next) {
                    l.through = next;
                } else {
                    // (A changelog that acknowledged at once lets this commit go now.)
                    self.take_logged();
                    l = self.lane(&key).map_or(l, |l| l.logged);
                }
            }
            if let Some(lane) = self.lane(&key) {
                // (This commit takes what moved.)
                lane.logged.moved = false;
            }
            let through = l.through.min(next);
            if through > i64::MIN {
                out.push((key, through));
            }
        }
        out
    }

    /// Revocation: sends partition `key`'s records below `next` (after any on their way) and
    /// waits for them until `deadline`. Returns the offset that may be committed: `next`, or
    /// what the changelog held when the wait ended.
    pub(super) fn logged_before_revoke(
        &mut self,
        key: &PartitionKey,
        next: i64,
        deadline: Instant,
    ) -> Option<i64> {
        if self.changelog.is_none() {
            return Some(next);
        }
        loop {
            self.take_logged();
            let l = self.lane(key)?.logged;
            if l.through >= next || (l.sending.is_none() && self.send_changes(key, next)) {
                return Some(next);
            }
            if l.lost {
                return (l.through > i64::MIN).then_some(l.through);
            }
            match self.logged_rx.recv_deadline(deadline) {
                Ok(c) => self.logged(c),
                Err(_) => {
                    tracing::warn!(%key, next, "revoke: the state's changelog records were not acknowledged in time; committing what it holds");
                    return (l.through > i64::MIN).then_some(l.through);
                }
            }
        }
    }

    /// The partitions whose changelog records were acknowledged since they last committed,
    /// with what the changelog holds the writes below.
    pub(super) fn logged_commits(&mut self) -> Vec<(PartitionKey, i64)> {
        self.logged_moved = false;
        let mut out = Vec::new();
        for (t, parts) in self.lanes.iter_mut() {
            for (p, lane) in parts.iter_mut() {
                if std::mem::take(&mut lane.logged.moved) && lane.logged.through > i64::MIN {
                    let key = PartitionKey {
                        topic: t.clone(),
                        partition: *p,
                    };
                    out.push((key, lane.logged.through));
                }
            }
        }
        out
    }

    /// Sends partition `key`'s changelog records below `next`; true when there were none to
    /// send (the changelog holds every write below `next` already).
    fn send_changes(&mut self, key: &PartitionKey, next: i64) -> bool {
        let (Some(state), Some(changelog)) = (self.state.clone(), self.changelog.clone()) else {
            return true;
        };
        let done = self.logged_tx.clone();
        let Some(l) = self.lane(key) else {
            return false;
        };
        if l.logged.lost {
            return false;
        }
        let generation = l.generation;
        let changes = state.take_changes(key, generation, next);
        if changes.is_empty() {
            l.logged.through = l.logged.through.max(next);
            return true;
        }
        l.logged.sending = Some(next);
        self.metrics.state_writes.inc_by(changes.len() as u64);
        let lane = Lane {
            topic: key.topic.clone(),
            partition: key.partition,
            generation,
        };
        let ticket = Ticket::new(key.clone(), generation, next, changes.len() as u32, done);
        changelog.write(&lane, &changes, &ticket);
        false
    }

    /// Applies every acknowledgement of changelog records that has arrived.
    pub(super) fn take_logged(&mut self) {
        while let Ok(c) = self.logged_rx.try_recv() {
            self.logged(c);
        }
    }

    /// One commit point's records are acknowledged, or one of them is lost.
    fn logged(&mut self, c: Completion) {
        let next = c.offsets.first().copied().unwrap_or(i64::MIN);
        let Some(l) = self.lane(&c.key).filter(|l| l.generation == c.generation) else {
            // (A revoked lane's: its commit is decided.)
            return;
        };
        l.logged.sending = None;
        let why = match c.outcome {
            Settled::Done => {
                l.logged.through = l.logged.through.max(next);
                l.logged.moved = true;
                self.logged_moved = true;
                return;
            }
            Settled::Failed => "lost".to_owned(),
            Settled::Undelivered(why) => why,
        };
        l.logged.lost = true;
        tracing::error!(key = %c.key, next, "state changelog: {why}; stopping (not committed past it)");
        self.fail(RuntimeError::Undelivered {
            key: c.key,
            offset: next - 1,
            why: format!("state changelog: {why}"),
        });
    }
}
