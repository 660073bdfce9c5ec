//! The host's schema codec around the chain: source records in the registry's wire format
//! become JSON text before the first stage, and outputs become wire format after the last.
//! A record that cannot be decoded, or an output that does not fit its schema, is rejected
//! with the reason; nothing is produced half-encoded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::registry::{Compiled, LookupError, Registered, Registry, SchemaKind};
use crate::config::schema::{Decode, Encode, SchemaFormat, SubjectStrategy};
use crate::message::Message;
use crate::metrics::Metrics;

pub use super::registry::{HEADER_ID, HEADER_SUBJECT, HEADER_VERSION};
use super::wire::wire;
pub use super::wire::{schema_id, CodecReject, MAGIC};

/// Decodes one side (value or key) of source records.
pub struct Decoder {
    format: SchemaFormat,
    registry: Arc<Registry>,
    key: bool,
    /// Ids the registry said it does not have, so a run of bad records asks once.
    unknown: Mutex<HashMap<u32, String>>,
    /// A local source: records may be JSON beside their schema (`schema::local`).
    local: bool,
    metrics: Option<Arc<Metrics>>,
}

impl Decoder {
    /// A decoder from the YAML block (`key`: it decodes keys).
    pub fn new(cfg: &Decode, key: bool, metrics: Option<Arc<Metrics>>) -> Result<Self, String> {
        Ok(Decoder {
            format: cfg.format,
            registry: Registry::new(&cfg.registry, metrics.clone())?,
            key,
            unknown: Mutex::default(),
            local: false,
            metrics,
        })
    }

    /// The decoder of a local source (a JSONL file, stdin): it also takes records written as
    /// JSON beside their schema (`{"schema_id": 7, "avro": {…}}`, see `schema::local`) and
    /// encodes them first, as a producer would.
    pub fn for_local_source(mut self) -> Self {
        self.local = true;
        self
    }

