//! The host's own ceiling: Weir's no-stage Kafka pipeline vs a hand-written rdkafka
//! consume → produce loop with the same guarantees, alternating on one embedded broker.
//!
//! The loop is what a careful engineer writes by hand: one consumer (the same settings as
//! Weir's: no auto commit, offsets stored by hand), one idempotent `acks=all` producer
//! (`linger.ms=5`, as Weir's), each record produced with its input partition and offset as the
//! delivery opaque; an offset is committed only when every record below it on its partition
//! is acknowledged (commits every 500 ms, as Weir's default, and once at the end). Time is
//! from the first message read until every output is acknowledged and the last commit done —
//! what Weir's report calls `consuming_ms`.
//!
//! Run: `cargo run --release -p weir-benches --example host_ceiling -- [ROUNDS]` (default 5).

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use weir_benches::kafka::{broker, drain, yaml, N, PARTITIONS};

/// Sends each acknowledged record's input (partition, offset) back to the loop.
struct Acks(Mutex<Sender<(i32, i64)>>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = Box<(i32, i64)>;
    fn delivery(&self, result: &DeliveryResult<'_>, input: Box<(i32, i64)>) {
        assert!(
            result.is_ok(),
            "delivery failed: {:?}",
            result.as_ref().err()
        );
        let _ = self.0.lock().unwrap().send(*input);
    }
}

/// Per input partition: offsets read but not yet acknowledged, and the next offset to read.
#[derive(Default)]
struct Pending {
    open: BTreeSet<i64>,
    next: i64,
}

impl Pending {
    /// The offset to commit: the lowest one not yet acknowledged, or the next to read.
    fn safe(&self) -> i64 {
        self.open.first().copied().unwrap_or(self.next)
    }
}

fn commit(consumer: &BaseConsumer, pending: &HashMap<i32, Pending>, mode: CommitMode) {
    let mut tpl = TopicPartitionList::new();
    for (p, s) in pending {
        tpl.add_partition_offset("in", *p, Offset::Offset(s.safe()))
            .expect("offset");
    }
    if tpl.count() > 0 {
        consumer.commit(&tpl, mode).expect("commit");
    }
}

fn settle(acks: &Receiver<(i32, i64)>, pending: &mut HashMap<i32, Pending>) -> usize {
    let mut n = 0;
    for (p, o) in acks.try_iter() {
        pending
            .get_mut(&p)
            .expect("read before acked")
            .open
            .remove(&o);
        n += 1;
    }
    n
}

/// One drain of `in` into `out` by the hand-written loop; the time from the first read.
fn by_hand(bootstrap: &str, group: &str) -> Duration {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "10")
        .set("queued.max.messages.kbytes", "16384")
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .expect("consumer");
    consumer.subscribe(&["in"]).expect("subscribe");
    let (tx, acks) = channel();
    let producer = ThreadedProducer::from_config_and_context(
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "5")
            .set("acks", "all")
            .set("enable.idempotence", "true"),
        Acks(Mutex::new(tx)),
    )
    .expect("producer");
    let mut pending: HashMap<i32, Pending> = HashMap::new();
    let (mut read, mut acked, mut eof) = (0usize, 0usize, 0);
    let mut started = None;
    let mut last_commit = Instant::now();
    while read < N || eof < PARTITIONS {
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = match m {
            Ok(m) => m,
            Err(KafkaError::PartitionEOF(_)) => {
                eof += 1;
                continue;
            }
            Err(e) => panic!("consume: {e}"),
        };
        started.get_or_insert_with(Instant::now);
        let (p, o) = (m.partition(), m.offset());
        let state = pending.entry(p).or_default();
        state.open.insert(o);
        state.next = o + 1;
        read += 1;
        let mut record = BaseRecord::with_opaque_to("out", Box::new((p, o)));
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        if let Some(v) = m.payload() {
            record = record.payload(v);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    acked += settle(&acks, &mut pending);
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
        if last_commit.elapsed() >= Duration::from_millis(500) {
            acked += settle(&acks, &mut pending);
            commit(&consumer, &pending, CommitMode::Async);
            last_commit = Instant::now();
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    while acked < N {
        acked += settle(&acks, &mut pending);
        std::thread::sleep(Duration::from_millis(1));
    }
    commit(&consumer, &pending, CommitMode::Sync);
    started.expect("read something").elapsed()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(5, |a| a.parse().expect("ROUNDS is a number"));
    let b = broker();
    let (mut weir, mut hand) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let w = drain(&yaml(b.bootstrap(), "", 0, 1));
        let h = by_hand(b.bootstrap(), &format!("by-hand-{round}"));
        println!(
            "round {round}: weir (no stage) {:5} ms, by hand {:5} ms, ratio {:.2}",
            w.as_millis(),
            h.as_millis(),
            h.as_secs_f64() / w.as_secs_f64()
        );
        weir.push(w.as_secs_f64());
        hand.push(h.as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, h) = (median(&mut weir), median(&mut hand));
    println!(
        "median: weir {:.0} k msg/s, by hand {:.0} k msg/s; weir / by hand = {:.2}",
        N as f64 / w / 1e3,
        N as f64 / h / 1e3,
        h / w
    );
}
