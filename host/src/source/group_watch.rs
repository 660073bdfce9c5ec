//! Watches the whole consumer group, not only this member: a partition of the subscribed
//! topics whose committed offset has stood still while input arrived is **stalled**. No member
//! owns it (a group that left it unassigned), or the member that owns it makes no progress.
//! Either way nothing of it moves, and the run of any single member looks healthy. Each
//! member counts such partitions in `weir_kafka_partitions_stalled{topic}` and logs each one
//! once (docs/operations.md, alert `WeirPartitionsStalled`).
//!
//! The watch runs on a thread of its own with a client of its own that never joins the group.
//! Each `every` it lists the topics' partitions and asks, in one request each, for the
//! group's committed offsets and the partitions' ends. A partition is stalled when its
//! committed offset has not moved for `after` and, since it last moved, either the end grew
//! (input arrived) or more than one offset stands unread. (One offset may be a transaction's
//! commit marker after the last record, which a reader never commits past.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::PartitionKey;
use crate::config::KafkaSource as KafkaSourceConfig;
use crate::kafka::offsets;
use crate::metrics::Metrics;

/// Longest one request of the watch may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the watch knows of one partition.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The group's committed offset (`None`: nothing committed yet).
    committed: Option<i64>,
    /// When `committed` last changed (or was first seen).
    since: Instant,
    /// The partition's end then.
    end_then: i64,
    /// The end at the last look.
    end: i64,
}

/// The stall rule over successive looks at the group's offsets (no I/O: the watch thread feeds
/// it).
#[derive(Debug, Default)]
pub struct Stalls {
    seen: HashMap<PartitionKey, Seen>,
}

impl Stalls {
    /// Takes in one look at a partition: the group's committed offset and the partition's end.
    pub fn observe(&mut self, now: Instant, key: &PartitionKey, committed: Option<i64>, end: i64) {
        match self.seen.get_mut(key) {
            Some(s) if s.committed == committed => s.end = end,
            _ => {
                self.seen.insert(
                    key.clone(),
                    Seen {
                        committed,
                        since: now,
                        end_then: end,
                        end,
                    },
                );
            }
        }
    }

    /// Forgets partitions not in `keys` (a topic deleted, a pattern no longer matching).
    pub fn keep_only(&mut self, keys: &BTreeSet<PartitionKey>) {
        self.seen.retain(|k, _| keys.contains(k));
    }

    /// The partitions stalled at `now`: committed offset unchanged for at least `after`, with
    /// input arrived since it last moved or more than one offset unread.
    pub fn stalled(&self, now: Instant, after: Duration) -> BTreeSet<PartitionKey> {
        self.seen
            .iter()
            .filter(|(_, s)| {
                let unread = s.committed.map(|c| s.end - c);
                now.duration_since(s.since) >= after
                    && (s.end > s.end_then || unread.is_some_and(|u| u > 1))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The running watch; dropping it stops the thread (within one request).
pub struct GroupWatch {
    _stop: mpsc::Sender<()>,
}

/// What the watch needs to know of the source.
struct Watched {
    group: String,
    names: Vec<String>,
    patterns: Vec<regex_lite::Regex>,
    every: Duration,
    after: Duration,
}

impl GroupWatch {
    /// Starts the watch of `cfg`'s group, unless `stalled_after` is zero or the run stops at
    /// the end of its input.
    pub fn start(cfg: &KafkaSourceConfig, metrics: Arc<Metrics>) -> Option<GroupWatch> {
        let after = cfg.stalled_after();
        if after.is_zero() || cfg.stop_at_end {
            return None;
        }
        let mut client = crate::kafka::client::consumer_config(cfg);
        // It never joins the group: it only reads the group's offsets and the ends.
        client.set("group.protocol", "classic");
        let consumer = match BaseConsumer::from_config(&client) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    "the group watch has no client ({e}); stalled partitions are not watched"
                );
                return None;
            }
        };
        let watched = Watched {
            group: cfg.group.clone(),
            names: cfg
                .topics
                .iter()
                .filter(|t| !crate::config::is_pattern(t))
                .cloned()
                .collect(),
            patterns: cfg.patterns(),
            // Four looks per `after`, at most one every 30 s and at least one a second.
            every: (after / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)),
            after,
        };
        let (stop, stopped) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("weir-group-watch".into())
            .spawn(move || watch(&consumer, &watched, &metrics, &stopped));
        if let Err(e) = spawned {
            tracing::warn!(
                "the group watch did not start ({e}); stalled partitions are not watched"
            );
            return None;
        }
        Some(GroupWatch { _stop: stop })
    }
}

