//! Brokers that enforce what production clusters enforce, all Apache Kafka ([`crate::apache`])
//! with its own listeners: TLS (one-way and mutual, PEM key and certificates), SASL SCRAM
//! (users made when the storage is formatted), SASL PLAIN and OAUTHBEARER (unsecured JWTs,
//! checked by the broker's default validator); and the tools that set them up
//! (`scripts/ensure-kafka-tools`: openssl, and the Python confluent-kafka client as an
//! independent producer and reader).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

/// The tools `scripts/ensure-kafka-tools` installs (cached), by name.
pub fn tools() -> HashMap<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ensure-kafka-tools");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A tool's path from [`tools`].
pub fn tool(tools: &HashMap<String, String>, name: &str) -> String {
    tools
        .get(name)
        .unwrap_or_else(|| panic!("scripts/ensure-kafka-tools printed no {name}"))
        .clone()
}

/// A throw-away certificate authority, a server certificate for `localhost` (only), a
/// client certificate whose key is encrypted with [`Certs::KEY_PASSWORD`], and a second CA
/// that signed nothing here (the wrong CA).
pub struct Certs {
    /// The folder holding them.
    pub dir: PathBuf,
}

impl Certs {
    /// The client key's password.
    pub const KEY_PASSWORD: &'static str = "client-key-pass-7431";

