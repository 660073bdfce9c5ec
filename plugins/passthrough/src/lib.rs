//! Passes every message on unchanged (the cheapest possible stage).
use weir_sdk::{Message, Outcome};

/// Keeps every message.
#[weir_sdk::stage]
pub fn passthrough(_msg: &Message<'_>) -> Outcome {
    Outcome::Keep
}
