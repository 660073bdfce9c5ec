//! The packed batch layout of the Weir stage contract (`weir:stage/batch`).
//!
//! The layout is specified in `wit/weir.wit`; this crate is its one implementation, used by the
//! host (which writes batches and reads results) and by the Rust SDK (which reads batches and
//! writes results). Every read is bounds-checked: the host reads what an untrusted guest wrote.
#![deny(missing_docs)]

mod read;
mod write;

pub use read::{BatchReader, Headers, InMessage, OutMessage, OutMessages, ResultReader, Verdict};
pub use write::{BatchWriter, ResultWriter};

/// First word of every batch: "WEIR".
pub const MAGIC: u32 = 0x5745_4952;
/// The layout version this crate reads and writes.
pub const VERSION: u32 = 1;
/// A length that marks an absent key, value, header value or topic.
pub const ABSENT: u32 = u32::MAX;
/// A timestamp that marks "no timestamp".
pub const NO_TIMESTAMP: i64 = i64::MIN;

/// Verdict byte: the input continues unchanged.
pub const KEEP: u8 = 0;
/// Verdict byte: the input is replaced by zero or more messages.
pub const NEXT: u8 = 1;
/// Verdict byte: the input goes to the reject path.
pub const REJECT: u8 = 2;
/// Verdict byte: the pipeline stops.
pub const FAIL: u8 = 3;

/// Bytes that do not follow the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbiError(pub &'static str);

impl std::fmt::Display for AbiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed packed batch: {}", self.0)
    }
}

impl std::error::Error for AbiError {}

#[cfg(test)]
mod tests;
