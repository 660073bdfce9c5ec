//! A Confluent-compatible schema-registry client with a cache: schemas by id are kept for the
//! run (an id never changes its schema), a subject's latest version for `cache_ttl`. A
//! steady-state decode or encode makes no request.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

use super::avro::AvroSchema;
use super::json_schema::JsonSchema;
use super::protobuf::ProtoSchema;
use crate::config::schema::RegistryConfig;
use crate::message::Header;
use crate::metrics::Metrics;

/// A schema's type as the registry names it (`schemaType`; absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    /// `AVRO`.
    Avro,
    /// `PROTOBUF`.
    Protobuf,
    /// `JSON`.
    Json,
}

impl SchemaKind {
    /// The kind the registry's `schemaType` names (absent: Avro).
    pub fn parse(s: Option<&str>) -> Result<Self, String> {
        match s.unwrap_or("AVRO") {
            "AVRO" => Ok(SchemaKind::Avro),
            "PROTOBUF" => Ok(SchemaKind::Protobuf),
            "JSON" => Ok(SchemaKind::Json),
            other => Err(format!("unknown schema type `{other}`")),
        }
    }

    /// The registry's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaKind::Avro => "AVRO",
            SchemaKind::Protobuf => "PROTOBUF",
            SchemaKind::Json => "JSON",
        }
    }
}

/// A schema the registry holds, compiled for use.
#[derive(Debug)]
pub struct Registered {
    /// Its global id.
    pub id: u32,
    /// Its type.
    pub kind: SchemaKind,
    /// A subject it is registered under, and the version there (when the registry says).
    pub subject: Option<(String, i32)>,
    /// The compiled schema, or why it could not be compiled (it cannot be used, but the
    /// answer is final).
    pub compiled: Result<Compiled, String>,
    /// The headers of records decoded with it, made at the first one.
    headers: OnceLock<Vec<Header>>,
}

/// Headers the decoder adds: the schema of the decoded value.
pub const HEADER_ID: &str = "weir.schema.id";
/// The subject the schema is registered under (when the registry says).
pub const HEADER_SUBJECT: &str = "weir.schema.subject";
/// Its version there.
pub const HEADER_VERSION: &str = "weir.schema.version";

impl Registered {
    /// The `weir.schema.*` headers of the records decoded with this schema: its id, and the
    /// subject and version it is registered under when the registry said. Their values are
    /// made once and kept for the process's life, as the schema itself is (a registry's
    /// cache by id is never emptied), so that every decoded record shares them instead of
    /// allocating its own.
    pub fn headers(&self) -> &[Header] {
        self.headers.get_or_init(|| {
            let header = |key: &'static str, value: String| Header {
                key: key.into(),
                value: Some(Cow::Borrowed(Box::leak(
                    value.into_bytes().into_boxed_slice(),
                ))),
            };
            let mut headers = vec![header(HEADER_ID, self.id.to_string())];
            if let Some((subject, version)) = &self.subject {
                headers.push(header(HEADER_SUBJECT, subject.clone()));
                headers.push(header(HEADER_VERSION, version.to_string()));
            }
            headers
        })
    }
}

/// A schema compiled for decoding and encoding.
#[derive(Debug)]
pub enum Compiled {
    /// Avro.
    Avro(AvroSchema),
    /// Protobuf.
    Protobuf(ProtoSchema),
    /// JSON Schema.
    Json(JsonSchema),
}

impl Compiled {
    /// Compiles a schema of `kind` with the schemas it references, (name, text) pairs in
    /// the order they are needed. `name` is what `.proto` source is called when it has none.
    pub fn parse(
        kind: SchemaKind,
        name: &str,
        text: &str,
        refs: &[(String, String)],
    ) -> Result<Self, String> {
        match kind {
            SchemaKind::Avro => {
                let texts: Vec<&str> = refs.iter().map(|(_, t)| t.as_str()).collect();
                AvroSchema::parse(text, &texts)
                    .map(Compiled::Avro)
                    .map_err(|e| e.to_string())
            }
            SchemaKind::Protobuf => ProtoSchema::parse(name, text, refs).map(Compiled::Protobuf),
            SchemaKind::Json => JsonSchema::parse(text, refs).map(Compiled::Json),
        }
    }
}

