//! Hostile plugins are contained: traps, infinite loops, memory bombs, huge output, probes of
//! the filesystem, environment and network. The host keeps running and loses nothing.

use serde_json::json;
use weir_tests::{pipeline_yaml, plugins, scratch, stage, stderr, values, Scratch};

fn run_misbehave(vals: &[&str], limits: &str, extra: &str) -> (Scratch, std::process::Output) {
    let s = scratch!();
    s.jsonl(
        "in.jsonl",
        &vals.iter().map(|v| json!({"value": v})).collect::<Vec<_>>(),
    );
    let st = stage("hostile", plugins::MISBEHAVE, &[]) + limits;
    s.write("p.yaml", &pipeline_yaml(&st, extra));
    let o = s.run(&["run", "p.yaml"]);
    (s, o)
}

#[test]
fn a_trap_rejects_only_its_message_with_the_panic_text() {
    let (s, o) = run_misbehave(&["a", "b", "trap", "c", "d"], "", "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "b", "c", "d"]);
    let r = s.reject_reasons();
    assert_eq!(r.len(), 1);
    assert!(r[0].starts_with("trap: "), "{}", r[0]);
    assert!(
        r[0].contains("misbehave: asked to trap at offset 2"),
        "guest stderr captured: {}",
        r[0]
    );
    let sb = &s.report()["stages"][0]["sandbox"];
    assert_eq!(sb["traps"], 2, "the batch call and the isolated retry");
    assert_eq!(sb["restarts"], 2);
}

#[test]
fn repeated_traps_never_loop() {
    let vals: Vec<&str> = (0..200)
        .map(|i| if i % 2 == 0 { "trap" } else { "ok" })
        .collect();
    let (s, o) = run_misbehave(&vals, "", "batch:\n  max_messages: 16\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(s.read_jsonl("out.jsonl").len(), 100);
    assert_eq!(s.read_jsonl("rejected.jsonl").len(), 100);
}

#[test]
fn an_infinite_loop_hits_the_deadline() {
    let started = std::time::Instant::now();
    let (s, o) = run_misbehave(
        &["a", "loop", "b"],
        // Wall-clock time: room enough that a loaded machine never runs out on `a` or `b`.
        "    limits:\n      timeout: 500ms\n",
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "b"]);
    let r = s.reject_reasons();
    assert_eq!(r.len(), 1);
    assert!(r[0].contains("deadline of 500ms exceeded"), "{}", r[0]);
    assert_eq!(s.report()["stages"][0]["sandbox"]["timeouts"], 2);
    // Two 500 ms deadlines plus start-up: far below this bound unless the loop was not stopped.
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// 60 `leak` messages (each keeps 1 MiB) under a 16 MiB cap: every message is delivered,
/// none rejected, and each time the instance reaches the cap it is counted as recycled, at
/// least `recycles` times, never as a trap. Returns the run and the report's sandbox section.
fn leaks_are_recycled(
    limits: &str,
    extra: &str,
    recycles: u64,
) -> (Scratch, std::process::Output, serde_json::Value) {
    let vals = vec!["leak"; 60];
    let (s, o) = run_misbehave(&vals, limits, extra);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        s.read_jsonl("out.jsonl").len(),
        60,
        "every message delivered"
    );
    assert!(s.reject_reasons().is_empty(), "{:?}", s.reject_reasons());
    let sb = s.report()["stages"][0]["sandbox"].clone();
    // Counted as recycled instances, not as traps: no message was at fault.
    assert!(sb["recycled"].as_u64().unwrap() >= recycles, "{sb}");
    assert_eq!(
        (sb["traps"].as_u64(), sb["memory_exceeded"].as_u64()),
        (Some(0), Some(0)),
        "{sb}"
    );
    (s, o, sb)
}

#[test]
fn a_heap_grown_over_many_messages_costs_a_fresh_instance_not_a_message() {
    // On the typed path every dozen messages the instance hits its cap; the message that
    // happens to cross it is retried once on a fresh instance and delivered.
    let (_s, o, sb) = leaks_are_recycled(
        "    contract: typed\n    limits:\n      memory: 16MiB\n",
        "",
        3,
    );
    assert_eq!(sb["restarts"], sb["recycled"], "{sb}");
    assert!(stderr(&o).contains("instance recycled"), "{}", stderr(&o));
    // The high-water mark of the instances' memory: near the cap, never above it.
    let peak = sb["peak_memory"].as_u64().unwrap();
    assert!((12 << 20..=16 << 20).contains(&peak), "{sb}");
}

#[test]
fn on_the_batch_path_a_heap_grown_over_many_batches_recycles_the_instance_and_retries_the_batch() {
    // Batches of 4 `leak`s keep 4 MiB each: every few batches the instance reaches its cap.
    // The batch that crosses it is retried whole on a fresh instance.
    let (_s, o, _sb) = leaks_are_recycled(
        "    limits:\n      memory: 16MiB\n",
        "batch:\n  max_messages: 4\n",
        1,
    );
    assert!(
        !stderr(&o).contains("retrying its messages one by one"),
        "a recycled batch is retried whole: {}",
        stderr(&o)
    );
}

#[test]
fn a_memory_bomb_hits_the_memory_cap() {
    let (s, o) = run_misbehave(
        &["a", "bomb", "b"],
        "    limits:\n      memory: 16MiB\n",
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "b"]);
    let r = s.reject_reasons();
    assert!(r[0].contains("memory limit of 16MiB exceeded"), "{}", r[0]);
    assert!(
        s.report()["stages"][0]["sandbox"]["memory_exceeded"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

#[test]
fn huge_output_hits_max_output() {
    let (s, o) = run_misbehave(
        &["a", "huge", "b"],
        "    limits:\n      memory: 128MiB\n      max_output: 1MiB\n",
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "b"]);
    let r = s.reject_reasons();
    assert!(r[0].contains("exceeds max_output of 1MiB"), "{}", r[0]);
    assert_eq!(s.report()["stages"][0]["sandbox"]["oversized"], 1);
}

#[test]
fn a_flood_of_empty_messages_hits_max_output_on_both_paths() {
    for contract in ["batch", "typed"] {
        let limits = format!(
            "    contract: {contract}\n    limits:\n      memory: 128MiB\n      max_output: 1MiB\n"
        );
        let (s, o) = run_misbehave(&["flood", "b"], &limits, "");
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(values(&s.read_jsonl("out.jsonl")), ["b"], "{contract}");
        assert!(
            s.reject_reasons()[0].contains("exceeds max_output of 1MiB"),
            "{contract}: {:?}",
            s.reject_reasons()
        );
    }
}

#[test]
fn huge_output_on_the_typed_path_is_capped_too() {
    let (s, o) = run_misbehave(
        &["huge", "b"],
        "    contract: typed\n    limits:\n      memory: 128MiB\n      max_output: 1MiB\n",
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["b"]);
    assert!(s.reject_reasons()[0].contains("exceeds max_output"));
}

#[test]
fn on_trap_fail_stops_the_pipeline_before_the_message() {
    let (s, o) = run_misbehave(&["a", "trap", "b"], "    on_trap: fail\n", "");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a"]);
    let rep = s.report();
    assert_eq!(rep["failure"]["offset"], 1);
    assert!(rep["failure"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("trap: "));
    assert_eq!(
        rep["committed"]["in/0"], 1,
        "committed up to the failed offset"
    );
}

#[test]
fn the_sandbox_grants_no_files_environment_or_network() {
    let s = scratch!();
    s.jsonl(
        "in.jsonl",
        &[
            json!({"value": "read-file"}),
            json!({"value": "env"}),
            json!({"value": "net"}),
        ],
    );
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("probe", plugins::MISBEHAVE, &[]), ""),
    );
    let o = s
        .weir(&["run", "p.yaml"])
        .env("WEIR_SECRET", "hunter2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = s.reject_reasons();
    assert!(r[0].starts_with("probe: file read denied"), "{}", r[0]);
    assert_eq!(r[1], "probe: 0 environment variables");
    assert!(r[2].starts_with("probe: network denied"), "{}", r[2]);
}

/// Runs the `forge` stage (packed answers spoiled by seeded mutations, or random bytes) in
/// process over `batches` batches of 1–16 messages; returns the verdicts per batch and the
/// instance's sandbox counters.
fn forged(
    mode: &str,
    batches: usize,
) -> (
    Vec<Vec<weir::engine::Verdict>>,
    Vec<Vec<usize>>,
    weir::engine::SandboxStats,
) {
    use std::sync::Arc;
    use weir::config::{ContractChoice, TrapPolicy};
    use weir::engine::{StageInstance, StageSpec, WeirEngine};
    use weir::message::{Envelope, Lane, Message};

    let engine = WeirEngine::new(64 << 20, None).unwrap();
    let plugin = Arc::new(
        engine
            .load_plugin("forge", std::path::Path::new(plugins::FORGE))
            .unwrap(),
    );
    let spec = Arc::new(StageSpec {
        name: "forge".into(),
        config: vec![("mode".into(), mode.into()), ("seed".into(), "7".into())],
        memory: 64 << 20,
        timeout: std::time::Duration::from_secs(5),
        max_output: 4 << 20,
        on_trap: TrapPolicy::Reject,
        contract: ContractChoice::Batch,
        grants: Default::default(),
        state: None,
    });
    let mut inst = StageInstance::new(&engine, spec, plugin).unwrap();
    assert!(inst.uses_batch());
    let lane = Lane {
        topic: "t".into(),
        partition: 0,
        generation: 0,
    };
    let (mut answers, mut traps) = (Vec::new(), Vec::new());
    let mut offset = 0i64;
    for b in 0..batches {
        let n = 1 + b % 16;
        let batch: Vec<Envelope> = (0..n)
            .map(|i| Envelope {
                offset: offset + i as i64,
                msg: Message {
                    key: Some(format!("k{}", offset + i as i64).into_bytes()),
                    value: Some(b"v".to_vec()),
                    headers: vec![],
                    timestamp: Some(1),
                    topic: None,
                },
            })
            .collect();
        offset += n as i64;
        let mut out = Vec::new();
        inst.process(&lane, &batch, &mut out)
            .expect("a forged answer never stops the instance");
        answers.push(out);
        traps.push(inst.trapped_at().to_vec());
    }
    (answers, traps, inst.stats.clone())
}

#[test]
fn forged_packed_answers_are_traps_and_every_message_is_answered_once() {
    use weir::engine::Verdict;
    // The control: the same answers unspoiled are read as written.
    let (answers, traps, stats) = forged("valid", 64);
    assert_eq!(stats.malformed, 0);
    assert!(traps.iter().all(Vec::is_empty));
    for out in &answers {
        for v in out {
            assert!(
                matches!(v, Verdict::Keep | Verdict::Next(_) | Verdict::Reject(_)),
                "{v:?}"
            );
        }
    }
    for mode in ["mutate", "random"] {
        let (answers, traps, stats) = forged(mode, 400);
        let mut trapped = 0;
        for (b, (out, at)) in answers.iter().zip(&traps).enumerate() {
            let n = 1 + b % 16;
            // One verdict per message (no fail can come from a trap under on_trap: reject, and
            // a forged fail is only accepted as the last answer of a whole-batch call).
            let fail = out.iter().position(|v| matches!(v, Verdict::Fail(_)));
            assert_eq!(
                out.len(),
                fail.map_or(n, |i| i + 1),
                "{mode} batch {b}: {out:?}"
            );
            for &i in at {
                let Verdict::Reject(reason) = &out[i] else {
                    panic!("{mode}: a trap answered {:?}", out[i])
                };
                assert!(
                    reason.contains("malformed packed batch") || reason.contains("trap"),
                    "{mode}: {reason}"
                );
                trapped += 1;
            }
        }
        eprintln!("{mode}: {trapped} messages trapped, {stats:?}");
        assert!(
            stats.malformed >= 100,
            "{mode}: only {} malformed answers were seen: {stats:?}",
            stats.malformed
        );
        assert!(trapped >= 100, "{mode}: {trapped} messages trapped");
        assert_eq!(
            stats.restarts,
            stats.malformed + stats.traps,
            "{mode}: {stats:?}"
        );
    }
}
