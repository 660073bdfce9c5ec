//! The Kafka parts of the pipeline YAML: source, sink, reject topic.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::ByteSize;

/// A Kafka source: one consumer group member reading one or more topics.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSource {
    /// Bootstrap servers (`host:port,host:port`).
    pub brokers: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// Consumer group id. Several `weir` processes with the same group share the partitions.
    pub group: String,
    /// Where a partition without a committed offset starts: `earliest` or `latest`.
    #[serde(default)]
    pub start: StartFrom,
    /// Partition assignment: `cooperative` (incremental, cooperative-sticky) or `eager` (range).
    #[serde(default)]
    pub assignor: Assignor,
    /// Stop once every assigned partition is fully handled up to the end it had when it was
    /// assigned (drain a topic and exit; used by the quickstart, the benchmarks and `weir
    /// replay`). The ends of all partitions are read in one request per assignment.
    #[serde(default)]
    pub stop_at_end: bool,
    /// How often handled offsets are committed.
    #[serde(default = "default_commit_interval", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub commit_interval: Duration,
    /// With `delivery: exactly-once`, a partition's transaction also commits once the input
    /// it holds reaches this many bytes (besides every `commit_interval`).
    #[serde(default = "default_transaction_max_bytes")]
    pub transaction_max_bytes: ByteSize,
    /// Longest a rebalance waits for revoked partitions' in-flight messages before it
    /// commits what is done and lets them go.
    #[serde(default = "default_revoke_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub revoke_timeout: Duration,
    /// Any librdkafka consumer property (`session.timeout.ms`, `security.protocol`, …). These
    /// win over the values Weir sets, except `enable.auto.commit` and
    /// `enable.auto.offset.store`, which Weir owns.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub properties: BTreeMap<String, serde_yaml::Value>,
}

fn default_commit_interval() -> Duration {
    Duration::from_millis(500)
}
fn default_transaction_max_bytes() -> ByteSize {
    ByteSize(16 << 20)
}
fn default_revoke_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Where a partition without a committed offset starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The oldest retained message.
    #[default]
    Earliest,
    /// Only messages produced after the group first joins.
    Latest,
}

/// The consumer group's partition assignment protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Assignor {
    /// Cooperative-sticky: only moved partitions are revoked.
    #[default]
    Cooperative,
    /// Range, eager: every rebalance revokes everything first.
    Eager,
}

/// A Kafka sink: messages are produced to `topic`, or to the topic a stage set.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSink {
    /// Bootstrap servers (`host:port,host:port`).
    pub brokers: String,
    /// Default output topic (a stage may route a message elsewhere).
    pub topic: String,
    /// Any librdkafka producer property (`compression.type`, `linger.ms`, …). `acks` is
    /// always `all` and idempotence on: a message counts as done only when the broker has it.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub properties: BTreeMap<String, serde_yaml::Value>,
}

/// A YAML scalar as the text librdkafka takes.
pub fn property_text(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Null => String::new(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