/// Why a look-up gave no schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The registry answered that it has no such schema or subject: final.
    #[error("{0}")]
    NotFound(String),
    /// The registry refused the request for good (an invalid schema, incompatible).
    #[error("{0}")]
    Refused(String),
    /// The registry could not be asked or answered an error that may pass (down, timeout,
    /// 5xx, 429, credentials refused): try again later.
    #[error("{0}")]
    Unavailable(String),
}

impl LookupError {
    /// The same kind of error with its text changed.
    pub fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            LookupError::NotFound(s) => LookupError::NotFound(f(s)),
            LookupError::Refused(s) => LookupError::Refused(f(s)),
            LookupError::Unavailable(s) => LookupError::Unavailable(f(s)),
        }
    }
}

/// The client.
pub struct Registry {
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
    ttl: Duration,
    /// Looked up once per decoded message: a fast hash for the small integer key.
    by_id: RwLock<HashMap<u32, Arc<Registered>, foldhash::fast::RandomState>>,
    by_subject: Mutex<HashMap<String, (Instant, Arc<Registered>)>>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("url", &self.base).finish()
    }
}

/// Characters a subject keeps in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
    #[serde(default)]
    id: Option<u32>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    version: Option<i32>,
}

#[derive(Deserialize, Clone)]
struct Reference {
    /// How the schema names it (an import path, a `$ref`, an Avro name).
    #[serde(default)]
    name: String,
    subject: String,
    version: i32,
}

#[derive(Deserialize)]
struct SubjectVersion {
    subject: String,
    version: i32,
}

