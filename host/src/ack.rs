//! Acknowledgements: the records one source offset became carry a [`Ticket`]; when the last
//! of them is durable (or lost) the ticket reports a [`Completion`] to the runtime, which
//! moves the partition's watermark. Sinks and changelogs settle tickets; neither knows the
//! runtime.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

use crate::message::PartitionKey;

/// One or more source offsets of one lane are settled.
#[derive(Debug)]
pub struct Completion {
    /// The partition.
    pub key: PartitionKey,
    /// The assignment generation the messages were read in.
    pub generation: u64,
    /// The source offsets.
    pub offsets: Vec<i64>,
    /// How they were settled.
    pub outcome: Settled,
}

/// How a source offset was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Fully handled: every record it became is durable (or it became none).
    Done,
    /// A stage failed on it: the pipeline stops and never commits past it.
    Failed,
    /// A record it became could not be delivered: the pipeline stops, never past it.
    Undelivered(String),
}

/// The records one source offset became; when the last is acknowledged the offset is settled.
pub struct Ticket {
    key: PartitionKey,
    generation: u64,
    offset: i64,
    remaining: AtomicU32,
    error: Mutex<Option<String>>,
    done: Sender<Completion>,
}

impl Ticket {
    /// A ticket for `records` records of `offset`, reporting to `done`.
    pub fn new(
        key: PartitionKey,
        generation: u64,
        offset: i64,
        records: u32,
        done: Sender<Completion>,
    ) -> Arc<Self> {
        Arc::new(Ticket {
            key,
            generation,
            offset,
            remaining: AtomicU32::new(records),
            error: Mutex::new(None),
            done,
        })
    }

    /// One record is acknowledged (`None`) or lost (`Some(why)`).
    pub fn settle(&self, error: Option<String>) {
        if let Some(e) = error {
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let err = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
            let _ = self.done.send(Completion {
                key: self.key.clone(),
                generation: self.generation,
                offsets: vec![self.offset],
                outcome: err.map_or(Settled::Done, Settled::Undelivered),
            });
        }
    }
}
