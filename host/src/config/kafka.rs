//! The Kafka parts of the pipeline YAML: source, sink, reject topic.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::security::Security;
use super::ByteSize;

/// A Kafka source: one consumer group member reading one or more topics.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSource {
    /// Bootstrap servers (`host:port,host:port`).
    pub brokers: String,
    /// Topics to subscribe to. A name starting with `^` is a regular expression: every topic
    /// it matches is read, and topics created later join at the next metadata refresh
    /// (librdkafka's `topic.metadata.refresh.interval.ms`, 5 minutes by default).
    pub topics: Vec<String>,
    /// Consumer group id. Several `weir` processes with the same group share the partitions.
    pub group: String,
    /// Where a partition without a committed offset starts: `earliest`, `latest`, a time
    /// (`"2026-12-01T00:00:00Z"`), a time ago (`"-1h"`), or an offset (`"+1000"`: offset 1000
    /// of each partition, or its end if it holds fewer).
    #[serde(default)]
    #[schemars(with = "String")]
    pub start: StartFrom,
    /// How this client connects (TLS, SASL). Default: the pipeline's `security` block.
    #[serde(default)]
    pub security: Option<Box<Security>>,
    /// Partition assignment: `cooperative` (incremental, cooperative-sticky) or `eager` (range).
    /// Under `group_protocol: consumer` the broker assigns (incrementally): `eager` is refused.
    #[serde(default)]
    pub assignor: Assignor,
    /// The consumer group protocol: `classic` (the members agree on an assignment at each
    /// rebalance) or `consumer` (KIP-848, Kafka 4 and later: the broker assigns, each member
    /// moves only the partitions that move, no group-wide pause). Under `consumer` the session
    /// and heartbeat times are the broker's (`group.consumer.session.timeout.ms`, …), so the
    /// properties `session.timeout.ms`, `heartbeat.interval.ms`,
    /// `partition.assignment.strategy` and `group.protocol.type` are refused.
    #[serde(default)]
    pub group_protocol: GroupProtocol,
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
    /// The group watch: a partition of the topics whose group's committed offset has not moved
    /// for this long while input waits (no member owns it, or its owner makes no progress)
    /// counts in `weir_kafka_partitions_stalled` and is logged. Every member watches the whole
    /// group, with a client of its own that does not join it. Default: two sessions
    /// (`session.timeout.ms`, else 45 s). `0s` turns the watch off.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub stalled_after: Option<Duration>,
    /// Any librdkafka consumer property (`session.timeout.ms`, `security.protocol`, …). These
    /// win over the values Weir sets, except `enable.auto.commit` and
    /// `enable.auto.offset.store`, which Weir owns.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub properties: BTreeMap<String, serde_yaml::Value>,
    /// Values in the schema registry's wire format (Avro) become JSON text before the first
    /// stage, with the schema in the `weir.schema.*` headers (docs/schema-registry.md).
    #[serde(default)]
    pub decode: Option<Box<super::schema::Decode>>,
    /// The same for keys.
    #[serde(default)]
    pub decode_key: Option<Box<super::schema::Decode>>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum StartFrom {
    /// The oldest retained message.
    #[default]
    Earliest,
    /// Only messages produced after the group first joins.
    Latest,
    /// The first message at or after this time (milliseconds since the Unix epoch).
    Time(i64),
    /// The first message at or after this long before the run started.
    Ago(Duration),
    /// This offset of each partition (its end if it holds fewer).
    Offset(i64),
}

impl TryFrom<String> for StartFrom {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        StartFrom::parse(&s)
    }
}

impl StartFrom {
    /// `earliest`, `latest`, an RFC 3339 time, `-DURATION` or `+OFFSET`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = |why: String| {
            format!(
                "`{s}`: {why} (use `earliest`, `latest`, a time such as `2026-12-01T00:00:00Z`, \
                 a time ago such as `-1h`, or an offset such as `+1000`)"
            )
        };
        match s {
            "earliest" | "beginning" => return Ok(StartFrom::Earliest),
            "latest" | "end" => return Ok(StartFrom::Latest),
            _ => {}
        }
        if let Some(n) = s.strip_prefix('+') {
            return n
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .map(StartFrom::Offset)
                .ok_or_else(|| bad("not an offset".into()));
        }
        if let Some(d) = s.strip_prefix('-') {
            return humantime::parse_duration(d)
                .map(StartFrom::Ago)
                .map_err(|e| bad(e.to_string()));
        }
        humantime::parse_rfc3339_weak(s)
            .map_err(|e| bad(e.to_string()))
            .and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| StartFrom::Time(d.as_millis() as i64))
                    .map_err(|_| bad("before 1970".into()))
            })
    }

    /// The time to look up, in milliseconds since the epoch (for `Time` and `Ago`).
    pub fn timestamp_ms(&self, now: std::time::SystemTime) -> Option<i64> {
        match self {
            StartFrom::Time(t) => Some(*t),
            StartFrom::Ago(d) => Some(
                now.checked_sub(*d)
                    .unwrap_or(std::time::UNIX_EPOCH)
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as i64,
            ),
            _ => None,
        }
    }

    /// Whether the start needs a look-up per partition (a time or an offset).
    pub fn is_positional(&self) -> bool {
        matches!(
            self,
            StartFrom::Time(_) | StartFrom::Ago(_) | StartFrom::Offset(_)
        )
    }
}

