//! Weir on Kafka, end to end: the real `weir` binary against a real Kafka-protocol broker
//! (`weir broker`, librdkafka's mock cluster, in its own process) over TCP, with real
//! components built from source, real signals and `kill -9`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_tests::kafka::{
    high_watermarks, kafka, kafka_pipeline, log_shows, records, sigterm, spawn_weir, trickle,
    wait_ok, Broker, Record,
};
use weir_tests::plugins::{JSON_ENRICH, JSON_FILTER, MISBEHAVE, PASSTHROUGH};
use weir_tests::{free_port, gauge, scrape, scratch, stage, stderr, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn report(s: &Scratch) -> Value {
    s.report()
}

fn keys(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.key.clone()).collect()
}

#[test]
fn every_message_comes_out_transformed_filtered_or_in_the_dlq_and_offsets_are_committed() {
    let b = Broker::start(WEIR, &[("in", 3), ("out", 3), ("dlq", 1)]);
    end_to_end(&b, true);
}

/// The same pipeline on Apache Kafka (the broker users run, not librdkafka's own mock).
/// `scripts/test` fetches it (cached) and sets `WEIR_KAFKA_HOME`. Stopped with SIGTERM once
/// every output is there (a clean drain); the mock-cluster run above stops at the end.
#[test]
fn apache_kafka_carries_the_same_pipeline_end_to_end() {
    end_to_end(&kafka(&[("in", 3), ("out", 3), ("dlq", 1)]), false);
}

/// The pipeline of the end-to-end tests over `b`; with `at_end` it stops by itself
/// (`stop_at_end`), otherwise it is stopped with SIGTERM once every output is there.
fn end_to_end(b: &Broker, at_end: bool) {
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
            if at_end { "    stop_at_end: true" } else { "" },
            "  drivers: 2\n  pin: true\n",
        ),
    );
    if at_end {
        let out = s.run(&["run", "p.yaml"]);
        assert!(out.status.success(), "{}", stderr(&out));
    } else {
        let c = spawn_weir(&s, "p.yaml", "e2e.log");
        let deadline = Instant::now() + Duration::from_secs(60);
        // 180 paid orders out and 30 malformed ones in the DLQ (see below).
        while b.read("out").len() + b.read("dlq").len() < 210 {
            assert!(Instant::now() < deadline, "outputs did not arrive");
            std::thread::sleep(Duration::from_millis(200));
        }
        // Let the commit tick pass, then stop cleanly.
        std::thread::sleep(Duration::from_millis(500));
        sigterm(&c);
        wait_ok(c, "weir", &s, "e2e.log");
    }

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
    assert_eq!(
        outs.len(),
        paid.len(),
        "every paid order once; source has {}; report {}",
        b.read("in").len(),
        report(&s)
    );
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
    assert_eq!(
        rep["state"],
        if at_end { "completed" } else { "interrupted" }
    );
    assert_eq!(rep["read"], n);
    assert_eq!(rep["written"], paid.len());
    assert_eq!(rep["rejected"], malformed.len());
    let f = &rep["stages"][0];
    assert_eq!(f["input"], n);
    assert_eq!(f["keep"], paid.len());
    assert_eq!(f["dropped"], pending);
    assert_eq!(f["rejected"], malformed.len());
    assert_eq!(rep["stages"][1]["input"], paid.len());

    let ends = high_watermarks(b, "in", 3);
    let committed = b.committed("g-e2e", "in", 3);
    assert_eq!(committed, ends.iter().map(|&e| Some(e)).collect::<Vec<_>>());
    for (p, e) in ends.iter().enumerate() {
        assert_eq!(rep["committed"][format!("in/{p}")], *e, "{rep}");
    }
}

#[test]
fn a_stage_fail_exits_1_without_committing_the_failed_offset_and_a_restart_meets_it_again() {
    stage_fail(
        &Broker::start(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]),
        true,
    );
}

#[test]
fn on_kafka_a_stage_fail_exits_1_without_committing_the_failed_offset_and_a_restart_meets_it_again()
{
    stage_fail(&kafka(&[("in", 1), ("out", 1), ("dlq", 1)]), false);
}