fn watch(consumer: &BaseConsumer, w: &Watched, metrics: &Metrics, stopped: &mpsc::Receiver<()>) {
    let mut stalls = Stalls::default();
    let mut reported: BTreeSet<PartitionKey> = BTreeSet::new();
    // Named topics show 0 from the start (a stall is only known `after` a first look).
    for t in &w.names {
        metrics.partitions_stalled.with_label_values(&[t]).set(0);
    }
    let mut topics_shown: BTreeSet<String> = w.names.iter().cloned().collect();
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            match stopped.recv_timeout(w.every) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
        let Some(keys) = partitions(consumer, w) else {
            continue;
        };
        let Some((committed, ends)) = offsets(consumer, &keys) else {
            continue;
        };
        let now = Instant::now();
        for k in &keys {
            if let Some(&end) = ends.get(k) {
                stalls.observe(now, k, committed.get(k).copied(), end);
            }
        }
        stalls.keep_only(&keys);
        let stalled = stalls.stalled(now, w.after);
        for k in stalled.difference(&reported) {
            tracing::warn!(
                group = %w.group,
                key = %k,
                "partition stalled: the group's committed offset has not moved for {:?} while input waits (no member owns it, or its owner makes no progress)",
                w.after
            );
        }
        for k in reported.difference(&stalled) {
            tracing::info!(group = %w.group, key = %k, "partition moving again");
        }
        let mut per_topic: BTreeMap<&str, i64> = BTreeMap::new();
        for k in &keys {
            per_topic.entry(&*k.topic).or_default();
        }
        for k in &stalled {
            *per_topic.entry(&*k.topic).or_default() += 1;
        }
        for (topic, n) in &per_topic {
            metrics
                .partitions_stalled
                .with_label_values(&[topic])
                .set(*n);
        }
        for gone in topics_shown
            .iter()
            .filter(|t| !per_topic.contains_key(t.as_str()))
        {
            let _ = metrics.partitions_stalled.remove_label_values(&[gone]);
        }
        topics_shown = per_topic.keys().map(|t| (*t).to_owned()).collect();
        reported = stalled;
    }
}

/// Every partition of the watched topics (the names, and what the patterns match now).
fn partitions(consumer: &BaseConsumer, w: &Watched) -> Option<BTreeSet<PartitionKey>> {
    let meta = match consumer.fetch_metadata(None, REQUEST_TIMEOUT) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!("group watch: listing topics: {e}");
            return None;
        }
    };
    let keys = meta
        .topics()
        .iter()
        .filter(|t| {
            let name = t.name();
            w.names.iter().any(|n| n == name) || crate::config::pattern_matches(&w.patterns, name)
        })
        .flat_map(|t| {
            t.partitions()
                .iter()
                .map(move |p| PartitionKey::new(t.name(), p.id()))
        })
        .collect();
    Some(keys)
}

/// The group's committed offsets and the partitions' ends, one request each.
type Offsets = (HashMap<PartitionKey, i64>, HashMap<PartitionKey, i64>);

fn offsets(consumer: &BaseConsumer, keys: &BTreeSet<PartitionKey>) -> Option<Offsets> {
    if keys.is_empty() {
        return None;
    }
    let mut tpl = TopicPartitionList::new();
    for k in keys {
        tpl.add_partition(&k.topic, k.partition);
    }
    let committed = match consumer.committed_offsets(tpl.clone(), REQUEST_TIMEOUT) {
        Ok(c) => offsets::of(Some(&c)),
        Err(e) => {
            tracing::debug!("group watch: committed offsets: {e}");
            return None;
        }
    };
    for k in keys {
        let _ = tpl.set_partition_offset(&k.topic, k.partition, Offset::End);
    }
    let ends = match consumer.offsets_for_times(tpl, REQUEST_TIMEOUT) {
        Ok(e) => offsets::of(Some(&e)),
        Err(e) => {
            tracing::debug!("group watch: end offsets: {e}");
            return None;
        }
    };
    Some((committed, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        PartitionKey::new("in", p)
    }

    const AFTER: Duration = Duration::from_secs(12);

    #[test]
    fn a_partition_whose_commit_stands_while_input_arrives_is_stalled_only_after_the_wait() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        s.observe(t0, &key(0), Some(100), 100);
        s.observe(t0 + Duration::from_secs(6), &key(0), Some(100), 150);
        assert!(s.stalled(t0 + Duration::from_secs(6), AFTER).is_empty());
        s.observe(t0 + AFTER, &key(0), Some(100), 200);
        assert_eq!(s.stalled(t0 + AFTER, AFTER), BTreeSet::from([key(0)]));
    }

    #[test]
    fn a_moving_commit_or_an_idle_partition_is_never_stalled() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        for i in 0..10 {
            let at = t0 + Duration::from_secs(5 * i);
            let i = i64::try_from(i).expect("small");
            // Partition 0 has a lag, but its commit moves every look.
            s.observe(at, &key(0), Some(100 * i), 100 * i + 500);
            // Partition 1 has no input: fully committed (one offset is a commit marker).
            s.observe(at, &key(1), Some(40), 41);
            // Partition 2 never had input nor a commit.
            s.observe(at, &key(2), None, 0);
        }
        assert!(s.stalled(t0 + Duration::from_secs(45), AFTER).is_empty());
    }

    #[test]
    fn a_backlog_nobody_reads_is_stalled_even_without_new_input_and_clears_once_read() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        s.observe(t0, &key(3), Some(10), 500);
        s.observe(t0 + AFTER, &key(3), Some(10), 500);
        assert_eq!(s.stalled(t0 + AFTER, AFTER), BTreeSet::from([key(3)]));
        s.observe(t0 + AFTER * 2, &key(3), Some(500), 500);
        assert!(s.stalled(t0 + AFTER * 3, AFTER).is_empty());
    }

    #[test]
    fn a_partition_never_committed_is_stalled_once_input_arrives_unread() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        s.observe(t0, &key(4), None, 0);
        s.observe(t0 + AFTER, &key(4), None, 0);
        assert!(s.stalled(t0 + AFTER, AFTER).is_empty());
        s.observe(t0 + AFTER, &key(4), None, 30);
        assert_eq!(s.stalled(t0 + AFTER, AFTER), BTreeSet::from([key(4)]));
        s.keep_only(&BTreeSet::new());
        assert!(s.stalled(t0 + AFTER, AFTER).is_empty());
    }
}
