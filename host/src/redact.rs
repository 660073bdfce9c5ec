//! Secrets out of everything Weir prints.
//!
//! Every secret the pipeline holds (the `security` block's passwords and client secrets, and
//! the values of sensitive librdkafka `properties` such as `sasl.password`) is registered here
//! when the YAML is loaded. The log writer, error lines, the run report and `/metrics` pass
//! their text through [`redact`], so a secret that reaches any of them (a library's error
//! message quoting it, say) shows as `[redacted]`.

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

/// Shorter values are not registered: replacing every `ab` in the logs would hide more than it
/// protects (and a two-character password protects nothing).
const MIN_LEN: usize = 4;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What a secret is replaced with.
pub const MASK: &str = "[redacted]";

/// Registers a secret value.
pub fn register(secret: &str) {
    if secret.len() < MIN_LEN {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| s == secret) {
        all.push(secret.to_owned());
        // Longest first, so a secret that contains another is masked whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Whether a librdkafka property holds a secret (its value is registered).
pub fn is_sensitive_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "jaas",
        ".pem",
        "oauthbearer.config",
        "token",
    ]
    .iter()
    .any(|w| k.contains(w))
        && !k.ends_with(".location")
        && !k.ends_with(".url")
}

/// `text` with every registered secret replaced by [`MASK`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let all = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    if all.iter().all(|s| !text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for s in all.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    Cow::Owned(out)
}

/// A writer that redacts what passes through it (for the log).
pub struct Redacting<W>(pub W);

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => match redact(text) {
                Cow::Borrowed(_) => self.0.write_all(buf)?,
                Cow::Owned(masked) => self.0.write_all(masked.as_bytes())?,
            },
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_secret_is_masked_wherever_it_appears() {
        register("correct-horse-battery");
        register("horse");
        let out = redact("auth failed for correct-horse-battery; retry with horse");
        assert_eq!(out, format!("auth failed for {MASK}; retry with {MASK}"));
        assert!(matches!(redact("nothing to hide"), Cow::Borrowed(_)));
        register("ab");
        assert_eq!(redact("about"), "about", "too short to register");
        let mut buf = Vec::new();
        write!(Redacting(&mut buf), "x correct-horse-battery y").expect("write");
        assert_eq!(String::from_utf8(buf).expect("utf8"), format!("x {MASK} y"));
    }

    #[test]
    fn sensitive_properties_are_recognised() {
        for k in [
            "sasl.password",
            "ssl.key.password",
            "sasl.oauthbearer.client.secret",
            "sasl.jaas.config",
            "ssl.key.pem",
            "sasl.oauthbearer.config",
        ] {
            assert!(is_sensitive_property(k), "{k}");
        }
        for k in [
            "sasl.username",
            "ssl.key.location",
            "sasl.oauthbearer.token.endpoint.url",
            "linger.ms",
        ] {
            assert!(!is_sensitive_property(k), "{k}");
        }
    }
}
