//! The HTTP listener on `runtime.metrics`: Prometheus `/metrics`, `/healthz`, `/readyz`, and
//! the admin API over the stages' versions.
//!
//! | request | answer |
//! |---|---|
//! | `GET /stages` | every stage: live hash, policy, rollout in progress and its counters, the last one |
//! | `GET /stages/NAME` | one stage |
//! | `POST /stages/NAME/rollout` | start a rollout: `{"plugin": PATH, "mode": "shadow"\|"canary", ...policy}` |
//! | `POST /stages/NAME/promote` | promote the candidate now |
//! | `POST /stages/NAME/rollback` | roll the candidate back now |
//!
//! The admin API answers loopback clients only, unless `runtime.admin_token_env` names a
//! token: then every admin request must carry `Authorization: Bearer TOKEN` (401 without it,
//! and nothing changes). On a non-loopback address without a token the API answers 403.

use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::{CanaryBy, Observe, Percent, RollbackWhen, RolloutMode};
use crate::metrics::Metrics;
use crate::reload::{Refusal, ReloadRequest};
use crate::rollout::{Decision, StageSlot};

/// The listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics listener {addr}: {reason}")]
pub struct ListenError {
    addr: String,
    reason: String,
}

/// What the listener serves.
pub struct Admin {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The stages.
    pub slots: Vec<Arc<StageSlot>>,
    /// Rollout requests go to the reloader (it loads and checks candidates).
    pub reload: Sender<ReloadRequest>,
    /// The bearer token admin requests must carry, if any.
    pub token: Option<String>,
}

/// A rollout request's body: the candidate, and what differs from the stage's own policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The candidate's file, as the Weir process sees it (absolute, or relative to its
    /// working folder).
    pub plugin: PathBuf,
    /// `shadow` or `canary` (default: the stage's policy, else `shadow`).
    #[serde(default)]
    pub mode: Option<RolloutMode>,
    /// Canary share.
    #[serde(default)]
    pub share: Option<Percent>,
    /// Canary split.
    #[serde(default)]
    pub by: Option<CanaryBy>,
    /// Observation window.
    #[serde(default)]
    pub observe: Option<Observe>,
    /// Rollback conditions.
    #[serde(default)]
    pub rollback_when: Option<RollbackWhen>,
}

/// Serves on `addr` from a background thread; returns the bound address.
pub fn serve(addr: &str, admin: Admin) -> Result<SocketAddr, ListenError> {
    let fail = |reason: String| ListenError {
        addr: addr.to_owned(),
        reason,
    };
    let server = tiny_http::Server::http(addr).map_err(|e| fail(e.to_string()))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| fail("not an IP address".into()))?;
    let loopback = addr
        .to_socket_addrs()
        .map(|mut a| a.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    tracing::info!(%addr, admin = if admin.token.is_some() { "token" } else if loopback { "loopback" } else { "off (no token)" },
        "serving /metrics, /healthz, /readyz, /stages");
    std::thread::Builder::new()
        .name("weir-metrics".into())
        .spawn(move || {
            for mut req in server.incoming_requests() {
                let (code, body, json) = admin.answer(&mut req, loopback);
                let kind = if json {
                    "application/json"
                } else {
                    "text/plain; version=0.0.4"
                };
                let resp = tiny_http::Response::from_string(body)
                    .with_status_code(code)
                    .with_header(
                        tiny_http::Header::from_bytes("Content-Type", kind).expect("valid header"),
                    );
                let _ = req.respond(resp);
            }
        })
        .expect("spawning the metrics thread");
    Ok(bound)
}

type Answer = (u16, String, bool);

fn error(code: u16, message: impl std::fmt::Display) -> Answer {
    (
        code,
        json!({ "error": message.to_string() }).to_string() + "\n",
        true,
    )
}

fn ok(code: u16, v: Value) -> Answer {
    (code, v.to_string() + "\n", true)
}

