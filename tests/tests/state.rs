//! Stateful stages end to end: the real `weir` binary, the `running-total`, `dedup` and
//! `misbehave` components built from source, real files, and a Kafka-protocol broker over TCP
//! for the changelog (the mock cluster of `weir broker`; tansu with transactions).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use weir_tests::kafka::{kafka_pipeline, Broker};
use weir_tests::plugins::{DEDUP, MISBEHAVE, RUNNING_TOTAL};
use weir_tests::{scratch, Scratch};

fn stateful(name: &str, plugin: &str, state: &str, config: &[(&str, &str)]) -> String {
    let mut s = weir_tests::stage(name, plugin, config);
    s.push_str(&format!("    state: {state}\n"));
    s
}

fn jsonl_pipeline(s: &Scratch, stages: &str) {
    s.write(
        "p.yaml",
        &format!(
            "name: local\nsource: {{ jsonl: {{ path: in.jsonl }} }}\nstages:\n{stages}sink: {{ jsonl: {{ path: out.jsonl }} }}\nreject: {{ jsonl: {{ path: rejected.jsonl }} }}\nruntime: {{ report: report.json }}\n"
        ),
    );
}

fn run_ok(s: &Scratch) {
    let out = s.run(&["run", "p.yaml"]);
    assert!(
        out.status.success(),
        "weir run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `total` of each output value, in order.
fn totals(lines: &[Value]) -> Vec<(String, i64)> {
    lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l["value"].as_str().expect("a text value"))
                .expect("a JSON value");
            (
                l["key"].as_str().expect("a key").to_owned(),
                v["total"].as_i64().expect("a total"),
            )
        })
        .collect()
}

#[test]
fn a_second_run_over_a_local_file_continues_from_the_first_runs_state() {
    let s = scratch!();
    let input: Vec<Value> = [("a", 5), ("b", 2), ("a", 3)]
        .iter()
        .map(|(k, a)| json!({"key": k, "value": {"amount": a}}))
        .collect();
    s.jsonl("in.jsonl", &input);
    jsonl_pipeline(
        &s,
        &stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[]),
    );
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("a".into(), 5), ("b".into(), 2), ("a".into(), 8)],
        "first run"
    );
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("a".into(), 13), ("b".into(), 4), ("a".into(), 16)],
        "the second run starts from the first run's totals"
    );
}

#[test]
fn dedup_drops_every_duplicate_within_a_run_and_across_a_restart() {
    let s = scratch!();
    let ids = ["o-1", "o-2", "o-1", "o-3", "o-2"];
    let input: Vec<Value> = ids.iter().map(|id| json!({"value": {"id": id}})).collect();
    s.jsonl("in.jsonl", &input);
    jsonl_pipeline(
        &s,
        &stateful("dedup", DEDUP, "{ buckets: [seen], ttl: 1d }", &[]),
    );
    run_ok(&s);
    let out = s.read_jsonl("out.jsonl");
    let kept: Vec<String> = out
        .iter()
        .map(|l| l["value"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kept.len(), 3, "one of each id: {kept:?}");
    // The same file again, with a new id: only the new one passes.
    let mut again = input.clone();
    again.push(json!({"value": {"id": "o-4"}}));
    s.jsonl("in.jsonl", &again);
    run_ok(&s);
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(
        out.len(),
        1,
        "only the new id passes after a restart: {out:?}"
    );
    assert!(out[0]["value"].as_str().unwrap().contains("o-4"));
}

#[test]
fn an_undeclared_bucket_is_access_denied_and_an_oversized_value_is_an_error_answer() {
    let s = scratch!();
    s.jsonl("in.jsonl", &[json!({"value": "x"})]);
    // The stage opens `other`, but only `counts` is declared.
    jsonl_pipeline(
        &s,
        &stateful(
            "m",
            MISBEHAVE,
            "{ buckets: [counts] }",
            &[("count_in", "other")],
        ),
    );
    run_ok(&s);
    let reasons = s.reject_reasons();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("not declared"),
        "access-denied, as an error answer the stage could handle: {reasons:?}"
    );
    // Declared, but `increment` stores 8 bytes and the limit is 4.
    jsonl_pipeline(
        &s,
        &stateful(
            "m",
            MISBEHAVE,
            "{ buckets: [counts], max_value: 4B }",
            &[("count_in", "counts")],
        ),
    );
    run_ok(&s);
    let reasons = s.reject_reasons();
    assert!(
        reasons.len() == 1 && reasons[0].contains("max_value"),
        "{reasons:?}"
    );
}

