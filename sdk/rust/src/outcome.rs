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
    pub fn drop() -> Self {
        Outcome::Next(Vec::new())
    }

    /// Replaces the input by one message.
    pub fn map(msg: OutMessage) -> Self {
        Outcome::Next(vec![msg])
    }

    /// Rejects the input.
    pub fn reject(reason: impl Into<String>) -> Self {
        Outcome::Reject(reason.into())
    }

    /// Stops the pipeline.
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
