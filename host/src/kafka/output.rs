//! Where a batch's results go: outputs to the sink, rejects to the dead-letter path, and
//! the per-offset tickets that turn broker acknowledgements into [`Completion`]s.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::record::headers_of;
use super::{Completion, PartitionKey, Settled};
use crate::chain::{ChainOutput, Rejected};
use crate::message::{Envelope, Lane, Message};
use crate::sink::LineSink;

/// The shared producer.
pub type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// Counts what the broker acknowledged.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Records acknowledged.
    pub ok: AtomicU64,
}

/// Settles tickets from librdkafka's delivery reports.
pub struct DeliveryContext {
    /// Counters.
    pub delivered: Arc<Delivered>,
    /// `weir_produced_records_total` for this destination.
    pub produced: prometheus::IntCounter,
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        super::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!("producer: {error}: {reason}");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Arc<Ticket>) {
        match result {
            Ok(_) => {
                self.delivered.ok.fetch_add(1, Ordering::Relaxed);
                self.produced.inc();
                ticket.settle(None);
            }
            Err((e, _)) => {
                ticket.settle(Some(format!("delivery failed: {e}")));
            }
        }
    }
}

/// The records one source offset became; when the last is acknowledged the offset is done.
pub struct Ticket {
    key: PartitionKey,
    generation: u64,
    offset: i64,
    remaining: AtomicU32,
    error: Mutex<Option<String>>,
    done: Sender<Completion>,
}

impl Ticket {
    fn settle(&self, error: Option<String>) {
        if let Some(e) = error {
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let err = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
            let _ = self.done.send(Completion {
                key: self.key.clone(),
                generation: self.generation,
                offset: self.offset,
                outcome: err.map_or(Settled::Done, Settled::Undelivered),
            });
        }
    }
}

/// One destination: a Kafka topic through the shared producer, or a local line sink.
#[derive(Clone)]
pub enum Target {
    /// Produce to `topic` (or the topic a stage set, for outputs).
    Kafka {
        /// The producer.
        producer: Arc<KafkaProducer>,
        /// Default topic.
        topic: Arc<str>,
    },
    /// A local sink shared by the drivers.
    Line(Arc<Mutex<LineSink>>),
}

