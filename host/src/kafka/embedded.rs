//! An embedded Kafka-protocol broker: librdkafka's mock cluster, listening on loopback TCP.
//! For the quickstart (`weir run --embedded-broker`), development (`weir broker`) and tests.
//! Data lives in memory and is gone when the process ends; retention is about 5 MB per
//! partition.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::path::Path;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::record::{headers_of, message_of};
use crate::message::Message;

/// A running mock cluster.
pub struct EmbeddedBroker {
    cluster: *mut rdkafka_sys::rd_kafka_mock_cluster_t,
    /// The client whose handle owns the cluster (kept alive as long as the cluster).
    _owner: BaseProducer<DefaultProducerContext>,
    bootstrap: String,
}

/// The embedded broker failed.
#[derive(Debug, thiserror::Error)]
#[error("embedded broker: {0}")]
pub struct BrokerError(String);

fn err(e: impl std::fmt::Display) -> BrokerError {
    BrokerError(e.to_string())
}

impl EmbeddedBroker {
    /// Starts a cluster of `brokers` brokers on loopback ports.
    pub fn start(brokers: i32) -> Result<Self, BrokerError> {
        let owner: BaseProducer<DefaultProducerContext> = ClientConfig::new()
            .set("log_level", "3")
            .create()
            .map_err(err)?;
        // SAFETY: the handle is a live producer; the cluster it returns is destroyed in
        // `Drop` before the producer is.
        let cluster =
            unsafe { rdkafka_sys::rd_kafka_mock_cluster_new(owner.client().native_ptr(), brokers) };
        if cluster.is_null() {
            return Err(err("the mock cluster could not start"));
        }
        // SAFETY: `cluster` is live; the returned string is owned by it and copied at once.
        let bootstrap = unsafe {
            // The first join waits 3 s by default; rebalances should not wait in a test broker.
            rdkafka_sys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 100);
            CStr::from_ptr(rdkafka_sys::rd_kafka_mock_cluster_bootstraps(cluster))
                .to_string_lossy()
                .into_owned()
        };
        Ok(EmbeddedBroker {
            cluster,
            _owner: owner,
            bootstrap,
        })
    }

    /// The `bootstrap.servers` to connect to.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Creates a topic.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), BrokerError> {
        let name = CString::new(topic).map_err(err)?;
        // SAFETY: `cluster` is live and `name` outlives the call.
        let code = unsafe {
            rdkafka_sys::rd_kafka_mock_topic_create(self.cluster, name.as_ptr(), partitions, 1)
        };
        check(code, &format!("creating topic `{topic}`"))
    }

    /// Takes broker `id` (1-based) down or brings it back up.
    pub fn set_broker_up(&self, id: i32, up: bool) -> Result<(), BrokerError> {
        // SAFETY: `cluster` is live.
        let code = unsafe {
            if up {
                rdkafka_sys::rd_kafka_mock_broker_set_up(self.cluster, id)
            } else {
                rdkafka_sys::rd_kafka_mock_broker_set_down(self.cluster, id)
            }
        };
        check(code, "changing broker state")
    }

    /// Makes the broker refuse a topic in its metadata with `error` (`NONE` clears it): what
    /// a cluster's ACL does to a client that may not describe the topic.
    pub fn refuse_topic(&self, topic: &str, error: &str) -> Result<(), BrokerError> {
        let name = CString::new(topic).map_err(err)?;
        let code = error_code(error)?;
        // SAFETY: `cluster` is live and `name` outlives the call.
        unsafe { rdkafka_sys::rd_kafka_mock_topic_set_error(self.cluster, name.as_ptr(), code) };
        Ok(())
    }

    /// Makes the broker answer the next `count` requests of `api` (`Fetch`, `OffsetFetch`,
    /// `InitProducerId`, …) with `error`, whoever sends them.
    pub fn refuse_requests(&self, api: &str, error: &str, count: usize) -> Result<(), BrokerError> {
        let key = api_key(api)?;
        let codes = vec![error_code(error)?; count];
        // SAFETY: `cluster` is live; `codes` holds `count` errors and outlives the call.
        unsafe {
            rdkafka_sys::rd_kafka_mock_push_request_errors_array(
                self.cluster,
                key,
                count,
                codes.as_ptr(),
            )
        };
        Ok(())
    }

    /// Produces every message of a JSONL file (docs/messages.md) to `topic`; a message's
    /// own `topic` field is ignored. Returns how many were produced.
    pub fn seed_jsonl(&self, topic: &str, path: &Path) -> Result<u64, BrokerError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("linger.ms", "1")
            .create()
            .map_err(err)?;
        let mut n = 0;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let msg = crate::jsonl::parse_line(line)
                .map_err(|e| err(format!("{}:{}: {e}", path.display(), i + 1)))?;
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
            if let Some(k) = msg.key.as_deref() {
                rec = rec.key(k);
            }
            if let Some(v) = msg.value.as_deref() {
                rec = rec.payload(v);
            }
            if let Some(ts) = msg.timestamp {
                rec = rec.timestamp(ts);
            }
            if let Some(h) = headers_of(&msg) {
                rec = rec.headers(h);
            }
            loop {
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        rec = r;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
            n += 1;
        }
        producer.flush(Duration::from_secs(30)).map_err(err)?;
        Ok(n)
    }

    /// Every message of `topic`, partition by partition, in offset order.
    pub fn read_topic(&self, topic: &str) -> Result<Vec<(i32, i64, Message)>, BrokerError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", "weir-embedded-reader")
            .set("enable.auto.commit", "false")
            .create()
            .map_err(err)?;
        let meta = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map_err(err)?;
        let mut tpl = TopicPartitionList::new();
        // The last offset to read, per partition.
        let mut ends = std::collections::HashMap::new();
        for t in meta.topics() {
            for p in t.partitions() {
                let (lo, hi) = consumer
                    .fetch_watermarks(topic, p.id(), Duration::from_secs(5))
                    .map_err(err)?;
                if hi > lo {
                    tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                        .map_err(err)?;
                    ends.insert(p.id(), hi - 1);
                }
            }
        }
        let mut out = Vec::new();
        if ends.is_empty() {
            return Ok(out);
        }
        consumer.assign(&tpl).map_err(err)?;
        drop(tpl);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ends.is_empty() && std::time::Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    if ends.get(&m.partition()).is_some_and(|&e| m.offset() >= e) {
                        ends.remove(&m.partition());
                    }
                    out.push((m.partition(), m.offset(), message_of(&m)));
                }
                Some(Err(e)) => return Err(err(e)),
                None => {}
            }
        }
        out.sort_by_key(|(p, o, _)| (*p, *o));
        Ok(out)
    }

    /// Topic names in the cluster.
    pub fn topics(&self) -> Result<Vec<String>, BrokerError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(err)?;
        let meta = consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .map_err(err)?;
        Ok(meta.topics().iter().map(|t| t.name().to_owned()).collect())
    }
}