impl Admin {
    fn answer(&self, req: &mut tiny_http::Request, loopback: bool) -> Answer {
        let url = req.url().to_owned();
        let path = url.split('?').next().unwrap_or("");
        match path {
            "/metrics" => {
                let text = self.metrics.render();
                return (200, crate::redact::redact(&text).into_owned(), false);
            }
            "/healthz" => return (200, "ok\n".to_owned(), false),
            "/readyz" if self.metrics.ready.load(Ordering::Relaxed) => {
                return (200, "ready\n".to_owned(), false)
            }
            "/readyz" => return (503, "starting\n".to_owned(), false),
            _ => {}
        }
        let Some(rest) = path.strip_prefix("/stages") else {
            return (404, "not found\n".to_owned(), false);
        };
        if let Some(refused) = self.authorize(req, loopback) {
            return refused;
        }
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let method = req.method().clone();
        use tiny_http::Method::{Get, Post};
        match (method, parts.as_slice()) {
            (Get, []) => ok(
                200,
                json!({ "stages": self.slots.iter().map(|s| s.status()).collect::<Vec<_>>() }),
            ),
            (Get, [name]) => match self.slot(name) {
                Some(s) => ok(200, s.status()),
                None => error(404, format!("no stage named `{name}`")),
            },
            (Post, [name, "rollout"]) => self.rollout(req, name),
            (Post, [name, verb @ ("promote" | "rollback")]) => {
                let Some(slot) = self.slot(name) else {
                    return error(404, format!("no stage named `{name}`"));
                };
                let decision = if *verb == "promote" {
                    Decision::Promote
                } else {
                    Decision::Rollback
                };
                match slot.end_by_hand(decision) {
                    Ok(record) => ok(200, json!(record)),
                    Err(e) => error(409, e),
                }
            }
            (_, [] | [_] | [_, "rollout" | "promote" | "rollback"]) => {
                error(405, "method not allowed")
            }
            _ => error(404, "not found"),
        }
    }

    /// `None` when the request may go on; else the refusal.
    fn authorize(&self, req: &tiny_http::Request, loopback: bool) -> Option<Answer> {
        match &self.token {
            Some(token) => {
                let given = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .map(|h| h.value.as_str().trim().to_owned());
                let expected = format!("Bearer {token}");
                let good =
                    given.is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes()));
                (!good).then(|| {
                    error(
                        401,
                        "the admin API needs `Authorization: Bearer TOKEN` (the token in runtime.admin_token_env)",
                    )
                })
            }
            None if loopback => None,
            None => Some(error(
                403,
                "the admin API is off on a non-loopback address: set runtime.admin_token_env",
            )),
        }
    }

    fn slot(&self, name: &str) -> Option<&Arc<StageSlot>> {
        self.slots.iter().find(|s| &*s.spec.name == name)
    }

    fn rollout(&self, req: &mut tiny_http::Request, name: &str) -> Answer {
        let Some(slot) = self.slot(name) else {
            return error(404, format!("no stage named `{name}`"));
        };
        let mut body = String::new();
        if let Err(e) = req.as_reader().take(1 << 16).read_to_string(&mut body) {
            return error(400, format!("cannot read the request: {e}"));
        }
        let r: RolloutRequest = match serde_json::from_str(&body) {
            Ok(r) => r,
            Err(e) => return error(400, format!("bad rollout request: {e}")),
        };
        let mut policy = slot.policy.clone();
        policy.mode = match r.mode.unwrap_or(policy.mode) {
            RolloutMode::Immediate => RolloutMode::Shadow,
            m => m,
        };
        policy.candidate = Some(r.plugin.clone());
        if let Some(v) = r.share {
            policy.share = v;
        }
        if let Some(v) = r.by {
            policy.by = v;
        }
        if let Some(v) = r.observe {
            policy.observe = v;
        }
        if let Some(v) = r.rollback_when {
            policy.rollback_when = v;
        }
        if policy.mode == RolloutMode::Canary && policy.share.0 <= 0.0 {
            return error(400, "a canary needs a share above 0%");
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let sent = self.reload.send(ReloadRequest::Rollout {
            stage: name.to_owned(),
            plugin: r.plugin,
            policy,
            reply: tx,
        });
        if sent.is_err() {
            return error(503, "the pipeline is shutting down");
        }
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(Ok(record)) => ok(202, json!(record)),
            Ok(Err(Refusal { status, message })) => error(status, message),
            Err(_) => error(503, "the reloader did not answer"),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
