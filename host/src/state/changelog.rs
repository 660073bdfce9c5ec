//! What the state needs of a changelog: the [`Changelog`] trait (Kafka's implementation is
//! `sink::changelog`), the records it takes and where their acknowledgements landed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::ack::Ticket;
use crate::message::Lane;

/// One state write on its way to a stage's changelog topic (see [`crate::state`](super)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The changelog topic (`<pipeline>.<stage>.<bucket>.changelog`).
    pub topic: Arc<str>,
    /// The bucket's key.
    pub key: Arc<str>,
    /// The encoded value (write time, then the stage's bytes; shared with the state's log);
    /// none: a tombstone.
    pub value: Option<super::encoding::Encoded>,
    /// The source offset whose outcome the write belongs to (see [`ChangelogAcks`]).
    pub tag: i64,
}

/// Where acknowledged changelog records landed, so a store's checkpoint can move past them
/// when it applies their writes (a restart then re-reads only what came after): per
/// changelog topic and partition, `(tag, offset)` in acknowledgement order.
#[derive(Debug, Default)]
pub struct ChangelogAcks {
    /// By topic (looked up by `&str`: a delivery allocates nothing), then partition.
    acked: Mutex<HashMap<Arc<str>, HashMap<i32, AckQueue>>>,
}

/// `(tag, offset)` of acknowledged records, in acknowledgement order.
type AckQueue = std::collections::VecDeque<(i64, i64)>;

impl ChangelogAcks {
    /// A record of the write tagged `tag` is at `offset` of `topic`'s `partition`.
    pub fn acked(&self, topic: &str, partition: i32, tag: i64, offset: i64) {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        let parts = match a.get_mut(topic) {
            Some(parts) => parts,
            None => a.entry(topic.into()).or_default(),
        };
        parts.entry(partition).or_default().push_back((tag, offset));
    }

    /// The offset after the last acknowledged record of the writes tagged below `next`,
    /// taking them out; `None` when there is none. It stops at the first record tagged
    /// `next` or later, so a record acknowledged out of order only holds the answer back.
    pub fn settled_below(&self, topic: &str, partition: i32, next: i64) -> Option<i64> {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        let q = a.get_mut(topic)?.get_mut(&partition)?;
        let mut last = None;
        while let Some(&(tag, offset)) = q.front() {
            if tag >= next {
                break;
            }
            last = Some(last.map_or(offset, |l: i64| l.max(offset)));
            q.pop_front();
        }
        last.map(|o| o + 1)
    }

    /// Forgets `partition` of `topic` (it left this process).
    pub fn forget(&self, topic: &str, partition: i32) {
        let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(parts) = a.get_mut(topic) {
            parts.remove(&partition);
        }
    }
}

/// What a restore hands each changelog record to: its offset, key and value (none: a
/// tombstone).
pub type ApplyRecord<'a> = dyn FnMut(i64, &str, Option<&[u8]>) + 'a;

/// Where stages' state writes are made durable: a compacted changelog topic per stage and
/// bucket, partitioned like the source. At-least-once its records carry a ticket of the
/// batch, so no offset commits before they are acknowledged; exactly-once each key's last
/// write of a transaction goes into it just before it commits (Kafka Streams' record cache:
/// one record per key per transaction, not per write).
pub trait Changelog: Send + Sync {
    /// Sends the writes of a batch of `lane` to the changelog partition of the lane's
    /// partition; each acknowledgement settles `ticket` once and is noted in [`Changelog::acks`]
    /// with its offset.
    fn write(&self, lane: &Lane, records: &[ChangeRecord], ticket: &Arc<Ticket>);
    /// Exactly-once: puts `records` (each key's last write since the partition's last
    /// commit) into the open transaction of `lane`'s partition, just before it commits. Its
    /// commit waits for their acknowledgements (noted in [`Changelog::acks`]).
    fn write_to_transaction(&self, lane: &Lane, records: &[ChangeRecord]) -> Result<(), String>;
    /// Where the acknowledged records landed.
    fn acks(&self) -> &Arc<ChangelogAcks>;
    /// Reads partition `partition` of `topic` from offset `from` to its end (committed
    /// records only, under exactly-once), handing each record to `apply` (offset, key,
    /// value). Returns the offset after the last record (the end), or why it could not.
    fn restore(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        apply: &mut ApplyRecord<'_>,
    ) -> Result<i64, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changelog_checkpoint_moves_past_the_records_of_committed_writes_only() {
        let acks = ChangelogAcks::default();
        let t: Arc<str> = "c".into();
        for (tag, offset) in [(1, 10), (1, 11), (3, 12), (5, 13), (4, 14), (6, 15)] {
            acks.acked("c", 0, tag, offset);
        }
        acks.acked("c", 1, 1, 99);
        assert_eq!(acks.settled_below(&t, 0, 1), None, "nothing below 1");
        assert_eq!(
            acks.settled_below(&t, 0, 4),
            Some(13),
            "after offset 12 (tags 1, 1, 3)"
        );
        // Tag 4 was acknowledged after tag 5: commit 5 stops at tag 5, holding 4 back.
        assert_eq!(acks.settled_below(&t, 0, 5), None);
        assert_eq!(acks.settled_below(&t, 0, 7), Some(16));
        assert_eq!(acks.settled_below(&t, 1, 7), Some(100), "partitions apart");
        acks.acked("c", 1, 8, 100);
        acks.forget(&t, 1);
        assert_eq!(acks.settled_below(&t, 1, 9), None, "forgotten");
    }
}