    fn side<'a>(&self, m: &'a Message) -> Option<&'a [u8]> {
        if self.key {
            m.key.as_deref()
        } else {
            m.value.as_deref()
        }
    }

    /// Fetches every schema `messages` need that is not cached. `Err` when the registry
    /// cannot be reached (the lane holds and tries again later); a schema it does not have
    /// is not an error here (that record is rejected when decoded).
    pub fn fetch<'a>(&self, messages: impl Iterator<Item = &'a Message>) -> Result<(), String> {
        let mut last = None;
        for m in messages {
            if self.local {
                let local = self.side(m).and_then(super::local::parse);
                if let Some(Ok(r)) = local {
                    // Looked up now, so that decoding finds it cached; a schema the registry
                    // does not have is said when the record is decoded.
                    if let Err(LookupError::Unavailable(why)) =
                        super::local::lookup(&self.registry, &r)
                    {
                        return Err(why);
                    }
                    continue;
                }
            }
            let Some(id) = self.side(m).and_then(|b| schema_id(b).ok()) else {
                continue;
            };
            // A batch is mostly one schema: each run of it is looked up once.
            if last.replace(id) == Some(id)
                || self.registry.has(id)
                || self.unknown.lock().expect("unknown ids").contains_key(&id)
            {
                continue;
            }
            match self.registry.by_id(id) {
                Ok(_) => {}
                Err(LookupError::NotFound(why) | LookupError::Refused(why)) => {
                    self.unknown.lock().expect("unknown ids").insert(id, why);
                }
                Err(LookupError::Unavailable(why)) => return Err(why),
            }
        }
        Ok(())
    }

    /// The JSON text of one side's bytes and its schema (counted when it fails). Uses
    /// only what [`Decoder::fetch`] cached.
    pub fn decode(&self, bytes: &[u8]) -> Result<(Vec<u8>, Arc<Registered>), CodecReject> {
        let mut recent = Recent::default();
        let json = self.decode_recent(bytes, &mut recent)?;
        Ok((json, recent.schema.expect("set by a decode")))
    }

    /// [`Decoder::decode`] with the schema of the side's last record at hand: a batch is
    /// mostly one schema, so a record with the same id asks no cache (no lock, no map).
    /// `recent` holds this record's schema afterwards.
    fn decode_recent(&self, bytes: &[u8], recent: &mut Recent) -> Result<Vec<u8>, CodecReject> {
        let r = self.decode_bytes(bytes, recent);
        if let (Err(e), Some(metrics)) = (&r, &self.metrics) {
            metrics
                .schema_failures
                .with_label_values(&["decode", e.reason])
                .inc();
        }
        r
    }

    fn decode_bytes(&self, bytes: &[u8], recent: &mut Recent) -> Result<Vec<u8>, CodecReject> {
        let side = if self.key { "key" } else { "value" };
        if self.local {
            if let Some(local) = super::local::parse(bytes) {
                let r = local.map_err(|e| CodecReject {
                    reason: "does_not_fit",
                    text: format!("{side}: {e}"),
                })?;
                let schema = super::local::lookup(&self.registry, &r).map_err(|e| CodecReject {
                    reason: "unknown_schema",
                    text: format!("{side}: {e}"),
                })?;
                let encoded = super::local::encode(&schema, &r, side)?;
                return self.decode_wire(side, &encoded, recent);
            }
        }
        self.decode_wire(side, bytes, recent)
    }

    fn decode_wire(
        &self,
        side: &str,
        bytes: &[u8],
        recent: &mut Recent,
    ) -> Result<Vec<u8>, CodecReject> {
        let id = schema_id(bytes).map_err(|e| CodecReject {
            text: format!("{side}: {}", e.text),
            ..e
        })?;
        if recent.schema.as_ref().is_some_and(|s| s.id == id) {
            recent.hits += 1;
        } else {
            recent.schema = self.registry.cached(id);
        }
        let schema = match &recent.schema {
            Some(s) => s,
            None => {
                let why = self
                    .unknown
                    .lock()
                    .expect("unknown ids")
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| "not fetched".into());
                return Err(CodecReject {
                    reason: "unknown_schema",
                    text: format!("{side}: schema id {id} is not in the registry ({why})"),
                });
            }
        };
        let wanted = kind_of(self.format);
        if wanted.is_some_and(|w| w != schema.kind) {
            return Err(CodecReject {
                reason: "wrong_format",
                text: format!(
                    "{side}: schema id {id} is {}, the source decodes {}",
                    schema.kind.as_str(),
                    wanted.expect("checked").as_str()
                ),
            });
        }
        let body = &bytes[5..];
        let mut out = Vec::with_capacity(match &schema.compiled {
            Ok(Compiled::Avro(avro)) => avro.json_len_hint(body.len()),
            _ => body.len() * 2 + 16,
        });
        let fit = match &schema.compiled {
            Ok(Compiled::Avro(avro)) => avro.to_json(body, &mut out).map_err(|e| e.to_string()),
            Ok(Compiled::Protobuf(proto)) => proto.to_json(body, &mut out),
            Ok(Compiled::Json(json)) => json.validate(body).map(|()| out.extend_from_slice(body)),
            Err(why) => {
                return Err(CodecReject {
                    reason: "unsupported",
                    text: format!("{side}: {why}"),
                })
            }
        };
        fit.map_err(|e| CodecReject {
            reason: "does_not_fit",
            text: format!("{side}: does not match its schema (id {id}): {e}"),
        })?;
        Ok(out)
    }
}

/// What an encoder keeps between the outputs of one batch (see [`Encoder::encode_after`]):
/// what the last output was encoded with and its topic (kept for one batch only, so a
/// subject's new version is seen at the next), and spare buffers to encode into.
#[derive(Default)]
pub struct Scratch {
    last: Option<(String, Arc<Target>)>,
    spare: Vec<Vec<u8>>,
}

impl Scratch {
    /// With empty `spare` buffers to encode into before any is allocated (the batch's
    /// records' wire-format buffers, from [`Decoding::take_spare`]).
    pub fn with_spare(spare: Vec<Vec<u8>>) -> Self {
        Scratch { last: None, spare }
    }
}

