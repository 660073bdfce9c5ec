//! Plain-HTTP requests to a running pipeline's listener (`runtime.metrics`): what `weir top`
//! and the admin verbs use.

use std::time::Duration;

/// A request that got no HTTP answer.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach {addr}: {reason}")]
pub struct Unreachable {
    /// The address.
    pub addr: String,
    /// Why.
    pub reason: String,
}

/// Normalises `ADDR`: `host:port`, also given as `http://host:port/…`.
pub fn host_port(addr: &str) -> String {
    let a = addr.strip_prefix("http://").unwrap_or(addr);
    a.split('/').next().unwrap_or(a).to_owned()
}

/// `METHOD http://ADDR/PATH` with an optional bearer token and JSON body, waiting at most
/// `timeout`; any HTTP status is an answer: `(status, body)`.
pub fn request(
    method: &str,
    addr: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<(u16, String), Unreachable> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(timeout.min(Duration::from_secs(2)))
        .timeout(timeout)
        .build();
    let url = format!("http://{}{path}", host_port(addr));
    let mut req = agent.request(method, &url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let answer = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let resp = match answer {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => {
            return Err(Unreachable {
                addr: addr.to_owned(),
                reason: t.to_string(),
            })
        }
    };
    let status = resp.status();
    let text = resp.into_string().map_err(|e| Unreachable {
        addr: addr.to_owned(),
        reason: e.to_string(),
    })?;
    Ok((status, text))
}
