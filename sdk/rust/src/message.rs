//! Messages: the borrowed input a stage reads and the owned output it emits.

/// Where a message's headers live: in the packed batch or in owned storage.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HeaderView<'a> {
    /// Only the wasm32 glue reads packed batches.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Packed(weir_abi::Headers<'a>),
    Owned(&'a [(String, Option<Vec<u8>>)]),
}

/// One input message, borrowed from the host's batch: reading it copies nothing.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) headers: HeaderView<'a>,
    pub(crate) timestamp: Option<i64>,
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl<'a> Message<'a> {
    /// The key.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The key as UTF-8 text, when it is present and valid UTF-8.
    pub fn key_str(&self) -> Option<&'a str> {
        self.key.and_then(|k| std::str::from_utf8(k).ok())
    }

    /// The value.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// The value as UTF-8 text, when it is present and valid UTF-8.
    pub fn value_str(&self) -> Option<&'a str> {
        self.value.and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The headers in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let (packed, owned) = match self.headers {
            HeaderView::Packed(h) => (Some(h.iter()), None),
            HeaderView::Owned(h) => (
                None,
                Some(h.iter().map(|(k, v)| (k.as_str(), v.as_deref()))),
            ),
        };
        packed
            .into_iter()
            .flatten()
            .chain(owned.into_iter().flatten())
    }

    /// The value of the first header named `name` (`Some(None)` for a null header value).
    pub fn header(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.headers().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The topic the message was read from.
    pub fn source_topic(&self) -> &'a str {
        self.topic
    }

    /// The partition the message was read from.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset the message was read at.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// An owned copy to modify and emit (key, value, headers and timestamp; no output topic).
    pub fn to_owned(&self) -> OutMessage {
        OutMessage {
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self
                .headers()
                .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
                .collect(),
            timestamp: self.timestamp,
            topic: None,
        }
    }
}

/// A message a stage emits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutMessage {
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// The headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// Output topic; `None` sends it to the sink's configured topic.
    pub topic: Option<String>,
}

impl OutMessage {
    /// A message with this value and nothing else.
    pub fn with_value(value: impl Into<Vec<u8>>) -> Self {
        OutMessage {
            value: Some(value.into()),
            ..OutMessage::default()
        }
    }

    /// Sets the value.
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Routes the message to `topic`.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Appends a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }
}
