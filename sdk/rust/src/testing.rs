//! Native unit testing of stage functions.
//!
//! ```
//! use weir_sdk::testing::TestMessage;
//! let m = TestMessage::value(r#"{"ok":true}"#).key("k").header("h", "v");
//! assert_eq!(m.borrow().value_str(), Some(r#"{"ok":true}"#));
//! ```

use crate::message::{HeaderView, Message};

/// An owned message to hand to a stage function in a native test.
#[derive(Debug, Clone, Default)]
pub struct TestMessage {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Option<i64>,
    topic: String,
    partition: i32,
    offset: i64,
}

impl TestMessage {
    /// A message with this value.
    pub fn value(value: impl Into<Vec<u8>>) -> Self {
        TestMessage {
            value: Some(value.into()),
            topic: "test".into(),
            ..TestMessage::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Appends a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Sets the source offset.
    pub fn offset(mut self, offset: i64) -> Self {
        self.offset = offset;
        self
    }

    /// The borrowed view a stage function takes.
    pub fn borrow(&self) -> Message<'_> {
        Message {
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: HeaderView::Owned(&self.headers),
            timestamp: self.timestamp,
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
        }
    }
}

/// Empties the in-memory buckets [`crate::state`] uses natively (on this thread), so that
/// each test starts without state.
pub fn reset_state() {
    #[cfg(not(target_arch = "wasm32"))]
    crate::state::native::reset();
}
