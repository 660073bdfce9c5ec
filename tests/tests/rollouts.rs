//! Safe rollouts, end to end: the real `weir` binary with real components, a shadow or canary
//! candidate on a local source and on Kafka (`weir broker`, librdkafka's mock cluster over
//! TCP), and the admin API through `weir status | rollout | promote | rollback`.
//!
//! Versions are told apart by what they do: `passthrough` keeps every message; `misbehave`
//! keeps ordinary messages too (the same answers), but rejects `reject` and traps on `trap`;
//! `json-enrich` (config `set.by: v2`) tags every JSON message with `"by":"v2"`.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir::config::CanaryBy;
use weir::message::{Envelope, Lane, Message};
use weir::rollout::split::to_candidate;
use weir_tests::kafka::{kafka_pipeline, Broker, Record};
use weir_tests::plugins::{JSON_ENRICH, MISBEHAVE, PASSTHROUGH};
use weir_tests::{free_port, scratch, stderr, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// The stage: live `plugin`, and a `rollout` block (indented under the stage).
fn stage(plugin: &str, rollout: &str) -> String {
    format!(
        "  - name: s\n    plugin: {plugin}\n    config:\n      set.by: v2\n    rollout:\n{rollout}"
    )
}

/// Input lines `{"key": "k<i>", "value": <value(i)>}`.
fn input(s: &Scratch, n: usize, value: impl Fn(usize) -> String) {
    let lines: Vec<Value> = (0..n)
        .map(|i| json!({ "key": format!("k{i}"), "value": value(i) }))
        .collect();
    s.jsonl("in.jsonl", &lines);
}

fn ordinary(i: usize) -> String {
    format!("{{\"n\":{i}}}")
}

/// Values that are `word` where `at(i)`, else `other(i)` (JSON).
fn values(
    word: &'static str,
    at: impl Fn(usize) -> bool,
    other: fn(usize) -> String,
) -> impl Fn(usize) -> String {
    move |i| if at(i) { word.to_owned() } else { other(i) }
}

/// The rollout ended this way for this reason.
fn assert_decided(r: &Value, outcome: &str, reason: &str) {
    assert_eq!(
        (&r["outcome"], &r["reason"]),
        (&json!(outcome), &json!(reason)),
        "{r:#}"
    );
}

/// The sink holds every input, unchanged and in order, and nothing was rejected: what the
/// live version (passthrough) alone produces.
fn assert_live_output(s: &Scratch, n: usize, value: impl Fn(usize) -> String) {
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), n);
    for (i, line) in out.iter().enumerate() {
        assert_eq!(line["key"], format!("k{i}"), "order kept");
        assert_eq!(line["value"], value(i));
    }
    assert_eq!(s.read_jsonl("rej.jsonl").len(), 0);
}

/// Runs a local pipeline (in.jsonl → out.jsonl, rejects to rej.jsonl) to its end.
fn run_local(s: &Scratch, stages: &str) -> Value {
    s.write(
        "p.yaml",
        &format!(
            "source:\n  jsonl: {{ path: in.jsonl }}\nstages:\n{stages}sink:\n  jsonl: {{ path: out.jsonl }}\nreject:\n  jsonl: {{ path: rej.jsonl }}\nbatch:\n  max_messages: 16\nruntime:\n  report: report.json\n"
        ),
    );
    let out = s.run(&["run", "p.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.report()
}

fn only_rollout(report: &Value) -> &Value {
    let r = report["rollouts"].as_array().expect("a rollouts section");
    assert_eq!(r.len(), 1, "{report:#}");
    &r[0]
}

#[test]
fn shadow_of_a_version_with_the_same_answers_finds_no_difference_and_is_promoted() {
    // A byte-identical rebuild (the same file), and another build with the same answers.
    for candidate in [PASSTHROUGH, MISBEHAVE] {
        shadow_same_answers(candidate);
    }
}

fn shadow_same_answers(candidate: &str) {
    let s = scratch!();
    input(&s, 1000, ordinary);
    let rollout = format!(
        "      mode: shadow\n      candidate: {candidate}\n      observe: 300 messages\n      differences: diffs.jsonl\n"
    );
    let rep = run_local(&s, &stage(PASSTHROUGH, &rollout));
    let r = only_rollout(&rep);
    assert_eq!(r["outcome"], "promoted", "{r:#}");
    assert_eq!(r["reason"], "observed");
    assert!(r["observed"]["compared"].as_u64().unwrap() >= 300, "{r:#}");
    assert_eq!(r["observed"]["agree"], r["observed"]["compared"]);
    assert_eq!(r["observed"]["differ"], json!({}));
    assert_eq!(s.read_jsonl("diffs.jsonl").len(), 0);
    // The candidate runs on after its promotion.
    assert_eq!(rep["stages"][0]["plugin"], r["candidate"]);
    assert_eq!(rep["stages"][0]["swaps"], 1);
    assert_eq!(r["candidate"] == r["live"], candidate == PASSTHROUGH);
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), 1000);
}

