//! The consumer group's metadata, from the source to the transactions that send offsets.

use std::sync::{Arc, Mutex};

use rdkafka::consumer::ConsumerGroupMetadata;

/// The consumer's group metadata (member id, generation), as the source last saw it; the
/// source sets it at every rebalance, transactions send it with their offsets.
#[derive(Default)]
pub struct GroupSlot(Mutex<Option<Arc<ConsumerGroupMetadata>>>);

impl GroupSlot {
    /// Replaces the metadata.
    pub fn set(&self, m: Option<ConsumerGroupMetadata>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = m.map(Arc::new);
    }

    /// The metadata, once the consumer has joined.
    pub fn get(&self) -> Option<Arc<ConsumerGroupMetadata>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
