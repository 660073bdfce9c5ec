//! A small Confluent-compatible schema registry for development and tests (`weir broker
//! --schema-registry`): register, look up, get by id, latest by subject, with Confluent's
//! JSON error bodies. It keeps everything in memory, checks that an Avro schema parses, and
//! checks no compatibility. Not for production.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

#[derive(Clone)]
struct Stored {
    kind: String,
    text: String,
    references: Value,
}

#[derive(Default)]
struct State {
    schemas: Vec<Stored>,
    ids: HashMap<(String, String), u32>,
    /// Per subject, the ids of its versions (version = index + 1).
    subjects: BTreeMap<String, Vec<u32>>,
}

/// A running development registry.
pub struct DevRegistry {
    url: String,
    down: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
}

impl Drop for DevRegistry {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

struct Answer(u16, Value);

fn error(status: u16, code: u32, message: String) -> Answer {
    Answer(status, json!({ "error_code": code, "message": message }))
}

impl DevRegistry {
    /// Listens on `addr` (`127.0.0.1:0` picks a port) and serves until dropped.
    pub fn start(addr: &str) -> Result<Self, String> {
        let server = Arc::new(
            tiny_http::Server::http(addr).map_err(|e| format!("schema registry on {addr}: {e}"))?,
        );
        let url = format!(
            "http://{}",
            server
                .server_addr()
                .to_ip()
                .ok_or("the schema registry is not on an IP address")?
        );
        let down = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(State::default()));
        for _ in 0..2 {
            let (server, down, state) = (server.clone(), down.clone(), state.clone());
            std::thread::Builder::new()
                .name("weir-dev-registry".into())
                .spawn(move || {
                    for mut req in server.incoming_requests() {
                        let answer = if down.load(Ordering::Relaxed) {
                            error(503, 50301, "the registry is down (`registry-down`)".into())
                        } else {
                            let mut body = String::new();
                            let _ = req.as_reader().read_to_string(&mut body);
                            let mut st = state.lock().expect("registry state");
                            answer(&mut st, req.method(), req.url(), &body)
                        };
                        let resp = tiny_http::Response::from_string(answer.1.to_string())
                            .with_status_code(answer.0)
                            .with_header(
                                tiny_http::Header::from_bytes(
                                    "Content-Type",
                                    "application/vnd.schemaregistry.v1+json",
                                )
                                .expect("valid header"),
                            );
                        let _ = req.respond(resp);
                    }
                })
                .map_err(|e| format!("schema registry thread: {e}"))?;
        }
        Ok(DevRegistry { url, down, server })
    }

    /// Its address (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// While down, every request is answered 503 (for trying Weir's hold).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }
}

fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

fn answer(st: &mut State, method: &tiny_http::Method, url: &str, body: &str) -> Answer {
    use tiny_http::Method::{Delete, Get, Post, Put};
    let path = url.split('?').next().unwrap_or("");
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .map(decode)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match (method, &parts[..]) {
        (Get, []) => Answer(200, json!({})),
        (Get, ["schemas", "types"]) => Answer(200, json!(["AVRO", "PROTOBUF", "JSON"])),
        (Get, ["config"]) | (Get, ["config", _]) => {
            Answer(200, json!({ "compatibilityLevel": "NONE" }))
        }
        (Put, ["config"]) | (Put, ["config", _]) => Answer(
            200,
            serde_json::from_str::<Value>(body).unwrap_or(json!({})),
        ),
        (Get, ["subjects"]) => Answer(200, json!(st.subjects.keys().collect::<Vec<_>>())),
        (Get, ["schemas", "ids", id]) => match by_id(st, id) {
            Some((_, s)) => Answer(200, schema_json(s, None)),
            None => error(404, 40403, format!("Schema {id} not found")),
        },
        (Get, ["schemas", "ids", id, "versions"]) => match by_id(st, id) {
            Some((id, _)) => Answer(200, json!(versions_of(st, id))),
            None => error(404, 40403, format!("Schema {id} not found")),
        },
        (Get, ["schemas", "ids", id, "subjects"]) => match by_id(st, id) {
            Some((id, _)) => Answer(
                200,
                json!(versions_of(st, id)
                    .into_iter()
                    .map(|v| v["subject"].clone())
                    .collect::<Vec<_>>()),
            ),
            None => error(404, 40403, format!("Schema {id} not found")),
        },
        (Get, ["subjects", subject, "versions"]) => match st.subjects.get(*subject) {
            Some(v) => Answer(200, json!((1..=v.len()).collect::<Vec<_>>())),
            None => subject_not_found(subject),
        },
        (Get, ["subjects", subject, "versions", version]) => {
            version_json(st, subject, version).unwrap_or_else(|e| e)
        }
        (Get, ["subjects", subject, "versions", version, "schema"]) => {
            match version_json(st, subject, version) {
                Ok(Answer(_, v)) => Answer(
                    200,
                    serde_json::from_str(v["schema"].as_str().unwrap_or("null"))
                        .unwrap_or(Value::Null),
                ),
                Err(e) => e,
            }
        }
        (Post, ["subjects", subject, "versions"]) => register(st, subject, body),
        (Post, ["subjects", subject]) => lookup(st, subject, body),
        (Delete, ["subjects", subject]) => match st.subjects.remove(*subject) {
            Some(v) => Answer(200, json!((1..=v.len()).collect::<Vec<_>>())),
            None => subject_not_found(subject),
        },
        _ => error(
            404,
            404,
            format!("{method} {path}: not served by this development registry"),
        ),
    }
}