/// The refusals `weir broker` can stage (the errors an ACL or a missing topic gives).
fn error_code(name: &str) -> Result<rdkafka_sys::rd_kafka_resp_err_t, BrokerError> {
    use rdkafka_sys::rd_kafka_resp_err_t as E;
    Ok(match name {
        "NONE" => E::RD_KAFKA_RESP_ERR_NO_ERROR,
        "TOPIC_AUTHORIZATION_FAILED" => E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        "GROUP_AUTHORIZATION_FAILED" => E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
        "CLUSTER_AUTHORIZATION_FAILED" => E::RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" => {
            E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        }
        "UNKNOWN_TOPIC_OR_PART" => E::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        "SASL_AUTHENTICATION_FAILED" => E::RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED,
        other => {
            return Err(err(format!(
                "unknown error `{other}` (NONE, TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PART, SASL_AUTHENTICATION_FAILED)"
            )))
        }
    })
}

/// Kafka API keys by name, for [`EmbeddedBroker::refuse_requests`].
fn api_key(name: &str) -> Result<i16, BrokerError> {
    Ok(match name {
        "Produce" => 0,
        "Fetch" => 1,
        "ListOffsets" => 2,
        "Metadata" => 3,
        "OffsetCommit" => 8,
        "OffsetFetch" => 9,
        "FindCoordinator" => 10,
        "JoinGroup" => 11,
        "InitProducerId" => 22,
        other => {
            return Err(err(format!(
                "unknown API `{other}` (Produce, Fetch, ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, InitProducerId)"
            )))
        }
    })
}

fn check(code: rdkafka_sys::rd_kafka_resp_err_t, what: &str) -> Result<(), BrokerError> {
    if code == rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(err(format!(
            "{what}: {}",
            rdkafka_sys::RDKafkaErrorCode::from(code)
        )))
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        // SAFETY: created in `start`, destroyed once, before its owning handle.
        unsafe { rdkafka_sys::rd_kafka_mock_cluster_destroy(self.cluster) };
    }
}