#[test]
fn shadow_of_a_version_that_rejects_more_is_rolled_back_and_none_of_its_answers_is_delivered() {
    let s = scratch!();
    // One message in five says `reject`: the candidate (misbehave) rejects it, the live
    // version (passthrough) keeps it.
    let value = values("reject", |i| i.is_multiple_of(5), ordinary);
    input(&s, 1000, &value);
    let rollout = format!(
        "      mode: shadow\n      candidate: {MISBEHAVE}\n      observe: 100000 messages\n      differences: diffs.jsonl\n      max_differences: 5\n"
    );
    let rep = run_local(&s, &stage(PASSTHROUGH, &rollout));
    let r = only_rollout(&rep);
    assert_eq!(r["outcome"], "rolled_back", "{r:#}");
    assert_eq!(r["reason"], "reject_rate", "{r:#}");
    assert!(
        r["observed"]["differ"]["differ_kind"].as_u64().unwrap() > 0,
        "{r:#}"
    );
    // Exactly what the live version alone produces; no candidate reject anywhere.
    assert_live_output(&s, 1000, &value);
    assert_eq!(
        rep["stages"][0]["plugin"], r["live"],
        "the live version runs on"
    );
    // The first differences, with both answers and the input's offset.
    let diffs = s.read_jsonl("diffs.jsonl");
    assert_eq!(diffs.len(), 5);
    assert_eq!(diffs[0]["offset"], 0);
    assert_eq!(diffs[1]["offset"], 5);
    assert_eq!(diffs[0]["live"]["outcome"], "keep");
    assert_eq!(diffs[0]["candidate"]["outcome"], "reject");
    assert_eq!(diffs[0]["differ"], "kind");
}

#[test]
fn a_canary_that_traps_is_rolled_back_at_the_first_trap_and_the_message_gets_the_live_answer() {
    let s = scratch!();
    let value = values("trap", |i| i == 50, ordinary);
    input(&s, 1000, &value);
    // A local source is one lane (partition 0), which is in every lane share.
    let rollout = format!(
        "      mode: canary\n      by: lane\n      share: 10%\n      candidate: {MISBEHAVE}\n      observe: 100000 messages\n"
    );
    let rep = run_local(&s, &stage(PASSTHROUGH, &rollout));
    let r = only_rollout(&rep);
    assert_eq!(r["outcome"], "rolled_back", "{r:#}");
    assert_eq!(r["reason"], "trap", "{r:#}");
    // Nothing lost, nothing rejected: the trapping message got the live version's answer
    // (passthrough keeps it), in its place.
    assert_live_output(&s, 1000, &value);
    assert_eq!(rep["stages"][0]["plugin"], r["live"]);
}

// ---------------------------------------------------------------------------------------
// On Kafka.