/// The schema of one side's last decoded record, and how many records since found it there
/// (cache hits, counted once per batch).
#[derive(Default)]
struct Recent {
    schema: Option<Arc<Registered>>,
    hits: u64,
}

/// The schema kind a format names (`auto`: any).
fn kind_of(format: SchemaFormat) -> Option<SchemaKind> {
    match format {
        SchemaFormat::Auto => None,
        SchemaFormat::Avro => Some(SchemaKind::Avro),
        SchemaFormat::Protobuf => Some(SchemaKind::Protobuf),
        SchemaFormat::JsonSchema => Some(SchemaKind::Json),
    }
}

/// What outputs to one subject are encoded with: the schema, and for Protobuf the message
/// type and its indexes in the file.
struct Target {
    schema: Arc<Registered>,
    proto: Result<(prost_reflect::MessageDescriptor, Vec<i32>), String>,
}

/// Encodes outputs' values (or keys) with the subject's schema.
pub struct Encoder {
    registry: Arc<Registry>,
    /// It encodes keys (`sink.kafka.encode_key`): subjects `<topic>-key`.
    key: bool,
    kind: SchemaKind,
    subject: SubjectStrategy,
    /// The schema file's text (else the subject's latest version is used).
    schema: Option<String>,
    /// The local `.proto` files it imports (registered before it, as references).
    imports: Vec<super::protobuf::LocalImport>,
    /// Its full name (for the record-name strategies): Avro's record name, the Protobuf
    /// message's full name, a JSON Schema's `title`.
    record: String,
    /// Protobuf: the message outputs are (else the file's first).
    message: Option<String>,
    auto_register: bool,
    /// The sink's topic, for outputs that name none.
    default_topic: String,
    /// Per subject: the schema to encode with (a fixed schema's id never changes).
    resolved: Mutex<HashMap<String, Arc<Registered>>>,
    /// Per output topic: what to encode with and when it was looked up (no subject is
    /// formatted and no registry cache asked per message).
    by_topic: Mutex<HashMap<String, (std::time::Instant, Arc<Target>)>>,
    metrics: Option<Arc<Metrics>>,
}

impl Encoder {
    /// An encoder of values from the YAML block for a sink whose default topic is `topic`.
    pub fn new(cfg: &Encode, topic: &str, metrics: Option<Arc<Metrics>>) -> Result<Self, String> {
        Self::for_side(cfg, topic, false, metrics)
    }

