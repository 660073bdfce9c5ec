//! Stateful stages end to end: the real `weir` binary, the `running-total`, `dedup` and
//! `misbehave` components built from source, real files, and a Kafka-protocol broker over TCP
//! for the changelog (the mock cluster of `weir broker`; Apache Kafka with transactions).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use weir_tests::kafka::{kafka_pipeline, Broker};
use weir_tests::plugins::{DEDUP, MISBEHAVE, RUNNING_TOTAL};
use weir_tests::{evidence, scratch, Scratch};

/// The output topics of the Kafka pipelines here, for [`evidence::state`].
const OUTPUTS: &[(&str, i32)] = &[("out", 3), ("dlq", 1)];

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

/// A local pipeline of `misbehave` keeping state in bucket `seen`, with config `mode: seen`.
fn misbehave_in_seen(s: &Scratch, mode: &str) {
    jsonl_pipeline(
        s,
        &stateful("m", MISBEHAVE, "{ buckets: [seen] }", &[(mode, "seen")]),
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
fn a_calls_writes_and_deletes_show_in_its_own_reads_and_key_listings() {
    writes_and_deletes_show_in_reads_and_listings(&[]);
}

#[test]
fn a_bucket_opened_in_init_and_kept_serves_every_call_as_one_opened_per_message() {
    // The host's `open` answers outside a call too (only reads and writes need one): a stage
    // may open its buckets once in `init` and keep them (the SDK's docs say so).
    writes_and_deletes_show_in_reads_and_listings(&[("open_in_init", "true")]);
}

/// `misbehave` with `list_in: seen` (and `config`) over writes and a delete, in one packed
/// call, then a second run.
fn writes_and_deletes_show_in_reads_and_listings(config: &[(&str, &str)]) {
    // One packed call answers all of them: the Rust SDK keeps the call's writes in the guest
    // until it returns, so every read and listing must see the earlier messages' writes.
    let s = scratch!();
    let input: Vec<Value> = [
        ("b", "1"),
        ("a", "1"),
        ("b", "2"),
        ("c", "1"),
        ("a", "delete"),
    ]
    .iter()
    .map(|(k, v)| json!({"key": k, "value": v}))
    .collect();
    s.jsonl("in.jsonl", &input);
    let mut config = config.to_vec();
    config.push(("list_in", "seen"));
    jsonl_pipeline(
        &s,
        &stateful("m", MISBEHAVE, "{ buckets: [seen] }", &config),
    );
    run_ok(&s);
    let listed: Vec<String> = s
        .read_jsonl("out.jsonl")
        .iter()
        .map(|l| l["value"].as_str().expect("a text value").to_owned())
        .collect();
    assert_eq!(listed, ["b", "a,b", "a,b", "a,b,c", "b,c"]);
    // The second run (a local source's state is kept) lists what the first one left.
    s.jsonl("in.jsonl", &[json!({"key": "d", "value": "1"})]);
    run_ok(&s);
    let listed = s.read_jsonl("out.jsonl");
    assert_eq!(
        listed[0]["value"], "b,c,d",
        "the first run's writes were kept"
    );
}

#[test]
fn a_write_in_init_is_refused_not_kept_for_later() {
    // The Rust SDK keeps a call's writes until the call returns; outside a call there is
    // nothing to keep them for, so the host answers at once.
    let s = scratch!();
    s.jsonl("in.jsonl", &[json!({"key": "a", "value": "1"})]);
    misbehave_in_seen(&s, "write_in_init");
    let out = s.run(&["run", "p.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("write in init: Err(Other(") && stderr.contains("not in init"),
        "{stderr}"
    );
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
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("a".into(), 21), ("b".into(), 6), ("a".into(), 24)],
        "and the third from the second's"
    );
    // What the store holds, as `weir state` shows it.
    let out = s.run(&["state", "list", "p.yaml", "--stage", "total"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<(String, i64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (
                v["key"].as_str().unwrap().to_owned(),
                v["int"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("a".into(), 24), ("b".into(), 6)]);
    let out = s.run(&["state", "get", "p.yaml", "--stage", "total", "--key", "b"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"int\":6"));
    let out = s.run(&["state", "reset", "p.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("a".into(), 5), ("b".into(), 2), ("a".into(), 8)],
        "after a reset the totals start from nothing"
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
    // Each chain run sends each key's last write (compaction does the rest later): at least
    // one record per key, at most one per increment.
    let keys = sums(&first).len();
    assert!(
        (keys..=300).contains(&changelog.len()),
        "{} changelog records for {keys} keys and 300 increments",
        changelog.len()
    );
    // `weir state` reads the same totals from the changelog as from the store.
    for from in [&["--changelog"][..], &[][..]] {
        let mut args = vec!["state", "get", "p.yaml", "--stage", "total", "--key", "k3"];
        args.extend_from_slice(from);
        let out = s.run(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            v["int"].as_i64(),
            sums(&first).get("k3").copied(),
            "{from:?}"
        );
    }
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

/// `n` orders over 9 customers (`c0`..`c8`, customer j always on partition j % 3), amounts 1-5.
fn customer_orders(n: usize) -> Vec<(i32, String, String)> {
    (0..n)
        .map(|i| {
            let j = i % 9;
            (
                (j % 3) as i32,
                format!("c{j}"),
                format!("{{\"amount\":{},\"order\":{i}}}", i % 5 + 1),
            )
        })
        .collect()
}

/// Every customer's totals in output order must be exactly the running sums of its orders:
/// each order counted once, in order, nothing lost, nothing doubled.
fn assert_exact_totals(b: &Broker, orders: &[(i32, String, String)], s: &Scratch) {
    assert_exact_totals_in(b, orders, s, ("g-state", ("in", 3)), OUTPUTS);
}

/// [`assert_exact_totals`] for `group` reading `input`, with its totals in the first of
/// `outputs`.
fn assert_exact_totals_in(
    b: &Broker,
    orders: &[(i32, String, String)],
    s: &Scratch,
    (group, input): (&str, (&str, i32)),
    outputs: &[(&str, i32)],
) {
    let mut expected: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for (_, k, v) in orders {
        let v: Value = serde_json::from_str(v).unwrap();
        let t = sum.entry(k.clone()).or_default();
        *t += v["amount"].as_i64().unwrap();
        expected.entry(k.clone()).or_default().push(*t);
    }
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in b.read(outputs[0].0) {
        let v: Value = serde_json::from_str(&r.value).expect("JSON output");
        got.entry(r.key)
            .or_default()
            .push(v["total"].as_i64().expect("a total"));
    }
    if got != expected {
        let diff: Vec<String> = expected
            .iter()
            .filter(|(k, e)| got.get(*k) != Some(e))
            .map(|(k, e)| {
                let g = got.get(k).cloned().unwrap_or_default();
                format!(
                    "{k}: {} outputs, expected {}; last total {:?}, expected {:?}",
                    g.len(),
                    e.len(),
                    g.last(),
                    e.last()
                )
            })
            .collect();
        panic!(
            "totals differ:\n{}\n{}",
            diff.join("\n"),
            evidence::state(b, s, group, input, outputs)
        );
    }
}

#[test]
fn on_kafka_exactly_once_totals_survive_kill_9_and_a_wiped_state_dir() {
    let (b, orders, s, _logs) = churn_with("exactly-once");
    assert_exact_totals(&b, &orders, &s);
}

/// The control: at-least-once, killed the same way and restored from a wiped state dir, the
/// totals are never lower than the sums (nothing is lost), and may be higher (a replayed
/// order's write can come back from the changelog). Without the group churn: a partition can
/// be handed to a new member before the old one let it go, and without fencing two members
/// then write one partition's state (docs/state.md: at-least-once and zombies).
#[test]
fn on_kafka_at_least_once_totals_after_kill_9_and_a_wiped_state_dir_are_never_lower() {
    let (b, orders, s, _logs) = churn_with("at-least-once");
    let want = sums(&orders);
    let got = last_totals(&b);
    for (k, w) in &want {
        let g = got.get(k).copied().unwrap_or(0);
        assert!(
            g >= *w,
            "{k}: total {g} is lower than the sum {w}: {}",
            evidence::state(&b, &s, "g-state", ("in", 3), OUTPUTS)
        );
    }
}

/// What [`churn_with`] leaves: the broker, the orders, the scratch folder and the runs' logs.
type Churned = (Broker, Vec<(i32, String, String)>, Scratch, Vec<String>);

/// The running-total pipeline on Apache Kafka with `delivery` while the input trickles in: killed
/// twice (`kill -9`) with totals produced and not committed, then run again, stopped, and
/// started with its state dir wiped; then the last 300 orders come, and it runs until every
/// order came out.
/// (Group churn with state: `on_kafka_three_members_joining_and_leaving_keep_exact_totals_exactly_once`.)
fn churn_with(delivery: &str) -> Churned {
    use std::time::{Duration, Instant};
    use weir_tests::kafka::{kafka, sigterm, spawn_weir, trickle, wait_ok};

    let b = kafka(&[("in", 3), ("out", 3), ("dlq", 1)]);
    let orders = customer_orders(1800);
    // Input keeps coming (about 30 s) while it is killed and restarted. The last 300 come
    // after the wipe: their totals build on the restored state.
    let (early, late) = orders.split_at(1500);
    let producer = trickle(&b, "in", early.to_vec(), 100, Duration::from_millis(300));
    let s = scratch!();
    if std::env::var("WEIR_KEEP").is_ok() {
        eprintln!("scratch: {}", s.dir.path().display());
    }
    let group = "g-state";
    // Commits every second, so a kill lands with totals produced and not committed.
    let yaml = kafka_pipeline(
        &b.bootstrap,
        group,
        &stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[]),
        "",
        &format!("  state_dir: state-0\ndelivery: {delivery}\n"),
    )
    .replace("commit_interval: 100ms", "commit_interval: 1s");
    s.write("p-0.yaml", &yaml);
    let progress = |before: &[Option<i64>], log: &str| {
        evidence::wait_commit_progress(&b, &s, group, ("in", 3), OUTPUTS, before, log);
    };
    let mut logs = Vec::new();
    // 1. kill -9 twice, each time with totals produced and not committed.
    for i in 0..2 {
        let log = format!("kill-{i}.log");
        let before = b.committed(group, "in", 3);
        let mut c = spawn_weir(&s, "p-0.yaml", &log);
        progress(&before, &log);
        std::thread::sleep(Duration::from_millis(600));
        c.kill().expect("kill -9");
        c.wait().expect("reaped");
        logs.push(log);
    }
    // 2. A clean run.
    let log = "member-0.log".to_owned();
    let before = b.committed(group, "in", 3);
    let mut c = spawn_weir(&s, "p-0.yaml", &log);
    progress(&before, &log);
    logs.push(log.clone());
    // 3. It stops and comes back with its state dir wiped.
    sigterm(&c);
    wait_ok(c, "member 0", &s, &log);
    std::fs::remove_dir_all(s.path("state-0")).expect("wiping the state dir");
    producer.join().expect("producer");
    let log = "wiped.log".to_owned();
    c = spawn_weir(&s, "p-0.yaml", &log);
    logs.push(log.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(s.path(&log))
        .unwrap_or_default()
        .matches("state restored from the changelog")
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "the wiped member did not restore its 3 partitions within 120 s: {}",
            evidence::state(&b, &s, group, ("in", 3), OUTPUTS)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.produce("in", late);
    let deadline = Instant::now() + Duration::from_secs(180);
    let last_ok = |b: &Broker| {
        let want = sums(&orders);
        let got = last_totals(b);
        want.iter().all(|(k, w)| got.get(k).is_some_and(|g| g >= w))
    };
    while b.read("out").len() < orders.len() || !last_ok(&b) {
        if Instant::now() >= deadline {
            panic!(
                "not every order came out within 180 s: {} outputs for {} orders; last totals {:?}, sums {:?}\n{}",
                b.read("out").len(),
                orders.len(),
                last_totals(&b),
                sums(&orders),
                evidence::state(&b, &s, group, ("in", 3), OUTPUTS)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    sigterm(&c);
    wait_ok(c, "the last member", &s, &log);
    (b, orders, s, logs)
}

/// Group churn with state: three members, each with its own state dir, join one group one
/// after another while orders keep coming, then two leave; each partition's state moves with
/// it (restored from the changelog by the member it moves to, read_committed). Every
/// customer's totals, in output order, are exactly the running sums of its orders. (Not on
/// the mock cluster: it does not keep offsets committed in a transaction.)
#[test]
fn on_kafka_three_members_joining_and_leaving_keep_exact_totals_exactly_once() {
    three_members_keep_exact_totals(weir_tests::kafka::Protocol::Classic);
}

/// The same under the consumer group protocol (KIP-848): the broker moves the partitions,
/// and their state with them.
#[test]
fn on_kafka_kip848_three_members_joining_and_leaving_keep_exact_totals_exactly_once() {
    three_members_keep_exact_totals(weir_tests::kafka::Protocol::Consumer);
}

/// The sequence that left 3 of 6 partitions without an owner for 6 minutes on tansu, on
/// Apache Kafka under each group protocol at once (one input, a group and outputs per
/// protocol: cooperative-sticky, eager, KIP-848): three stateful exactly-once members share
/// 6 partitions; one stops (SIGTERM), another is killed (`kill -9`) right after, and a fourth
/// joins while orders keep coming. Every order must come out, with exact totals, within
/// 150 s of the churn (the dead member's session is 6 s): no partition is left unowned.
#[test]
fn on_kafka_a_stop_a_kill_and_a_join_at_once_leave_no_partition_unowned_under_each_protocol() {
    use std::time::{Duration, Instant};
    use weir_tests::kafka::{kafka, log_shows, sigterm, spawn_weir, trickle, wait_ok, Protocol};

    let protocols = [
        ("coop", "", Protocol::Classic),
        ("eager", "    assignor: eager", Protocol::Classic),
        ("kip848", "", Protocol::Consumer),
    ];
    let mut topics = vec![("in", 6)];
    let outs: Vec<(String, String)> = protocols
        .iter()
        .map(|(tag, ..)| (format!("out-{tag}"), format!("dlq-{tag}")))
        .collect();
    for (out, dlq) in &outs {
        topics.push((out.as_str(), 6));
        topics.push((dlq.as_str(), 1));
    }
    let b = kafka(&topics);
    // 18 customers, 3 on each partition.
    let orders: Vec<(i32, String, String)> = (0..2400)
        .map(|i| {
            let j = i % 18;
            (
                j % 6,
                format!("c{j}"),
                format!("{{\"amount\":{},\"order\":{i}}}", i % 5 + 1),
            )
        })
        .collect();
    // About 30 s of input: the churn happens while it arrives.
    let producer = trickle(&b, "in", orders.clone(), 100, Duration::from_millis(300));
    let s = scratch!();
    std::thread::scope(|scope| {
        for ((tag, extra, protocol), (out, dlq)) in protocols.iter().zip(&outs) {
            let (b, s, orders) = (&b, &s, &orders);
            scope.spawn(move || {
                let group = format!("g-{tag}");
                let outputs = [(out.as_str(), 6), (dlq.as_str(), 1)];
                for i in 0..4 {
                    let yaml = protocol
                        .apply(&kafka_pipeline(
                            &b.bootstrap,
                            &group,
                            &stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[]),
                            extra,
                            &format!("  state_dir: {tag}-state-{i}\ndelivery: exactly-once\n"),
                        ))
                        // Its own changelog topics (named for the pipeline).
                        .replace("name: kafka-test", &format!("name: churn-{tag}"))
                        .replace(
                            "report: report.json",
                            &format!("report: {tag}-report-{i}.json"),
                        )
                        .replace("topic: out\n", &format!("topic: {out}\n"))
                        .replace("topic: dlq\n", &format!("topic: {dlq}\n"));
                    s.write(&format!("{tag}-{i}.yaml"), &yaml);
                }
                let progress = |before: &[Option<i64>], log: &str| {
                    evidence::wait_commit_progress(b, s, &group, ("in", 6), &outputs, before, log);
                };
                let spawn = |i: usize| {
                    let log = format!("{tag}-member-{i}.log");
                    (spawn_weir(s, &format!("{tag}-{i}.yaml"), &log), log)
                };
                // Each member runs (it has partitions, past its start-up) before the next.
                let assigned = |log: &str| {
                    assert!(
                        log_shows(s, log, "partitions assigned", Duration::from_secs(60)),
                        "{tag}: {log} got no partitions within 60 s: {}",
                        evidence::state(b, s, &group, ("in", 6), &outputs)
                    );
                };
                let mut members = Vec::new();
                for i in 0..3 {
                    let before = b.committed(&group, "in", 6);
                    let (c, log) = spawn(i);
                    assigned(&log);
                    progress(&before, &log);
                    members.push((c, log));
                }
                let (mut killed, _) = members.remove(2);
                let (stopped, stopped_log) = members.remove(1);
                sigterm(&stopped);
                killed.kill().expect("kill -9");
                killed.wait().expect("reaped");
                members.push(spawn(3));
                wait_ok(stopped, "the member stopped with SIGTERM", s, &stopped_log);
                let deadline = Instant::now() + Duration::from_secs(150);
                while b.read(out).len() < orders.len() {
                    assert!(
                        Instant::now() < deadline,
                        "{tag}: {} of {} totals came out: {}",
                        b.read(out).len(),
                        orders.len(),
                        evidence::state(b, s, &group, ("in", 6), &outputs)
                    );
                    std::thread::sleep(Duration::from_millis(300));
                }
                for (c, log) in members {
                    sigterm(&c);
                    wait_ok(c, "a member", s, &log);
                }
                assert_exact_totals_in(b, orders, s, (&group, ("in", 6)), &outputs);
            });
        }
    });
    producer.join().expect("producer");
}

fn three_members_keep_exact_totals(protocol: weir_tests::kafka::Protocol) {
    use std::time::{Duration, Instant};
    use weir_tests::kafka::{kafka, sigterm, spawn_weir, trickle, wait_ok};

    let b = kafka(&[("in", 3), ("out", 3), ("dlq", 1)]);
    let orders = customer_orders(1800);
    let producer = trickle(&b, "in", orders.clone(), 60, Duration::from_millis(100));
    let s = scratch!();
    let group = "g-state";
    for i in 0..3 {
        let yaml = protocol
            .apply(&kafka_pipeline(
                &b.bootstrap,
                group,
                &stateful("total", RUNNING_TOTAL, "{ buckets: [totals] }", &[]),
                "",
                &format!("  state_dir: state-{i}\ndelivery: exactly-once\n"),
            ))
            .replace("report: report.json", &format!("report: report-{i}.json"));
        s.write(&format!("p-{i}.yaml"), &yaml);
    }
    let evidence = || evidence::state(&b, &s, group, ("in", 3), OUTPUTS);
    let progress = |before: &[Option<i64>], log: &str| {
        evidence::wait_commit_progress(&b, &s, group, ("in", 3), OUTPUTS, before, log);
    };
    let mut members = Vec::new();
    for i in 0..3 {
        let log = format!("member-{i}.log");
        let before = b.committed(group, "in", 3);
        members.push((spawn_weir(&s, &format!("p-{i}.yaml"), &log), log.clone()));
        progress(&before, &log);
    }
    // Two leave mid-stream: their partitions, and the partitions' state, move to the last.
    for _ in 0..2 {
        let (c, log) = members.remove(0);
        let before = b.committed(group, "in", 3);
        sigterm(&c);
        wait_ok(c, "a leaving member", &s, &log);
        progress(&before, "a member left");
    }
    producer.join().expect("producer");
    let (c, log) = members.remove(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while b.read("out").len() < orders.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} totals came out within 120 s: {}",
            b.read("out").len(),
            orders.len(),
            evidence()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&c);
    wait_ok(c, "the last member", &s, &log);
    let restored: usize = (0..3)
        .map(|i| {
            std::fs::read_to_string(s.path(&format!("member-{i}.log")))
                .unwrap_or_default()
                .matches("state restored from the changelog")
                .count()
        })
        .sum();
    assert!(
        restored >= 5,
        "partitions moved between members {restored} times (at least 3 + 2 expected)"
    );
    assert_exact_totals(&b, &orders, &s);
}

/// A local pipeline of one stage (`name`, running `plugin`, state in `bucket`, config
/// `count_in: bucket`) with the rollout `policy` (the flow mapping's fields) of a `misbehave`
/// candidate, which counts in the same bucket.
fn with_misbehave_candidate(s: &Scratch, name: &str, plugin: &str, bucket: &str, policy: &str) {
    let mut stage = stateful(
        name,
        plugin,
        &format!("{{ buckets: [{bucket}] }}"),
        &[("count_in", bucket)],
    );
    stage.push_str(&format!(
        "    rollout: {{ candidate: {MISBEHAVE}, {policy} }}\n"
    ));
    jsonl_pipeline(s, &stage);
}

/// [`with_misbehave_candidate`] for `running-total` (stage `total`, bucket `totals`).
fn total_with_misbehave_candidate(s: &Scratch, policy: &str) {
    with_misbehave_candidate(s, "total", RUNNING_TOTAL, "totals", policy);
}

#[test]
fn a_shadow_candidate_reads_the_live_state_and_its_writes_are_never_kept() {
    let s = scratch!();
    let input: Vec<Value> = [("a", 5), ("b", 2), ("a", 3)]
        .iter()
        .map(|(k, a)| json!({"key": k, "value": {"amount": a}}))
        .collect();
    s.jsonl("in.jsonl", &input);
    // The candidate (`misbehave` with `count_in: totals`) adds 1 to `seen` and to the
    // message's value in the live stage's bucket, in its throw-away overlay.
    total_with_misbehave_candidate(&s, "mode: shadow, observe: 1000 messages");
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("a".into(), 5), ("b".into(), 2), ("a".into(), 8)],
        "only the live version's answers, on the live state"
    );
    let out = s.run(&["state", "list", "p.yaml", "--stage", "total"]);
    let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["key"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(keys, ["a", "b"], "nothing the candidate wrote was kept");
    let report = s.report();
    assert_eq!(
        report["rollouts"][0]["mode"], "shadow",
        "the candidate ran in shadow: {report}"
    );
}

#[test]
fn values_past_the_ttl_are_deleted_from_the_store_not_only_hidden() {
    let s = scratch!();
    let first: Vec<Value> = (0..200)
        .map(|i| json!({"key": format!("k{i:03}"), "value": {"amount": i}}))
        .collect();
    s.jsonl("in.jsonl", &first);
    jsonl_pipeline(
        &s,
        &stateful(
            "total",
            RUNNING_TOTAL,
            "{ buckets: [totals], ttl: 1s }",
            &[],
        ),
    );
    run_ok(&s);
    let listed = |s: &Scratch| -> Vec<String> {
        state_list(s, "total")
            .iter()
            .map(|v| v["key"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(listed(&s).len(), 200, "the first run's keys are stored");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // A second run after the TTL: its first chain run sweeps the store.
    s.jsonl(
        "in.jsonl",
        &[
            json!({"key": "new", "value": {"amount": 7}}),
            json!({"key": "k005", "value": {"amount": 1}}),
        ],
    );
    run_ok(&s);
    assert_eq!(
        totals(&s.read_jsonl("out.jsonl")),
        [("new".into(), 7), ("k005".into(), 1)],
        "an expired total starts again"
    );
    assert_eq!(
        listed(&s),
        ["k005", "new"],
        "the expired keys are gone from the store"
    );
}

/// What `weir state list` shows of stage `stage`'s store, a JSON object per key.
fn state_list(s: &Scratch, stage: &str) -> Vec<Value> {
    let out = s.run(&["state", "list", "p.yaml", "--stage", stage]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The `value` of each line of `out.jsonl`, in order.
fn out_values(s: &Scratch) -> Vec<Value> {
    s.read_jsonl("out.jsonl")
        .iter()
        .map(|l| l["value"].clone())
        .collect()
}

/// Each key of stage `stage`'s store and its number.
fn stored_ints(s: &Scratch, stage: &str) -> BTreeMap<String, i64> {
    state_list(s, stage)
        .iter()
        .map(|v| {
            (
                v["key"].as_str().unwrap().to_owned(),
                v["int"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_canary_candidate_and_the_live_version_count_in_one_state_exactly_once() {
    // Half the keys go to the candidate, half to the live version, in every batch: each
    // instance keeps the values it read between its calls (the Rust SDK's read cache), and
    // the other's writes in between must make it forget them, or a count is lost.
    let s = scratch!();
    let words = ["x", "y", "z"];
    let input: Vec<Value> = (0..900)
        .map(|i| json!({"key": format!("k{}", i % 7), "value": words[(i * 7 / 5) % 3]}))
        .collect();
    s.jsonl("in.jsonl", &input);
    with_misbehave_candidate(
        &s,
        "m",
        MISBEHAVE,
        "counts",
        "mode: canary, by: key, share: 50%, observe: 1000000 messages, rollback_when: { reject_rate: off }",
    );
    let yaml = std::fs::read_to_string(s.path("p.yaml")).unwrap();
    // Small batches: many calls of each instance, the other's in between.
    s.write("p.yaml", &format!("{yaml}batch: {{ max_messages: 64 }}\n"));
    run_ok(&s);
    let report = s.report();
    assert_eq!(report["rollouts"][0]["mode"], "canary", "{report}");
    let counted = stored_ints(&s, "m");
    let mut expected = BTreeMap::from([("seen".to_owned(), input.len() as i64)]);
    for m in &input {
        *expected
            .entry(m["value"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        counted, expected,
        "every message counted once, by whichever version"
    );
}

#[test]
fn a_canary_candidates_writes_for_a_message_it_failed_on_are_not_kept() {
    // The candidate (`misbehave` counting in the live stage's bucket) answers its whole share;
    // it fails on `fail`, which the live version answers instead (and the messages after it).
    // The candidate's writes of the messages before it are kept; of `fail` none.
    let s = scratch!();
    let input: Vec<Value> = ["1", "2", "fail", "3"]
        .iter()
        .map(|v| json!({"key": "a", "value": v}))
        .collect();
    s.jsonl("in.jsonl", &input);
    total_with_misbehave_candidate(
        &s,
        "mode: canary, by: key, share: 100%, observe: 1000000 messages, rollback_when: { reject_rate: off }",
    );
    run_ok(&s);
    assert_eq!(out_values(&s), ["1", "2"], "the candidate's answers (keep)");
    assert_eq!(
        s.read_jsonl("rejected.jsonl").len(),
        2,
        "`fail` and `3`: the live version's answers (not JSON: rejected)"
    );
    let counted = stored_ints(&s, "total");
    assert_eq!(
        counted,
        BTreeMap::from([
            ("seen".to_owned(), 2),
            ("1".to_owned(), 1),
            ("2".to_owned(), 1)
        ]),
        "only the writes of the candidate's delivered answers"
    );
}

#[test]
fn a_stateful_first_stage_feeds_a_second_and_a_fail_keeps_only_the_delivered_writes() {
    // The stateful run lends its batch: the first stage's kept messages are copied out of it
    // for the second, its reject taken from it, and after `fail` the messages before it run
    // again from the same batch.
    let s = scratch!();
    let input: Vec<Value> = ["a", "reject", "b", "fail", "c"]
        .iter()
        .map(|v| json!({"key": "k", "value": v}))
        .collect();
    s.jsonl("in.jsonl", &input);
    let stages = stateful(
        "m",
        MISBEHAVE,
        "{ buckets: [seen] }",
        &[("count_in", "seen")],
    ) + &weir_tests::stage("p", weir_tests::plugins::PASSTHROUGH, &[]);
    jsonl_pipeline(&s, &stages);
    let out = s.run(&["run", "p.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a fail stops the run: {stderr}");
    assert!(stderr.contains("asked to fail"), "{stderr}");
    assert_eq!(out_values(&s), ["a", "b"], "through both stages, in order");
    let rejected = s.read_jsonl("rejected.jsonl");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].to_string().contains("reject"), "{rejected:?}");
    assert_eq!(
        stored_ints(&s, "m"),
        BTreeMap::from([
            ("seen".to_owned(), 3),
            ("a".to_owned(), 1),
            ("reject".to_owned(), 1),
            ("b".to_owned(), 1)
        ]),
        "the writes of the delivered messages (the reject's included), none of `fail`'s or after"
    );
}