/// 40 messages, the 26th makes the stage `fail`: twice in a row the run exits 1 with the
/// failure in its report, 25 is committed (not past it) and exactly the 25 before it came out.
/// The failure ends the run whether or not it would stop at the end (`at_end`).
fn stage_fail(b: &Broker, at_end: bool) {
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
            if at_end { "    stop_at_end: true" } else { "" },
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

/// Runs the drain-to-end pass that finishes a test and asserts it exits 0.
fn drain_to_end(b: &Broker, s: &Scratch, group: &str, stages: &str) {
    s.write(
        "end.yaml",
        &kafka_pipeline(&b.bootstrap, group, stages, "    stop_at_end: true", ""),
    );
    let out = s.run(&["run", "end.yaml"]);
    assert!(out.status.success(), "final pass: {}", stderr(&out));
    let rep = s.report();
    assert_eq!(rep["state"], "completed", "{rep}");
    assert_eq!(rep["reached_end"], true, "{rep}");
}

#[test]
fn kill_9_at_several_points_then_restart_loses_nothing_and_replays_only_the_uncommitted() {
    kill_9_and_restart(
        &Broker::start(WEIR, &[("in", 3), ("out", 3), ("dlq", 1)]),
        true,
    );
}

#[test]
fn on_kafka_kill_9_at_several_points_then_restart_loses_nothing_and_replays_only_the_uncommitted() {
    kill_9_and_restart(&kafka(&[("in", 3), ("out", 3), ("dlq", 1)]), false);
}

/// Killed during start-up, then twice mid-stream, while the input trickles in; then one run to
/// the end (`stop_at_end` with `at_end`, else until every input is out, then SIGTERM): every
/// input came out, and a duplicate only from above the offset committed at the first kill.
fn kill_9_and_restart(b: &Broker, at_end: bool) {
    let n = 3000;
    let producer = trickle(
        b,
        "in",
        records(n, 3, |i| format!("v-{i}")),
        40,
        Duration::from_millis(75),
    );
    let s = scratch!();
    let stages = stage("pass", PASSTHROUGH, &[]);
    s.write(
        "p.yaml",
        &kafka_pipeline(&b.bootstrap, "g-kill", &stages, "", ""),
    );
    // Killed during start-up, then twice mid-stream.
    let mut floor: Vec<Option<i64>> = vec![None; 3];
    for i in 0..3 {
        let before = b.committed("g-kill", "in", 3);
        let mut c = spawn_weir(&s, "p.yaml", &format!("run-{i}.log"));
        if i > 0 {
            // Mid-stream: once this run has committed progress of its own.
            // (Or, on a slow machine, once the input is complete and all committed.)
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let now = b.committed("g-kill", "in", 3);
                if now != before {
                    break;
                }
                let ends: Vec<Option<i64>> =
                    high_watermarks(b, "in", 3).into_iter().map(Some).collect();
                if producer.is_finished() && now == ends {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "run {i} committed nothing: {}",
                    std::fs::read_to_string(s.path(&format!("run-{i}.log"))).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_millis(150));
        c.kill().expect("kill -9");
        c.wait().expect("reaped");
        let committed = b.committed("g-kill", "in", 3);
        if floor.iter().all(Option::is_none) {
            floor = committed;
        }
    }
    producer.join().expect("producer");
    assert!(
        floor.iter().any(Option::is_some),
        "something was committed before a kill"
    );
    if at_end {
        drain_to_end(b, &s, "g-kill", &stages);
    } else {
        let c = spawn_weir(&s, "p.yaml", "last.log");
        let want: BTreeSet<String> = b.read("in").into_iter().map(|r| r.value).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got: BTreeSet<String> = b.read("out").into_iter().map(|r| r.value).collect();
            if want.is_subset(&got) {
                break;
            }
            assert!(Instant::now() < deadline, "the last run did not catch up");
            std::thread::sleep(Duration::from_millis(200));
        }
        sigterm(&c);
        wait_ok(c, "the last run", &s, "last.log");
        let ends: Vec<Option<i64>> = high_watermarks(b, "in", 3).into_iter().map(Some).collect();
        assert_eq!(
            b.committed("g-kill", "in", 3),
            ends,
            "all committed at SIGTERM"
        );
    }

    let source = b.read("in");
    let outs = b.read("out");
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &outs {
        *seen.entry(r.value.as_str()).or_default() += 1;
    }
    for r in &source {
        let copies = seen.get(r.value.as_str()).copied().unwrap_or(0);
        assert!(copies >= 1, "lost {r:?}");
        if copies > 1 {
            // A duplicate can only come from the window that was not committed at the first kill.
            let f = floor[r.partition as usize].unwrap_or(0);
            assert!(
                r.offset >= f,
                "{r:?} duplicated below the committed offset {f}"
            );
        }
    }
    assert_eq!(source.len(), n);
}

fn share_partitions(assignor: &str) {
    let b = Broker::start(WEIR, &[("in", 6), ("out", 6), ("dlq", 1)]);
    let n = 6000;
    // One key per source partition, so the output keeps each partition's order in one place.
    let input: Vec<(i32, String, String)> = (0..n)
        .map(|i| {
            let p = (i % 6) as i32;
            (p, format!("p{p}"), format!("{p}:{}", i / 6))
        })
        .collect();
    let producer = trickle(&b, "in", input, 50, Duration::from_millis(80));
    let s = scratch!();
    let group = format!("g-share-{assignor}");
    let stages = stage("pass", PASSTHROUGH, &[]);
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            &group,
            &stages,
            &format!("    assignor: {assignor}"),
            "",
        ),
    );
    let a = spawn_weir(&s, "p.yaml", "a.log");
    std::thread::sleep(Duration::from_millis(1000));
    let bb = spawn_weir(&s, "p.yaml", "b.log");
    std::thread::sleep(Duration::from_millis(1000));
    let c = spawn_weir(&s, "p.yaml", "c.log");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        log_shows(&s, "b.log", "pipeline running", Duration::from_secs(60)),
        "b did not start"
    );
    sigterm(&bb);
    wait_ok(bb, "b", &s, "b.log");
    // Rapid rebalances: members that join and leave at once.
    for name in ["d", "e", "f"] {
        let log = format!("{name}.log");
        let x = spawn_weir(&s, "p.yaml", &log);
        // Past its start-up checks (a SIGTERM before them ends the process by the signal's
        // default, which a loaded machine's slower start made this test meet), then it joins
        // and leaves at once.
        assert!(
            log_shows(&s, &log, "pipeline running", Duration::from_secs(60)),
            "{name} did not start: {}",
            std::fs::read_to_string(s.path(&log)).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
        sigterm(&x);
        wait_ok(x, name, &s, &log);
    }
    producer.join().expect("producer");
    // The survivors (not a final pass) consume everything: churn did not stall them.
    let ends: Vec<Option<i64>> = high_watermarks(&b, "in", 6).into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.committed(&group, "in", 6) != ends {
        if Instant::now() > deadline {
            let keep = std::env::temp_dir().join(format!("weir-stalled-{assignor}"));
            let _ = std::fs::remove_dir_all(&keep);
            std::fs::create_dir_all(&keep).unwrap();
            for log in ["a.log", "b.log", "c.log", "d.log", "e.log", "f.log"] {
                let _ = std::fs::copy(s.path(log), keep.join(log));
            }
            panic!(
                "survivors stalled: {:?} of {ends:?} (logs in {})",
                b.committed(&group, "in", 6),
                keep.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&a);
    sigterm(&c);
    wait_ok(a, "a", &s, "a.log");
    wait_ok(c, "c", &s, "c.log");
    for log in ["a.log", "b.log", "c.log", "d.log", "e.log", "f.log"] {
        let text = std::fs::read_to_string(s.path(log)).unwrap();
        // Commits refused by the broker mid-rebalance (IllegalGeneration) are expected and
        // safe; a commit for a partition this member no longer owns never is.
        assert!(
            !text.contains("refusing to commit"),
            "{log} tried to commit what it did not own:\n{text}"
        );
        assert!(!text.contains("completion refused"), "{log}:\n{text}");
    }
    drain_to_end(&b, &s, &group, &stages);

    let outs = b.read("out");
    let mut first_seen: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in &outs {
        if seen.insert(r.value.clone()) {
            let seq: usize = r.value.split(':').nth(1).unwrap().parse().unwrap();
            first_seen.entry(r.key.clone()).or_default().push(seq);
        }
    }
    assert_eq!(seen.len(), n, "every message came out");
    for (k, seqs) in &first_seen {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{k}: order broken");
        assert_eq!(seqs.len(), n / 6);
    }
}

#[test]
fn processes_joining_and_leaving_one_group_share_partitions_without_loss_cooperative() {
    share_partitions("cooperative");
}

#[test]
fn processes_joining_and_leaving_one_group_share_partitions_without_loss_eager() {
    share_partitions("eager");
}

#[test]
fn a_slow_stage_holds_the_partition_keeps_bytes_under_the_budget_and_resumes() {
    let b = Broker::start(WEIR, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let pad = "x".repeat(2000);
    // `slow` spins 20 ms per message; the padding makes each ~2 KB.
    let n = 120;
    b.produce(
        "in",
        &records(n, 1, |i| {
            if i % 2 == 0 {
                "slow".into()
            } else {
                format!("{pad}{i}")
            }
        }),
    );
    let port = free_port();
    let budget = 16 * 1024;
    let s = scratch!();
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            "g-slow",
            &stage("slow", MISBEHAVE, &[]),
            "    stop_at_end: true",
            &format!("  max_in_flight: {budget}\n  metrics: 127.0.0.1:{port}\nbatch:\n  max_messages: 4\n"),
        ),
    );
    let c = spawn_weir(&s, "p.yaml", "slow.log");
    let mut max_bytes = 0.0f64;
    let mut paused_seen = false;
    let mut ready = false;
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (code, body) = scrape(port, "/metrics");
            assert_eq!(code, 200);
            max_bytes = max_bytes.max(gauge(&body, "weir_in_flight_bytes").unwrap_or(0.0));
            paused_seen |= gauge(&body, "weir_paused_partitions").unwrap_or(0.0) >= 1.0;
            ready |= scrape(port, "/readyz").0 == 200;
            assert_eq!(scrape(port, "/healthz").0, 200);
            last = body;
            if last.contains("weir_stage_messages_total{outcome=\"keep\",stage=\"slow\"} 100") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_ok(c, "slow pipeline", &s, "slow.log");
    assert!(paused_seen, "the partition was held or paused");
    assert!(
        gauge(&last, "weir_flow_control_total{action=\"hold\"}").unwrap_or(0.0) >= 1.0,
        "backpressure held reading:\n{last}"
    );
    assert!(ready, "/readyz answered 200");
    // One message may go over before the pause (2 KB + per-message overhead).
    assert!(
        max_bytes > 0.0 && max_bytes <= (budget + 2200) as f64,
        "in flight {max_bytes}"
    );
    for name in [
        "weir_stage_batch_seconds_bucket",
        "weir_batch_messages_bucket",
        "weir_consumed_messages_total",
        "weir_committed_offset{partition=\"0\",topic=\"in\"}",
        "weir_plugin_info{plugin=",
        "weir_rebalances_total{kind=\"assign\"}",
        "weir_commits_total{result=\"ok\"}",
        "weir_plugin_reloads_total{result=\"unchanged\",stage=\"slow\"} 1",
        "weir_produced_records_total{destination=\"sink\"}",
    ] {
        assert!(last.contains(name), "{name} missing from:\n{last}");
    }
    assert_eq!(b.read("out").len(), n, "everything came out after resuming");
}

#[test]
fn a_stalled_sink_pauses_consumption_keeps_bytes_under_the_budget_and_commits_nothing_unacked() {
    // The source and the sink are two brokers; the sink's goes down while the source keeps
    // serving. Produced records cannot be acknowledged, so their offsets cannot settle: the
    // in-flight budget fills, the partition pauses, consumption stops, nothing is committed
    // past what was acknowledged; the lag gauge (from librdkafka's cached high watermark, no
    // `stop_at_end`) shows the backlog. When the sink comes back everything is delivered and
    // committed, and the lag drops to zero.
    let source = Broker::start(WEIR, &[("in", 1)]);
    let mut sink = Broker::start(WEIR, &[("out", 1), ("dlq", 1)]);
    let pad = "y".repeat(2000);
    let n = 400;
    source.produce("in", &records(n, 1, |i| format!("{pad}{i}")));
    let port = free_port();
    let budget = 64 * 1024;
    let yaml = kafka_pipeline(
        &source.bootstrap,
        "g-stall",
        &stage("pass", PASSTHROUGH, &[]),
        "",
        &format!(
            "  max_in_flight: {budget}\n  metrics: 127.0.0.1:{port}\nbatch:\n  max_messages: 8\n"
        ),
    );
    let yaml = yaml
        .replace(
            &format!("sink:\n  kafka:\n    brokers: {}", source.bootstrap),
            &format!("sink:\n  kafka:\n    brokers: {}", sink.bootstrap),
        )
        .replace(
            &format!("reject:\n  kafka:\n    brokers: {}", source.bootstrap),
            &format!("reject:\n  kafka:\n    brokers: {}", sink.bootstrap),
        );
    assert_eq!(yaml.matches(&sink.bootstrap).count(), 2, "{yaml}");
    // librdkafka's statistics (the queued-bytes gauges) every 200 ms instead of 5 s.
    let yaml = yaml.replace(
        "    topic: out\n",
        "    topic: out\n    properties: { statistics.interval.ms: 200 }\n",
    );
    let s = scratch!();
    s.write("p.yaml", &yaml);
    sink.set_up(false);
    let c = spawn_weir(&s, "p.yaml", "stall.log");
    // Wait until the stall shows: paused, with the budget full.
    let (mut max_bytes, mut paused, mut consumed, mut lag) = (0.0f64, false, Vec::new(), None);
    let lag_metric = "weir_consumer_lag{partition=\"0\",topic=\"in\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (_, body) = scrape(port, "/metrics");
            max_bytes = max_bytes.max(gauge(&body, "weir_in_flight_bytes").unwrap_or(0.0));
            paused |= gauge(&body, "weir_paused_partitions").unwrap_or(0.0) >= 1.0;
            if paused {
                lag = gauge(&body, lag_metric);
                consumed.push(gauge(&body, "weir_consumed_messages_total").unwrap_or(0.0));
                if consumed.len() == 20 {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        paused,
        "the partition paused while the sink was down: {}",
        weir_tests::evidence::tail(&s.path("stall.log"))
    );
    let flow = |action: &str| {
        let body = scrape(port, "/metrics").1;
        gauge(
            &body,
            &format!("weir_flow_control_total{{action=\"{action}\"}}"),
        )
        .unwrap_or(0.0)
    };
    // A stall that outlasts the hold (0.5 s) becomes a real pause: librdkafka's prefetch is
    // released and the consumer keeps polling for the group.
    assert!(flow("hold") >= 1.0, "held first");
    assert!(flow("pause") >= 1.0, "then paused");
    let (first, last) = (consumed[0], *consumed.last().unwrap());
    assert!(
        last <= first + 8.0,
        "consumption stopped while paused: {consumed:?}"
    );
    assert!(
        last < n as f64,
        "the stall held back the source (consumed {last} of {n})"
    );
    assert!(
        max_bytes >= (budget / 2) as f64 && max_bytes <= (budget + 2200) as f64,
        "in flight {max_bytes} within the budget {budget} (+ one message)"
    );
    // What the sink's producer holds unacknowledged is on /metrics (issue 28).
    let queued = "weir_kafka_queued_bytes{client=\"sink\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    let held = loop {
        let body = scrape(port, "/metrics").1;
        let held = gauge(&body, queued).unwrap_or(0.0);
        if held >= (budget / 2) as f64 || Instant::now() > deadline {
            break (held, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        held.0 >= (budget / 2) as f64 && held.0 <= (2 * budget) as f64,
        "{queued} is {} while the sink holds about {max_bytes} bytes in flight:\n{}",
        held.0,
        held.1
    );
    let committed = source.committed("g-stall", "in", 1);
    assert_eq!(
        committed[0].unwrap_or(0),
        0,
        "nothing acknowledged, nothing committed: {committed:?}"
    );
    assert_eq!(
        lag,
        Some(n as f64),
        "the whole backlog is lag while nothing commits"
    );
    sink.set_up(true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while source.committed("g-stall", "in", 1) != [Some(n as i64)] {
        assert!(
            Instant::now() < deadline,
            "the commit never reached the end"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(300)); // one more commit tick for the gauge
    assert_eq!(gauge(&scrape(port, "/metrics").1, lag_metric), Some(0.0));
    let body = scrape(port, "/metrics").1;
    assert!(
        gauge(&body, queued).is_some_and(|q| q < 3000.0),
        "everything acknowledged, the sink's queue is empty again (one record may be on its way):\n{body}"
    );
    assert!(flow("resume") >= 1.0, "resumed once the sink came back");
    sigterm(&c);
    wait_ok(c, "stalled-sink pipeline", &s, "stall.log");
    let out = sink.read("out");
    assert_eq!(out.len(), n, "everything delivered once the sink came back");
    let unique: BTreeSet<_> = out.iter().map(|r| r.key.clone()).collect();
    assert_eq!(unique.len(), n);
    assert_eq!(source.committed("g-stall", "in", 1), [Some(n as i64)]);
}

#[test]
fn broker_down_at_start_and_mid_stream_gives_clear_errors_then_recovers_without_loss() {
    let mut b = Broker::start(WEIR, &[("in", 2), ("out", 2), ("dlq", 1)]);
    b.produce("in", &records(200, 2, |i| format!("a-{i}")));
    b.set_up(false);
    let s = scratch!();
    let stages = stage("pass", PASSTHROUGH, &[]);
    s.write(
        "p.yaml",
        &kafka_pipeline(&b.bootstrap, "g-down", &stages, "", ""),
    );
    let c = spawn_weir(&s, "p.yaml", "down.log");
    std::thread::sleep(Duration::from_millis(2500));
    let log = std::fs::read_to_string(s.path("down.log")).unwrap();
    assert!(
        log.contains("Connection refused") || log.contains("Connect to"),
        "a clear error:\n{log}"
    );
    b.set_up(true);
    std::thread::sleep(Duration::from_millis(2500));
    b.set_up(false);
    std::thread::sleep(Duration::from_millis(1500));
    b.set_up(true);
    b.produce("in", &records(200, 2, |i| format!("b-{i}")));
    std::thread::sleep(Duration::from_millis(2000));
    sigterm(&c);
    wait_ok(c, "weir through the outages", &s, "down.log");
    drain_to_end(&b, &s, "g-down", &stages);
    let values: BTreeSet<String> = b.read("out").into_iter().map(|r| r.value).collect();
    for i in 0..200 {
        assert!(values.contains(&format!("a-{i}")), "lost a-{i}");
        assert!(values.contains(&format!("b-{i}")), "lost b-{i}");
    }
}

#[test]
fn a_plugin_replaced_mid_stream_swaps_on_every_driver_without_loss_or_reordering() {
    let b = Broker::start(WEIR, &[("in", 4), ("out", 4), ("dlq", 1)]);
    let n = 4000;
    // One key per source partition, so each partition's order is visible in the output.
    let input: Vec<(i32, String, String)> = (0..n)
        .map(|i| {
            let p = (i % 4) as i32;
            (
                p,
                format!("p{p}"),
                format!("{{\"p\":{p},\"seq\":{}}}", i / 4),
            )
        })
        .collect();
    let producer = trickle(&b, "in", input, 40, Duration::from_millis(80));
    let s = scratch!();
    std::fs::copy(PASSTHROUGH, s.path("stage.wasm")).unwrap();
    let stages = "  - name: swap\n    plugin: stage.wasm\n    config:\n      set.version: \"2\"\n";
    s.write(
        "p.yaml",
        &kafka_pipeline(&b.bootstrap, "g-swap", stages, "", "  drivers: 2\n"),
    );
    let c = spawn_weir(&s, "p.yaml", "swap.log");
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::copy(JSON_ENRICH, s.path("stage.wasm.tmp")).unwrap();
    std::fs::rename(s.path("stage.wasm.tmp"), s.path("stage.wasm")).unwrap();
    producer.join().expect("producer");
    let ends: Vec<Option<i64>> = high_watermarks(&b, "in", 4).into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.committed("g-swap", "in", 4) != ends {
        assert!(Instant::now() < deadline, "did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&c);
    wait_ok(c, "weir", &s, "swap.log");
    let log = std::fs::read_to_string(s.path("swap.log")).unwrap();
    assert!(log.contains("new plugin version published"), "{log}");
    assert_eq!(
        log.matches("plugin swapped").count(),
        2,
        "each driver swapped once:\n{log}"
    );

    let outs = b.read("out");
    assert_eq!(
        outs.len(),
        n,
        "every message exactly once (no crash, no replay)"
    );
    let mut per_key: BTreeMap<String, Vec<(u64, bool)>> = BTreeMap::new();
    for r in &outs {
        let v: Value = serde_json::from_str(&r.value).unwrap();
        per_key
            .entry(r.key.clone())
            .or_default()
            .push((v["seq"].as_u64().unwrap(), v["version"] == "2"));
    }
    let mut old = 0;
    let mut new = 0;
    for (k, seqs) in &per_key {
        assert!(
            seqs.windows(2).all(|w| w[0].0 < w[1].0),
            "{k}: order broken"
        );
        // Within a partition: the old version, then only the new one.
        let first_new = seqs.iter().position(|x| x.1).unwrap_or(seqs.len());
        assert!(
            seqs[first_new..].iter().all(|x| x.1),
            "{k}: went back to the old version"
        );
        old += first_new;
        new += seqs.len() - first_new;
    }
    assert!(
        old > 0 && new > 0,
        "both versions ran: {old} old, {new} new"
    );
}

/// Runs `weir replay FROM... EXTRA... --json`; its JSON report.
fn replay_json(s: &Scratch, from: &[&str], extra: &[&str]) -> Value {
    let mut args = vec!["replay", "--json"];
    args.extend_from_slice(from);
    args.extend_from_slice(extra);
    let o = s.run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report")
}

/// A JSONL file through a chain into Kafka: outputs to `out`, the stage's rejects and a
/// malformed line to the dead-letter topic, each with where it came from; the file's one
/// partition is committed to its end.
#[test]
fn a_jsonl_file_flows_through_a_chain_into_kafka_with_rejects_in_the_dlq() {
    let b = Broker::start(WEIR, &[("out", 2), ("dlq", 1)]);
    let s = scratch!();
    let mut lines = String::new();
    for i in 0..30 {
        let v = if i % 10 == 3 { "reject" } else { "ok" };
        lines.push_str(&format!("{{\"key\": \"k-{i}\", \"value\": \"{v}\"}}\n"));
    }
    lines.push_str("not json\n");
    s.write("in.jsonl", &lines);
    s.write(
        "p.yaml",
        &format!(
            "source:\n  jsonl:\n    path: in.jsonl\n    topic: orders\nstages:\n{}sink:\n  kafka:\n    brokers: {bs}\n    topic: out\nreject:\n  kafka:\n    brokers: {bs}\n    topic: dlq\nruntime:\n  report: report.json\n",
            stage("m", MISBEHAVE, &[]),
            bs = b.bootstrap
        ),
    );
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = b.read("out");
    let mut got: Vec<String> = keys(&out);
    got.sort();
    let mut want: Vec<String> = (0..30)
        .filter(|i| i % 10 != 3)
        .map(|i| format!("k-{i}"))
        .collect();
    want.sort();
    assert_eq!(got, want, "every ok message once");
    let dlq = b.read("dlq");
    assert_eq!(dlq.len(), 4, "{dlq:?}");
    for r in &dlq {
        assert_eq!(r.header("weir.source.topic"), Some("orders"));
    }
    let staged: Vec<&str> = dlq.iter().filter_map(|r| r.header("weir.stage")).collect();
    assert_eq!(staged.iter().filter(|s| **s == "m").count(), 3);
    assert_eq!(staged.iter().filter(|s| **s == "source").count(), 1);
    let rep = report(&s);
    assert_eq!(rep["committed"]["orders/0"], 31, "{rep}");
    assert_eq!(rep["malformed"], 1);
    assert_eq!(rep["written"], 27);
    assert_eq!(rep["rejected"], 4);

    // And back: Kafka into a JSONL file.
    s.write(
        "back.yaml",
        &format!(
            "source:\n  kafka:\n    brokers: {}\n    topics: [out]\n    group: g-back\n    stop_at_end: true\nsink:\n  jsonl:\n    path: back.jsonl\nruntime:\n  report: back.json\n",
            b.bootstrap
        ),
    );
    let o = s.run(&["run", "back.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut back: Vec<String> = s
        .read_jsonl("back.jsonl")
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    back.sort();
    assert_eq!(back, want);

    // A reject JSONL file replays like a dead-letter topic: the stage's three rejects go back
    // to `orders`, the malformed line is filtered out by `--stage`.
    s.write(
        "local.yaml",
        &format!(
            "source:\n  jsonl:\n    path: in.jsonl\n    topic: orders\nstages:\n{}sink:\n  discard: {{}}\nreject:\n  jsonl:\n    path: rejected.jsonl\n",
            stage("m", MISBEHAVE, &[])
        ),
    );
    assert!(s.run(&["run", "local.yaml"]).status.success());
    let replay =
        |extra: &[&str]| replay_json(&s, &["--file", "rejected.jsonl", "--stage", "m"], extra);
    let dry = replay(&["--dry-run"]);
    assert_eq!(
        (
            dry["written"].as_u64(),
            dry["stages"][0]["dropped"].as_u64()
        ),
        (Some(3), Some(1)),
        "{dry}"
    );
    let done = replay(&["--to-brokers", &b.bootstrap]);
    assert_eq!(done["written"], 3, "{done}");
    let replayed = b.read("orders");
    assert_eq!(replayed.len(), 3);
    assert!(
        replayed
            .iter()
            .all(|r| r.value == "reject" && r.headers.is_empty()),
        "{replayed:?}"
    );
}

/// The dead-letter round trip: a stage rejects some messages → `weir replay --dry-run`
/// counts them (and honours its filters) → the stage is fixed → `weir replay` sends them
/// back to their source topic without the `weir.*` headers → the same group reads only the
/// replayed ones: every message came out exactly once.
#[test]
fn reject_fix_the_stage_replay_and_every_message_is_delivered_once() {
    let b = Broker::start(WEIR, &[("in", 2), ("out", 2), ("dlq", 1)]);
    let input = records(20, 2, |i| {
        if i % 4 == 1 {
            "reject".into()
        } else {
            format!("ok-{i}")
        }
    });
    b.produce("in", &input);
    let s = scratch!();
    let yaml = |plugin: &str| {
        kafka_pipeline(
            &b.bootstrap,
            "g-replay",
            &stage("m", plugin, &[]),
            "    stop_at_end: true",
            "",
        )
    };
    s.write("v1.yaml", &yaml(MISBEHAVE));
    let o = s.run(&["run", "v1.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(b.read("out").len(), 15);
    assert_eq!(b.read("dlq").len(), 5);

    // The mock cluster makes a member joining a known group wait for the session timeout.
    let from = [
        "--topic",
        "dlq",
        "--brokers",
        &b.bootstrap,
        "--property",
        "session.timeout.ms=6000",
    ];
    let replay = |extra: &[&str]| replay_json(&s, &from, extra);
    let dry = replay(&["--dry-run"]);
    assert_eq!(dry["written"], 5, "{dry}");
    let dry = replay(&["--dry-run", "--stage", "other"]);
    assert_eq!(dry["written"], 0, "{dry}");
    assert_eq!(dry["stages"][0]["dropped"], 5, "{dry}");
    let dry = replay(&["--dry-run", "--reason", "^asked to rej"]);
    assert_eq!(dry["written"], 5, "{dry}");
    assert_eq!(b.read("in").len(), 20, "a dry run produces nothing");

    let done = replay(&[]);
    assert_eq!(done["written"], 5, "{done}");
    let back = b.read("in");
    assert_eq!(back.len(), 25);
    assert!(
        back.iter()
            .all(|r| r.headers.iter().all(|(k, _)| !k.starts_with("weir."))),
        "replayed records carry no weir.* headers"
    );

    // The fixed stage passes everything; the group resumes after what it committed.
    s.write("v2.yaml", &yaml(PASSTHROUGH));
    let o = s.run(&["run", "v2.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut got = keys(&b.read("out"));
    got.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("k-{i}")).collect();
    want.sort();
    assert_eq!(got, want, "every message came out exactly once");
    // A second replay with the same group finds nothing new.
    assert_eq!(
        replay(&["--dry-run"])["written"],
        5,
        "a dry run re-reads everything"
    );
    assert_eq!(
        replay(&[])["written"],
        0,
        "the group already replayed these"
    );
}

/// `stop_at_end` must not cost a broker round trip per partition: 256 partitions used to
/// take over two minutes to be declared ended (about 0.5 s each), after the work was done.
#[test]
fn stop_at_end_on_hundreds_of_partitions_does_not_wait_per_partition() {
    let b = Broker::start(WEIR, &[("in", 256), ("out", 1), ("dlq", 1)]);
    b.produce("in", &records(5_000, 256, |i| format!("v-{i}")));
    let s = scratch!();
    s.write(
        "p.yaml",
        &format!(
            "source:\n  kafka:\n    brokers: {}\n    topics: [in]\n    group: g-many\n    stop_at_end: true\nstages:\n{}sink:\n  discard: {{}}\nruntime:\n  report: report.json\n",
            b.bootstrap,
            stage("p", PASSTHROUGH, &[])
        ),
    );
    let started = Instant::now();
    let o = s.run(&["run", "p.yaml"]);
    let took = started.elapsed();
    assert!(o.status.success(), "{}", stderr(&o));
    let rep = report(&s);
    assert_eq!(rep["read"], 5_000);
    assert_eq!(rep["reached_end"], true);
    assert_eq!(
        rep["committed"].as_object().unwrap().len(),
        256,
        "every partition committed"
    );
    assert!(took < Duration::from_secs(40), "took {took:?}");
}

/// The group watch (`source.kafka.stalled_after`): a member of the group that owns partitions
/// and makes no progress (this test's own consumer: it joins, takes its share, reads and never
/// commits) leaves its partitions stalled while input keeps coming. Weir, owning the others,
/// counts exactly those in `weir_kafka_partitions_stalled` and names them in its log. Once the
/// stuck member leaves, Weir takes them over, reads their backlog, and the count goes back to 0.
#[test]
fn on_kafka_the_partitions_a_stuck_member_holds_are_counted_stalled_until_they_move_again() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::ClientConfig;

    let b = kafka(&[("in", 4), ("out", 4), ("dlq", 1)]);
    let group = "g-stuck";
    let stuck: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("group.id", group)
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("enable.auto.commit", "false")
        .create()
        .expect("the stuck member");
    stuck.subscribe(&["in"]).expect("subscribe");
    let owned = |c: &BaseConsumer| c.assignment().map_or(0, |a| a.count());
    let deadline = Instant::now() + Duration::from_secs(30);
    while owned(&stuck) < 4 {
        assert!(
            Instant::now() < deadline,
            "the stuck member got no assignment in 30 s"
        );
        let _ = stuck.poll(Duration::from_millis(50));
    }
    let producer = trickle(
        &b,
        "in",
        records(1600, 4, |i| format!("v{i}")),
        80,
        Duration::from_millis(250),
    );
    let port = free_port();
    let s = scratch!();
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            group,
            &stage("pass", PASSTHROUGH, &[]),
            "    stalled_after: 6s",
            &format!("  metrics: 127.0.0.1:{port}\n"),
        ),
    );
    let c = spawn_weir(&s, "p.yaml", "weir.log");
    let stalled = || {
        weir_tests::try_scrape(port, "/metrics")
            .ok()
            .and_then(|(_, body)| gauge(&body, "weir_kafka_partitions_stalled{topic=\"in\"}"))
    };
    let log = || std::fs::read_to_string(s.path("weir.log")).unwrap_or_default();
    // The stuck member keeps its session (it polls) and what cooperative-sticky leaves it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        let _ = stuck.poll(Duration::from_millis(100));
        let held = owned(&stuck);
        last = stalled().or(last);
        if held == 2 && last == Some(2.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within 60 s: the stuck member holds {held} partitions, Weir counts {last:?} stalled (want 2 and 2)\n{}",
            log()
        );
    }
    let held: Vec<i32> = stuck
        .assignment()
        .expect("assignment")
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect();
    for p in &held {
        assert!(
            log().contains(&format!("in/{p}")) && log().contains("partition stalled"),
            "Weir's log does not name stalled partition in/{p}:\n{}",
            log()
        );
    }
    // The stuck member leaves: Weir takes its partitions and their backlog over.
    drop(stuck);
    let deadline = Instant::now() + Duration::from_secs(60);
    while stalled() != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "60 s after the stuck member left, Weir still counts {:?} stalled\n{}",
            stalled(),
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    producer.join().expect("producer");
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.read("out").len() < 1600 {
        assert!(
            Instant::now() < deadline,
            "{} of 1600 came out within 60 s after the input ended\n{}",
            b.read("out").len(),
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&c);
    wait_ok(c, "weir", &s, "weir.log");
}
