//! Asynchronous offset commits whose results come back.
//!
//! rdkafka's `commit(Async)` reports nothing back unless a C `offset_commit_cb` is set, so
//! the controller commits through `rd_kafka_commit_queue` with a queue of its own and serves
//! that queue in its loop: every commit is confirmed (or its failure counted) without
//! blocking the poll loop.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::TopicPartitionList;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

use crate::metrics::Metrics;

/// Offsets the broker confirmed, per `topic/partition` (never moving backwards).
pub struct Confirmations {
    map: Mutex<BTreeMap<String, i64>>,
    metrics: Arc<Metrics>,
}

impl Confirmations {
    /// An empty set.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Confirmations {
            map: Mutex::new(BTreeMap::new()),
            metrics,
        })
    }

    /// Records a confirmed commit.
    pub fn confirm(&self, topic: &str, partition: i32, offset: i64) {
        self.metrics
            .committed_offset
            .with_label_values(&[topic, &partition.to_string()])
            .set(offset);
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let v = m.entry(format!("{topic}/{partition}")).or_insert(offset);
        *v = (*v).max(offset);
    }

    /// The confirmed commit of one partition.
    pub fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        let m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&format!("{topic}/{partition}")).copied()
    }

    /// Everything confirmed so far.
    pub fn snapshot(&self) -> BTreeMap<String, i64> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A commit result queue bound to one consumer handle.
pub struct CommitQueue {
    rk: *mut rdkafka_sys::rd_kafka_t,
    queue: *mut rdkafka_sys::rd_kafka_queue_t,
    sink: *const Confirmations,
}

// SAFETY: librdkafka handles and queues may be used from any thread; the queue is only used by
// the thread that owns the source.
unsafe impl Send for CommitQueue {}

impl CommitQueue {
    /// A queue on `consumer`. The queue must be dropped before the consumer.
    pub fn new<C: rdkafka::consumer::ConsumerContext>(
        consumer: &rdkafka::consumer::BaseConsumer<C>,
        sink: Arc<Confirmations>,
    ) -> Self {
        let rk = rdkafka::consumer::Consumer::client(consumer).native_ptr();
        // SAFETY: `rk` is the live consumer's handle (the caller keeps the consumer alive
        // longer than this queue).
        let queue = unsafe { rdkafka_sys::rd_kafka_queue_new(rk) };
        CommitQueue {
            rk,
            queue,
            sink: Arc::into_raw(sink),
        }
    }

    /// Starts an asynchronous commit; its result arrives through [`CommitQueue::serve`].
    pub fn commit(&self, offsets: &TopicPartitionList) -> KafkaResult<()> {
        // SAFETY: handle and queue are live; librdkafka copies `offsets`; the callback's
        // opaque points at `sink`, alive until this queue is dropped after a final serve.
        let err = unsafe {
            rdkafka_sys::rd_kafka_commit_queue(
                self.rk,
                offsets.ptr(),
                self.queue,
                Some(on_commit),
                self.sink as *mut c_void,
            )
        };
        if err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
            Ok(())
        } else {
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::from(err)))
        }
    }

    /// Runs the callbacks of commits that finished (waiting up to `timeout_ms`).
    pub fn serve(&self, timeout_ms: i32) {
        // SAFETY: the queue is live.
        unsafe { rdkafka_sys::rd_kafka_queue_poll_callback(self.queue, timeout_ms) };
    }
}

impl Drop for CommitQueue {
    fn drop(&mut self) {
        self.serve(100);
        // SAFETY: created in `new`, destroyed once; `sink` came from `Arc::into_raw`.
        unsafe {
            rdkafka_sys::rd_kafka_queue_destroy(self.queue);
            drop(Arc::from_raw(self.sink));
        }
    }
}

/// librdkafka's commit result callback, run inside [`CommitQueue::serve`].
unsafe extern "C" fn on_commit(
    _rk: *mut rdkafka_sys::rd_kafka_t,
    err: Err,
    offsets: *mut rdkafka_sys::rd_kafka_topic_partition_list_t,
    opaque: *mut c_void,
) {
    // SAFETY: `opaque` is the `sink` of a live CommitQueue (see `commit`).
    let sink = unsafe { &*(opaque as *const Confirmations) };
    if err == Err::RD_KAFKA_RESP_ERR__NO_OFFSET {
        return;
    }
    let failed = err != Err::RD_KAFKA_RESP_ERR_NO_ERROR;
    sink.metrics
        .commits
        .with_label_values(&[if failed { "error" } else { "ok" }])
        .inc();
    let mut refused = Vec::new();
    if !offsets.is_null() {
        // SAFETY: librdkafka hands a valid list for the duration of the callback.
        let list = unsafe { &*offsets };
        for i in 0..list.cnt.max(0) as usize {
            // SAFETY: `elems` holds `cnt` initialized elements.
            let e = unsafe { &*list.elems.add(i) };
            if e.topic.is_null() {
                continue;
            }
            // SAFETY: a non-null topic is a NUL-terminated string owned by the list.
            let topic = unsafe { CStr::from_ptr(e.topic) }.to_string_lossy();
            if failed || e.err != Err::RD_KAFKA_RESP_ERR_NO_ERROR || e.offset < 0 {
                refused.push(format!("{topic}/{}@{}", e.partition, e.offset));
            } else {
                sink.confirm(&topic, e.partition, e.offset);
            }
        }
    }
    if failed || !refused.is_empty() {
        tracing::warn!(
            partitions = %refused.join(","),
            "offset commit failed: {} (retried at the next tick)",
            RDKafkaErrorCode::from(err)
        );
    }
}