/// Whether a `topics` entry is a regular expression (librdkafka's convention: a leading `^`).
pub fn is_pattern(topic: &str) -> bool {
    topic.starts_with('^')
}

/// Whether one of `patterns` (a subscription's) matches `topic`; internal topics (`__…`) never.
pub fn pattern_matches(patterns: &[regex_lite::Regex], topic: &str) -> bool {
    !topic.starts_with("__") && patterns.iter().any(|p| p.is_match(topic))
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

/// The consumer group protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// The classic protocol: a join and sync round at every rebalance, the assignor run by
    /// the group's leader.
    #[default]
    Classic,
    /// KIP-848's protocol (`group.protocol=consumer`): heartbeats carry the assignment, the
    /// broker computes it, and a rebalance moves only what moves.
    Consumer,
}

impl GroupProtocol {
    /// The consumer properties this protocol does not take (the broker owns them).
    pub fn refused_properties(self) -> &'static [&'static str] {
        match self {
            GroupProtocol::Classic => &[],
            GroupProtocol::Consumer => &[
                "session.timeout.ms",
                "heartbeat.interval.ms",
                "partition.assignment.strategy",
                "group.protocol.type",
            ],
        }
    }
}

/// A Kafka sink: messages are produced to `topic`, or to the topic a stage set.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSink {
    /// Bootstrap servers (`host:port,host:port`).
    pub brokers: String,
    /// Default output topic (a stage may route a message elsewhere).
    pub topic: String,
    /// How this client connects (TLS, SASL). Default: the pipeline's `security` block.
    #[serde(default)]
    pub security: Option<Box<Security>>,
    /// Any librdkafka producer property (`compression.type`, `linger.ms`, …). `acks` is
    /// always `all` and idempotence on: a message counts as done only when the broker has it.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub properties: BTreeMap<String, serde_yaml::Value>,
    /// Outputs' values (JSON text) are encoded with a registered schema into the schema
    /// registry's wire format; one that does not fit goes to the reject path
    /// (docs/schema-registry.md).
    #[serde(default)]
    pub encode: Option<Box<super::schema::Encode>>,
    /// The same for outputs' keys (subject `<topic>-key` with `subject: topic-name`). An
    /// output whose key or value does not fit goes to the reject path as the stages left it.
    #[serde(default)]
    pub encode_key: Option<Box<super::schema::Encode>>,
}

/// Kafka's default consumer session (classic `session.timeout.ms`, and the broker's
/// `group.consumer.session.timeout.ms` under KIP-848).
pub const DEFAULT_SESSION: std::time::Duration = std::time::Duration::from_secs(45);

impl KafkaSource {
    /// The consumer's session: `session.timeout.ms` from `properties`, else Kafka's default.
    pub fn session_timeout(&self) -> std::time::Duration {
        self.properties
            .get("session.timeout.ms")
            .and_then(|v| property_text(v).trim().parse().ok())
            .map_or(DEFAULT_SESSION, std::time::Duration::from_millis)
    }

    /// The `topics` entries that are regular expressions, compiled (one that does not compile
    /// is refused when the file is loaded).
    pub fn patterns(&self) -> Vec<regex_lite::Regex> {
        self.topics
            .iter()
            .filter(|t| is_pattern(t))
            .filter_map(|t| regex_lite::Regex::new(t).ok())
            .collect()
    }

    /// How long a partition's commit may stand still while input waits before the group watch
    /// calls it stalled: `stalled_after`, else two sessions.
    pub fn stalled_after(&self) -> Duration {
        self.stalled_after
            .unwrap_or_else(|| self.session_timeout() * 2)
    }
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
