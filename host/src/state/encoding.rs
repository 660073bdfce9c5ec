//! How the store and the changelog hold a value: the write's time, then the stage's bytes.

use std::sync::Arc;

/// An encoded value ([`encode`]) shared by the write's log entry, the partition's map of
/// latest values and its changelog record: made once, never copied between them.
pub type Encoded = Arc<[u8]>;

/// [`encode`] into a shared value (one allocation: a short value is put together on the
/// stack first, then copied once into the `Arc`).
pub fn encode_shared(at_ms: i64, value: &[u8]) -> Encoded {
    let mut on_stack = [0u8; 256];
    match on_stack.get_mut(..8 + value.len()) {
        Some(buf) => {
            buf[..8].copy_from_slice(&at_ms.to_le_bytes());
            buf[8..].copy_from_slice(value);
            Encoded::from(&*buf)
        }
        None => encode(at_ms, value).into(),
    }
}

/// A value as the store and the changelog hold it: the write's time (ms since the epoch,
/// 8 bytes little-endian), then the stage's bytes.
pub fn encode(at_ms: i64, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + value.len());
    v.extend_from_slice(&at_ms.to_le_bytes());
    v.extend_from_slice(value);
    v
}

/// The write time and the stage's bytes of an encoded value (a short value: time 0, as is).
pub fn decode(stored: &[u8]) -> (i64, &[u8]) {
    match stored.split_first_chunk::<8>() {
        Some((t, rest)) => (i64::from_le_bytes(*t), rest),
        None => (0, stored),
    }
}
