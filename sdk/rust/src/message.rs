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
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v").key([0xff, 1]);
    /// assert_eq!(m.borrow().key(), Some(&[0xff, 1][..]));
    /// ```
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The key as UTF-8 text, when it is present and valid UTF-8.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v").key("customer-7");
    /// assert_eq!(m.borrow().key_str(), Some("customer-7"));
    /// assert_eq!(TestMessage::value("v").borrow().key_str(), None); // no key
    /// ```
    pub fn key_str(&self) -> Option<&'a str> {
        self.key.and_then(|k| std::str::from_utf8(k).ok())
    }

    /// The value.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value(vec![0, 159, 146]);
    /// assert_eq!(m.borrow().value().map(<[u8]>::len), Some(3));
    /// ```
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// The value as UTF-8 text, when it is present and valid UTF-8.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// assert_eq!(TestMessage::value(r#"{"id": 1}"#).borrow().value_str(), Some(r#"{"id": 1}"#));
    /// assert_eq!(TestMessage::value(vec![0xff]).borrow().value_str(), None); // not UTF-8
    /// ```
    pub fn value_str(&self) -> Option<&'a str> {
        self.value.and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Milliseconds since the Unix epoch.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v");
    /// let age_ms = m.borrow().timestamp().map(|t| 1_767_225_600_000 - t);
    /// assert_eq!(age_ms, None); // a test message has no timestamp
    /// ```
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The headers in order.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v").header("trace", "a1").header("trace", "b2");
    /// let traces: Vec<_> = m.borrow().headers().filter(|(k, _)| *k == "trace").map(|(_, v)| v).collect();
    /// assert_eq!(traces, [Some(&b"a1"[..]), Some(&b"b2"[..])]);
    /// ```
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
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v").header("source", "web");
    /// assert_eq!(m.borrow().header("source"), Some(Some(&b"web"[..])));
    /// assert_eq!(m.borrow().header("missing"), None);
    /// ```
    pub fn header(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.headers().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The topic the message was read from.
    ///
    /// ```
    /// use weir_sdk::{Message, OutMessage, Outcome};
    ///
    /// /// Sends each message on to `<source topic>.clean`.
    /// fn route(msg: &Message<'_>) -> Outcome {
    ///     let to = format!("{}.clean", msg.source_topic());
    ///     Outcome::map(msg.to_owned().topic(to))
    /// }
    /// # let m = weir_sdk::testing::TestMessage::value("v");
    /// # assert!(matches!(route(&m.borrow()), Outcome::Next(v) if v[0].topic.as_deref() == Some("test.clean")));
    /// ```
    pub fn source_topic(&self) -> &'a str {
        self.topic
    }

    /// The partition the message was read from.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// assert_eq!(TestMessage::value("v").borrow().partition(), 0);
    /// ```
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset the message was read at.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("v").offset(41);
    /// assert_eq!(m.borrow().offset(), 41);
    /// ```
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// An owned copy to modify and emit (key, value, headers and timestamp; no output topic).
    ///
    /// ```
    /// use weir_sdk::{Message, Outcome};
    ///
    /// /// Passes the message on with one more header.
    /// fn tag(msg: &Message<'_>) -> Outcome {
    ///     Outcome::map(msg.to_owned().header("checked", "yes"))
    /// }
    /// # let m = weir_sdk::testing::TestMessage::value("v");
    /// # assert!(matches!(tag(&m.borrow()), Outcome::Next(v) if v[0].headers.len() == 1));
    /// ```
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
    ///
    /// ```
    /// use weir_sdk::{OutMessage, Outcome};
    ///
    /// // A new message (no key, no headers) in place of the input.
    /// let out = Outcome::map(OutMessage::with_value("summary"));
    /// # assert!(matches!(out, Outcome::Next(v) if v[0].value.as_deref() == Some(&b"summary"[..])));
    /// ```
    pub fn with_value(value: impl Into<Vec<u8>>) -> Self {
        OutMessage {
            value: Some(value.into()),
            ..OutMessage::default()
        }
    }

    /// Sets the value.
    ///
    /// ```
    /// use weir_sdk::testing::TestMessage;
    /// let m = TestMessage::value("hello");
    /// let upper = m.borrow().value_str().unwrap().to_uppercase();
    /// let out = m.borrow().to_owned().value(upper);
    /// assert_eq!(out.value.as_deref(), Some(&b"HELLO"[..]));
    /// ```
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets the key.
    ///
    /// ```
    /// use weir_sdk::OutMessage;
    ///
    /// let out = OutMessage::with_value("{}").key("customer-7");
    /// assert_eq!(out.key.as_deref(), Some(&b"customer-7"[..]));
    /// ```
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Routes the message to `topic`.
    ///
    /// ```
    /// // A builder method: copy the input with `to_owned()`, then route the copy.
    /// use weir_sdk::testing::TestMessage;
    ///
    /// let m = TestMessage::value("v");
    /// let out = m.borrow().to_owned().topic("orders.paid");
    /// assert_eq!(out.topic.as_deref(), Some("orders.paid"));
    /// ```
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Appends a header.
    ///
    /// ```
    /// use weir_sdk::OutMessage;
    ///
    /// let out = OutMessage::with_value("v").header("schema", "v2");
    /// assert_eq!(out.headers, [("schema".to_owned(), Some(b"v2".to_vec()))]);
    /// ```
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }
}
