//! Brokers that enforce what production clusters enforce: TLS (one-way and mutual) by stunnel
//! in front of tansu, whose advertised listener is the TLS port; SASL SCRAM by tansu's own
//! authentication; and the tools that set them up (`scripts/ensure-kafka-tools`: stunnel,
//! openssl, and the Python confluent-kafka client as an independent producer and reader).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    /// SASL SCRAM-SHA-512 over plaintext.
    Scram {
        /// User.
        user: String,
        /// Password.
        password: String,
    },
}

/// tansu behind stunnel (TLS) or with SASL authentication; both killed on drop.
pub struct SecureBroker {
    children: Vec<Child>,
    /// `bootstrap.servers` (the advertised listener: `localhost:PORT`).
    pub bootstrap: String,
    /// How the test's own clients connect.
    pub access: Access,
}

impl Drop for SecureBroker {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tansu_cmd(bin: &str, listen: u16, advertised: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "broker",
        "--listener-url",
        &format!("tcp://127.0.0.1:{listen}"),
        "--advertised-listener-url",
        advertised,
        "--storage-engine",
        "memory://tansu/",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    cmd
}

impl SecureBroker {
    /// tansu listening on loopback, advertised as `localhost:TLS_PORT`, where stunnel takes
    /// TLS (with a client certificate required when `mutual`).
    pub fn tls(tansu: &str, stunnel: &str, certs: &Certs, mutual: bool, topics: &[&str]) -> Self {
        let (plain, tls) = (free_port(), free_port());
        let t = tansu_cmd(tansu, plain, &format!("tcp://localhost:{tls}"))
            .spawn()
            .expect("starting tansu");
        let conf = certs.dir.join(format!("stunnel-{tls}.conf"));
        let verify = if mutual {
            format!("CAfile = {}\nverify = 2\n", certs.path("ca.pem"))
        } else {
            String::new()
        };
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\ndebug = 3\n[kafka]\naccept = 127.0.0.1:{tls}\nconnect = 127.0.0.1:{plain}\ncert = {}\nkey = {}\n{verify}",
                certs.path("server.pem"),
                certs.path("server.key")
            ),
        )
        .expect("write stunnel config");
        let s = Command::new(stunnel)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting stunnel");
        let b = SecureBroker {
            children: vec![t, s],
            bootstrap: format!("localhost:{tls}"),
            access: Access::Tls {
                ca: certs.path("ca.pem"),
                client: mutual.then(|| {
                    (
                        certs.path("client.pem"),
                        certs.path("client.key"),
                        Certs::KEY_PASSWORD.to_owned(),
                    )
                }),
            },
        };
        wait_listening(plain, "tansu");
        wait_listening(tls, "stunnel");
        b.create_topics(topics);
        b
    }

    /// tansu requiring SASL, with SCRAM-SHA-256 and SCRAM-SHA-512 credentials for `user`
    /// (computed here as RFC 5802 stores them, and seeded through `WEIR_TANSU_SCRAM`:
    /// scripts/tansu/scram.patch; tansu 0.6 has no other way to a first user).
    pub fn scram(tansu: &str, python: &str, user: &str, password: &str, topics: &[&str]) -> Self {
        let script = format!(
            r#"
import hashlib, hmac, os
def cred(mech, it=4096):
    h = {{"256": "sha256", "512": "sha512"}}[mech]
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(h, b"{password}", salt, it)
    stored = hashlib.new(h, hmac.new(salted, b"Client Key", h).digest()).digest()
    server = hmac.new(salted, b"Server Key", h).digest()
    return "{user},%s,%d,%s,%s,%s" % (mech, it, salt.hex(), stored.hex(), server.hex())
print(";".join(cred(m) for m in ("256", "512")))
"#
        );
        let seed = python_run(python, &script);
        let port = free_port();
        let t = tansu_cmd(tansu, port, &format!("tcp://localhost:{port}"))
            .arg("--authentication")
            .env("WEIR_TANSU_SCRAM", seed.trim())
            .spawn()
            .expect("starting tansu");
        let b = SecureBroker {
            children: vec![t],
            bootstrap: format!("localhost:{port}"),
            access: Access::Scram {
                user: user.to_owned(),
                password: password.to_owned(),
            },
        };
        wait_listening(port, "tansu");
        b.create_topics(topics);
        b
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
            Access::Scram { user, password } => {
                c.set("security.protocol", "sasl_plaintext")
                    .set("sasl.mechanism", "SCRAM-SHA-512")
                    .set("sasl.username", user)
                    .set("sasl.password", password);
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

/// Produces `values` to partition 0 of `topic`, one record batch each (tansu), keyed by index.
pub fn produce_via(config: &ClientConfig, topic: &str, values: &[String]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = config
        .clone()
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .expect("producer");
    for (i, v) in values.iter().enumerate() {
        let key = i.to_string();
        let rec = BaseRecord::to(topic).partition(0).key(&key).payload(v);
        p.send(rec).map_err(|(e, _)| e).expect("send");
        p.flush(Duration::from_secs(30)).expect("flush");
    }
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
