//! What a stage answers for one message.

use crate::OutMessage;

/// What becomes of one input message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The input continues unchanged. The cheapest answer: nothing is copied back to the host.
    Keep,
    /// These messages continue instead: none filters the input out, one maps it, many flat-map it.
    Next(Vec<OutMessage>),
    /// The input leaves the chain for the reject path (dead-letter queue) with this reason.
    Reject(String),
    /// The pipeline stops with this reason; nothing at or after this message is committed.
    Fail(String),
}

impl Outcome {
    /// Filters the input out.
    ///
    /// ```
    /// use weir_sdk::{Message, Outcome};
    ///
    /// fn only_valued(msg: &Message<'_>) -> Outcome {
    ///     if msg.value().is_some() { Outcome::Keep } else { Outcome::drop() }
    /// }
    /// # assert_eq!(only_valued(&weir_sdk::testing::TestMessage::value("v").borrow()), Outcome::Keep);
    /// ```
    pub fn drop() -> Self {
        Outcome::Next(Vec::new())
    }

    /// Replaces the input by one message.
    ///
    /// ```
    /// use weir_sdk::{Message, Outcome};
    ///
    /// fn trim(msg: &Message<'_>) -> Outcome {
    ///     let text = msg.value_str().unwrap_or_default().trim().to_owned();
    ///     Outcome::map(msg.to_owned().value(text))
    /// }
    /// # assert!(matches!(trim(&weir_sdk::testing::TestMessage::value(" x ").borrow()), Outcome::Next(v) if v[0].value.as_deref() == Some(&b"x"[..])));
    /// ```
    pub fn map(msg: OutMessage) -> Self {
        Outcome::Next(vec![msg])
    }

    /// Rejects the input.
    ///
    /// ```
    /// use weir_sdk::{Message, Outcome};
    ///
    /// // The reason travels with the message to the reject path (dead-letter queue).
    /// fn require_text(msg: &Message<'_>) -> Outcome {
    ///     match msg.value_str() {
    ///         Some(_) => Outcome::Keep,
    ///         None => Outcome::reject("value is not UTF-8 text"),
    ///     }
    /// }
    /// # assert_eq!(require_text(&weir_sdk::testing::TestMessage::value(vec![0xff]).borrow()), Outcome::reject("value is not UTF-8 text"));
    /// ```
    pub fn reject(reason: impl Into<String>) -> Self {
        Outcome::Reject(reason.into())
    }

    /// Stops the pipeline.
    ///
    /// ```
    /// use weir_sdk::{Message, Outcome};
    ///
    /// // For what no retry or reject can fix: the pipeline stops and nothing from here on is committed.
    /// fn guard(msg: &Message<'_>) -> Outcome {
    ///     if msg.header("schema") == Some(Some(&b"v9"[..])) {
    ///         return Outcome::fail("schema v9 is not supported by this stage: deploy a newer one");
    ///     }
    ///     Outcome::Keep
    /// }
    /// # assert_eq!(guard(&weir_sdk::testing::TestMessage::value("v").borrow()), Outcome::Keep);
    /// ```
    pub fn fail(reason: impl Into<String>) -> Self {
        Outcome::Fail(reason.into())
    }
}

impl From<bool> for Outcome {
    /// `true` keeps the message, `false` filters it out.
    fn from(keep: bool) -> Self {
        if keep {
            Outcome::Keep
        } else {
            Outcome::drop()
        }
    }
}