    /// An encoder of keys (`key`) or values.
    pub fn for_side(
        cfg: &Encode,
        topic: &str,
        key: bool,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Self, String> {
        let kind = kind_of(cfg.format)
            .ok_or("`format: auto` decodes only; give `avro`, `protobuf` or `json-schema`")?;
        if cfg.message.is_some() && kind != SchemaKind::Protobuf {
            return Err("`message` is for `format: protobuf`".into());
        }
        let (schema, record, imports) = match &cfg.schema {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("schema {}: cannot read: {e}", p.display()))?;
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let imports = match kind {
                    SchemaKind::Protobuf => super::protobuf::local_imports(
                        p.parent().unwrap_or(std::path::Path::new(".")),
                        &name,
                        &text,
                    )
                    .map_err(|e| format!("schema {}: {e}", p.display()))?,
                    _ => Vec::new(),
                };
                let refs: Vec<(String, String)> = imports
                    .iter()
                    .map(|i| (i.name.clone(), i.text.clone()))
                    .collect();
                let parsed = Compiled::parse(kind, &name, &text, &refs)
                    .map_err(|e| format!("schema {}: {e}", p.display()))?;
                let record = match &parsed {
                    Compiled::Avro(a) => a.name().unwrap_or_default().to_owned(),
                    Compiled::Protobuf(proto) => match &cfg.message {
                        Some(m) => proto
                            .by_name(m)
                            .map_err(|e| format!("message: {e}"))?
                            .0
                            .full_name()
                            .to_owned(),
                        None => proto.first().full_name().to_owned(),
                    },
                    Compiled::Json(_) => serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v["title"].as_str().map(str::to_owned))
                        .unwrap_or_default(),
                };
                (Some(text), record, imports)
            }
            None => (None, String::new(), Vec::new()),
        };
        if record.is_empty()
            && matches!(
                cfg.subject,
                SubjectStrategy::RecordName | SubjectStrategy::TopicRecordName
            )
        {
            return Err("`subject: record-name` and `topic-record-name` need `schema` with a name (Avro: a named type; Protobuf: a message; JSON Schema: a `title`)".into());
        }
        Ok(Encoder {
            registry: Registry::new(&cfg.registry, metrics.clone())?,
            key,
            kind,
            subject: cfg.subject.clone(),
            schema,
            imports,
            record,
            message: cfg.message.clone(),
            auto_register: cfg.auto_register,
            default_topic: topic.to_owned(),
            resolved: Mutex::default(),
            by_topic: Mutex::default(),
            metrics,
        })
    }

    /// The subject an output to `topic` is encoded under.
    pub fn subject(&self, topic: &str) -> String {
        match &self.subject {
            SubjectStrategy::TopicName if self.key => format!("{topic}-key"),
            SubjectStrategy::TopicName => format!("{topic}-value"),
            SubjectStrategy::RecordName => self.record.clone(),
            SubjectStrategy::TopicRecordName => format!("{topic}-{}", self.record),
            SubjectStrategy::Literal(s) => s.clone(),
        }
    }

    /// The schema outputs to `topic` are encoded with (cached per subject; a subject's
    /// latest version is asked again after the registry's `cache_ttl`).
    pub fn schema_for(&self, topic: &str) -> Result<Arc<Registered>, LookupError> {
        let subject = self.subject(topic);
        match &self.schema {
            Some(text) => {
                if let Some(r) = self.resolved.lock().expect("encoder cache").get(&subject) {
                    return Ok(r.clone());
                }
                let r = self.registry.id_of(
                    &subject,
                    self.kind,
                    text,
                    &self.imports,
                    self.auto_register,
                )?;
                self.resolved
                    .lock()
                    .expect("encoder cache")
                    .insert(subject, r.clone());
                Ok(r)
            }
            None => self.registry.latest(&subject),
        }
    }

    /// Resolves the schema of the sink's default topic (start-up: a missing subject, a
    /// schema of another format or an unreachable registry is said before anything is read).
    pub fn check(&self) -> Result<(), String> {
        let subject = || self.subject(&self.default_topic);
        let schema = self
            .schema_for(&self.default_topic)
            .map_err(|e| format!("subject `{}`: {e}", subject()))?;
        let target = self.target(schema);
        self.usable(&target)
            .map_err(|r| format!("subject `{}`: {}", subject(), r.text))
    }

    fn target(&self, schema: Arc<Registered>) -> Target {
        let proto = match &schema.compiled {
            Ok(Compiled::Protobuf(p)) => match &self.message {
                Some(m) => p.by_name(m),
                None => {
                    let first = p.first();
                    Ok((first, vec![0]))
                }
            },
            _ => Err("not Protobuf".into()),
        };
        Target { schema, proto }
    }

    /// Why outputs cannot be encoded with `t` at all (a schema of another format, one that
    /// does not compile, a Protobuf message it lacks).
    fn usable(&self, t: &Target) -> Result<(), CodecReject> {
        let s = &t.schema;
        if s.kind != self.kind {
            return Err(CodecReject {
                reason: "wrong_format",
                text: format!(
                    "schema id {} is {}, the sink encodes {}",
                    s.id,
                    s.kind.as_str(),
                    self.kind.as_str()
                ),
            });
        }
        let unsupported = |text: String| CodecReject {
            reason: "unsupported",
            text,
        };
        match (&s.compiled, &t.proto) {
            (Err(why), _) => Err(unsupported(why.clone())),
            (Ok(Compiled::Protobuf(_)), Err(why)) => {
                Err(unsupported(format!("schema id {}: message: {why}", s.id)))
            }
            _ => Ok(()),
        }
    }

    /// The wire-format encoding of the message's value (JSON text); `None` for a null.
    /// `Err(Ok(reject))`: it does not fit; `Err(Err(why))`: the registry cannot be reached
    /// for its subject (try again).
    pub fn encode(&self, m: &Message) -> Result<Option<Vec<u8>>, Result<CodecReject, String>> {
        self.encode_after(m, &mut Scratch::default())
    }

    /// [`Encoder::encode`] for the outputs of one batch, one after the other: `scratch` keeps
    /// what the previous output was encoded with, so the next one to the same topic asks no
    /// cache (no lock, no map, no clock), and its spare buffers are used before any is
    /// allocated.
    pub fn encode_after(
        &self,
        m: &Message,
        scratch: &mut Scratch,
    ) -> Result<Option<Vec<u8>>, Result<CodecReject, String>> {
        let side = if self.key { &m.key } else { &m.value };
        let Some(value) = side else {
            return Ok(None);
        };
        let topic = m.topic.as_deref().unwrap_or(&self.default_topic);
        let target = match &scratch.last {
            Some((t, target)) if t == topic => target.clone(),
            _ => {
                let target = self.target_for(topic)?;
                scratch.last = Some((topic.to_owned(), target.clone()));
                target
            }
        };
        let out = scratch
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(value.len() + 8));
        self.encode_with(&target, topic, value, out)
    }

    /// What outputs to `topic` are encoded with, from the cache while it is fresh.
    fn target_for(&self, topic: &str) -> Result<Arc<Target>, Result<CodecReject, String>> {
        let cached = self
            .by_topic
            .lock()
            .expect("encoder cache")
            .get(topic)
            .filter(|(at, _)| self.schema.is_some() || at.elapsed() < self.registry.ttl())
            .map(|(_, t)| t.clone());
        let looked_up = match cached {
            Some(t) => Ok(t),
            None => self.schema_for(topic).map(|s| {
                let t = Arc::new(self.target(s));
                self.by_topic
                    .lock()
                    .expect("encoder cache")
                    .insert(topic.to_owned(), (std::time::Instant::now(), t.clone()));
                t
            }),
        };
        match looked_up {
            Ok(t) => Ok(t),
            Err(LookupError::Unavailable(why)) => Err(Err(why)),
            Err(e) => Err(Ok(self.failed(CodecReject {
                reason: "unknown_schema",
                text: format!("subject `{}`: {e}", self.subject(topic)),
            }))),
        }
    }

    fn encode_with(
        &self,
        target: &Target,
        topic: &str,
        value: &[u8],
        mut out: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, Result<CodecReject, String>> {
        self.usable(target).map_err(|r| {
            Ok(self.failed(CodecReject {
                text: format!("subject `{}`: {}", self.subject(topic), r.text),
                ..r
            }))
        })?;
        let schema = &target.schema;
        if let Err(e) = wire(schema, target.proto.as_ref().ok(), value, &mut out) {
            return Err(Ok(self.failed(CodecReject {
                reason: "does_not_fit",
                text: format!(
                    "does not fit schema id {} of subject `{}`: {e}",
                    schema.id,
                    self.subject(topic)
                ),
            })));
        }
        Ok(Some(out))
    }

    /// A lane starts (`true`) or stops holding for the registry (the held-lanes gauge).
    pub fn held(&self, on: bool) {
        if let Some(m) = &self.metrics {
            if on {
                m.schema_held_lanes.inc();
            } else {
                m.schema_held_lanes.dec();
            }
        }
    }

    fn failed(&self, r: CodecReject) -> CodecReject {
        if let Some(m) = &self.metrics {
            m.schema_failures
                .with_label_values(&["encode", r.reason])
                .inc();
        }
        r
    }
}

