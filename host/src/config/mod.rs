//! The pipeline YAML: one [`PipelineConfig`] per file.
//!
//! Every struct denies unknown fields; [`load`] turns any problem into an error that names the
//! file, line and field and suggests the nearest valid key. Sizes are human (`64MiB`), durations
//! too (`50ms`), `${ENV}` / `${ENV:-default}` are interpolated, and paths are relative to the
//! YAML file. `weir schema` prints the JSON Schema generated from these structs
//! (committed as `docs/weir.schema.json`).

mod kafka;
mod load;
mod locate;
mod rollout;
pub mod schema;
mod security;
mod size;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

pub use kafka::{
    is_pattern, pattern_matches, property_text, Assignor, GroupProtocol, KafkaSink, KafkaSource,
    StartFrom, DEFAULT_SESSION,
};
pub use load::{load, load_str, ConfigError};
pub use locate::line_of_path;
pub use rollout::{CanaryBy, Factor, Observe, Percent, RollbackWhen, RolloutConfig, RolloutMode};
pub use security::{Sasl, SaslMechanism, Secret, Security, SecurityProtocol};
pub use size::ByteSize;

/// A whole pipeline: a source, stages in order, a sink and a reject path.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Pipeline name, used in logs and the run report.
    #[serde(default = "default_name")]
    pub name: String,
    /// Where messages come from.
    pub source: SourceConfig,
    /// The stages, applied in order. May be empty (a pass-through pipeline).
    #[serde(default)]
    pub stages: Vec<StageConfig>,
    /// Where messages that pass every stage go.
    pub sink: SinkConfig,
    /// Where rejected messages go (the dead-letter path). Default: discard (counted).
    #[serde(default)]
    pub reject: Option<SinkConfig>,
    /// What a crash may cost. `at-least-once` (default): messages handled but not yet
    /// committed are handled again after a restart, so their outputs can appear twice.
    /// `exactly-once`: a Kafka source, a Kafka sink and a Kafka (or no) reject path on one
    /// cluster; per source partition, the outputs, the dead-letter records and the next
    /// offset commit in one Kafka transaction, so a `read_committed` consumer sees each
    /// input's results once, whatever crashes (docs/exactly-once.md).
    #[serde(default)]
    pub delivery: Delivery,
    /// How messages are grouped into batches for the stages.
    #[serde(default)]
    pub batch: BatchConfig,
    /// How every Kafka client (source, sink, reject path) connects: TLS and SASL. A
    /// `security` block inside one of them replaces this one for that client.
    #[serde(default)]
    pub security: Option<Security>,
    /// Engine-wide settings.
    #[serde(default)]
    pub runtime: RuntimeConfig,
}

/// The delivery promise of a pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Nothing is lost; after a crash, what was not committed is handled again.
    #[default]
    AtLeastOnce,
    /// Kafka transactions: each input's results are visible once to `read_committed`
    /// consumers.
    ExactlyOnce,
}

fn default_name() -> String {
    "weir".into()
}

/// Where messages come from: a map with exactly one key naming the kind.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", try_from = "SourceSpec")]
pub enum SourceConfig {
    /// A JSONL file, one message per line (see docs/messages.md). Ends the run at end of file.
    Jsonl(JsonlSource),
    /// JSONL on standard input, until end of input.
    Stdin(StdinSource),
    /// Kafka topics, as a member of a consumer group.
    Kafka(KafkaSource),
}

/// A JSONL file source.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonlSource {
    /// File to read, relative to the YAML file.
    pub path: PathBuf,
    /// Topic name stages see as the source topic. Default: the file name without extension.
    #[serde(default)]
    pub topic: Option<String>,
    /// Values in the schema registry's wire format (`{"base64": …}`), or written as JSON
    /// beside their schema (`{"schema_id": 7, "avro": {…}}`), are decoded to JSON text
    /// before the first stage, as on a Kafka topic (docs/schema-registry.md).
    #[serde(default)]
    pub decode: Option<Box<schema::Decode>>,
    /// The same for keys.
    #[serde(default)]
    pub decode_key: Option<Box<schema::Decode>>,
}

/// Standard input as a source.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinSource {
    /// Topic name stages see as the source topic. Default: `stdin`.
    #[serde(default)]
    pub topic: Option<String>,
    /// As `source.jsonl.decode`.
    #[serde(default)]
    pub decode: Option<Box<schema::Decode>>,
    /// As `source.jsonl.decode_key`.
    #[serde(default)]
    pub decode_key: Option<Box<schema::Decode>>,
}

/// Where messages go: a map with exactly one key naming the kind.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", try_from = "SinkSpec")]
pub enum SinkConfig {
    /// Append JSONL to a file (created or truncated at start).
    Jsonl(JsonlSink),
    /// JSONL on standard output.
    Stdout(EmptySink),
    /// Count and drop.
    Discard(EmptySink),
    /// Produce to a Kafka topic.
    Kafka(KafkaSink),
}

