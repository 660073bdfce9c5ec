//! Weir on Kafka, end to end: the real `weir` binary against a real Kafka-protocol broker
//! (`weir broker`, librdkafka's mock cluster, in its own process) over TCP, with real
//! components built from source, real signals and `kill -9`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_tests::kafka::{kafka_pipeline, Broker, Record};
use weir_tests::plugins::{JSON_ENRICH, JSON_FILTER, MISBEHAVE, PASSTHROUGH};
use weir_tests::{scratch, stage, stderr, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn report(s: &Scratch) -> Value {
    s.report()
}

fn keys(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.key.clone()).collect()
}

/// `n` records `k-i` spread over `parts` partitions (record i on partition i % parts).
fn records(n: usize, parts: i32, value: impl Fn(usize) -> String) -> Vec<(i32, String, String)> {
    (0..n)
        .map(|i| ((i as i32) % parts, format!("k-{i}"), value(i)))
        .collect()
}

fn high_watermarks(b: &Broker, topic: &str, parts: i32) -> Vec<i64> {
    let recs = b.read(topic);
    (0..parts)
        .map(|p| recs.iter().filter(|r| r.partition == p).count() as i64)
        .collect()
}

#[test]
fn every_message_comes_out_transformed_filtered_or_in_the_dlq_and_offsets_are_committed() {
    let b = Broker::start(WEIR, &[("in", 3), ("out", 3), ("dlq", 1)]);
    let n = 300;
    let input = records(n, 3, |i| {
        if i % 10 == 3 {
            format!("{{\"id\": {i}, \"status\": ")
        } else if i % 3 == 0 {
            format!("{{\"id\": {i}, \"status\": \"pending\"}}")
        } else {
            format!("{{\"id\": {i}, \"status\": \"paid\"}}")
        }
    });
    b.produce("in", &input);
    let s = scratch!();
    let stages = stage(
        "paid-only",
        JSON_FILTER,
        &[("field", "status"), ("equals", "paid")],
    ) + &stage("enrich", JSON_ENRICH, &[("set.seen", "yes")]);
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            "g-e2e",
            &stages,
            "    stop_at_end: true",
            "  drivers: 2\n  pin: true\n",
        ),
    );
    let out = s.run(&["run", "p.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let malformed: BTreeSet<String> = (0..n)
        .filter(|i| i % 10 == 3)
        .map(|i| format!("k-{i}"))
        .collect();
    let paid: BTreeSet<String> = (0..n)
        .filter(|i| i % 10 != 3 && i % 3 != 0)
        .map(|i| format!("k-{i}"))
        .collect();
    let pending = n - malformed.len() - paid.len();

    let outs = b.read("out");
    assert_eq!(outs.len(), paid.len(), "every paid order once");
    assert_eq!(keys(&outs).into_iter().collect::<BTreeSet<_>>(), paid);
    for r in &outs {
        let v: Value = serde_json::from_str(&r.value).expect("JSON output");
        assert_eq!(v["seen"], "yes", "{r:?}");
        assert_eq!(v["status"], "paid");
        assert_eq!(r.header("origin"), Some(r.key.as_str()), "headers kept");
    }

    let source = b.read("in");
    let dlq = b.read("dlq");
    assert_eq!(keys(&dlq).into_iter().collect::<BTreeSet<_>>(), malformed);
    assert_eq!(dlq.len(), malformed.len());
    for r in &dlq {
        assert!(
            r.header("weir.reason").unwrap().contains("malformed JSON"),
            "{r:?}"
        );
        assert_eq!(r.header("weir.stage"), Some("paid-only"));
        assert_eq!(
            r.header("weir.plugin").unwrap().len(),
            64,
            "full plugin hash"
        );
        assert_eq!(r.header("weir.source.topic"), Some("in"));
        assert_eq!(
            r.header("origin"),
            Some(r.key.as_str()),
            "original headers kept"
        );
        let p: i32 = r.header("weir.source.partition").unwrap().parse().unwrap();
        let o: i64 = r.header("weir.source.offset").unwrap().parse().unwrap();
        let src = source
            .iter()
            .find(|x| x.partition == p && x.offset == o)
            .expect("source record");
        assert_eq!(
            (&src.key, &src.value),
            (&r.key, &r.value),
            "DLQ carries the original"
        );
    }

    let rep = report(&s);
    assert_eq!(rep["state"], "completed");
    assert_eq!(rep["read"], n);
    assert_eq!(rep["written"], paid.len());
    assert_eq!(rep["rejected"], malformed.len());
    let f = &rep["stages"][0];
    assert_eq!(f["input"], n);
    assert_eq!(f["keep"], paid.len());
    assert_eq!(f["dropped"], pending);
    assert_eq!(f["rejected"], malformed.len());
    assert_eq!(rep["stages"][1]["input"], paid.len());

    let ends = high_watermarks(&b, "in", 3);
    let committed = b.committed("g-e2e", "in", 3);
    assert_eq!(committed, ends.iter().map(|&e| Some(e)).collect::<Vec<_>>());
    for (p, e) in ends.iter().enumerate() {
        assert_eq!(rep["kafka"]["committed"][format!("in/{p}")], *e, "{rep}");
    }
}

#[test]
fn a_stage_fail_exits_1_without_committing_the_failed_offset_and_a_restart_meets_it_again() {
    let b = Broker::start(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let input = records(40, 1, |i| {
        if i == 25 {
            "fail".into()
        } else {
            format!("ok-{i}")
        }
    });
    b.produce("in", &input);
    let s = scratch!();
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            "g-fail",
            &stage("m", MISBEHAVE, &[]),
            "    stop_at_end: true",
            "",
        ),
    );
    for attempt in 0..2 {
        let out = s.run(&["run", "p.yaml"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "attempt {attempt}: {}",
            stderr(&out)
        );
        let rep = report(&s);
        assert_eq!(rep["state"], "failed");
        assert_eq!(rep["failure"]["offset"], 25, "{rep}");
        assert_eq!(rep["failure"]["stage"], "m");
        assert_eq!(
            b.committed("g-fail", "in", 1),
            vec![Some(25)],
            "attempt {attempt}"
        );
        // Everything before the failed message went out, once: the restart resumed at it.
        let outs = b.read("out");
        assert_eq!(
            keys(&outs),
            (0..25).map(|i| format!("k-{i}")).collect::<Vec<_>>(),
            "attempt {attempt}"
        );
    }
}
