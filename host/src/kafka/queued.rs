//! What librdkafka holds in memory, from its statistics: a producer's queue (records handed
//! over and not yet acknowledged) and a consumer's fetch queues (records prefetched and not
//! yet polled), as `weir_kafka_queued_bytes{client}` and `weir_kafka_queued_messages{client}`.
//!
//! Several clients may share a label (the per-partition transactional producers): each
//! client's [`Queued`] adds the change since its last report, and takes its share back when
//! the client goes away, so the gauge is the sum over the live clients.

use std::sync::Mutex;

use prometheus::IntGauge;
use rdkafka::statistics::Statistics;

/// How often librdkafka reports its statistics, unless the YAML's `properties` say otherwise.
pub const STATISTICS_INTERVAL_MS: &str = "5000";

/// Asks librdkafka for its statistics every [`STATISTICS_INTERVAL_MS`], unless the YAML's
/// `properties` set another interval (0 turns them off).
pub fn enable(c: &mut rdkafka::ClientConfig) {
    if c.get("statistics.interval.ms").is_none() {
        c.set("statistics.interval.ms", STATISTICS_INTERVAL_MS);
    }
}

/// Turns librdkafka's statistics off for a short-lived helper client (start-up checks, a
/// restore, `weir admin`), whatever the YAML's `properties` say: nothing reads them there, and
/// a client that is not polled often piles them up in its queue.
pub fn disable(c: &mut rdkafka::ClientConfig) {
    c.remove("statistics.interval.ms");
}

/// One client's share of the queued gauges.
#[derive(Debug)]
pub struct Queued {
    bytes: IntGauge,
    messages: IntGauge,
    /// What this client reported last: (bytes, messages).
    last: Mutex<(i64, i64)>,
}

impl Queued {
    /// A client's share of these gauges (the `client` label already applied).
    pub fn new(bytes: IntGauge, messages: IntGauge) -> Self {
        Queued {
            bytes,
            messages,
            last: Mutex::new((0, 0)),
        }
    }

    /// A Kafka client's share of `weir_kafka_queued_*{client}`.
    pub fn of(metrics: &crate::metrics::Metrics, client: &str) -> Self {
        Queued::new(
            metrics.kafka_queued_bytes.with_label_values(&[client]),
            metrics.kafka_queued_messages.with_label_values(&[client]),
        )
    }

    /// Another client's share of the same gauges.
    pub fn another(&self) -> Self {
        Queued::new(self.bytes.clone(), self.messages.clone())
    }

    /// A producer's statistics: its queues.
    pub fn producer(&self, s: &Statistics) {
        self.set(s.msg_size as i64, s.msg_cnt as i64);
    }

    /// A consumer's statistics: its partitions' fetch queues.
    pub fn consumer(&self, s: &Statistics) {
        let (mut bytes, mut messages) = (0i64, 0i64);
        for p in s.topics.values().flat_map(|t| t.partitions.values()) {
            // Partition -1 is librdkafka's internal "unassigned" one.
            if p.partition >= 0 {
                bytes += p.fetchq_size as i64;
                messages += p.fetchq_cnt.max(0);
            }
        }
        self.set(bytes, messages);
    }

    fn set(&self, bytes: i64, messages: i64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        self.bytes.add(bytes - last.0);
        self.messages.add(messages - last.1);
        *last = (bytes, messages);
    }
}

impl Drop for Queued {
    /// The client is gone: what it held is no longer held.
    fn drop(&mut self) {
        self.set(0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_sharing_a_label_add_up_and_a_dropped_one_takes_its_share_back() {
        let bytes = IntGauge::new("b", "b").unwrap();
        let messages = IntGauge::new("m", "m").unwrap();
        let a = Queued::new(bytes.clone(), messages.clone());
        let b = a.another();
        a.set(100, 2);
        b.set(50, 1);
        assert_eq!((bytes.get(), messages.get()), (150, 3));
        a.set(10, 1);
        assert_eq!((bytes.get(), messages.get()), (60, 2));
        drop(b);
        assert_eq!((bytes.get(), messages.get()), (10, 1));
        drop(a);
        assert_eq!((bytes.get(), messages.get()), (0, 0));
    }

    #[test]
    fn a_consumer_counts_its_partitions_fetch_queues_and_not_the_unassigned_one() {
        let bytes = IntGauge::new("b", "b").unwrap();
        let messages = IntGauge::new("m", "m").unwrap();
        let q = Queued::new(bytes.clone(), messages.clone());
        let mut s = Statistics::default();
        for (topic, parts) in [
            ("in", &[(0, 3000, 30), (-1, 999, 9)][..]),
            ("more", &[(2, 500, 5)]),
        ] {
            let mut t = rdkafka::statistics::Topic::default();
            for &(partition, size, count) in parts {
                let p = rdkafka::statistics::Partition {
                    partition,
                    fetchq_size: size,
                    fetchq_cnt: count,
                    ..Default::default()
                };
                t.partitions.insert(partition, p);
            }
            s.topics.insert(topic.into(), t);
        }
        q.consumer(&s);
        assert_eq!((bytes.get(), messages.get()), (3000 + 500, 30 + 5));
    }
}