fn subject_not_found(subject: &str) -> Answer {
    error(404, 40401, format!("Subject '{subject}' not found."))
}

fn by_id<'a>(st: &'a State, id: &str) -> Option<(u32, &'a Stored)> {
    let id: u32 = id.parse().ok()?;
    st.schemas
        .get((id as usize).checked_sub(1)?)
        .map(|s| (id, s))
}

fn versions_of(st: &State, id: u32) -> Vec<Value> {
    st.subjects
        .iter()
        .flat_map(|(subject, ids)| {
            ids.iter()
                .enumerate()
                .filter(move |(_, i)| **i == id)
                .map(move |(v, _)| json!({ "subject": subject, "version": v + 1 }))
        })
        .collect()
}

fn schema_json(s: &Stored, extra: Option<(&str, usize, u32)>) -> Value {
    let mut v = json!({ "schema": s.text });
    if s.kind != "AVRO" {
        v["schemaType"] = s.kind.clone().into();
    }
    if s.references.as_array().is_some_and(|r| !r.is_empty()) {
        v["references"] = s.references.clone();
    }
    if let Some((subject, version, id)) = extra {
        v["subject"] = subject.into();
        v["version"] = version.into();
        v["id"] = id.into();
    }
    v
}

fn version_json(st: &State, subject: &str, version: &str) -> Result<Answer, Answer> {
    let ids = st
        .subjects
        .get(subject)
        .ok_or_else(|| subject_not_found(subject))?;
    let n = match version {
        "latest" | "-1" => ids.len(),
        v => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=ids.len()).contains(n))
            .ok_or_else(|| error(404, 40402, format!("Version {v} not found.")))?,
    };
    let id = ids[n - 1];
    Ok(Answer(
        200,
        schema_json(&st.schemas[id as usize - 1], Some((subject, n, id))),
    ))
}

/// The schema a request body carries: its type, text and references.
fn parse_body(st: &State, body: &str) -> Result<Stored, Answer> {
    let v: Value = serde_json::from_str(body).map_err(|e| {
        error(
            422,
            42201,
            format!("Invalid schema: the request is not JSON: {e}"),
        )
    })?;
    let text = v["schema"]
        .as_str()
        .ok_or_else(|| error(422, 42201, "Invalid schema: no `schema`".into()))?
        .to_owned();
    let kind = v["schemaType"].as_str().unwrap_or("AVRO").to_owned();
    let references = v.get("references").cloned().unwrap_or(json!([]));
    let Ok(parsed_kind) = super::registry::SchemaKind::parse(Some(&kind)) else {
        return Err(error(422, 42201, format!("Invalid schema type {kind}")));
    };
    let mut refs = Vec::new();
    for r in references.as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap_or("").to_owned();
        let subject = r["subject"].as_str().unwrap_or("");
        let version = r["version"].to_string();
        match version_json(st, subject, &version) {
            Ok(Answer(_, s)) => refs.push((name, s["schema"].as_str().unwrap_or("").to_owned())),
            Err(_) => {
                return Err(error(
                    422,
                    42201,
                    format!("Invalid schema: reference {subject} version {version} not found"),
                ))
            }
        }
    }
    super::registry::Compiled::parse(parsed_kind, "schema.proto", &text, &refs)
        .map_err(|e| error(422, 42201, format!("Invalid schema: {e}")))?;
    Ok(Stored {
        kind,
        text,
        references,
    })
}