/// A pipeline's codecs, shared by its drivers.
#[derive(Default)]
pub struct Codecs {
    /// Source values.
    pub value: Option<Decoder>,
    /// Source keys.
    pub key: Option<Decoder>,
    /// Outputs' values.
    pub encode: Option<Encoder>,
    /// Outputs' keys.
    pub encode_key: Option<Encoder>,
}

impl Codecs {
    /// The codecs a pipeline's YAML asks for (`None`: none). An encoder's subject for the
    /// sink's topic is resolved now, so a missing subject or schema is said at start-up.
    pub fn from_config(
        cfg: &crate::config::PipelineConfig,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Arc<Self>>, String> {
        use crate::config::{SinkConfig, SourceConfig};
        let mut c = Codecs::default();
        let (decode, decode_key, at, local) = match &cfg.source {
            SourceConfig::Kafka(k) => (&k.decode, &k.decode_key, "source.kafka", false),
            SourceConfig::Jsonl(j) => (&j.decode, &j.decode_key, "source.jsonl", true),
            SourceConfig::Stdin(i) => (&i.decode, &i.decode_key, "source.stdin", true),
        };
        let decoder = |d: &Decode, key: bool, field: &str| {
            let d = Decoder::new(d, key, Some(metrics.clone()))
                .map_err(|e| format!("{at}.{field}: {e}"))?;
            Ok::<_, String>(if local { d.for_local_source() } else { d })
        };
        c.value = decode
            .as_deref()
            .map(|d| decoder(d, false, "decode"))
            .transpose()?;
        c.key = decode_key
            .as_deref()
            .map(|d| decoder(d, true, "decode_key"))
            .transpose()?;
        if let SinkConfig::Kafka(k) = &cfg.sink {
            let encoder = |e: &Encode, key: bool, field: &str| {
                let enc = Encoder::for_side(e, &k.topic, key, Some(metrics.clone()))
                    .map_err(|e| format!("sink.kafka.{field}: {e}"))?;
                enc.check()
                    .map_err(|e| format!("sink.kafka.{field}: {e}"))?;
                Ok::<_, String>(enc)
            };
            c.encode = k
                .encode
                .as_deref()
                .map(|e| encoder(e, false, "encode"))
                .transpose()?;
            c.encode_key = k
                .encode_key
                .as_deref()
                .map(|e| encoder(e, true, "encode_key"))
                .transpose()?;
        }
        Ok((!c.is_empty()).then(|| Arc::new(c)))
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.value.is_none()
            && self.key.is_none()
            && self.encode.is_none()
            && self.encode_key.is_none()
    }

    /// Fetches the schemas `messages` need (see [`Decoder::fetch`]).
    pub fn fetch<'a>(
        &self,
        messages: impl Iterator<Item = &'a Message> + Clone,
    ) -> Result<(), String> {
        for d in [&self.value, &self.key].into_iter().flatten() {
            d.fetch(messages.clone())?;
        }
        Ok(())
    }

