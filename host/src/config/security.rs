//! How a Kafka client connects: TLS and SASL (the `security` block), and the secrets it holds.
//!
//! One block at the top of the pipeline applies to every Kafka client (source, sink, reject
//! path); a `security` block inside one of them replaces it for that client. Secrets come from
//! the YAML (usually `${ENV}`) or from a `*_file` path (as Kubernetes mounts them); either way
//! they are registered with [`crate::redact`] at load, so no log line, error, report, `weir
//! check` output or `/metrics` answer shows them.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::property_text;

/// A secret value: never printed (`Debug` shows `***`).
#[derive(Clone, Default, PartialEq, Eq, JsonSchema)]
#[schemars(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret from text (registered for redaction).
    pub fn new(text: impl Into<String>) -> Self {
        let s = Secret(text.into());
        crate::redact::register(&s.0);
        s
    }

    /// A secret from a file (a trailing newline is not part of it), as Kubernetes mounts them.
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        std::fs::read_to_string(path)
            .map(|t| Secret::new(t.trim_end_matches(['\r', '\n'])))
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))
    }

    /// The value, for the Kafka client only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Any scalar (a numeric password is a number in YAML); never echoed in an error.
        let v = serde_yaml::Value::deserialize(d)?;
        match v {
            serde_yaml::Value::Mapping(_) | serde_yaml::Value::Sequence(_) => Err(
                serde::de::Error::custom("expected a text value (the secret itself, or `${ENV}`)"),
            ),
            v => Ok(Secret::new(property_text(&v))),
        }
    }
}

/// How a client connects and authenticates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Security {
    /// `plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl`. Default: `sasl_ssl` when `sasl` is
    /// set, `ssl` when `ca`, `cert` or `key` is, else `plaintext`.
    #[serde(default)]
    pub protocol: Option<SecurityProtocol>,
    /// CA certificate file (PEM) the brokers' certificates are verified against. Default: the
    /// system's trust store.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM; may be encrypted, see `key_password`).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Password of an encrypted `key`.
    #[serde(default)]
    pub key_password: Option<Secret>,
    /// A file holding `key_password` (trailing newline ignored).
    #[serde(default)]
    pub key_password_file: Option<PathBuf>,
    /// Check that the broker's certificate names the host connected to (default: on).
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
    /// SASL authentication.
    #[serde(default)]
    pub sasl: Option<Sasl>,
}

fn default_true() -> bool {
    true
}

/// The wire protocol of a client's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[serde(alias = "PLAINTEXT")]
    Plaintext,
    /// TLS.
    #[serde(alias = "SSL")]
    Ssl,
    /// SASL without TLS (the password crosses the network in the clear with PLAIN).
    #[serde(alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    /// SASL over TLS.
    #[serde(alias = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    /// librdkafka's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// SASL settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sasl {
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER` (OIDC client credentials).
    pub mechanism: SaslMechanism,
    /// User name (PLAIN, SCRAM).
    #[serde(default)]
    pub username: Option<String>,
    /// Password (PLAIN, SCRAM); usually `${ENV}`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// OAUTHBEARER: the OIDC token endpoint (`https://…/oauth2/token`).
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// OAUTHBEARER: the OIDC client id.
    #[serde(default)]
    pub client_id: Option<String>,
    /// OAUTHBEARER: the OIDC client secret; usually `${ENV}`.
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// A file holding the client secret.
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// OAUTHBEARER: the scope asked for (optional).
    #[serde(default)]
    pub scope: Option<String>,
    /// OAUTHBEARER: SASL extensions some clusters need (Confluent Cloud:
    /// `logicalCluster=lkc-…,identityPoolId=pool-…`).
    #[serde(default)]
    pub extensions: Option<String>,
}

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum SaslMechanism {
    /// User name and password, as sent (use it over TLS).
    #[serde(rename = "PLAIN", alias = "plain")]
    Plain,
    /// Salted challenge-response, SHA-256.
    #[serde(rename = "SCRAM-SHA-256", alias = "scram-sha-256")]
    ScramSha256,
    /// Salted challenge-response, SHA-512.
    #[serde(rename = "SCRAM-SHA-512", alias = "scram-sha-512")]
    ScramSha512,
    /// OAuth 2 bearer tokens, fetched from an OIDC token endpoint with client credentials.
    #[serde(rename = "OAUTHBEARER", alias = "oauthbearer")]
    OauthBearer,
}