/// The text a schema is known by: Avro compacted (whitespace does not make a new id).
fn canonical(s: &Stored) -> String {
    if s.kind == "AVRO" || s.kind == "JSON" {
        if let Ok(v) = serde_json::from_str::<Value>(&s.text) {
            return v.to_string();
        }
    }
    s.text.clone()
}

fn register(st: &mut State, subject: &str, body: &str) -> Answer {
    let s = match parse_body(st, body) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let key = (s.kind.clone(), canonical(&s));
    let id = match st.ids.get(&key) {
        Some(id) => *id,
        None => {
            st.schemas.push(s);
            let id = st.schemas.len() as u32;
            st.ids.insert(key, id);
            id
        }
    };
    let versions = st.subjects.entry(subject.to_owned()).or_default();
    let version = match versions.iter().position(|i| *i == id) {
        Some(v) => v + 1,
        None => {
            versions.push(id);
            versions.len()
        }
    };
    Answer(
        200,
        json!({ "id": id, "subject": subject, "version": version }),
    )
}

fn lookup(st: &mut State, subject: &str, body: &str) -> Answer {
    let s = match parse_body(st, body) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let Some(versions) = st.subjects.get(subject) else {
        return subject_not_found(subject);
    };
    let found = st
        .ids
        .get(&(s.kind.clone(), canonical(&s)))
        .and_then(|id| versions.iter().position(|i| i == id).map(|v| (*id, v + 1)));
    match found {
        Some((id, version)) => Answer(
            200,
            schema_json(&st.schemas[id as usize - 1], Some((subject, version, id))),
        ),
        None => error(404, 40403, "Schema not found".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::RegistryConfig;
    use crate::schema::registry::{LookupError, Registry, SchemaKind};

    fn client(url: &str) -> Arc<Registry> {
        let cfg: RegistryConfig =
            serde_yaml::from_str(&format!("{{ url: '{url}', cache_ttl: 1h }}")).unwrap();
        Registry::new(&cfg, None).unwrap()
    }

    #[test]
    fn the_client_registers_looks_up_and_caches_against_the_dev_registry() {
        let dev = DevRegistry::start("127.0.0.1:0").unwrap();
        let r = client(dev.url());
        let v1 = r#"{"type":"record","name":"T","fields":[{"name":"a","type":"int"}]}"#;
        let missing = r
            .id_of("t-value", SchemaKind::Avro, v1, &[], false)
            .unwrap_err();
        assert!(matches!(missing, LookupError::NotFound(_)), "{missing:?}");
        let s = r.id_of("t-value", SchemaKind::Avro, v1, &[], true).unwrap();
        assert_eq!(s.id, 1);
        assert_eq!(s.subject, Some(("t-value".into(), 1)));
        // The same schema in other whitespace is the same id.
        let again = r
            .id_of(
                "t-value",
                SchemaKind::Avro,
                &v1.replace(',', ", "),
                &[],
                false,
            )
            .unwrap();
        assert_eq!(again.id, 1);
        assert_eq!(r.latest("t-value").unwrap().id, 1);
        assert!(matches!(r.by_id(9), Err(LookupError::NotFound(_))));
        assert!(matches!(
            r.id_of(
                "t-value",
                SchemaKind::Avro,
                "{\"type\":\"nope\"}",
                &[],
                true
            ),
            Err(LookupError::Refused(_))
        ));
        // Down: by id from the cache, the latest from its (fresh) cache, the rest unavailable.
        dev.set_down(true);
        assert_eq!(r.by_id(1).unwrap().id, 1);
        assert_eq!(r.latest("t-value").unwrap().id, 1);
        assert!(matches!(r.by_id(2), Err(LookupError::Unavailable(_))));
        dev.set_down(false);
        drop(dev);
        assert!(matches!(
            client("http://127.0.0.1:9").by_id(1),
            Err(LookupError::Unavailable(_))
        ));
    }
}
