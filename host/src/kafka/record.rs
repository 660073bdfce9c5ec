//! Between librdkafka's records and Weir's messages.

use rdkafka::message::{BorrowedMessage, Header as KHeader, Headers, Message as _, OwnedHeaders};

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
