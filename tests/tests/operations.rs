//! Operating Weir: `weir top` in a real terminal (tmux) against a running pipeline on a Kafka
//! broker, the Grafana dashboard and the Prometheus alert rules checked against what a running
//! Weir exports (and by promtool), and JSON logs.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_tests::languages::root;
use weir_tests::plugins::MISBEHAVE;
use weir_tests::{free_port, scratch, stderr, try_scrape, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// The operations tools (`scripts/ensure-ops-tools`): promtool and tmux.
fn ops_tools() -> HashMap<String, String> {
    weir_tests::script_vars("ensure-ops-tools", &[])
}

/// A pipeline that keeps running (a Kafka source on the embedded broker, never ending) with a
/// stage that works for a while: 4 partitions of messages, one in four spinning 20 ms, plus a
/// trap and a reject (so the DLQ and trap series have values), in small batches so rates are
/// smooth. Killed on drop.
struct Running {
    child: Child,
    port: u16,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_pipeline(s: &Scratch, messages: usize) -> Running {
    let mut input = String::new();
    for i in 0..messages {
        let value = match i {
            3 => "trap",
            5 => "reject",
            _ if i % 4 == 0 => "slow",
            _ => "pass",
        };
        input.push_str(&format!("{{\"key\": \"k{i}\", \"value\": \"{value}\"}}\n"));
    }
    s.write("in.jsonl", &input);
    let port = free_port();
    s.write(
        "p.yaml",
        &format!(
            "name: watched\n\
             source:\n  kafka:\n    brokers: localhost:9092\n    topics: [in]\n    group: watched\n\
             stages:\n  - name: slowpoke\n    plugin: {MISBEHAVE}\n    limits: {{ timeout: 30s }}\n\
             sink:\n  kafka:\n    brokers: localhost:9092\n    topic: out\n\
             reject:\n  kafka:\n    brokers: localhost:9092\n    topic: dlq\n\
             batch: {{ max_messages: 8 }}\n\
             runtime:\n  metrics: 127.0.0.1:{port}\n"
        ),
    );
    let child = s
        .weir(&["run", "p.yaml", "--embedded-broker", "--partitions", "4"])
        .args(["--seed", "in=in.jsonl"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting weir run");
    let running = Running { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !try_scrape(port, "/readyz").is_ok_and(|r| r.0 == 200) {
        assert!(Instant::now() < deadline, "the pipeline never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    running
}

/// tmux on a private socket (so tests never touch a user's sessions); killed on drop.
struct Tmux {
    bin: String,
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin)
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("running tmux")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Captures until `ok` holds (at most 20 s).
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pane = self.capture();
            if ok(&pane) {
                return pane;
            }
            assert!(Instant::now() < deadline, "{what}; the pane shows:\n{pane}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The lag column summed over the partition rows of a `weir top` screen.
fn total_lag(pane: &str) -> u64 {
    pane.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.trim_matches(['│', ' ']).split_whitespace().collect();
            match cols.as_slice() {
                ["in", _partition, _committed, lag, _state] => {
                    lag.replace(',', "").parse::<u64>().ok()
                }
                _ => None,
            }
        })
        .sum()
}

/// The `in/s` column of a stage row.
fn stage_rate(pane: &str, stage: &str) -> Option<f64> {
    pane.lines().find_map(|l| {
        let cols: Vec<&str> = l.trim_matches(['│', ' ']).split_whitespace().collect();
        // Columns: stage, plugin, rollout, in/s, ...
        (cols.first() == Some(&stage) && cols.get(2) == Some(&"-"))
            .then(|| cols.get(3)?.replace(',', "").parse().ok())
            .flatten()
    })
}

#[test]
fn weir_top_shows_a_running_pipeline_live_in_a_terminal_and_quits_on_q() {
    let tools = ops_tools();
    let s = scratch!();
    let run = start_pipeline(&s, 4_000);
    let tmux = Tmux {
        bin: tools["WEIR_TMUX"].clone(),
        socket: format!("weir-top-{}", std::process::id()),
    };
    let status = s.path("top.status");
    let command = format!(
        "{WEIR} top 127.0.0.1:{}; echo $? > {}; sleep 30",
        run.port,
        status.display()
    );
    let o = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "140",
        "-y",
        "40",
        &command,
    ]);
    assert!(o.status.success(), "tmux: {}", stderr(&o));

    // The stage, the process block and the four partitions with their lag appear.
    let first = tmux.wait_for("weir top shows the stage and the partitions' lag", |p| {
        p.contains("slowpoke")
            && p.contains("partitions (4")
            && p.contains("in flight")
            && total_lag(p) > 0
    });
    // It updates: the lag goes down as the pipeline works, and the stage's rate shows.
    let later = tmux.wait_for("the lag shown goes down and a rate appears", |p| {
        total_lag(p) < total_lag(&first) && stage_rate(p, "slowpoke").is_some_and(|r| r > 0.0)
    });
    assert!(later.contains("ready"), "{later}");

    // Keys: `s` sorts by partition, Down scrolls, `q` quits with status 0.
    tmux.run(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("`s` sorts by partition", |p| {
        p.contains("sorted by partition")
    });
    tmux.run(&["send-keys", "-t", "top", "Down"]);
    tmux.wait_for("Down scrolls", |p| p.contains("2-4 shown"));
    tmux.run(&["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !status.exists() {
        assert!(Instant::now() < deadline, "`q` did not end weir top");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(std::fs::read_to_string(&status).unwrap().trim(), "0");
}

#[test]
fn weir_top_refuses_a_dead_address_or_one_that_is_not_weir() {
    let s = scratch!();
    let dead = s.run(&["top", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(dead.status.code(), Some(2), "{}", stderr(&dead));
    assert!(stderr(&dead).contains("cannot reach"), "{}", stderr(&dead));
    assert!(!stderr(&dead).contains("panicked"), "{}", stderr(&dead));

    // Something that speaks HTTP but is not Weir.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut conn = conn;
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\n# TYPE up gauge\nup 1\n");
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    });
    let other = s.run(&["top", &addr.to_string()]);
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    assert!(
        stderr(&other).contains("does not serve Weir metrics"),
        "{}",
        stderr(&other)
    );

    // A pipeline file without a metrics address says so.
    s.write(
        "p.yaml",
        "source: { jsonl: { path: in.jsonl } }\nstages: []\nsink: { discard: {} }\n",
    );
    let none = s.run(&["top", "--pipeline", "p.yaml"]);
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("sets no runtime.metrics"),
        "{}",
        stderr(&none)
    );
}

/// Every `expr` in a JSON or YAML document (the dashboard's targets, the rules).
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The `weir_…` metric names an expression uses.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("weir_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let preceded_by_name = rest[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded_by_name {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_and_the_alert_rules_use_only_metrics_a_running_weir_exports() {
    let s = scratch!();
    let run = start_pipeline(&s, 200);
    // What a running Weir exports, once it has committed (the per-partition series exist from
    // the first commit and lag update): each family's name, and a histogram's series names.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (_, body) = try_scrape(run.port, "/metrics").expect("scrape");
        if body.contains("weir_committed_offset{") && body.contains("weir_consumer_lag{") {
            break body;
        }
        assert!(Instant::now() < deadline, "no partition series:\n{body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut exported = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            exported.insert(name.to_owned());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    exported.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/weir.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let rules: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("deploy/prometheus/alerts.yaml")).unwrap(),
    )
    .expect("the rules are YAML");
    for (what, doc) in [("dashboard", &dashboard), ("alert rules", &rules)] {
        let mut found = Vec::new();
        exprs(doc, &mut found);
        assert!(found.len() >= 7, "{what}: {found:?}");
        let used: BTreeSet<String> = found.iter().flat_map(|e| metric_names(e)).collect();
        let unknown: Vec<_> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what} uses metrics Weir does not export: {unknown:?} (exported: {exported:?})"
        );
        assert!(used.len() >= 5, "{what}: {used:?}");
    }
    // The dashboard covers what the issue names.
    let mut found = Vec::new();
    exprs(&dashboard, &mut found);
    let used: BTreeSet<String> = found.iter().flat_map(|e| metric_names(e)).collect();
    for needed in [
        "weir_stage_messages_total",
        "weir_stage_traps_total",
        "weir_consumer_lag",
        "weir_in_flight_bytes",
        "weir_flow_control_total",
        "weir_commits_total",
        "weir_rebalances_total",
        "weir_plugin_reloads_total",
    ] {
        assert!(used.contains(needed), "the dashboard shows {needed}");
    }
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let tools = ops_tools();
    let dir = root().join("deploy").join("prometheus");
    for args in [
        &["check", "rules", "alerts.yaml"][..],
        &["test", "rules", "alerts.test.yaml"][..],
    ] {
        let o = Command::new(&tools["WEIR_PROMTOOL"])
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("running promtool");
        assert!(
            o.status.success(),
            "promtool {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(&o)
        );
    }
}

#[test]
fn json_logs_parse_line_by_line_and_name_the_message_they_are_about() {
    let s = scratch!();
    s.write(
        "in.jsonl",
        "{\"value\": \"a\"}\n{\"value\": \"trap\"}\nnot json\n{\"value\": \"fail\"}\n",
    );
    s.write(
        "p.yaml",
        &format!(
            "source: {{ jsonl: {{ path: in.jsonl, topic: orders }} }}\n\
             stages:\n  - name: m\n    plugin: {MISBEHAVE}\n\
             sink: {{ jsonl: {{ path: out.jsonl }} }}\nreject: {{ jsonl: {{ path: rej.jsonl }} }}\n"
        ),
    );
    let o = s
        .weir(&["run", "p.yaml"])
        .env("WEIR_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "the stage failed: {}", stderr(&o));
    let events: Vec<Value> = stderr(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let about = |needle: &str| {
        events
            .iter()
            .find(|e| {
                e["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(needle))
            })
            .unwrap_or_else(|| panic!("no `{needle}` event in {events:#?}"))
    };
    let trap = &about("stage trapped")["fields"];
    assert_eq!(
        (
            &trap["stage"],
            &trap["topic"],
            &trap["partition"],
            &trap["offset"]
        ),
        (
            &Value::from("m"),
            &Value::from("orders"),
            &Value::from(0),
            &Value::from(1)
        ),
        "{trap}"
    );
    let fail = &about("stage failed")["fields"];
    assert_eq!(
        (
            &fail["stage"],
            &fail["topic"],
            &fail["partition"],
            &fail["offset"]
        ),
        (
            &Value::from("m"),
            &Value::from("orders"),
            &Value::from(0),
            &Value::from(3)
        ),
        "{fail}"
    );
    // The exit report is a log event too, with the whole report.
    let report: Value = serde_json::from_str(
        about("exit report")["fields"]["report"]
            .as_str()
            .expect("report field"),
    )
    .unwrap();
    assert_eq!(report["state"], "failed");
    // `--log-format json` is the same switch.
    let flag = s.run(&["--log-format", "json", "check", "p.yaml"]);
    assert!(flag.status.success(), "{}", stderr(&flag));
    for line in stderr(&flag).lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert!(Path::new(MISBEHAVE).exists());
}

/// The Kubernetes manifests (deploy/kubernetes) decode strictly with the projects' own Go
/// types (`deploy/kubernetes/check`: k8s.io/api, KEDA's apis, prometheus-operator's
/// monitoring/v1; an unknown field, a repeated one or a wrong type fails), and the check fails
/// on broken copies, naming the field.
#[test]
fn the_kubernetes_manifests_decode_strictly_with_the_projects_types() {
    let dir = root().join("deploy/kubernetes");
    let check = root().join("target/k8s-check");
    let o = weir_tests::languages::go(&dir.join("check"))
        .args(["build", "-o"])
        .arg(&check)
        .arg(".")
        .output()
        .expect("running go");
    assert!(o.status.success(), "go build: {}", stderr(&o));
    let manifests = [
        "statefulset.yaml",
        "service.yaml",
        "poddisruptionbudget.yaml",
        "podmonitor.yaml",
        "scaledobject.yaml",
    ];
    let o = Command::new(&check)
        .args(manifests)
        .current_dir(&dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert_eq!(out.lines().count(), 6, "every document checked: {out}");
    // Each file in kustomization.yaml's resources is checked here.
    let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    for m in manifests {
        assert!(kustomization.contains(&format!("  - {m}")), "{m}");
    }
    let s = scratch!();
    for (file, from, to, field) in [
        (
            "statefulset.yaml",
            "terminationGracePeriodSeconds: 45",
            "terminationGracePeriodSecond: 45",
            "unknown field \"terminationGracePeriodSecond\"",
        ),
        (
            "scaledobject.yaml",
            "maxReplicaCount: 8 ",
            "maxReplicaCount: \"8\" ",
            "spec.maxReplicaCount of type int32",
        ),
        (
            "podmonitor.yaml",
            "interval: 15s",
            "intervall: 15s",
            "unknown field \"intervall\"",
        ),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.contains(from), "{file}: {from}");
        let broken = s.write(file, &text.replacen(from, to, 1));
        let o = Command::new(&check).arg(&broken).output().unwrap();
        assert!(
            !o.status.success() && stderr(&o).contains(field),
            "{file} with `{to}`: {}",
            stderr(&o)
        );
    }
}
