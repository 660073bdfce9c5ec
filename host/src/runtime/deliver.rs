//! A batch's results on their way: outputs to the sink, rejects to the reject path, and the
//! settling of every source offset of the batch — by the sink's acknowledgement (a ticket
//! per offset that became records), or at once when there is nothing to wait for.

use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::chain::{ChainOutput, Rejected};
use crate::message::PartitionKey;
use crate::message::{Envelope, Lane};
use crate::sink::{Changelog, Completion, Record, Settled, Sink, SinkError, Ticket};

/// The sink and the reject path, as every driver uses them.
#[derive(Clone)]
pub struct Outputs {
    /// Where outputs go.
    pub sink: Arc<dyn Sink>,
    /// Where rejects go.
    pub rejects: Arc<dyn Sink>,
    /// Where settled offsets are reported.
    pub done: Sender<Completion>,
    /// Where stateful stages' writes go (Kafka sources); none: the state is local only.
    pub changelog: Option<Arc<dyn Changelog>>,
}

/// A lane as the outputs see it: the partition and the generation it was read in.
pub struct LaneRef<'a> {
    /// Partition.
    pub key: &'a PartitionKey,
    /// Generation.
    pub generation: u64,
    /// The chain's view of the lane.
    pub lane: &'a Lane,
}

impl Outputs {
    /// Sends a batch's results on. `offsets` are the batch's source offsets (sorted);
    /// `originals` the source messages when the chain may have changed them before a reject;
    /// `pre_rejected` items the source already rejected (malformed input).
    /// Every offset below a failure is settled (now, or when its records are acknowledged);
    /// the failed one is settled as failed; later ones never are.
    pub fn deliver(
        &self,
        lane: LaneRef<'_>,
        offsets: &[i64],
        out: &ChainOutput,
        pre_rejected: &[Rejected],
        originals: Option<&[Envelope]>,
    ) -> Result<(), SinkError> {
        let fail_at = out.failure.as_ref().map_or(i64::MAX, |f| f.offset);
        let idx = |o: i64| offsets.binary_search(&o).ok();
        let rejects = out
            .rejects
            .iter()
            .chain(pre_rejected.iter().filter(|r| r.env.offset < fail_at));
        // Records per offset that wait for an acknowledgement.
        let mut pending = vec![0u32; offsets.len()];
        let (sink_later, rejects_later) = (
            self.sink.acknowledges_later(),
            self.rejects.acknowledges_later(),
        );
        if sink_later {
            for e in &out.outputs {
                if let Some(i) = idx(e.offset) {
                    pending[i] += 1;
                }
            }
        }
        if rejects_later {
            for r in rejects.clone() {
                if let Some(i) = idx(r.env.offset) {
                    pending[i] += 1;
                }
            }
        }
        let tickets: Vec<Option<Arc<Ticket>>> = if sink_later || rejects_later {
            offsets
                .iter()
                .zip(&pending)
                .map(|(&offset, &n)| {
                    (n > 0).then(|| {
                        Ticket::new(
                            lane.key.clone(),
                            lane.generation,
                            offset,
                            n,
                            self.done.clone(),
                        )
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let ticket = |later: bool, o: i64| {
            later
                .then(|| idx(o).and_then(|i| tickets[i].clone()))
                .flatten()
        };

        let records = out
            .outputs
            .iter()
            .map(|e| Record::Output {
                msg: &e.msg,
                ticket: ticket(sink_later, e.offset),
            })
            .collect();
        self.sink.write(lane.lane, records)?;
        let records = rejects
            .map(|r| {
                let original = originals
                    .and_then(|o| {
                        o.binary_search_by_key(&r.env.offset, |e| e.offset)
                            .ok()
                            .map(|i| &o[i].msg)
                    })
                    .unwrap_or(&r.env.msg);
                Record::Reject {
                    original,
                    rejected: r,
                    ticket: ticket(rejects_later, r.env.offset),
                }
            })
            .collect();
        self.rejects.write(lane.lane, records)?;

        // Offsets with nothing to wait for are done now (or failed).
        let mut done = Vec::with_capacity(offsets.len());
        for (i, &o) in offsets.iter().enumerate() {
            if pending[i] == 0 && o < fail_at {
                done.push(o);
            }
        }
        let settle = |offsets: Vec<i64>, outcome: Settled| {
            let _ = self.done.send(Completion {
                key: lane.key.clone(),
                generation: lane.generation,
                offsets,
                outcome,
            });
        };
        if !done.is_empty() {
            settle(done, Settled::Done);
        }
        if fail_at != i64::MAX {
            settle(vec![fail_at], Settled::Failed);
        }
        Ok(())
    }
}
