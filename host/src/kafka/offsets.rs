//! Offsets as the broker answers them (committed offsets, ends, offsets for times).

use std::collections::HashMap;

use rdkafka::{Offset, TopicPartitionList};

use crate::message::PartitionKey;

/// The offsets in a list returned by the broker, per partition (unset ones and those with an
/// error left out).
pub fn of(tpl: Option<&TopicPartitionList>) -> HashMap<PartitionKey, i64> {
    tpl.map(|t| {
        t.elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if e.error().is_ok() => {
                    Some((PartitionKey::new(e.topic(), e.partition()), o))
                }
                _ => None,
            })
            .collect()
    })
    .unwrap_or_default()
}