/// The YAML shape of a source (serde_yaml reads enums only from `!tags`, so the one-key map
/// form is read through this struct).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceSpec {
    jsonl: Option<JsonlSource>,
    stdin: Option<StdinSource>,
    kafka: Option<KafkaSource>,
}

impl TryFrom<SourceSpec> for SourceConfig {
    type Error = String;

    fn try_from(s: SourceSpec) -> Result<Self, String> {
        match (s.jsonl, s.stdin, s.kafka) {
            (Some(j), None, None) => Ok(SourceConfig::Jsonl(j)),
            (None, Some(i), None) => Ok(SourceConfig::Stdin(i)),
            (None, None, Some(k)) => Ok(SourceConfig::Kafka(k)),
            _ => Err("a source needs exactly one of `jsonl`, `stdin`, `kafka`".into()),
        }
    }
}

/// The YAML shape of a sink (see [`SourceSpec`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkSpec {
    jsonl: Option<JsonlSink>,
    stdout: Option<EmptySink>,
    discard: Option<EmptySink>,
    kafka: Option<KafkaSink>,
}

impl TryFrom<SinkSpec> for SinkConfig {
    type Error = String;

    fn try_from(s: SinkSpec) -> Result<Self, String> {
        match (s.jsonl, s.stdout, s.discard, s.kafka) {
            (Some(j), None, None, None) => Ok(SinkConfig::Jsonl(j)),
            (None, Some(e), None, None) => Ok(SinkConfig::Stdout(e)),
            (None, None, Some(e), None) => Ok(SinkConfig::Discard(e)),
            (None, None, None, Some(k)) => Ok(SinkConfig::Kafka(k)),
            _ => Err("a sink needs exactly one of `jsonl`, `stdout`, `discard`, `kafka`".into()),
        }
    }
}

/// A JSONL file sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonlSink {
    /// File to write, relative to the YAML file.
    pub path: PathBuf,
}

/// A sink without settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptySink {}

/// One stage of the chain.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// Stage name (unique in the pipeline): used in logs, metrics, reject records and errors.
    pub name: String,
    /// The stage's component (`.wasm`), relative to the YAML file.
    pub plugin: PathBuf,
    /// Handed to the stage's `init` as string pairs (numbers and booleans are rendered as text).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub config: BTreeMap<String, serde_yaml::Value>,
    /// Sandbox limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// What happens to a message the stage traps on (or times out on, or floods output for).
    #[serde(default)]
    pub on_trap: TrapPolicy,
    /// Which contract to call: `auto` uses the packed batch path when the component exports it.
    #[serde(default)]
    pub contract: ContractChoice,
    /// What the sandbox grants beyond computing: nothing unless listed here.
    #[serde(default)]
    pub allow: Grants,
    /// How a new version of the plugin goes live (file replaced, SIGHUP, the admin API):
    /// `immediate` (default), `shadow` or `canary`. See docs/rollouts.md.
    #[serde(default)]
    pub rollout: RolloutConfig,
    /// Durable per-key state the stage may keep (`wasi:keyvalue` buckets), per source
    /// partition. None by default. See docs/state.md.
    #[serde(default)]
    pub state: Option<StateConfig>,
}

/// A stage's state: the buckets it may open and their limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Bucket names the stage may open (`store.open`); any other name is `access-denied`.
    pub buckets: Vec<String>,
    /// A value not written for this long reads as absent and is purged (e.g. `7d`). Default:
    /// values live until deleted.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub ttl: Option<Duration>,
    /// Largest value one `set` may store; a larger one is an `other` error answer.
    #[serde(default = "default_max_value")]
    pub max_value: ByteSize,
}

fn default_max_value() -> ByteSize {
    ByteSize(1 << 20)
}

/// Capabilities a stage is granted. By default a stage sees no files, no environment variables
/// and no network, whatever language it was written in (WASI is linked so components load).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Environment variables passed through by name (their values are read when the stage
    /// starts; a name the host does not have is simply absent).
    #[serde(default)]
    pub env: Vec<String>,
    /// Host folders the stage may open, each at a path of its own choosing.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Outbound TCP and UDP sockets and DNS lookups.
    #[serde(default)]
    pub network: bool,
}

/// One host folder made visible to a stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The host folder (relative to the YAML file); it must exist.
    pub host: PathBuf,
    /// Where the stage sees it (e.g. `/data`).
    pub guest: String,
    /// Whether the stage may create, change and delete files in it (default: read-only).
    #[serde(default)]
    pub write: bool,
}

/// Per-stage sandbox limits.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most linear memory the stage instance may hold (e.g. `64MiB`).
    #[serde(default = "default_memory")]
    pub memory: ByteSize,
    /// Longest one call may run (a whole batch on the batch path, e.g. `200ms`).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// Most bytes the stage may emit for one input message: keys, values, headers and topics,
    /// plus 32 per emitted message (so a flood of empty messages is capped too).
    #[serde(default = "default_max_output")]
    pub max_output: ByteSize,
}

