//! A Kafka sink: records are produced (acks=all, idempotent) and their tickets settled by
//! librdkafka's delivery reports. On the reject path the record is the original message with
//! its headers plus `weir.reason`, `weir.stage`, `weir.plugin`, `weir.source.topic`,
//! `weir.source.partition` and `weir.source.offset`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::{Record, Role, Sink, SinkError, Ticket};
use crate::config::KafkaSink as KafkaSinkConfig;
use crate::kafka::fatal::FatalSlot;
use crate::kafka::record::headers_of;
use crate::message::Rejected;
use crate::message::{Lane, Message};

/// Counts acknowledgements and settles tickets from librdkafka's delivery reports.
pub struct DeliveryContext {
    acknowledged: AtomicU64,
    produced: prometheus::IntCounter,
    /// Which client this is (`kafka sink`, `kafka reject path`) and the run's fatal slot.
    fatal: (&'static str, Arc<FatalSlot>),
    /// Its queue's share of `weir_kafka_queued_*`.
    queued: crate::kafka::queued::Queued,
}

impl ClientContext for DeliveryContext {
    fn stats(&self, s: rdkafka::statistics::Statistics) {
        self.queued.producer(&s);
    }
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::kafka::client::log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        let (client, slot) = &self.fatal;
        if slot.record(client, &error, reason) {
            tracing::error!("{client}: {error}: {reason}");
        } else {
            tracing::warn!("{client}: {error}: {reason}");
        }
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Arc<Ticket>) {
        match result {
            Ok(_) => {
                self.acknowledged.fetch_add(1, Ordering::Relaxed);
                self.produced.inc();
                ticket.settle(None);
            }
            Err((e, _)) => ticket.settle(Some(format!("delivery failed: {e}"))),
        }
    }
}

/// The Kafka sink.
pub struct KafkaSink {
    producer: ThreadedProducer<DeliveryContext>,
    topic: Arc<str>,
}

impl KafkaSink {
    /// Creates the producer; `produced` counts acknowledged records; client errors that
    /// retrying cannot heal go to the run's fatal slot.
    pub fn open(
        cfg: &KafkaSinkConfig,
        (produced, queued): (prometheus::IntCounter, crate::kafka::queued::Queued),
        (role, fatal): (Role, Arc<FatalSlot>),
    ) -> Result<Self, SinkError> {
        let mut client = crate::kafka::client::producer_config(cfg);
        crate::kafka::queued::enable(&mut client);
        let producer = ThreadedProducer::from_config_and_context(
            &client,
            DeliveryContext {
                acknowledged: AtomicU64::new(0),
                produced,
                fatal: (role.client_name(), fatal),
                queued,
            },
        )
        .map_err(|source| SinkError::Kafka {
            topic: cfg.topic.clone(),
            source,
        })?;
        Ok(KafkaSink {
            producer,
            topic: cfg.topic.as_str().into(),
        })
    }

    /// Hands one record to the producer; a record it refuses settles its ticket as
    /// undelivered.
    fn produce(
        &self,
        topic: &str,
        msg: &Message,
        headers: Option<OwnedHeaders>,
        ticket: Arc<Ticket>,
    ) {
        if let Err((ticket, why)) = send(&self.producer, topic, msg, headers, ticket) {
            ticket.settle(Some(why));
        }
    }
}

/// Hands one record to `producer`, waiting while its queue is full. A record the producer
/// refuses outright is handed back with why.
pub(super) fn send<C: ProducerContext>(
    producer: &ThreadedProducer<C>,
    topic: &str,
    msg: &Message,
    headers: Option<OwnedHeaders>,
    opaque: C::DeliveryOpaque,
) -> Result<(), (C::DeliveryOpaque, String)> {
    let mut record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque> =
        BaseRecord::with_opaque_to(topic, opaque);
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
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, r)) => {
                return Err((
                    r.delivery_opaque,
                    format!("cannot produce to `{topic}`: {e}"),
                ))
            }
        }
    }
}

/// The original headers plus why, where and by which plugin version it was rejected.
pub(super) fn dlq_headers(original: &Message, r: &Rejected, lane: &Lane) -> OwnedHeaders {
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
    h
}

impl Sink for KafkaSink {
    fn write(&self, lane: &Lane, records: Vec<Record<'_>>) -> Result<(), SinkError> {
        for r in records {
            match r {
                Record::Output {
                    msg,
                    ticket: Some(t),
                } => {
                    let to = msg.topic.as_deref().unwrap_or(&self.topic);
                    self.produce(to, msg, headers_of(msg), t);
                }
                Record::Reject {
                    original,
                    rejected,
                    ticket: Some(t),
                } => self.produce(
                    &self.topic,
                    original,
                    Some(dlq_headers(original, rejected, lane)),
                    t,
                ),
                _ => unreachable!("records for a Kafka sink carry tickets"),
            }
        }
        Ok(())
    }

    fn acknowledges_later(&self) -> bool {
        true
    }

    fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        self.producer
            .flush(timeout)
            .map_err(|source| SinkError::Unacknowledged {
                topic: self.topic.to_string(),
                records: self.producer.in_flight_count().max(0) as u64,
                source,
            })
    }

    fn delivered(&self) -> u64 {
        self.producer.context().acknowledged.load(Ordering::Relaxed)
    }
}