impl SaslMechanism {
    /// librdkafka's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OauthBearer => "OAUTHBEARER",
        }
    }
}

impl Security {
    /// The protocol in force (explicit, or inferred from what is set).
    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol.unwrap_or(match (&self.sasl, self.tls_set()) {
            (Some(_), _) => SecurityProtocol::SaslSsl,
            (None, true) => SecurityProtocol::Ssl,
            (None, false) => SecurityProtocol::Plaintext,
        })
    }

    fn tls_set(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// A short description for check lines and logs (no secrets).
    pub fn describe(&self) -> String {
        let p = self.protocol();
        match (&self.sasl, p.sasl()) {
            (Some(s), true) => format!("{}, {}", p.as_str(), s.mechanism.as_str()),
            _ => p.as_str().to_owned(),
        }
    }

    /// The librdkafka properties this block sets.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let p = self.protocol();
        let mut out = vec![("security.protocol", p.as_str().to_owned())];
        if p.tls() {
            let path = |p: &PathBuf| p.display().to_string();
            if let Some(ca) = &self.ca {
                out.push(("ssl.ca.location", path(ca)));
            }
            if let Some(c) = &self.cert {
                out.push(("ssl.certificate.location", path(c)));
            }
            if let Some(k) = &self.key {
                out.push(("ssl.key.location", path(k)));
            }
            if let Some(pw) = &self.key_password {
                out.push(("ssl.key.password", pw.expose().to_owned()));
            }
            out.push((
                "ssl.endpoint.identification.algorithm",
                if self.verify_hostname {
                    "https"
                } else {
                    "none"
                }
                .to_owned(),
            ));
        }
        if let (Some(s), true) = (&self.sasl, p.sasl()) {
            out.push(("sasl.mechanism", s.mechanism.as_str().to_owned()));
            match s.mechanism {
                SaslMechanism::OauthBearer => {
                    out.push(("sasl.oauthbearer.method", "oidc".to_owned()));
                    let opt = [
                        ("sasl.oauthbearer.token.endpoint.url", &s.token_endpoint),
                        ("sasl.oauthbearer.client.id", &s.client_id),
                        ("sasl.oauthbearer.scope", &s.scope),
                        ("sasl.oauthbearer.extensions", &s.extensions),
                    ];
                    for (k, v) in opt {
                        if let Some(v) = v {
                            out.push((k, v.clone()));
                        }
                    }
                    if let Some(v) = &s.client_secret {
                        out.push(("sasl.oauthbearer.client.secret", v.expose().to_owned()));
                    }
                }
                _ => {
                    if let Some(u) = &s.username {
                        out.push(("sasl.username", u.clone()));
                    }
                    if let Some(pw) = &s.password {
                        out.push(("sasl.password", pw.expose().to_owned()));
                    }
                }
            }
        }
        out
    }

    /// What is missing or contradictory, as (field below the block, message).
    pub fn problems(&self) -> Option<(String, String)> {
        let p = self.protocol();
        let both = |a: bool, b: bool, field: &str| {
            (a && b).then(|| {
                (
                    field.to_owned(),
                    format!("set either `{field}` or `{field}_file`, not both"),
                )
            })
        };
        if let Some(e) = both(
            self.key_password.is_some(),
            self.key_password_file.is_some(),
            "key_password",
        ) {
            return Some(e);
        }
        if self.cert.is_some() != self.key.is_some() {
            let missing = if self.cert.is_some() { "key" } else { "cert" };
            return Some((
                missing.to_owned(),
                "mutual TLS needs both `cert` and `key`".to_owned(),
            ));
        }
        if self.tls_set() && !p.tls() {
            return Some((
                "protocol".to_owned(),
                format!(
                    "`{}` does not use TLS, but `ca`/`cert`/`key` are set (use `ssl` or `sasl_ssl`)",
                    p.as_str()
                ),
            ));
        }
        match (&self.sasl, p.sasl()) {
            (None, true) => {
                return Some((
                    "sasl".to_owned(),
                    format!("`{}` needs a `sasl` block (mechanism and credentials)", p.as_str()),
                ))
            }
            (Some(_), false) => {
                return Some((
                    "protocol".to_owned(),
                    format!(
                        "`{}` does not use SASL, but `sasl` is set (use `sasl_ssl` or `sasl_plaintext`)",
                        p.as_str()
                    ),
                ))
            }
            _ => {}
        }
        let s = self.sasl.as_ref()?;
        let sub = |f: &str, m: String| Some((format!("sasl.{f}"), m));
        if let Some((f, m)) = both(s.password.is_some(), s.password_file.is_some(), "password") {
            return sub(&f, m);
        }
        if let Some((f, m)) = both(
            s.client_secret.is_some(),
            s.client_secret_file.is_some(),
            "client_secret",
        ) {
            return sub(&f, m);
        }
        let name = s.mechanism.as_str();
        match s.mechanism {
            SaslMechanism::OauthBearer => {
                if s.token_endpoint.is_none() {
                    return sub(
                        "token_endpoint",
                        format!("{name} needs the OIDC token endpoint"),
                    );
                }
                if s.client_id.is_none() {
                    return sub("client_id", format!("{name} needs the OIDC client id"));
                }
                if s.client_secret.is_none() && s.client_secret_file.is_none() {
                    return sub(
                        "client_secret",
                        format!("{name} needs `client_secret` or `client_secret_file`"),
                    );
                }
            }
            _ => {
                if s.username.is_none() {
                    return sub("username", format!("{name} needs a user name"));
                }
                if s.password.is_none() && s.password_file.is_none() {
                    return sub(
                        "password",
                        format!("{name} needs `password` (e.g. `${{KAFKA_PASSWORD}}`) or `password_file`"),
                    );
                }
            }
        }
        None
    }

    /// Makes relative paths relative to `base` (the YAML's folder).
    pub fn resolve_paths(&mut self, base: &std::path::Path) {
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(p) = p {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            }
        };
        fix(&mut self.ca);
        fix(&mut self.cert);
        fix(&mut self.key);
        fix(&mut self.key_password_file);
        if let Some(s) = &mut self.sasl {
            fix(&mut s.password_file);
            fix(&mut s.client_secret_file);
        }
    }

    /// Reads the `*_file` secrets and checks that the certificate files exist. Errors name
    /// the field below the block and the file, never the secret.
    pub fn load_files(&mut self) -> Result<(), (String, String)> {
        let read = |p: &PathBuf, field: &str| -> Result<Secret, (String, String)> {
            Secret::read(p).map_err(|e| (field.to_owned(), e))
        };
        if let Some(p) = self.key_password_file.take() {
            self.key_password = Some(read(&p, "key_password_file")?);
            self.key_password_file = Some(p);
        }
        for (field, p) in [("ca", &self.ca), ("cert", &self.cert), ("key", &self.key)] {
            if let Some(p) = p {
                if !p.is_file() {
                    return Err((field.to_owned(), format!("{}: no such file", p.display())));
                }
            }
        }
        if let Some(s) = &mut self.sasl {
            if let Some(p) = s.password_file.take() {
                s.password = Some(read(&p, "sasl.password_file")?);
                s.password_file = Some(p);
            }
            if let Some(p) = s.client_secret_file.take() {
                s.client_secret = Some(read(&p, "sasl.client_secret_file")?);
                s.client_secret_file = Some(p);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Security {
        serde_yaml::from_str(yaml).expect("valid security block")
    }

    fn props(s: &Security) -> std::collections::BTreeMap<&'static str, String> {
        s.properties().into_iter().collect()
    }

    #[test]
    fn the_protocol_follows_what_is_set() {
        assert_eq!(parse("{}").protocol(), SecurityProtocol::Plaintext);
        assert_eq!(parse("ca: ca.pem").protocol(), SecurityProtocol::Ssl);
        let s = parse("sasl: {mechanism: SCRAM-SHA-512, username: u, password: p1234}");
        assert_eq!(s.protocol(), SecurityProtocol::SaslSsl);
        assert_eq!(s.describe(), "sasl_ssl, SCRAM-SHA-512");
        let s =
            parse("protocol: sasl_plaintext\nsasl: {mechanism: PLAIN, username: u, password: p}");
        assert_eq!(s.protocol(), SecurityProtocol::SaslPlaintext);
    }

    #[test]
    fn mutual_tls_sets_the_client_certificate_and_verifies_the_host_by_default() {
        let s = parse("ca: /c/ca.pem\ncert: /c/me.pem\nkey: /c/me.key\nkey_password: hunter22");
        let p = props(&s);
        assert_eq!(p["security.protocol"], "ssl");
        assert_eq!(p["ssl.ca.location"], "/c/ca.pem");
        assert_eq!(p["ssl.certificate.location"], "/c/me.pem");
        assert_eq!(p["ssl.key.location"], "/c/me.key");
        assert_eq!(p["ssl.key.password"], "hunter22");
        assert_eq!(p["ssl.endpoint.identification.algorithm"], "https");
        let s = parse("ca: /c/ca.pem\nverify_hostname: false");
        assert_eq!(props(&s)["ssl.endpoint.identification.algorithm"], "none");
    }

    #[test]
    fn oidc_sets_librdkafkas_oidc_method() {
        let s = parse(
            "sasl: {mechanism: OAUTHBEARER, token_endpoint: 'http://127.0.0.1:1/token', client_id: weir, client_secret: s3cr3t-x, scope: kafka}",
        );
        let p = props(&s);
        assert_eq!(p["sasl.mechanism"], "OAUTHBEARER");
        assert_eq!(p["sasl.oauthbearer.method"], "oidc");
        assert_eq!(
            p["sasl.oauthbearer.token.endpoint.url"],
            "http://127.0.0.1:1/token"
        );
        assert_eq!(p["sasl.oauthbearer.client.id"], "weir");
        assert_eq!(p["sasl.oauthbearer.client.secret"], "s3cr3t-x");
        assert_eq!(p["sasl.oauthbearer.scope"], "kafka");
        assert!(!p.contains_key("sasl.password"));
    }

    #[test]
    fn a_secret_never_prints() {
        let s = parse("sasl: {mechanism: PLAIN, username: u, password: 'pa55-word-xyz'}");
        let shown = format!("{s:?}");
        assert!(!shown.contains("pa55-word-xyz"), "{shown}");
        assert!(shown.contains("***"));
        // A numeric password is text too.
        let s = parse("sasl: {mechanism: PLAIN, username: u, password: 123456}");
        assert_eq!(props(&s)["sasl.password"], "123456");
    }

    #[test]
    fn contradictions_and_gaps_name_the_field() {
        let cases = [
            ("cert: a.pem", "key"),
            ("protocol: plaintext\nca: ca.pem", "protocol"),
            ("protocol: sasl_ssl", "sasl"),
            (
                "protocol: ssl\nsasl: {mechanism: PLAIN, username: u, password: p}",
                "protocol",
            ),
            (
                "sasl: {mechanism: SCRAM-SHA-256, password: p}",
                "sasl.username",
            ),
            (
                "sasl: {mechanism: SCRAM-SHA-256, username: u}",
                "sasl.password",
            ),
            (
                "sasl: {mechanism: PLAIN, username: u, password: p, password_file: f}",
                "sasl.password",
            ),
            (
                "sasl: {mechanism: OAUTHBEARER, client_id: c, client_secret: s}",
                "sasl.token_endpoint",
            ),
            (
                "sasl: {mechanism: OAUTHBEARER, token_endpoint: t, client_secret: s}",
                "sasl.client_id",
            ),
            (
                "sasl: {mechanism: OAUTHBEARER, token_endpoint: t, client_id: c}",
                "sasl.client_secret",
            ),
        ];
        for (yaml, field) in cases {
            let (f, m) = parse(yaml)
                .problems()
                .unwrap_or_else(|| panic!("{yaml}: no problem found"));
            assert_eq!(f, field, "{yaml}: {m}");
        }
        assert_eq!(
            parse("ca: ca.pem\ncert: c.pem\nkey: k.pem").problems(),
            None
        );
    }

    #[test]
    fn secrets_are_read_from_files_without_the_trailing_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-a-file-42\n").expect("write");
        let mut s = parse("sasl: {mechanism: PLAIN, username: u, password_file: pw}");
        s.resolve_paths(dir.path());
        s.load_files().expect("loads");
        assert_eq!(props(&s)["sasl.password"], "from-a-file-42");
        let mut s = parse("sasl: {mechanism: PLAIN, username: u, password_file: missing}");
        s.resolve_paths(dir.path());
        let (field, msg) = s.load_files().expect_err("missing file");
        assert_eq!(field, "sasl.password_file");
        assert!(msg.contains("cannot read"), "{msg}");
    }
}