/// The sink and the reject path, as every driver uses them.
#[derive(Clone)]
pub struct Outputs {
    /// Where outputs go.
    pub sink: Target,
    /// Where rejects go.
    pub rejects: Target,
    /// Where settled offsets are reported.
    pub done: Sender<Completion>,
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
    /// `originals` the source messages when the chain may have changed them before a reject.
    /// Every offset below a failure is settled (now, or when its records are acknowledged);
    /// the failed one is settled as failed; later ones never are.
    pub fn deliver(
        &self,
        lane: LaneRef<'_>,
        offsets: &[i64],
        out: &ChainOutput,
        originals: Option<&[Envelope]>,
    ) -> Result<(), String> {
        let fail_at = out.failure.as_ref().map_or(i64::MAX, |f| f.offset);
        let idx = |o: i64| offsets.binary_search(&o).ok();
        // Records per offset that wait for an acknowledgement.
        let mut pending = vec![0u32; offsets.len()];
        if matches!(self.sink, Target::Kafka { .. }) {
            for e in &out.outputs {
                if let Some(i) = idx(e.offset) {
                    pending[i] += 1;
                }
            }
        }
        if matches!(self.rejects, Target::Kafka { .. }) {
            for r in &out.rejects {
                if let Some(i) = idx(r.env.offset) {
                    pending[i] += 1;
                }
            }
        }
        let tickets: Vec<Option<Arc<Ticket>>> = offsets
            .iter()
            .zip(&pending)
            .map(|(&offset, &n)| {
                (n > 0).then(|| {
                    Arc::new(Ticket {
                        key: lane.key.clone(),
                        generation: lane.generation,
                        offset,
                        remaining: AtomicU32::new(n),
                        error: Mutex::new(None),
                        done: self.done.clone(),
                    })
                })
            })
            .collect();
        let ticket = |o: i64| idx(o).and_then(|i| tickets[i].clone());

        match &self.sink {
            Target::Kafka { producer, topic } => {
                for e in &out.outputs {
                    let to = e.msg.topic.as_deref().unwrap_or(topic);
                    if let Some(t) = ticket(e.offset) {
                        produce(producer, to, &e.msg, headers_of(&e.msg), t);
                    }
                }
            }
            Target::Line(sink) => {
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.write(&out.outputs).map_err(|e| e.to_string())?;
                s.flush().map_err(|e| e.to_string())?;
            }
        }
        match &self.rejects {
            Target::Kafka { producer, topic } => {
                for r in &out.rejects {
                    let original = originals
                        .and_then(|o| {
                            o.binary_search_by_key(&r.env.offset, |e| e.offset)
                                .ok()
                                .map(|i| &o[i].msg)
                        })
                        .unwrap_or(&r.env.msg);
                    if let Some(t) = ticket(r.env.offset) {
                        produce(
                            producer,
                            topic,
                            original,
                            dlq_headers(original, r, lane.lane),
                            t,
                        );
                    }
                }
            }
            Target::Line(sink) => {
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.write_rejects(lane.lane, &out.rejects)
                    .map_err(|e| e.to_string())?;
                s.flush().map_err(|e| e.to_string())?;
            }
        }
        // Offsets with nothing to wait for are done now (or failed).
        for (i, &o) in offsets.iter().enumerate() {
            if pending[i] > 0 || o > fail_at {
                continue;
            }
            let _ = self.done.send(Completion {
                key: lane.key.clone(),
                generation: lane.generation,
                offset: o,
                outcome: if o == fail_at {
                    Settled::Failed
                } else {
                    Settled::Done
                },
            });
        }
        Ok(())
    }
}

/// The original headers plus why, where and by which plugin version it was rejected.
fn dlq_headers(original: &Message, r: &Rejected, lane: &Lane) -> Option<OwnedHeaders> {
    let mut h = headers_of(original).unwrap_or_else(|| OwnedHeaders::new_with_capacity(6));
    let partition = lane.partition.to_string();
    let offset = r.env.offset.to_string();
    for (k, v) in [
        ("weir.reason", r.reason.as_str()),
        ("weir.stage", &r.stage),
        ("weir.plugin", r.plugin.as_str()),
        ("weir.source.topic", &lane.topic),
        ("weir.source.partition", partition.as_str()),
        ("weir.source.offset", offset.as_str()),
    ] {
        h = h.insert(KHeader {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    Some(h)
}

/// Hands one record to the producer, waiting while its queue is full. A record the
/// producer refuses outright settles its ticket as failed.
fn produce(
    producer: &KafkaProducer,
    topic: &str,
    msg: &Message,
    headers: Option<OwnedHeaders>,
    ticket: Arc<Ticket>,
) {
    let mut record: BaseRecord<'_, [u8], [u8], Arc<Ticket>> =
        BaseRecord::with_opaque_to(topic, ticket);
    if let Some(k) = msg.key.as_deref() {
        record = record.key(k);
    }
    if let Some(v) = msg.value.as_deref() {
        record = record.payload(v);
    }
    if let Some(h) = headers {
        record = record.headers(h);
    }
    if let Some(ts) = msg.timestamp {
        record = record.timestamp(ts);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, r)) => {
                r.delivery_opaque
                    .settle(Some(format!("cannot produce to `{topic}`: {e}")));
                return;
            }
        }
    }
}

/// Waits up to `timeout` for every record handed to `producer` to be acknowledged.
pub fn flush(producer: &KafkaProducer, timeout: Duration) -> Result<(), String> {
    producer.flush(timeout).map_err(|e| {
        format!(
            "{} records not acknowledged: {e}",
            producer.in_flight_count()
        )
    })
}