    /// Decodes a message's key and value (each side its codec has), adding the value's
    /// schema headers. On a reject the message is left as it was. For a batch,
    /// [`Codecs::decoding`] is cheaper.
    pub fn decode(&self, m: &mut Message) -> Result<(), CodecReject> {
        self.decoding().decode(m)
    }

    /// Decodes a batch's records one after the other, keeping the last record's schema at
    /// hand (see [`Decoding::decode`]).
    pub fn decoding(&self) -> Decoding<'_> {
        Decoding {
            codecs: self,
            key: Recent::default(),
            value: Recent::default(),
            spare: Vec::new(),
        }
    }
}

/// Records of one batch being decoded: each side's last schema is kept, so the records after
/// it with the same id ask no cache. The cache hits are counted when it is dropped.
pub struct Decoding<'a> {
    codecs: &'a Codecs,
    key: Recent,
    value: Recent,
    /// The decoded values' wire-format buffers, emptied, when outputs are encoded too.
    spare: Vec<Vec<u8>>,
}

impl Decoding<'_> {
    /// Decodes a message's key and value (each side its codec has), adding the value's
    /// schema headers. On a reject the message is left as it was.
    pub fn decode(&mut self, m: &mut Message) -> Result<(), CodecReject> {
        let c = self.codecs;
        let key = match (&c.key, &m.key) {
            (Some(d), Some(k)) => Some(d.decode_recent(k, &mut self.key)?),
            _ => None,
        };
        let value = match (&c.value, &m.value) {
            (Some(d), Some(v)) => Some(d.decode_recent(v, &mut self.value)?),
            _ => None,
        };
        if let Some(k) = key {
            m.key = Some(k);
        }
        if let Some(json) = value {
            if let (Some(mut wire), Some(_)) = (m.value.replace(json), &c.encode) {
                // The same schema's outputs are about as long: encoded into it, no allocation.
                wire.clear();
                self.spare.push(wire);
            }
            m.headers.retain(|h| !h.key.starts_with("weir.schema."));
            // The schema's own headers, shared (no allocation per record).
            let schema = self.value.schema.as_ref().expect("set by a decode");
            m.headers.extend_from_slice(schema.headers());
        }
        Ok(())
    }
}