impl Registry {
    /// A client for the registry in `cfg` (reads credential files now).
    pub fn new(cfg: &RegistryConfig, metrics: Option<Arc<Metrics>>) -> Result<Arc<Self>, String> {
        let base = cfg.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "registry url `{base}`: expected http:// or https://"
            ));
        }
        let mut tls = native_tls::TlsConnector::builder();
        if let Some(ca) = &cfg.ca {
            let pem =
                std::fs::read(ca).map_err(|e| format!("{}: cannot read: {e}", ca.display()))?;
            let cert = native_tls::Certificate::from_pem(&pem)
                .map_err(|e| format!("{}: not a PEM certificate: {e}", ca.display()))?;
            tls.add_root_certificate(cert);
        }
        let tls = tls
            .build()
            .map_err(|e| format!("TLS for the registry: {e}"))?;
        let agent = ureq::AgentBuilder::new()
            .timeout(cfg.timeout)
            .tls_connector(Arc::new(tls))
            .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")))
            .build();
        let auth = cfg.auth.as_ref().map(|a| a.header()).transpose()?;
        Ok(Arc::new(Registry {
            base,
            agent,
            auth,
            ttl: cfg.cache_ttl,
            by_id: RwLock::default(),
            by_subject: Mutex::default(),
            metrics,
        }))
    }

    /// How long a subject's latest version is trusted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The registry's address.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Whether the schema is in the cache (not counted as a hit).
    pub fn has(&self, id: u32) -> bool {
        self.by_id.read().expect("registry cache").contains_key(&id)
    }

    /// A schema already in the cache (no request).
    pub fn cached(&self, id: u32) -> Option<Arc<Registered>> {
        let hit = self.by_id.read().expect("registry cache").get(&id).cloned();
        if hit.is_some() {
            if let Some(m) = &self.metrics {
                m.schema_cache_hits.inc();
            }
        }
        hit
    }

    /// Counts `n` cache hits found without asking the cache (a decoder's last schema).
    pub fn count_hits(&self, n: u64) {
        if let (Some(m), 1..) = (&self.metrics, n) {
            m.schema_cache_hits.inc_by(n);
        }
    }

    /// The schema with this id: from the cache, else from the registry (then kept).
    pub fn by_id(&self, id: u32) -> Result<Arc<Registered>, LookupError> {
        if let Some(r) = self.cached(id) {
            return Ok(r);
        }
        let body: SchemaBody = self.get("id", &format!("/schemas/ids/{id}"))?;
        // The subject and version it is registered under, for the stage's headers (older
        // registries lack the call: then there are none).
        let subject = self
            .get::<Vec<SubjectVersion>>("id", &format!("/schemas/ids/{id}/versions"))
            .ok()
            .and_then(|v| v.into_iter().next())
            .map(|v| (v.subject, v.version));
        let r = Arc::new(self.compile(id, body, subject)?);
        self.by_id
            .write()
            .expect("registry cache")
            .insert(id, r.clone());
        Ok(r)
    }

    /// A subject's latest version: from the cache while younger than `cache_ttl`. When the
    /// registry cannot be reached, an older cached answer is used (and said in the log).
    pub fn latest(&self, subject: &str) -> Result<Arc<Registered>, LookupError> {
        let cached = self
            .by_subject
            .lock()
            .expect("registry cache")
            .get(subject)
            .cloned();
        if let Some((at, r)) = &cached {
            if at.elapsed() < self.ttl {
                if let Some(m) = &self.metrics {
                    m.schema_cache_hits.inc();
                }
                return Ok(r.clone());
            }
        }
        let path = format!("/subjects/{}/versions/latest", segment(subject));
        let body = match self.get::<SchemaBody>("subject", &path) {
            Ok(b) => b,
            Err(LookupError::Unavailable(why)) if cached.is_some() => {
                tracing::warn!(registry = %self.base, subject, "{why}: using the cached latest version");
                return Ok(cached.expect("checked").1);
            }
            Err(e) => return Err(e),
        };
        let id = body
            .id
            .ok_or_else(|| LookupError::Refused(format!("{path}: the answer has no `id`")))?;
        let version = body.version.unwrap_or(0);
        let r = match self.by_id.read().expect("registry cache").get(&id).cloned() {
            Some(r) => r,
            None => Arc::new(self.compile(id, body, Some((subject.to_owned(), version)))?),
        };
        self.by_id
            .write()
            .expect("registry cache")
            .entry(id)
            .or_insert_with(|| r.clone());
        self.by_subject
            .lock()
            .expect("registry cache")
            .insert(subject.to_owned(), (Instant::now(), r.clone()));
        Ok(r)
    }

    /// The id of `schema` under `subject`: looked up, and registered when it is not there
    /// and `register` is set. `imports` are the local `.proto` files it imports (each after the
    /// ones it imports): each is looked up (registered) first under its import name as the
    /// subject, Confluent's convention, and referenced by the ones that import it.
    pub fn id_of(
        &self,
        subject: &str,
        kind: SchemaKind,
        schema: &str,
        imports: &[super::protobuf::LocalImport],
        register: bool,
    ) -> Result<Arc<Registered>, LookupError> {
        let mut versions: HashMap<&str, i32> = HashMap::new();
        let body = |text: &str, refs: &[String], versions: &HashMap<&str, i32>| {
            let mut body = serde_json::json!({ "schema": text });
            if kind != SchemaKind::Avro {
                body["schemaType"] = kind.as_str().into();
            }
            if !refs.is_empty() {
                body["references"] = refs
                    .iter()
                    .map(|r| {
                        serde_json::json!({ "name": r, "subject": r, "version": versions.get(r.as_str()).copied().unwrap_or(1) })
                    })
                    .collect();
            }
            body
        };
        for imp in imports {
            let b = body(&imp.text, &imp.imports, &versions);
            let (_, version) = self
                .find_or_register(&imp.name, &b, register)
                .map_err(|e| e.map(|why| format!("import \"{}\": {why}", imp.name)))?;
            versions.insert(&imp.name, version);
        }
        let direct = if imports.is_empty() {
            Vec::new()
        } else {
            super::protobuf::imports_of("schema.proto", schema).map_err(LookupError::Refused)?
        };
        let (id, _) =
            self.find_or_register(subject, &body(schema, &direct, &versions), register)?;
        self.by_id(id)
    }

    /// The id and version of the schema in `body` under `subject`: looked up, and registered
    /// when it is not there and `register` is set.
    fn find_or_register(
        &self,
        subject: &str,
        body: &serde_json::Value,
        register: bool,
    ) -> Result<(u32, i32), LookupError> {
        let path = format!("/subjects/{}", segment(subject));
        let found = |b: SchemaBody| {
            let id =
                b.id.ok_or_else(|| LookupError::Refused("the answer has no `id`".into()))?;
            Ok((id, b.version.unwrap_or(1)))
        };
        match self.post::<SchemaBody>("subject", &path, body) {
            Ok(b) => found(b),
            Err(LookupError::NotFound(why)) if !register => Err(LookupError::NotFound(format!(
                "subject `{subject}` does not hold this schema ({why}); set `auto_register: true` to register it"
            ))),
            Err(LookupError::NotFound(_)) => {
                let versions = format!("/subjects/{}/versions", segment(subject));
                // The answer is `{"id": N}`; the version comes from looking it up again.
                self.post::<serde_json::Value>("register", &versions, body)?;
                found(self.post::<SchemaBody>("subject", &path, body)?)
            }
            Err(e) => Err(e),
        }
    }

    fn compile(
        &self,
        id: u32,
        body: SchemaBody,
        subject: Option<(String, i32)>,
    ) -> Result<Registered, LookupError> {
        let kind = SchemaKind::parse(body.schema_type.as_deref()).map_err(LookupError::Refused)?;
        let refs = self.references(&body.references, 0)?;
        let compiled = Compiled::parse(kind, &format!("schema-{id}.proto"), &body.schema, &refs)
            .map_err(|e| format!("schema {id}: {e}"));
        Ok(Registered {
            id,
            kind,
            subject: subject.or(body.subject.zip(body.version)),
            compiled,
            headers: OnceLock::new(),
        })
    }

    /// The (name, text) of referenced schemas, each after the ones it references.
    fn references(
        &self,
        refs: &[Reference],
        depth: usize,
    ) -> Result<Vec<(String, String)>, LookupError> {
        if depth > 32 {
            return Err(LookupError::Refused(
                "schema references nest deeper than 32".into(),
            ));
        }
        let mut out: Vec<(String, String)> = Vec::new();
        for r in refs {
            let path = format!("/subjects/{}/versions/{}", segment(&r.subject), r.version);
            let body: SchemaBody = self.get("subject", &path)?;
            for t in self.references(&body.references, depth + 1)? {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
            let own = (r.name.clone(), body.schema);
            if !out.contains(&own) {
                out.push(own);
            }
        }
        Ok(out)
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        path: &str,
    ) -> Result<T, LookupError> {
        let req = self.agent.get(&format!("{}{path}", self.base));
        self.send(kind, path, req, None)
    }

    fn post<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, LookupError> {
        let req = self.agent.post(&format!("{}{path}", self.base));
        self.send(kind, path, req, Some(body))
    }

    fn send<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        path: &str,
        mut req: ureq::Request,
        body: Option<&serde_json::Value>,
    ) -> Result<T, LookupError> {
        req = req.set(
            "Accept",
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some(a) = &self.auth {
            req = req.set("Authorization", a);
        }
        let res = match body {
            Some(b) => req
                .set("Content-Type", "application/vnd.schemaregistry.v1+json")
                .send_string(&b.to_string()),
            None => req.call(),
        };
        let out = match res {
            Ok(resp) => resp.into_json::<T>().map_err(|e| {
                LookupError::Unavailable(format!("{}{path}: unreadable answer: {e}", self.base))
            }),
            Err(ureq::Error::Status(code, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                let message = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                    .unwrap_or(text);
                let why = format!("{}{path}: HTTP {code}: {message}", self.base);
                Err(match code {
                    404 => LookupError::NotFound(why),
                    408 | 429 | 401 | 403 | 500..=599 => LookupError::Unavailable(why),
                    _ => LookupError::Refused(why),
                })
            }
            Err(e) => Err(LookupError::Unavailable(format!(
                "{}{path}: {e}",
                self.base
            ))),
        };
        if let Some(m) = &self.metrics {
            let result = match &out {
                Ok(_) => "ok",
                Err(LookupError::NotFound(_)) => "not_found",
                Err(LookupError::Refused(_)) => "refused",
                Err(LookupError::Unavailable(_)) => "unavailable",
            };
            m.schema_lookups.with_label_values(&[kind, result]).inc();
        }
        out
    }
}

fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}