    /// Makes them with `openssl` in `dir`.
    pub fn make(openssl: &str, dir: &Path) -> Certs {
        // One openssl command line, as written (no argument has a space).
        let run = |line: &str| {
            let args: Vec<&str> = line.split_whitespace().collect();
            let out = Command::new(openssl)
                .args(&args)
                .current_dir(dir)
                .output()
                .expect("running openssl");
            assert!(
                out.status.success(),
                "openssl {line}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").expect("write");
        let days = "-days 2";
        for ca in ["ca", "other-ca"] {
            run(&format!(
                "req -x509 -newkey rsa:2048 -nodes {days} -keyout {ca}.key -out {ca}.pem -subj /CN=weir-test-{ca}"
            ));
        }
        let sign = "-CA ca.pem -CAkey ca.key -CAcreateserial";
        run("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost");
        run(&format!(
            "x509 -req -in server.csr {sign} {days} -out server.pem -extfile san.ext"
        ));
        run(&format!(
            "req -newkey rsa:2048 -keyout client.key -passout pass:{} -out client.csr -subj /CN=weir-client",
            Self::KEY_PASSWORD
        ));
        run(&format!(
            "x509 -req -in client.csr {sign} {days} -out client.pem"
        ));
        std::fs::write(
            dir.join("client-key-password"),
            format!("{}\n", Self::KEY_PASSWORD),
        )
        .expect("write");
        Certs {
            dir: dir.to_owned(),
        }
    }

    /// A file's path.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// How a test client reaches a secured broker.
#[derive(Clone, Debug)]
pub enum Access {
    /// TLS, trusting `ca`, presenting a client certificate when `client` is set.
    Tls {
        /// CA file.
        ca: String,
        /// Client certificate, key and key password (mutual TLS).
        client: Option<(String, String, String)>,
    },
    /// SASL over plaintext with a user and password (`PLAIN`, `SCRAM-SHA-512`).
    Sasl {
        /// The mechanism.
        mechanism: String,
        /// User.
        user: String,
        /// Password.
        password: String,
    },
    /// SASL OAUTHBEARER over plaintext with an unsecured JWT librdkafka makes.
    UnsecuredJwt,
}

/// Properties with owned keys and values.
fn own(p: &[(&str, String)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// An Apache Kafka node whose client listener takes TLS or SASL; killed on drop.
pub struct SecureBroker {
    cluster: crate::apache::Cluster,
    /// `bootstrap.servers` (the advertised listener: `localhost:PORT` for TLS).
    pub bootstrap: String,
    /// How the test's own clients connect.
    pub access: Access,
}

impl SecureBroker {
    /// A node whose client listener takes TLS with the server certificate for `localhost`
    /// (requiring a client certificate signed by the CA when `mutual`), advertised as
    /// `localhost:PORT`.
    pub fn tls(certs: &Certs, mutual: bool, topics: &[&str]) -> Self {
        // Kafka reads a PEM key store: the server's key (PKCS#8) and its certificate.
        let keystore = certs.dir.join("server-keystore.pem");
        let key = std::fs::read_to_string(certs.dir.join("server.key")).expect("server key");
        let cert = std::fs::read_to_string(certs.dir.join("server.pem")).expect("server cert");
        std::fs::write(&keystore, format!("{key}{cert}")).expect("write the key store");
        let mut properties = vec![
            ("ssl.keystore.type", "PEM".to_owned()),
            ("ssl.keystore.location", keystore.display().to_string()),
            ("ssl.truststore.type", "PEM".to_owned()),
            ("ssl.truststore.location", certs.path("ca.pem")),
        ];
        if mutual {
            properties.push(("ssl.client.auth", "required".to_owned()));
        }
        let opts = crate::apache::Options {
            properties: own(&properties),
            protocol: Some("SSL".into()),
            host: Some("localhost".into()),
            ..Default::default()
        };
        Self::start(
            &opts,
            Access::Tls {
                ca: certs.path("ca.pem"),
                client: mutual.then(|| {
                    (
                        certs.path("client.pem"),
                        certs.path("client.key"),
                        Certs::KEY_PASSWORD.to_owned(),
                    )
                }),
            },
            topics,
        )
    }

    /// A node requiring SASL over plaintext with SCRAM-SHA-256 and SCRAM-SHA-512, `user`'s
    /// credentials for both made when its storage is formatted (`--add-scram`).
    pub fn scram(user: &str, password: &str, topics: &[&str]) -> Self {
        let login = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
        let mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"];
        Self::sasl(
            &mechanisms.map(|m| (m, login.to_owned())),
            mechanisms
                .iter()
                .map(|m| format!("{m}=[name={user},password={password}]"))
                .collect(),
            Access::Sasl {
                mechanism: "SCRAM-SHA-512".into(),
                user: user.to_owned(),
                password: password.to_owned(),
            },
            topics,
        )
    }

    /// A node requiring SASL PLAIN over plaintext, knowing `user` with `password`.
    pub fn plain(user: &str, password: &str, topics: &[&str]) -> Self {
        let login = format!(
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_{user}=\"{password}\";"
        );
        let access = Access::Sasl {
            mechanism: "PLAIN".into(),
            user: user.to_owned(),
            password: password.to_owned(),
        };
        Self::sasl(&[("PLAIN", login)], Vec::new(), access, topics)
    }

    /// A node requiring SASL OAUTHBEARER over plaintext, whose validator is Kafka's default
    /// for it: unsecured JWTs (`alg: none`) with a subject and an expiry in the future. The
    /// test's own clients log in with such a token, made by librdkafka.
    pub fn oauthbearer(topics: &[&str]) -> Self {
        let login = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;";
        Self::sasl(
            &[("OAUTHBEARER", login.to_owned())],
            Vec::new(),
            Access::UnsecuredJwt,
            topics,
        )
    }

    /// A node requiring SASL over plaintext with these mechanisms, each with the JAAS login
    /// line of its listener, and these `--add-scram` users.
    fn sasl(
        logins: &[(&str, String)],
        scram: Vec<String>,
        access: Access,
        topics: &[&str],
    ) -> Self {
        let names: Vec<&str> = logins.iter().map(|(m, _)| *m).collect();
        let mut properties = vec![(
            "listener.name.client.sasl.enabled.mechanisms".to_owned(),
            names.join(","),
        )];
        for (m, login) in logins {
            properties.push((
                format!("listener.name.client.{}.sasl.jaas.config", m.to_lowercase()),
                login.clone(),
            ));
        }
        let opts = crate::apache::Options {
            properties,
            scram,
            protocol: Some("SASL_PLAINTEXT".into()),
            ..Default::default()
        };
        Self::start(&opts, access, topics)
    }

    fn start(opts: &crate::apache::Options, access: Access, topics: &[&str]) -> Self {
        let cluster = crate::apache::Cluster::with(1, opts);
        let b = SecureBroker {
            bootstrap: cluster.bootstrap.clone(),
            cluster,
            access,
        };
        b.create_topics(topics);
        b
    }

    /// The node's log (for a failure message).
    pub fn log(&self) -> String {
        crate::evidence::tail(&self.cluster.log(0))
    }

    /// A client config that reaches this broker.
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        match &self.access {
            Access::Tls { ca, client } => {
                c.set("security.protocol", "ssl").set("ssl.ca.location", ca);
                if let Some((cert, key, pw)) = client {
                    c.set("ssl.certificate.location", cert)
                        .set("ssl.key.location", key)
                        .set("ssl.key.password", pw);
                }
            }
            Access::Sasl {
                mechanism,
                user,
                password,
            } => {
                c.set("security.protocol", "sasl_plaintext")
                    .set("sasl.mechanism", mechanism)
                    .set("sasl.username", user)
                    .set("sasl.password", password);
            }
            Access::UnsecuredJwt => {
                c.set("security.protocol", "sasl_plaintext")
                    .set("sasl.mechanism", "OAUTHBEARER")
                    .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
                    .set("sasl.oauthbearer.config", "principal=weir-tests");
            }
        }
        c
    }

    fn create_topics(&self, topics: &[&str]) {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().expect("admin client");
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
        let rt = futures_executor::block_on(admin.create_topics(&new, &opts));
        for r in rt.expect("create topics") {
            r.expect("topic created");
        }
    }
}

/// Runs a Python script with the confluent-kafka venv; panics with its output on failure.
pub fn python_run(python: &str, script: &str) -> String {
    let out = Command::new(python)
        .args(["-c", script])
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Produces `values` to partition 0 of `topic`, in order, keyed by index.
pub fn produce_via(config: &ClientConfig, topic: &str, values: &[String]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = config
        .clone()
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for (i, v) in values.iter().enumerate() {
        let key = i.to_string();
        let rec = BaseRecord::to(topic).partition(0).key(&key).payload(v);
        p.send(rec).map_err(|(e, _)| e).expect("send");
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// The values of `topic` (partition 0), reading until `want` arrived or `patience` passed.
pub fn read_via(
    config: &ClientConfig,
    topic: &str,
    want: usize,
    patience: Duration,
) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message as _;
    let c: BaseConsumer = config
        .clone()
        .set("group.id", "weir-tests-secure-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let deadline = Instant::now() + patience;
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    out
}