/// Produces `n` JSON records over 4 partitions (record i on partition i % 4, key `k<i>`),
/// runs the pipeline to the end with two drivers, and returns the report and the outputs.
fn run_kafka(
    stages: &str,
    group: &str,
    value: impl Fn(usize) -> String,
) -> (Value, Vec<Record>, Vec<Record>) {
    let b = Broker::start(WEIR, &[("in", 4), ("out", 1), ("dlq", 1)]);
    let records: Vec<(i32, String, String)> = (0..2000)
        .map(|i| ((i % 4) as i32, format!("k{i}"), value(i)))
        .collect();
    b.produce("in", &records);
    let s = scratch!();
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            group,
            stages,
            "    stop_at_end: true",
            "  drivers: 2\nbatch:\n  max_messages: 32\n",
        ),
    );
    let out = s.run(&["run", "p.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    (s.report(), b.read("out"), b.read("dlq"))
}

fn kafka_value(i: usize) -> String {
    format!("{{\"p\":{},\"seq\":{}}}", i % 4, i / 4)
}

/// Every input exactly once in `out` (one partition), each source partition in order;
/// returns per input index whether the candidate (json-enrich: `"by":"v2"`) answered it.
fn exactly_once_in_order(out: &[Record], n: usize) -> Vec<bool> {
    let mut seen: BTreeMap<usize, bool> = BTreeMap::new();
    let mut last_seq: BTreeMap<u64, i64> = BTreeMap::new();
    for r in out {
        let v: Value = serde_json::from_str(&r.value).expect("JSON output");
        let (p, seq) = (v["p"].as_u64().unwrap(), v["seq"].as_i64().unwrap());
        let i = (seq as usize) * 4 + p as usize;
        assert!(
            seen.insert(i, v.get("by").is_some()).is_none(),
            "input {i} twice"
        );
        let prev = last_seq.insert(p, seq);
        assert!(
            prev.is_none_or(|x| x < seq),
            "partition {p} out of order at {seq}"
        );
    }
    assert_eq!(seen.len(), n, "every input once");
    seen.into_values().collect()
}

#[test]
fn on_kafka_a_canary_of_half_the_lanes_or_keys_answers_each_message_once_in_order() {
    let n = 2000;
    for by in ["lane", "key"] {
        let rollout = format!(
            "      mode: canary\n      by: {by}\n      share: 50%\n      candidate: {JSON_ENRICH}\n      observe: 1000000 messages\n      rollback_when: {{ reject_rate: off }}\n"
        );
        let (rep, out, dlq) = run_kafka(
            &stage(PASSTHROUGH, &rollout),
            &format!("g-canary-{by}"),
            kafka_value,
        );
        assert!(dlq.is_empty(), "{dlq:?}");
        let r = only_rollout(&rep);
        assert_eq!(r["outcome"], "unfinished", "{r:#}");
        let by_candidate = exactly_once_in_order(&out, n);
        for (i, tagged) in by_candidate.iter().enumerate() {
            let lane = Lane {
                topic: "in".into(),
                partition: (i % 4) as i32,
                generation: 0,
            };
            let env = Envelope {
                offset: 0,
                msg: Message {
                    key: Some(format!("k{i}").into_bytes()),
                    ..Message::default()
                },
            };
            let expected = match by {
                "lane" => to_candidate(CanaryBy::Lane, 0.5, &lane, &env),
                _ => to_candidate(CanaryBy::Key, 0.5, &lane, &env),
            };
            assert_eq!(*tagged, expected, "by {by}: input {i}");
        }
        let share = by_candidate.iter().filter(|t| **t).count();
        assert!(
            (n / 4..3 * n / 4).contains(&share),
            "by {by}: {share} of {n} to the candidate"
        );
        assert_eq!(r["observed"]["messages"].as_u64().unwrap() as usize, share);
    }
}

#[test]
fn on_kafka_a_shadow_that_meets_no_rollback_condition_is_promoted_and_answers_the_rest() {
    let shadow = format!(
        "      mode: shadow\n      candidate: {JSON_ENRICH}\n      observe: 300 messages\n      rollback_when: {{ diff_rate: off }}\n"
    );
    // The candidate (json-enrich) tags every message, so every answer differs; with
    // `diff_rate: off` only traps, fails and rejects could stop it: it is promoted after 300
    // answers, and from then on its tagged answers are delivered, each input once, in order.
    let (rep, out, dlq) = run_kafka(&stage(PASSTHROUGH, &shadow), "g-promote", kafka_value);
    let r = only_rollout(&rep);
    assert_decided(r, "promoted", "observed");
    assert!(dlq.is_empty());
    let tagged = exactly_once_in_order(&out, 2000);
    assert!(
        tagged.iter().any(|t| *t) && tagged.iter().any(|t| !*t),
        "both versions answered"
    );
    assert!(
        r["observed"]["differ"]["differ_value"].as_u64().unwrap() >= 300,
        "{r:#}"
    );
}

#[test]
fn on_kafka_a_shadow_that_rejects_more_is_rolled_back_and_a_canary_that_traps_loses_nothing() {
    let shadow = format!(
        "      mode: shadow\n      candidate: {MISBEHAVE}\n      observe: 1000000 messages\n"
    );
    let value = values("reject", |i| i.is_multiple_of(5), kafka_value);
    let (rep, out, dlq) = run_kafka(&stage(PASSTHROUGH, &shadow), "g-shadow", value);
    let r = only_rollout(&rep);
    assert_decided(r, "rolled_back", "reject_rate");
    assert!(dlq.is_empty(), "no candidate answer is delivered: {dlq:?}");
    assert_eq!(out.len(), 2000, "the live version kept everything");

    let canary = format!(
        "      mode: canary\n      by: lane\n      share: 100%\n      candidate: {MISBEHAVE}\n      observe: 1000000 messages\n"
    );
    let value = values("trap", |i| i == 401, kafka_value);
    let (rep, out, dlq) = run_kafka(&stage(PASSTHROUGH, &canary), "g-trap", value);
    let r = only_rollout(&rep);
    assert_decided(r, "rolled_back", "trap");
    assert!(dlq.is_empty(), "{dlq:?}");
    assert_eq!(out.len(), 2000);
    assert_eq!(
        out.iter().filter(|r| r.value == "trap").count(),
        1,
        "the live answer: kept"
    );
}

// ---------------------------------------------------------------------------------------
// The admin API.

struct Live {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    port: u16,
}

impl Live {
    fn start(s: &Scratch, bind: &str, token_env: Option<&str>) -> Live {
        Live::with_policy(s, bind, token_env, PASSTHROUGH, "")
    }

    /// A pipeline on stdin whose stage runs `plugin` under the `rollout` block given.
    fn with_policy(
        s: &Scratch,
        bind: &str,
        token_env: Option<&str>,
        plugin: &str,
        rollout: &str,
    ) -> Live {
        let port = free_port();
        let admin = token_env
            .map(|t| format!("  admin_token_env: {t}\n"))
            .unwrap_or_default();
        s.write(
            "live.yaml",
            &format!(
                "source:\n  stdin: {{}}\nstages:\n  - name: s\n    plugin: {plugin}\n    config:\n      set.by: v2\n{rollout}sink:\n  jsonl: {{ path: out.jsonl }}\nbatch:\n  max_messages: 4\n  linger: 1ms\nruntime:\n  report: report.json\n  metrics: {bind}:{port}\n{admin}"
            ),
        );
        let mut child = s
            .weir(&["run", "live.yaml"])
            .env("WEIR_ADMIN_TOKEN_FOR_TEST", "s3cret")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(s.path("live.log")).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let live = Live { child, stdin, port };
        let t = Instant::now();
        while weir_tests::try_scrape(port, "/healthz").is_err() {
            assert!(t.elapsed() < Duration::from_secs(60), "never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        live
    }

    fn feed(&mut self, from: usize, n: usize) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        for i in from..from + n {
            writeln!(
                stdin,
                "{{\"key\":\"k{i}\",\"value\":\"{{\\\"n\\\":{i}}}\"}}"
            )
            .unwrap();
        }
        stdin.flush().unwrap();
    }

    /// Runs `weir VERB 127.0.0.1:PORT ARGS…` with or without the token.
    fn verb(&self, s: &Scratch, verb: &str, args: &[&str], token: bool) -> std::process::Output {
        let addr = format!("127.0.0.1:{}", self.port);
        let mut all = vec![verb, addr.as_str()];
        all.extend_from_slice(args);
        let mut cmd = s.weir(&all);
        cmd.env_remove("WEIR_ADMIN_TOKEN");
        if token {
            cmd.env("WEIR_ADMIN_TOKEN", "s3cret");
        }
        cmd.output().unwrap()
    }

    fn status(&self, s: &Scratch, token: bool) -> Value {
        let o = self.verb(s, "status", &["--json"], token);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn finish(mut self, s: &Scratch) -> Value {
        drop(self.stdin.take());
        let st = self.child.wait().unwrap();
        assert!(
            st.success(),
            "{}",
            std::fs::read_to_string(s.path("live.log")).unwrap()
        );
        s.report()
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_admin_api_shows_starts_promotes_and_rolls_back_rollouts_and_refuses_bad_requests() {
    let s = scratch!();
    let mut live = Live::start(&s, "127.0.0.1", None);
    live.feed(0, 20);
    let st = live.status(&s, false);
    assert_eq!(st["stages"][0]["name"], "s");
    assert!(st["stages"][0]["rollout"].is_null(), "{st:#}");
    let live_hash = st["stages"][0]["live"].as_str().unwrap().to_owned();

    // A shadow of json-enrich: every answer differs (it tags); promoted by hand anyway.
    let o = live.verb(
        &s,
        "rollout",
        &["--stage", "s", JSON_ENRICH, "--observe", "1000000 messages"],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let busy = live.verb(&s, "rollout", &["--stage", "s", MISBEHAVE], false);
    assert_eq!(busy.status.code(), Some(2));
    assert!(stderr(&busy).contains("409"), "{}", stderr(&busy));
    let unknown = live.verb(&s, "rollout", &["--stage", "nope", MISBEHAVE], false);
    assert!(stderr(&unknown).contains("404"), "{}", stderr(&unknown));
    let busy_but_bad = live.verb(&s, "rollback", &["--stage", "s"], false);
    assert!(busy_but_bad.status.success(), "{}", stderr(&busy_but_bad));
    let yaml = s.path("live.yaml");
    let not_a_stage = live.verb(
        &s,
        "rollout",
        &["--stage", "s", yaml.to_str().unwrap()],
        false,
    );
    assert_eq!(not_a_stage.status.code(), Some(2));
    assert!(
        stderr(&not_a_stage).contains("422"),
        "{}",
        stderr(&not_a_stage)
    );
    assert!(
        live.status(&s, false)["stages"][0]["rollout"].is_null(),
        "live untouched"
    );
    let o = live.verb(
        &s,
        "rollout",
        &["--stage", "s", JSON_ENRICH, "--observe", "1000000 messages"],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    live.feed(20, 50);
    wait_for("differences counted", || {
        let st = live.status(&s, false);
        st["stages"][0]["rollout"]["observed"]["compared"].as_u64() >= Some(20)
    });
    let st = live.status(&s, false);
    let r = &st["stages"][0]["rollout"];
    assert_eq!(r["mode"], "shadow");
    assert_eq!(r["observed"]["agree"], 0, "{r:#}");
    assert!(!r["differences"].as_array().unwrap().is_empty());
    let table = live.verb(&s, "status", &[], false);
    let text = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        text.contains("shadow") && text.contains("differs in value"),
        "{text}"
    );
    let o = live.verb(&s, "promote", &["--stage", "s"], false);
    assert!(o.status.success(), "{}", stderr(&o));
    let enriched = live.status(&s, false)["stages"][0]["live"].clone();
    assert_ne!(enriched, live_hash.as_str());

    // A canary of passthrough again, rolled back by hand: json-enrich stays live.
    let o = live.verb(
        &s,
        "rollout",
        &[
            "--stage",
            "s",
            PASSTHROUGH,
            "--mode",
            "canary",
            "--share",
            "100%",
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    live.feed(70, 30);
    let o = live.verb(&s, "rollback", &["--stage", "s"], false);
    assert!(o.status.success(), "{}", stderr(&o));
    let none = live.verb(&s, "rollback", &["--stage", "s"], false);
    assert!(stderr(&none).contains("409"), "{}", stderr(&none));
    live.feed(100, 20);
    let rep = live.finish(&s);
    let rollouts = rep["rollouts"].as_array().unwrap();
    let outcomes: Vec<(&str, &str)> = rollouts
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("rolled_back", "manual"),
            ("promoted", "manual"),
            ("rolled_back", "manual")
        ]
    );
    assert_eq!(rep["stages"][0]["plugin"], enriched);
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), 120, "nothing lost across four version changes");
    for (i, line) in out.iter().enumerate() {
        assert_eq!(line["key"], format!("k{i}"), "order kept");
    }
    // The last messages came after the rollback: json-enrich's answers.
    assert!(out[119]["value"]
        .as_str()
        .unwrap()
        .contains("\"by\":\"v2\""));
}

#[test]
fn on_a_non_loopback_address_the_admin_api_needs_the_token() {
    let s = scratch!();
    let live = Live::start(&s, "0.0.0.0", Some("WEIR_ADMIN_TOKEN_FOR_TEST"));
    let o = live.verb(&s, "status", &[], false);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
    let o = live.verb(&s, "rollout", &["--stage", "s", MISBEHAVE], false);
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
    let st = live.status(&s, true);
    assert!(
        st["stages"][0]["rollout"].is_null(),
        "a refused request changed nothing"
    );
    let o = live.verb(&s, "rollout", &["--stage", "s", MISBEHAVE], true);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        live.status(&s, true)["stages"][0]["rollout"]["mode"],
        "shadow"
    );
    let rep = live.finish(&s);
    assert_eq!(rep["rollouts"][0]["outcome"], "unfinished");

    // Without a token configured, a non-loopback listener keeps the admin API off.
    let s = scratch!();
    let live = Live::start(&s, "0.0.0.0", None);
    let o = live.verb(&s, "status", &[], true);
    assert!(stderr(&o).contains("403"), "{}", stderr(&o));
    live.finish(&s);
}

#[test]
fn a_replaced_plugin_file_goes_through_the_stage_policy_and_the_metrics_say_what_happened() {
    let s = scratch!();
    std::fs::copy(PASSTHROUGH, s.path("stage.wasm")).unwrap();
    let policy =
        "    rollout:\n      mode: canary\n      share: 100%\n      observe: 40 messages\n";
    let mut live = Live::with_policy(&s, "127.0.0.1", None, "stage.wasm", policy);
    live.feed(0, 10);
    std::fs::copy(JSON_ENRICH, s.path("stage.wasm.tmp")).unwrap();
    std::fs::rename(s.path("stage.wasm.tmp"), s.path("stage.wasm")).unwrap();
    wait_for("a canary from the replaced file", || {
        live.status(&s, false)["stages"][0]["rollout"]["trigger"] == "file"
    });
    let port = live.port;
    let metrics = |name: &str| {
        let (_, text) = weir_tests::try_scrape(port, "/metrics").unwrap();
        text.lines()
            .filter(|l| l.starts_with(name))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        metrics("weir_rollout_state"),
        ["weir_rollout_state{stage=\"s\"} 2"]
    );
    live.feed(10, 100);
    wait_for("promoted after 40 messages", || {
        live.status(&s, false)["stages"][0]["last_rollout"]["outcome"] == "promoted"
    });
    assert_eq!(
        metrics("weir_rollout_state"),
        ["weir_rollout_state{stage=\"s\"} 0"]
    );
    assert_eq!(
        metrics("weir_rollout_decisions_total"),
        ["weir_rollout_decisions_total{decision=\"promote\",reason=\"observed\",stage=\"s\"} 1"]
    );
    // SIGHUP with the file unchanged starts nothing (the file is what was promoted).
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &live.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    std::thread::sleep(Duration::from_millis(500));
    assert!(live.status(&s, false)["stages"][0]["rollout"].is_null());
    let rep = live.finish(&s);
    assert_eq!(rep["rollouts"].as_array().unwrap().len(), 1, "{rep:#}");
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), 110);
    assert!(out[109]["value"]
        .as_str()
        .unwrap()
        .contains("\"by\":\"v2\""));
}