impl Decoding<'_> {
    /// The decoded values' wire-format buffers, emptied (for [`Scratch::with_spare`]).
    pub fn take_spare(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.spare)
    }
}

impl Drop for Decoding<'_> {
    fn drop(&mut self) {
        let c = self.codecs;
        for (d, recent) in [(&c.key, &self.key), (&c.value, &self.value)] {
            if let Some(d) = d {
                d.registry.count_hits(recent.hits);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::devserver::DevRegistry;

    #[test]
    fn a_local_proto_with_local_imports_registers_them_as_references_and_round_trips() {
        let dev = DevRegistry::start("127.0.0.1:0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("common")).unwrap();
        std::fs::write(
            dir.path().join("common/money.proto"),
            "syntax = \"proto3\";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("line.proto"),
            "syntax = \"proto3\";\npackage shop;\nimport \"common/money.proto\";\nmessage Line { string sku = 1; Money price = 2; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("order.proto"),
            "syntax = \"proto3\";\npackage shop;\nimport \"line.proto\";\nimport \"common/money.proto\";\nimport \"google/protobuf/timestamp.proto\";\nmessage Order { string id = 1; repeated Line lines = 2; Money total = 3; google.protobuf.Timestamp at = 4; }\n",
        )
        .unwrap();
        let yaml = format!(
            "{{ format: protobuf, registry: {{ url: '{}' }}, schema: '{}', auto_register: true }}",
            dev.url(),
            dir.path().join("order.proto").display()
        );
        let cfg: Encode = serde_yaml::from_str(&yaml).unwrap();
        let enc = Encoder::new(&cfg, "orders", None).unwrap();
        enc.check().unwrap();
        // Each import is a subject of its own (its import path), the deepest first.
        let registry = Registry::new(
            &serde_yaml::from_str(&format!("{{ url: '{}' }}", dev.url())).unwrap(),
            None,
        )
        .unwrap();
        let money = registry.latest("common/money.proto").unwrap();
        let line = registry.latest("line.proto").unwrap();
        let order = registry.latest("orders-value").unwrap();
        assert!(
            money.id < line.id && line.id < order.id,
            "{money:?} {line:?} {order:?}"
        );
        let json = br#"{"id":"o-1","lines":[{"sku":"a","price":{"cents":"250","currency":"EUR"}}],"total":{"cents":"250","currency":"EUR"},"at":"2026-12-05T01:02:03Z"}"#;
        let msg = Message {
            value: Some(json.to_vec()),
            ..Message::default()
        };
        let wire = enc.encode(&msg).unwrap().unwrap();
        assert_eq!(u32::from_be_bytes(wire[1..5].try_into().unwrap()), order.id);
        // Decoded by id (the references fetched from the registry), the same record.
        let dec: Decode =
            serde_yaml::from_str(&format!("{{ registry: {{ url: '{}' }} }}", dev.url())).unwrap();
        let d = Decoder::new(&dec, false, None).unwrap();
        let m = Message {
            value: Some(wire),
            ..Message::default()
        };
        d.fetch(std::iter::once(&m)).unwrap();
        let (back, _) = d.decode(m.value.as_deref().unwrap()).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
        let want: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert_eq!(back, want);
        // A missing import says which file it looked for.
        std::fs::remove_file(dir.path().join("line.proto")).unwrap();
        let err = Encoder::new(&cfg, "orders", None).err().unwrap();
        assert!(err.contains("import \"line.proto\""), "{err}");
    }
}
