//! The host's message: what flows between source, stages and sinks.

use std::borrow::Cow;
use std::sync::Arc;

/// One message header (Kafka allows null values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header name: borrowed for the host's own (`weir.schema.id`, …), so adding one does not
    /// allocate its name.
    pub key: Cow<'static, str>,
    /// Header value: borrowed for values the host makes once and shares (a decoded
    /// record's schema headers), so adding one does not allocate either.
    pub value: Option<Cow<'static, [u8]>>,
}

/// A message as stages see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<Header>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// Output topic set by a stage (routing); `None` means the sink's default.
    pub topic: Option<String>,
}

impl Message {
    /// Bytes of payload: key, value, headers and topic.
    pub fn byte_len(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self.topic.as_ref().map_or(0, String::len)
            + self
                .headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, |v| v.len()))
                .sum::<usize>()
    }

    /// Headers as the packed writers take them.
    pub fn header_pairs(&self) -> impl ExactSizeIterator<Item = (&str, Option<&[u8]>)> {
        self.headers.iter().map(|h| (&*h.key, h.value.as_deref()))
    }
}

/// Where a batch came from: one topic and partition (a lane).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// Source topic (for local sources, the source's name).
    pub topic: Arc<str>,
    /// Source partition.
    pub partition: i32,
    /// The assignment generation the lane was read in (a partition assigned again is a new
    /// lane): a stateful stage writes to the state of this generation only.
    pub generation: u64,
}

/// A message in flight with the source offset it descends from. Everything a stage emits
/// for an input inherits the input's offset, so completion can be tracked per source offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// Source offset of the message this one descends from.
    pub offset: i64,
    /// The message.
    pub msg: Message,
}

/// One partition of a source (a local source has one: its name, partition 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
}

impl PartitionKey {
    /// A key.
    pub fn new(topic: &str, partition: i32) -> Self {
        PartitionKey {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// A message that left the chain for the reject path.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The message as the rejecting stage received it.
    pub env: Envelope,
    /// The stage that rejected it.
    pub stage: Arc<str>,
    /// That stage's plugin version (hash).
    pub plugin: String,
    /// Why.
    pub reason: String,
}