fn default_memory() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_timeout() -> Duration {
    Duration::from_millis(500)
}
fn default_max_output() -> ByteSize {
    ByteSize(4 << 20)
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            memory: default_memory(),
            timeout: default_timeout(),
            max_output: default_max_output(),
        }
    }
}

/// What happens to a message a stage traps on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrapPolicy {
    /// Send it to the reject path with the trap as the reason, and go on.
    #[default]
    Reject,
    /// Stop the pipeline (as if the stage said `fail`).
    Fail,
}

/// Which stage contract the host calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContractChoice {
    /// The packed batch path when exported, else the typed path.
    #[default]
    Auto,
    /// Always the typed per-message path.
    Typed,
    /// The packed batch path; an error if the component lacks it.
    Batch,
}

/// How messages are grouped into batches.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Most messages per batch.
    #[serde(default = "default_max_messages")]
    pub max_messages: usize,
    /// Most payload bytes per batch (a single larger message still goes alone).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: ByteSize,
    /// Longest wait for a batch to fill before it goes anyway.
    #[serde(default = "default_linger", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub linger: Duration,
}

fn default_max_messages() -> usize {
    256
}
fn default_max_bytes() -> ByteSize {
    ByteSize(1 << 20)
}
fn default_linger() -> Duration {
    Duration::from_millis(5)
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_messages: default_max_messages(),
            max_bytes: default_max_bytes(),
            linger: default_linger(),
        }
    }
}

/// Engine-wide settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Where compiled components are cached. Default: `$WEIR_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/weir`, else `~/.cache/weir`.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Reload a stage when its plugin file changes (SIGHUP reloads every stage regardless).
    #[serde(default = "default_true")]
    pub watch_plugins: bool,
    /// Where to write the JSON run report at exit (relative to the YAML file).
    #[serde(default)]
    pub report: Option<PathBuf>,
    /// Longest a SIGINT/SIGTERM drain may take before the process stops anyway.
    #[serde(default = "default_drain", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub drain_timeout: Duration,
    /// Driver threads, each with its own stage instances and its own partitions (a local
    /// source is one partition, so one driver does its work).
    #[serde(default = "default_drivers")]
    pub drivers: usize,
    /// Pin each driver thread to a CPU core (`cores`, else driver i on core i).
    #[serde(default)]
    pub pin: bool,
    /// The cores drivers are pinned to, in driver order (implies `pin`).
    #[serde(default)]
    pub cores: Option<Vec<usize>>,
    /// Most message bytes read but not yet fully handled. Above it reading holds (and the
    /// partitions pause if that lasts over 0.5 s); it resumes below half of it.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: ByteSize,
    /// Serve Prometheus `/metrics`, `/healthz`, `/readyz` and the admin API (`/stages`) on
    /// this address (`127.0.0.1:9464`).
    #[serde(default)]
    pub metrics: Option<String>,
    /// The environment variable holding the admin API's bearer token. Required for the admin
    /// API when `metrics` binds a non-loopback address (without it, the API answers 403 there);
    /// when set, every admin request must carry `Authorization: Bearer TOKEN`.
    #[serde(default)]
    pub admin_token_env: Option<String>,
    /// Longest the start-up checks (`weir check --connect`, and `weir run` before any stage
    /// is called) wait for a Kafka cluster to answer (exit 1 when none does). An error that
    /// retrying cannot heal (authentication, TLS trust, authorization, a missing topic, a
    /// corrupt batch) ends the checks, or a running pipeline, as soon as it is seen.
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub connect_timeout: Duration,
    /// Where stages' state is kept (relative to the YAML file): one store per stage, a cache
    /// of its changelog (Kafka sources) or the state itself (local sources). Default:
    /// `weir-state` next to the YAML file. One process at a time may use it (a lock).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_drivers() -> usize {
    1
}
fn default_max_in_flight() -> ByteSize {
    ByteSize(64 << 20)
}

fn default_true() -> bool {
    true
}
fn default_drain() -> Duration {
    Duration::from_secs(10)
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            watch_plugins: true,
            report: None,
            drain_timeout: default_drain(),
            drivers: default_drivers(),
            pin: false,
            cores: None,
            max_in_flight: default_max_in_flight(),
            metrics: None,
            admin_token_env: None,
            connect_timeout: default_connect_timeout(),
            state_dir: None,
        }
    }
}

impl StageConfig {
    /// The `config` map as the string pairs `init` receives.
    pub fn config_pairs(&self) -> Vec<(String, String)> {
        self.config
            .iter()
            .map(|(k, v)| (k.clone(), property_text(v)))
            .collect()
    }
}

/// The JSON Schema of the pipeline YAML.
pub fn schema() -> String {
    let schema = schemars::schema_for!(PipelineConfig);
    serde_json::to_string_pretty(&schema).expect("a schema always serializes") + "\n"
}
