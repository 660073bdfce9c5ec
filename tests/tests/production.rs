//! Weir against what production clusters enforce, on Apache Kafka's own listeners: TLS (one-way
//! and mutual), SASL SCRAM (users made at format time), SASL PLAIN, OAUTHBEARER through OIDC (a
//! local token endpoint, the broker checking the token), every compression codec (the Python confluent-kafka client as the independent
//! producer and reader), `weir check --connect`, errors that end the run instead of looping,
//! secrets kept out of every output, `start` from an offset or a time, and topic patterns.

use std::time::{Duration, Instant};

use weir_tests::kafka::{records, sigterm, spawn_weir, Broker, Running};
use weir_tests::plugins::PASSTHROUGH;
use weir_tests::secure::{python_run, read_via, tool, tools, Certs, SecureBroker};
use weir_tests::{free_port, scratch, stage, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A pass-through pipeline from `in` to `out` on `brokers`, with `security` (YAML under the
/// top-level `security:` key, already indented) and extra source lines.
fn pipeline(brokers: &str, security: &str, source_extra: &str, runtime_extra: &str) -> String {
    format!(
        "name: secure
source:
  kafka:
    brokers: {brokers}
    topics: [in]
    group: secure-group
    commit_interval: 100ms
{source_extra}
stages:
{stages}
sink:
  kafka:
    brokers: {brokers}
    topic: out
security:
{security}
runtime:
  report: report.json
  connect_timeout: 10s
{runtime_extra}",
        stages = stage("pass", PASSTHROUGH, &[])
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `weir check` of `yaml` (as `bad.yaml`) must refuse it with exit 2; its error text.
fn refused(s: &Scratch, yaml: &str) -> String {
    s.write("bad.yaml", yaml);
    let out = s.run(&["check", "bad.yaml"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

/// `weir check --connect` (stdout+stderr, exit code, seconds taken).
fn check_connect(s: &Scratch, yaml: &str, envs: &[(&str, &str)]) -> (String, i32, f64) {
    let t = Instant::now();
    let mut cmd = s.weir(&["check", "--connect", yaml]);
    cmd.env("WEIR_LOG", "debug,wasmtime=warn,cranelift=warn");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("weir check");
    (
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
        out.status.code().unwrap_or(-1),
        t.elapsed().as_secs_f64(),
    )
}

/// Runs `p.yaml` until `out` holds `want` values (read with the broker's own client), calls
/// `extra` while it still runs, then stops it.
fn run_until(s: &Scratch, b: &SecureBroker, want: usize, extra: &mut dyn FnMut()) -> Vec<String> {
    let child = spawn_weir(s, "p.yaml", "run.log");
    let got = read_via(&b.client(), "out", want, Duration::from_secs(60));
    extra();
    stop(child, s, "run.log");
    got
}

/// Writes `secret` to the file `secret` and `p.yaml` with `security`'s line `lines.0` (the
/// secret from the environment) replaced by `lines.1` (from that file).
fn secret_in_a_file(s: &Scratch, brokers: &str, security: &str, lines: (&str, &str), secret: &str) {
    std::fs::write(s.path("secret"), format!("{secret}\n")).expect("write");
    s.write(
        "p.yaml",
        &pipeline(brokers, &security.replace(lines.0, lines.1), "", ""),
    );
}

/// SIGTERMs a `weir run`, waits for its clean exit, and returns its log.
fn stop(mut child: Running, s: &Scratch, log: &str) -> String {
    sigterm(&child);
    let st = child.wait().expect("wait");
    let log = std::fs::read_to_string(s.path(log)).unwrap_or_default();
    assert!(st.success(), "weir run exited {st}: {log}");
    log
}

#[test]
fn mutual_tls_with_an_encrypted_key_carries_a_pipeline_and_a_wrong_ca_or_missing_certificate_is_refused(
) {
    let t = tools();
    let s = scratch!();
    let certs = Certs::make(&tool(&t, "WEIR_OPENSSL"), s.dir.path());
    let b = SecureBroker::tls(&certs, true, &["in", "out"]);
    let values: Vec<String> = (0..20).map(|i| format!("{{\"n\":{i}}}")).collect();
    weir_tests::secure::produce_via(&b.client(), "in", &values);
    let mtls = "  ca: ca.pem\n  cert: client.pem\n  key: client.key\n  key_password_file: client-key-password\n";
    s.write("p.yaml", &pipeline(&b.bootstrap, mtls, "", ""));
    let (out, code, _) = check_connect(&s, "p.yaml", &[]);
    assert_eq!(code, 0, "check --connect over mutual TLS: {out}");
    for want in [
        "ok    source",
        "ssl",
        "topic `in`",
        "group `secure-group`",
        "ok    sink",
    ] {
        assert!(out.contains(want), "missing {want:?} in: {out}");
    }
    let got = run_until(&s, &b, values.len(), &mut || {});
    assert_eq!(
        got, values,
        "every record through the pipeline over mutual TLS, in order"
    );
    let log = std::fs::read_to_string(s.path("run.log")).unwrap_or_default();
    assert!(
        !log.contains(Certs::KEY_PASSWORD),
        "the key password leaked into the log"
    );

    // No client certificate: the broker's stunnel refuses the handshake.
    s.write(
        "nocert.yaml",
        &pipeline(&b.bootstrap, "  ca: ca.pem\n", "", ""),
    );
    let (out, code, secs) = check_connect(&s, "nocert.yaml", &[]);
    assert_eq!(code, 2, "without a client certificate: {out}");
    assert!(out.contains("FAIL  source"), "{out}");
    assert!(secs < 20.0, "took {secs:.1}s with a 10s connect_timeout");

    // A key password that does not decrypt the key: the key file is named, and why.
    s.write("wrong-key-password", "not-the-password\n");
    let badkey = "  ca: ca.pem\n  cert: client.pem\n  key: client.key\n  key_password_file: wrong-key-password\n";
    s.write("badkey.yaml", &pipeline(&b.bootstrap, badkey, "", ""));
    let (out, code, _) = check_connect(&s, "badkey.yaml", &[]);
    assert_eq!(code, 2, "with a wrong key password: {out}");
    assert!(
        out.contains("client key `client.key` could not be read") && out.contains("password"),
        "{out}"
    );
    assert!(
        !out.contains("not-the-password"),
        "the password is shown: {out}"
    );

    // A CA that did not sign the broker's certificate: verification fails, clearly.
    let wrong = "  ca: other-ca.pem\n  cert: client.pem\n  key: client.key\n  key_password_file: client-key-password\n";
    s.write("wrongca.yaml", &pipeline(&b.bootstrap, wrong, "", ""));
    let (out, code, secs) = check_connect(&s, "wrongca.yaml", &[]);
    assert_eq!(code, 2, "with the wrong CA: {out}");
    assert!(
        out.contains("certificate verify failed") || out.contains("SSL"),
        "the error does not say the certificate was not trusted: {out}"
    );
    assert!(secs < 20.0, "took {secs:.1}s with a 10s connect_timeout");
    // `weir run` refuses the same before any stage runs, with exit 2.
    let out = s.run(&["run", "wrongca.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("start-up check"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn one_way_tls_verifies_the_broker_and_its_host_name() {
    let t = tools();
    let s = scratch!();
    let certs = Certs::make(&tool(&t, "WEIR_OPENSSL"), s.dir.path());
    let b = SecureBroker::tls(&certs, false, &["in", "out"]);
    s.write("p.yaml", &pipeline(&b.bootstrap, "  ca: ca.pem\n", "", ""));
    let (out, code, _) = check_connect(&s, "p.yaml", &[]);
    assert_eq!(code, 0, "one-way TLS: {out}");
    // The certificate names `localhost` only: at 127.0.0.1 hostname verification (on by
    // default) refuses it; `verify_hostname: false` accepts it.
    let by_ip = b.bootstrap.replace("localhost", "127.0.0.1");
    s.write(
        "ip.yaml",
        &pipeline(
            &by_ip,
            "  ca: ca.pem
",
            "",
            "",
        ),
    );
    let (out, code, _) = check_connect(&s, "ip.yaml", &[]);
    assert_eq!(
        code, 2,
        "a certificate for another name must be refused: {out}"
    );
    assert!(out.contains("FAIL  source"), "{out}");
    s.write(
        "ip-unverified.yaml",
        &pipeline(
            &by_ip,
            "  ca: ca.pem
  verify_hostname: false
",
            "",
            "",
        ),
    );
    let (out, code, _) = check_connect(&s, "ip-unverified.yaml", &[]);
    assert_eq!(code, 0, "verify_hostname: false: {out}");
    s.write(
        "plain.yaml",
        &pipeline(&b.bootstrap, "  protocol: plaintext\n", "", ""),
    );
    let (out, code, secs) = check_connect(&s, "plain.yaml", &[]);
    assert_eq!(
        code, 2,
        "a plaintext client at a TLS listener must not pass: {out}"
    );
    assert!(out.contains("FAIL  source"), "{out}");
    // It names the likely cause (the broker closes the connection at the first request).
    assert!(
        out.contains("a listener expecting TLS or SASL") && out.contains("set `security`"),
        "{out}"
    );
    assert!(secs < 20.0, "took {secs:.1}s with a 10s connect_timeout");
}

#[test]
fn scram_logs_in_with_the_right_password_and_a_wrong_one_ends_the_run_with_exit_2_never_showing_it()
{
    let password = "S3cret-scram-pw-9921";
    let b = SecureBroker::scram("weir", password, &["in", "out"]);
    let s = scratch!();
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    weir_tests::secure::produce_via(&b.client(), "in", &values);
    std::fs::write(s.path("pw"), format!("{password}\n")).expect("write");
    let port = free_port();
    for (mech, secret) in [
        ("SCRAM-SHA-256", "password: ${KAFKA_PASSWORD}"),
        ("SCRAM-SHA-512", "password_file: pw"),
    ] {
        let sec = format!(
            "  protocol: sasl_plaintext\n  sasl:\n    mechanism: {mech}\n    username: weir\n    {secret}\n"
        );
        s.write(
            "p.yaml",
            &pipeline(
                &b.bootstrap,
                &sec,
                "",
                &format!("  metrics: 127.0.0.1:{port}\n"),
            ),
        );
        let (out, code, _) = check_connect(&s, "p.yaml", &[("KAFKA_PASSWORD", password)]);
        assert_eq!(code, 0, "{mech}: {out}");
        assert!(out.contains(mech), "{out}");
        assert!(
            !out.contains(password),
            "the password is in check's output: {out}"
        );
    }
    // A run with the file-held password (SCRAM-SHA-512): records flow; /metrics, the log,
    // the report never show the password.
    let mut metrics = String::new();
    let got = run_until(&s, &b, values.len(), &mut || {
        metrics = weir_tests::scrape(port, "/metrics").1;
    });
    assert_eq!(got, values);
    assert!(metrics.contains("weir_"), "scraped nothing: {metrics}");
    let log = std::fs::read_to_string(s.path("run.log")).unwrap_or_default();
    let report = std::fs::read_to_string(s.path("report.json")).unwrap_or_default();
    for (what, text) in [
        ("/metrics", &metrics),
        ("the log", &log),
        ("the report", &report),
    ] {
        assert!(!text.contains(password), "the password is in {what}");
    }

    // The wrong password: exit 2 within the connect timeout, saying what failed, and the
    // wrong password (also a secret) is nowhere either.
    let wrong = "Wr0ng-password-5517";
    let sec = "  protocol: sasl_plaintext\n  sasl:\n    mechanism: SCRAM-SHA-256\n    username: weir\n    password: ${KAFKA_PASSWORD}\n";
    s.write("bad.yaml", &pipeline(&b.bootstrap, sec, "", ""));
    let (out, code, secs) = check_connect(&s, "bad.yaml", &[("KAFKA_PASSWORD", wrong)]);
    assert_eq!(code, 2, "wrong password: {out}");
    assert!(
        out.contains("Authentication") || out.contains("authentication"),
        "does not say authentication failed: {out}"
    );
    assert!(secs < 20.0, "took {secs:.1}s");
    assert!(!out.contains(wrong), "the wrong password is shown: {out}");
    let t0 = Instant::now();
    let out = s
        .weir(&["run", "bad.yaml"])
        .env("KAFKA_PASSWORD", wrong)
        .env("WEIR_LOG", "debug")
        .output()
        .expect("weir run");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        all.contains("credentials") || all.contains("uthentication"),
        "{all}"
    );
    assert!(
        !all.contains(wrong),
        "the wrong password is in the output of a failed run"
    );
}

#[test]
fn oidc_client_credentials_fetch_a_token_the_broker_accepts_and_the_secret_stays_hidden() {
    // A local token endpoint: librdkafka posts client credentials and gets a JWT, which it
    // presents to Apache Kafka's OAUTHBEARER listener; the broker's default validator checks
    // it (an unsecured JWT: `alg: none`, a subject, an expiry in the future).
    let server = tiny_http::Server::http("127.0.0.1:0").expect("token endpoint");
    let endpoint = format!("http://{}/oauth2/token", server.server_addr());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // header {"alg":"none"} . claims {"sub":"weir","exp":4102444800} . (no signature)
        let jwt = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ3ZWlyIiwiZXhwIjo0MTAyNDQ0ODAwfQ.";
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            let _ = req.as_reader().read_to_string(&mut body);
            let auth = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.to_string())
                .unwrap_or_default();
            let _ = tx.send((body, auth));
            let answer = format!(
                "{{\"access_token\":\"{jwt}\",\"token_type\":\"bearer\",\"expires_in\":3600}}"
            );
            let json: tiny_http::Header =
                "Content-Type: application/json".parse().expect("a header");
            let _ = req.respond(tiny_http::Response::from_string(answer).with_header(json));
        }
    });
    let b = SecureBroker::oauthbearer(&["in", "out"]);
    let values: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
    weir_tests::secure::produce_via(&b.client(), "in", &values);
    let s = scratch!();
    let secret = "oidc-client-secret-88231";
    let sec = format!(
        "  protocol: sasl_plaintext\n  sasl:\n    mechanism: OAUTHBEARER\n    token_endpoint: {endpoint}\n    client_id: weir-client\n    client_secret: ${{OIDC_SECRET}}\n    scope: kafka\n"
    );
    s.write("p.yaml", &pipeline(&b.bootstrap, &sec, "", ""));
    let (out, code, secs) = check_connect(&s, "p.yaml", &[("OIDC_SECRET", secret)]);
    let (body, auth) = rx
        .recv_timeout(Duration::from_secs(15))
        .unwrap_or_else(|_| panic!("the token endpoint was never called; check said: {out}"));
    assert!(body.contains("grant_type=client_credentials"), "{body}");
    assert!(body.contains("scope=kafka"), "{body}");
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("weir-client:{secret}"));
    assert_eq!(
        auth,
        format!("Basic {basic}"),
        "client id and secret as HTTP basic auth"
    );
    assert_eq!(
        code,
        0,
        "check --connect with the fetched token: {out}{}",
        b.log()
    );
    assert!(out.contains("OAUTHBEARER"), "{out}");
    assert!(secs < 20.0, "took {secs:.1}s");
    assert!(!out.contains(secret), "the client secret is shown: {out}");
    // A run (the secret from a file): every record through, the secret in no log or report.
    secret_in_a_file(
        &s,
        &b.bootstrap,
        &sec,
        (
            "client_secret: ${OIDC_SECRET}",
            "client_secret_file: secret",
        ),
        secret,
    );
    let child = spawn_weir(&s, "p.yaml", "run.log");
    let got = read_via(&b.client(), "out", values.len(), Duration::from_secs(60));
    let log = stop(child, &s, "run.log");
    assert_eq!(got, values, "{log}");
    let report = std::fs::read_to_string(s.path("report.json")).unwrap_or_default();
    assert!(!log.contains(secret) && !report.contains(secret));
}

#[test]
fn sasl_plain_logs_in_and_a_wrong_password_is_refused_by_check_within_the_timeout() {
    let password = "Pl41n-pw-3307";
    let b = SecureBroker::plain("weir", password, &["in", "out"]);
    let values: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    weir_tests::secure::produce_via(&b.client(), "in", &values);
    let s = scratch!();
    let sec = "  protocol: sasl_plaintext\n  sasl:\n    mechanism: PLAIN\n    username: weir\n    password: ${KAFKA_PASSWORD}\n";
    s.write("p.yaml", &pipeline(&b.bootstrap, sec, "", ""));
    let (out, code, _) = check_connect(&s, "p.yaml", &[("KAFKA_PASSWORD", password)]);
    assert_eq!(code, 0, "PLAIN: {out}{}", b.log());
    assert!(out.contains("PLAIN"), "{out}");
    assert!(!out.contains(password), "the password is shown: {out}");
    // The run reads the password from a file.
    secret_in_a_file(
        &s,
        &b.bootstrap,
        sec,
        ("password: ${KAFKA_PASSWORD}", "password_file: secret"),
        password,
    );
    let got = run_until(&s, &b, values.len(), &mut || {});
    assert_eq!(got, values);
    s.write("p.yaml", &pipeline(&b.bootstrap, sec, "", ""));
    let wrong = "Wr0ng-plain-1180";
    let (out, code, secs) = check_connect(&s, "p.yaml", &[("KAFKA_PASSWORD", wrong)]);
    assert_eq!(code, 2, "wrong password: {out}");
    assert!(out.to_lowercase().contains("authentication"), "{out}");
    assert!(secs < 20.0, "took {secs:.1}s");
    assert!(!out.contains(wrong), "the wrong password is shown: {out}");
}

#[test]
fn every_codec_written_by_an_independent_producer_is_read_and_each_is_written_for_an_independent_reader(
) {
    let t = tools();
    let python = tool(&t, "WEIR_KAFKA_PYTHON");
    let codecs = ["zstd", "lz4", "snappy", "gzip"];
    let mut topics = Vec::new();
    for c in codecs {
        topics.push((format!("in-{c}"), 1));
        topics.push((format!("out-{c}"), 1));
    }
    let refs: Vec<(&str, i32)> = topics.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    let b = Broker::start(WEIR, &refs);
    let n = 500;
    // confluent-kafka (its own librdkafka build) writes each topic in batches of its codec.
    python_run(
        &python,
        &format!(
            r#"
from confluent_kafka import Producer
for codec in {codecs:?}:
    p = Producer({{"bootstrap.servers": "{bs}", "compression.type": codec, "linger.ms": 50}})
    for i in range({n}):
        p.produce("in-" + codec, key=str(i), value=('{{"codec": "%s", "i": %d, "pad": "%s"}}' % (codec, i, "x" * 200)))
    assert p.flush(30) == 0
"#,
            bs = b.bootstrap
        ),
    );
    let s = scratch!();
    for c in codecs {
        let yaml = format!(
            "source:\n  kafka:\n    brokers: {bs}\n    topics: [in-{c}]\n    group: codec-{c}\n    stop_at_end: true\nstages:\n{st}sink:\n  kafka:\n    brokers: {bs}\n    topic: out-{c}\n    properties:\n      compression.type: {c}\nruntime:\n  connect_timeout: 10s\n",
            bs = b.bootstrap,
            st = stage("pass", PASSTHROUGH, &[])
        );
        s.write(&format!("{c}.yaml"), &yaml);
        let out = s.run(&["run", &format!("{c}.yaml"), "--json"]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{c}: {err}");
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("the JSON report");
        assert_eq!(report["read"], n, "{c}: {report}");
        assert_eq!(report["written"], n, "{c}: {report}");
        assert!(!err.contains("Decompression"), "{c}: {err}");
    }
    // confluent-kafka reads what Weir wrote in each codec (and checks the codec field).
    let counts = python_run(
        &python,
        &format!(
            r#"
import json
from confluent_kafka import Consumer, TopicPartition
for codec in {codecs:?}:
    c = Consumer({{"bootstrap.servers": "{bs}", "group.id": "py-" + codec, "enable.partition.eof": True}})
    c.assign([TopicPartition("out-" + codec, 0, 0)])
    seen = set()
    while True:
        m = c.poll(10)
        assert m is not None, "timed out reading out-" + codec
        if m.error():
            break
        v = json.loads(m.value())
        assert v["codec"] == codec, v
        seen.add(v["i"])
    c.close()
    print(codec, len(seen))
"#,
            bs = b.bootstrap
        ),
    );
    for c in codecs {
        assert!(
            counts.lines().any(|l| l == format!("{c} {n}")),
            "{c}: the independent reader saw {counts}"
        );
    }
}

#[test]
fn a_missing_topic_is_an_error_at_start_not_a_loop() {
    let b = Broker::start(WEIR, &[("in", 1), ("out", 1)]);
    let s = scratch!();
    let yaml = pipeline(&b.bootstrap, "  protocol: plaintext\n", "", "").replace("[in]", "[nope]");
    s.write("p.yaml", &yaml);
    let (out, code, _) = check_connect(&s, "p.yaml", &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("ok    source") && out.contains("connected"),
        "{out}"
    );
    assert!(out.contains("topic `nope` does not exist"), "{out}");
    let t0 = Instant::now();
    let out = s.run(&["run", "p.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("topic `nope` does not exist"));
    assert!(t0.elapsed() < Duration::from_secs(20));
    // A sink topic the broker does not have, where the broker does not say whether it
    // creates topics, passes with a note.
    let yaml = pipeline(&b.bootstrap, "  protocol: plaintext\n", "", "")
        .replace("topic: out", "topic: later");
    s.write("q.yaml", &yaml);
    let (out, code, _) = check_connect(&s, "q.yaml", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("topic `later`: missing"), "{out}");
}

#[test]
fn start_from_an_offset_applies_to_partitions_without_a_committed_offset() {
    let b = Broker::start(WEIR, &[("in", 2), ("out", 2)]);
    b.produce("in", &records(20, 2, |i| format!("v{i}")));
    let s = scratch!();
    let run = |name: &str, start: &str, group: &str| -> serde_json::Value {
        let yaml = format!(
            "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: {group}\n    stop_at_end: true\n    start: \"{start}\"\nsink:\n  kafka:\n    brokers: {bs}\n    topic: out\n",
            bs = b.bootstrap
        );
        s.write(name, &yaml);
        let out = s.run(&["run", name, "--json"]);
        assert!(out.status.success(), "{start}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("report")
    };
    // 10 records per partition: "+7" reads offsets 7, 8, 9 of each.
    assert_eq!(run("a.yaml", "+7", "g-offset")["read"], 6);
    // An offset past the end starts at the end.
    assert_eq!(run("b.yaml", "+1000", "g-past")["read"], 0);
    // A group with committed offsets ignores `start`: g-offset resumes at 10.
    assert_eq!(run("e.yaml", "earliest", "g-offset")["read"], 0);
    // A bad value names the field and the forms it takes.
    let err = refused(
        &s,
        &format!("source:\n  kafka:\n    brokers: {}\n    topics: [in]\n    group: g\n    start: yesterday\nsink:\n  discard: {{}}\n", b.bootstrap),
    );
    assert!(
        err.contains("source.kafka.start") && err.contains("-1h"),
        "{err}"
    );
}

/// Time look-ups need a broker that answers ListOffsets by timestamp (librdkafka's mock
/// cluster answers -1 to every one): Apache Kafka, with records written on both sides of a
/// moment.
#[test]
fn start_from_a_time_reads_what_was_written_after_it() {
    let b = weir_tests::kafka::kafka(&[("in", 1), ("out-at", 1), ("out-ago", 1)]);
    let before: Vec<(i32, String, String)> = (0..5)
        .map(|i| (0, format!("k{i}"), format!("before{i}")))
        .collect();
    let after: Vec<(i32, String, String)> = (0..5)
        .map(|i| (0, format!("k{i}"), format!("after{i}")))
        .collect();
    b.produce("in", &before);
    std::thread::sleep(Duration::from_millis(1500));
    let moment = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    std::thread::sleep(Duration::from_millis(1500));
    b.produce("in", &after);
    let s = scratch!();
    for (out_topic, start, want) in [("out-at", moment.as_str(), 5), ("out-ago", "-1h", 10)] {
        let yaml = format!(
            "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: g-{out_topic}\n    start: \"{start}\"\nsink:\n  kafka:\n    brokers: {bs}\n    topic: {out_topic}\n",
            bs = b.bootstrap
        );
        s.write("t.yaml", &yaml);
        let child = spawn_weir(&s, "t.yaml", "t.log");
        let deadline = Instant::now() + Duration::from_secs(60);
        while b.read(out_topic).len() < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        // Nothing more comes (the records before the moment stay unread).
        std::thread::sleep(Duration::from_millis(1500));
        let log = stop(child, &s, "t.log");
        let got: Vec<String> = b.read(out_topic).into_iter().map(|r| r.value).collect();
        let expected: Vec<String> = before
            .iter()
            .chain(&after)
            .map(|r| r.2.clone())
            .skip(10 - want)
            .collect();
        assert_eq!(got, expected, "start {start}: {log}");
    }
}

/// Waits until `out` holds `n` records.
fn wait_for(b: &Broker, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.read("out").len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} arrived",
            b.read("out").len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A topic created while the pipeline runs joins at the next metadata refresh (1 s here).
/// On Apache Kafka: librdkafka's mock cluster never completes the cooperative rejoin that
/// follows.
#[test]
fn a_topic_created_later_that_matches_the_pattern_joins_the_running_pipeline() {
    let b = weir_tests::kafka::kafka(&[("logs-a", 1), ("out", 1)]);
    b.produce("logs-a", &records(3, 1, |i| format!("a{i}")));
    let s = scratch!();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [\"^logs-.*\"]\n    group: later\n    commit_interval: 100ms\n    properties:\n      topic.metadata.refresh.interval.ms: 1000\nsink:\n  kafka:\n    brokers: {bs}\n    topic: out\n",
        bs = b.bootstrap
    );
    s.write("p.yaml", &yaml);
    let child = spawn_weir(&s, "p.yaml", "run.log");
    wait_for(&b, 3);
    b.create_topic("logs-b", 2);
    b.produce("logs-b", &records(4, 2, |i| format!("b{i}")));
    wait_for(&b, 7);
    let log = stop(child, &s, "run.log");
    assert!(log.contains("added=[\"logs-b\"]"), "{log}");
    let mut values: Vec<String> = b.read("out").into_iter().map(|r| r.value).collect();
    values.sort();
    assert_eq!(values, ["a0", "a1", "a2", "b0", "b1", "b2", "b3"]);
}

#[test]
fn a_topic_pattern_reads_every_matching_topic_and_no_other() {
    let b = Broker::start(
        WEIR,
        &[("orders-eu", 1), ("orders-us", 2), ("other", 1), ("out", 1)],
    );
    b.produce("orders-eu", &records(5, 1, |i| format!("eu{i}")));
    b.produce("orders-us", &records(7, 2, |i| format!("us{i}")));
    b.produce("other", &records(3, 1, |i| format!("x{i}")));
    let s = scratch!();
    let yaml = format!(
        "source:\n  kafka:\n    brokers: {bs}\n    topics: [\"^orders-.*\"]\n    group: pat\n    stop_at_end: true\nsink:\n  kafka:\n    brokers: {bs}\n    topic: out\n",
        bs = b.bootstrap
    );
    s.write("p.yaml", &yaml);
    let (out, code, _) = check_connect(&s, "p.yaml", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("matches 2 topic(s) now: orders-eu, orders-us"),
        "{out}"
    );
    let out = s.run(&["run", "p.yaml", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["read"], 12, "{report}");
    let values: Vec<String> = b.read("out").into_iter().map(|r| r.value).collect();
    assert_eq!(values.len(), 12);
    assert!(values.iter().all(|v| !v.starts_with('x')), "{values:?}");
}

#[test]
fn reset_to_moves_a_groups_offsets_before_the_run_and_is_refused_while_the_group_has_members() {
    let b = Broker::start(WEIR, &[("in", 2), ("out", 2)]);
    b.produce("in", &records(20, 2, |i| format!("v{i}")));
    let s = scratch!();
    let yaml = |group: &str, at_end: bool| {
        format!(
            "source:\n  kafka:\n    brokers: {bs}\n    topics: [in]\n    group: {group}\n    stop_at_end: {at_end}\n    commit_interval: 100ms\nsink:\n  kafka:\n    brokers: {bs}\n    topic: out\n",
            bs = b.bootstrap
        )
    };
    // A group that has never run: its offsets move to 6, and the run starts there (not at
    // `start: earliest`).
    s.write("p.yaml", &yaml("g-reset", true));
    let out = s.run(&["run", "p.yaml", "--reset-to", "+6", "--json"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("in/0 committed none -> 6"), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["read"], 8, "{report}");
    // A member is running: moving its group is refused.
    s.write("live.yaml", &yaml("g-live", false));
    let mut live = s
        .weir(&["run", "live.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.committed("g-live", "in", 2).iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "the live member never committed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = s.run(&["run", "live.yaml", "--reset-to", "earliest"]);
    sigterm(&live);
    let _ = live.wait();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("active member") || err.contains("refused to move group `g-live`"),
        "{err}"
    );
}

#[test]
fn a_security_block_with_a_gap_is_an_error_naming_its_line_and_field() {
    let s = scratch!();
    let err = refused(
        &s,
        "source:\n  kafka:\n    brokers: localhost:9092\n    topics: [in]\n    group: g\nsink:\n  discard: {}\nsecurity:\n  sasl:\n    mechanism: SCRAM-SHA-256\n    username: weir\n",
    );
    assert!(
        err.contains("bad.yaml:9") && err.contains("security.sasl.password"),
        "{err}"
    );
    let err = refused(
        &s,
        "source:\n  kafka:\n    brokers: localhost:9092\n    topics: [in]\n    group: g\n    security:\n      ca: missing-ca.pem\nsink:\n  discard: {}\n",
    );
    assert!(
        err.contains("source.kafka.security.ca") && err.contains("missing-ca.pem"),
        "{err}"
    );
}

/// Every `security` example in docs/kafka.md ("Worked examples") loads: the provider
/// examples are checked for form (no provider is reachable from here).
#[test]
fn every_worked_security_example_in_the_docs_loads() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/kafka.md"))
        .expect("docs/kafka.md");
    let section = docs
        .split("### Worked examples")
        .nth(1)
        .expect("the worked examples section")
        .split("\n### ")
        .next()
        .expect("section text");
    let s = scratch!();
    let secrets = s.path("secrets");
    let blocks: Vec<&str> = section
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert!(blocks.len() >= 6, "found {} examples", blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let block = block.replace("/var/run/secrets", &secrets.display().to_string());
        // The files an example names exist in a deployment: make them here.
        for word in block.split_whitespace() {
            let w = word.trim_matches(|c| c == ',' || c == '}' || c == '"');
            if w.ends_with(".pem")
                || w.ends_with(".key")
                || w.ends_with(".cert")
                || w.ends_with("password")
                || w.ends_with("secret")
            {
                if w.contains('$') || !(w.contains('/')) {
                    continue;
                }
                let p = if w.starts_with('/') {
                    std::path::PathBuf::from(w)
                } else {
                    s.path(w)
                };
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(&p, "x\n").expect("write");
            }
        }
        let yaml = format!(
            "source:\n  kafka:\n    brokers: localhost:9092\n    topics: [in]\n    group: g\nsink:\n  discard: {{}}\n{block}"
        );
        let name = format!("example-{i}.yaml");
        s.write(&name, &yaml);
        let out = s
            .weir(&["check", &name])
            .env("CONFLUENT_API_KEY", "key")
            .env("CONFLUENT_API_SECRET", "api-secret-value")
            .env("MSK_KEY_PASSWORD", "key-pass-value")
            .env("REDPANDA_PASSWORD", "rp-pass-value")
            .output()
            .expect("weir check");
        assert!(
            out.status.success(),
            "example {i}:\n{yaml}\n{}",
            text(&out.stderr)
        );
    }
}

/// Refusals as a cluster's ACLs give them (staged with `weir broker`'s `refuse` commands):
/// each fails the start-up checks with exit 2 naming what was refused, and a refusal that
/// arrives while the pipeline runs ends it (exit 2) instead of looping, committing only what
/// was delivered.
#[test]
fn refusals_like_acls_fail_the_checks_and_a_refused_fetch_ends_a_running_pipeline() {
    let mut b = Broker::start(WEIR, &[("in", 1), ("out", 1), ("secret", 1)]);
    let s = scratch!();
    let plain = "  protocol: plaintext\n";
    let cases = [
        (
            "refuse-topic secret TOPIC_AUTHORIZATION_FAILED",
            "[secret]",
            "topic `secret`",
        ),
        (
            "refuse OffsetFetch GROUP_AUTHORIZATION_FAILED 1",
            "[in]",
            "group `secure-group`",
        ),
    ];
    for (i, (command, topics, said)) in cases.iter().enumerate() {
        b.command(command);
        let name = format!("c{i}.yaml");
        s.write(
            &name,
            &pipeline(&b.bootstrap, plain, "", "").replace("[in]", topics),
        );
        let (out, code, _) = check_connect(&s, &name, &[]);
        assert_eq!(code, 2, "{command}: {out}");
        assert!(
            out.contains("FAIL  source") && out.contains(said),
            "{command}: {out}"
        );
        assert!(
            out.to_lowercase().contains("authorization failed"),
            "{command}: {out}"
        );
    }
    b.command("refuse InitProducerId TRANSACTIONAL_ID_AUTHORIZATION_FAILED 1");
    s.write(
        "eos.yaml",
        &format!(
            "{}delivery: exactly-once\n",
            pipeline(&b.bootstrap, plain, "", "")
        ),
    );
    let (out, code, _) = check_connect(&s, "eos.yaml", &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("FAIL  transactions"), "{out}");
    assert!(out.to_lowercase().contains("authorization failed"), "{out}");

    // While running: the broker starts refusing the source's fetches.
    b.produce("in", &records(10, 1, |i| format!("v{i}")));
    s.write("p.yaml", &pipeline(&b.bootstrap, plain, "", ""));
    let mut child = spawn_weir(&s, "p.yaml", "run.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.committed("secure-group", "in", 1) != [Some(10)] {
        assert!(
            Instant::now() < deadline,
            "the first 10 were never committed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(b.read("out").len(), 10);
    // (Every fetch from now on is refused, the test's own reads too.)
    b.command("refuse Fetch TOPIC_AUTHORIZATION_FAILED 100000");
    b.produce("in", &records(5, 1, |i| format!("later{i}")));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(s.path("run.log")).unwrap_or_default();
            panic!("still running 30 s after its fetches were refused: {log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(s.path("run.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.to_lowercase().contains("authorization failed"), "{log}");
    let report = s.report();
    assert_eq!(report["error_kind"], "credentials", "{report}");
    assert_eq!(b.committed("secure-group", "in", 1), [Some(10)]);
}
