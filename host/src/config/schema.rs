//! Schema-registry settings: `source.kafka.decode` / `decode_key` and `sink.kafka.encode`
//! (docs/schema-registry.md).

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::security::Secret;

/// A schema's kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SchemaFormat {
    /// Whatever the registry says the schema is (decoding only).
    #[default]
    Auto,
    /// Apache Avro.
    Avro,
    /// Protocol Buffers.
    Protobuf,
    /// JSON Schema.
    JsonSchema,
}

/// Source records in the schema registry's wire format (a zero byte, the schema id, the
/// encoded record) become JSON text before the first stage.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decode {
    /// `auto` (default: the schema's type as registered), `avro`, `protobuf` or `json-schema`
    /// (a record whose schema is of another type is rejected).
    #[serde(default)]
    pub format: SchemaFormat,
    /// The registry that holds the schemas.
    pub registry: RegistryConfig,
}

/// Outputs (JSON text from the stages) are encoded with a registered schema into the wire
/// format before they are produced; one that does not fit goes to the reject path.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Encode {
    /// `avro`, `protobuf` or `json-schema`.
    pub format: SchemaFormat,
    /// The registry that holds the schemas.
    pub registry: RegistryConfig,
    /// The subject an output's schema is registered under: `topic-name` (default:
    /// `<topic>-value`, or `-key` for keys), `record-name` (the schema's full name),
    /// `topic-record-name` (`<topic>-<full name>`), or any other text, used as it is.
    #[serde(default)]
    #[schemars(with = "String")]
    pub subject: SubjectStrategy,
    /// A schema file (`.avsc`, `.proto` or a JSON Schema `.json`). Without it, each output
    /// uses its subject's latest version.
    #[serde(default)]
    pub schema: Option<PathBuf>,
    /// Protobuf: the message type outputs are, by full name (`shop.Order`) or by name when
    /// one message has it. Default: the schema's first message.
    #[serde(default)]
    pub message: Option<String>,
    /// Register `schema` under the subject when the registry does not have it yet (else a
    /// subject without that schema stops the run at start-up).
    #[serde(default)]
    pub auto_register: bool,
}

/// How the subject of an output is named.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum SubjectStrategy {
    /// `<topic>-value`.
    #[default]
    TopicName,
    /// The schema's full record name.
    RecordName,
    /// `<topic>-<record full name>`.
    TopicRecordName,
    /// This subject, whatever the topic.
    Literal(String),
}

impl TryFrom<String> for SubjectStrategy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "topic-name" => SubjectStrategy::TopicName,
            "record-name" => SubjectStrategy::RecordName,
            "topic-record-name" => SubjectStrategy::TopicRecordName,
            "" => return Err("an empty subject".into()),
            _ => SubjectStrategy::Literal(s),
        })
    }
}

/// A Confluent-compatible schema registry (Confluent Schema Registry, Redpanda's, Karapace,
/// Apicurio in its compatibility API, or `weir broker --schema-registry` for development).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Base address (`http://host:8081`, `https://…`).
    pub url: String,
    /// How to authenticate (none by default).
    #[serde(default)]
    pub auth: Option<RegistryAuth>,
    /// How long a subject's latest version is trusted before it is asked again (schemas by
    /// id never change and are kept for the run).
    #[serde(default = "default_cache_ttl", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub cache_ttl: Duration,
    /// Longest one request may take.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// A CA certificate (PEM) to trust for `https` besides the system's.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

impl RegistryConfig {
    /// Makes relative files relative to the YAML's folder.
    pub fn resolve_paths(&mut self, base: &std::path::Path) {
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(p) = p.as_mut().filter(|p| p.is_relative()) {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.ca);
        if let Some(a) = &mut self.auth {
            if let Some(b) = &mut a.basic {
                fix(&mut b.password_file);
            }
            if let Some(t) = &mut a.bearer {
                fix(&mut t.token_file);
            }
        }
    }
}

fn default_cache_ttl() -> Duration {
    Duration::from_secs(300)
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

/// Registry credentials: `basic` (user and password) or `bearer` (a token), one of them.
/// Secrets come from the YAML (usually `${ENV}`) or a `*_file`, as in the `security` block.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryAuth {
    /// HTTP basic authentication (Confluent Cloud: an API key and secret).
    #[serde(default)]
    pub basic: Option<BasicAuth>,
    /// A bearer token.
    #[serde(default)]
    pub bearer: Option<BearerAuth>,
}

/// A user and password.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name (API key).
    pub username: String,
    /// Password (API secret).
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// A token.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BearerAuth {
    /// The token.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A file holding the token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl RegistryAuth {
    /// The `Authorization` header's value (reads a `*_file` now).
    pub fn header(&self) -> Result<String, String> {
        use base64::Engine as _;
        let pick = |v: &Option<Secret>, f: &Option<PathBuf>, what: &str| match (v, f) {
            (Some(s), None) => Ok(s.clone()),
            (None, Some(p)) => Secret::read(p),
            _ => Err(format!("auth: give one of `{what}` and `{what}_file`")),
        };
        let h = match (&self.basic, &self.bearer) {
            (Some(b), None) => {
                let p = pick(&b.password, &b.password_file, "password")?;
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!(
                        "{}:{}",
                        b.username,
                        p.expose()
                    ))
                )
            }
            (None, Some(t)) => format!(
                "Bearer {}",
                pick(&t.token, &t.token_file, "token")?.expose()
            ),
            _ => return Err("auth: give one of `basic` and `bearer`".into()),
        };
        crate::redact::register(&h);
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_a_strategy_or_themselves() {
        let e: Encode = serde_yaml::from_str(
            "{ format: avro, registry: { url: 'http://r' }, subject: orders-v1 }",
        )
        .unwrap();
        assert_eq!(e.subject, SubjectStrategy::Literal("orders-v1".into()));
        let e: Encode =
            serde_yaml::from_str("{ format: avro, registry: { url: 'http://r' } }").unwrap();
        assert_eq!(e.subject, SubjectStrategy::TopicName);
        assert_eq!(e.registry.cache_ttl, Duration::from_secs(300));
        let bad = serde_yaml::from_str::<Decode>("{ registry: { url: x, ttl: 1s } }");
        assert!(bad.unwrap_err().to_string().contains("unknown field `ttl`"));
    }

    #[test]
    fn credentials_become_a_header_and_never_show() {
        let a: RegistryAuth =
            serde_yaml::from_str("basic: { username: key, password: s3cr3t-pw }").unwrap();
        assert_eq!(a.header().unwrap(), "Basic a2V5OnMzY3IzdC1wdw==");
        assert!(!format!("{a:?}").contains("s3cr3t"));
        let a: RegistryAuth = serde_yaml::from_str("bearer: {}").unwrap();
        assert!(a.header().unwrap_err().contains("`token`"));
        let a: RegistryAuth = serde_yaml::from_str("{}").unwrap();
        assert!(a.header().unwrap_err().contains("`basic`"));
    }
}
