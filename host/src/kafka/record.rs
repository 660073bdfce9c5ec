//! Between librdkafka's records and Weir's messages.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header as KHeader, Headers, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ProducerContext, ThreadedProducer};

use crate::message::{Header, Message};

/// A consumed record as the chain sees it (no output topic set).
pub fn message_of(m: &BorrowedMessage<'_>) -> Message {
    Message {
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers: m.headers().map_or_else(Vec::new, |hs| {
            hs.iter()
                .map(|h| Header {
                    key: h.key.to_owned().into(),
                    value: h.value.map(|v| v.to_vec().into()),
                })
                .collect()
        }),
        timestamp: m.timestamp().to_millis(),
        topic: None,
    }
}

/// A message's headers for a produced record (`None` when it has none).
pub fn headers_of(msg: &Message) -> Option<OwnedHeaders> {
    if msg.headers.is_empty() {
        return None;
    }
    let mut h = OwnedHeaders::new_with_capacity(msg.headers.len());
    for x in &msg.headers {
        h = h.insert(KHeader {
            key: &x.key,
            value: x.value.as_deref(),
        });
    }
    Some(h)
}

/// Sends one keyed record (a state changelog's: a tombstone when `value` is none) to
/// `partition` of `topic`, waiting while the producer's queue is full.
pub fn send_keyed<C: ProducerContext>(
    producer: &ThreadedProducer<C>,
    topic: &str,
    partition: i32,
    key: &[u8],
    value: Option<&[u8]>,
    opaque: C::DeliveryOpaque,
) -> Result<(), String> {
    let mut record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque> =
        BaseRecord::with_opaque_to(topic, opaque)
            .partition(partition)
            .key(key);
    if let Some(v) = value {
        record = record.payload(v);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(format!("cannot produce to `{topic}`: {e}")),
        }
    }
}