#[test]
fn a_state_dir_in_use_by_another_process_is_refused_naming_the_stage() {
    let s = scratch!();
    s.write(
        "p.yaml",
        &format!(
            "name: locked\nsource: {{ stdin: {{}} }}\nstages:\n{}sink: {{ discard: {{}} }}\n",
            stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[])
        ),
    );
    let mut first = s
        .weir(&["run", "p.yaml"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("weir");
    // The first run holds the store once it has started.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !s.path("weir-state/locked/total.redb").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run never opened its store"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let second = s.run(&["run", "p.yaml"]);
    drop(first.stdin.take());
    let _ = first.wait();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stage `total`") && err.contains("in use by another process"),
        "{err}"
    );
}

/// `(partition, key, value)`: key `k{i % 10}` always on partition `(i % 10) % 3`.
fn orders(from: usize, n: usize) -> Vec<(i32, String, String)> {
    (from..from + n)
        .map(|i| {
            let k = i % 10;
            (
                (k % 3) as i32,
                format!("k{k}"),
                format!("{{\"amount\":{}}}", i % 7 + 1),
            )
        })
        .collect()
}

fn sums(records: &[(i32, String, String)]) -> BTreeMap<String, i64> {
    let mut s = BTreeMap::new();
    for (_, k, v) in records {
        let v: Value = serde_json::from_str(v).unwrap();
        *s.entry(k.clone()).or_default() += v["amount"].as_i64().unwrap();
    }
    s
}

/// The last `total` emitted per key (outputs in partition and offset order; a key stays on
/// one partition).
fn last_totals(b: &Broker) -> BTreeMap<String, i64> {
    let mut last = BTreeMap::new();
    for r in b.read("out") {
        let v: Value = serde_json::from_str(&r.value).expect("JSON output");
        last.insert(r.key, v["total"].as_i64().expect("a total"));
    }
    last
}

#[test]
fn on_the_mock_cluster_totals_are_restored_from_the_changelog_after_the_state_dir_is_wiped() {
    let s = scratch!();
    // The mock cluster does not answer CreateTopics: the changelog topic is made up front
    // (Weir's start-up error says so, with the partition count).
    let b = Broker::start(
        env!("CARGO_BIN_EXE_weir"),
        &[
            ("in", 3),
            ("out", 3),
            ("dlq", 1),
            ("kafka-test.total.totals.changelog", 3),
        ],
    );
    let first = orders(0, 300);
    b.produce("in", &first);
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            "g",
            &stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[]),
            "    stop_at_end: true\n",
            "",
        ),
    );
    run_ok(&s);
    assert_eq!(last_totals(&b), sums(&first), "the first run's totals");
    let changelog = b.read("kafka-test.total.totals.changelog");
    assert_eq!(
        changelog.len(),
        300,
        "one changelog record per increment (compaction comes later)"
    );
    // A new machine: no state dir. The totals come back from the changelog.
    std::fs::remove_dir_all(s.path("weir-state")).expect("wiping the state dir");
    let second = orders(300, 100);
    b.produce("in", &second);
    run_ok(&s);
    let all: Vec<_> = first.iter().chain(&second).cloned().collect();
    assert_eq!(
        last_totals(&b),
        sums(&all),
        "the second run restored the totals from the changelog and went on"
    );
    let report = s.report();
    assert!(report["committed"].is_object(), "{report}");
}
