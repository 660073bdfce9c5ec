//! Chain semantics through the real binary: next/reject/fail, flat-map, routing, order, bytes.

use serde_json::{json, Value};
use weir_tests::{pipeline_yaml, plugins, scratch, stage, stderr, values};

#[test]
fn filter_enrich_route_reject_and_counts_add_up() {
    let s = scratch!();
    let mut input = Vec::new();
    for i in 0..300 {
        let status = if i % 3 == 0 { "paid" } else { "open" };
        let region = ["eu", "us"][i % 2];
        input.push(
            json!({"key": format!("k{i}"), "value": {"n": i, "status": status, "region": region}}),
        );
    }
    input.push(json!({"key": "bad", "value": "{not json"}));
    s.jsonl("in.jsonl", &input);
    let stages = [
        stage(
            "paid",
            plugins::JSON_FILTER,
            &[("field", "status"), ("equals", "paid")],
        ),
        stage("enrich", plugins::JSON_ENRICH, &[("set.seen", "yes")]),
        stage(
            "route",
            plugins::ROUTER,
            &[("field", "region"), ("prefix", "orders-")],
        ),
    ]
    .concat();
    s.write("p.yaml", &pipeline_yaml(&stages, ""));
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), 100);
    for (j, line) in out.iter().enumerate() {
        let i = j * 3;
        let v: Value = serde_json::from_str(line["value"].as_str().unwrap()).unwrap();
        assert_eq!(v["n"], i, "order kept");
        assert_eq!(v["seen"], "yes");
        assert_eq!(line["key"], format!("k{i}"));
        assert_eq!(line["topic"], format!("orders-{}", ["eu", "us"][i % 2]));
    }
    let rejected = s.read_jsonl("rejected.jsonl");
    assert_eq!(rejected.len(), 1);
    let r = &rejected[0]["reject"];
    assert_eq!(rejected[0]["value"], "{not json");
    assert_eq!(rejected[0]["key"], "bad");
    assert_eq!(r["stage"], "paid");
    assert!(r["reason"].as_str().unwrap().starts_with("malformed JSON"));
    assert_eq!(
        r["source"],
        json!({"topic": "in", "partition": 0, "offset": 300})
    );
    assert_eq!(r["plugin"].as_str().unwrap().len(), 64, "full plugin hash");
    let rep = s.report();
    assert_eq!(rep["state"], "completed");
    assert_eq!(rep["read"], 301);
    let paid = &rep["stages"][0];
    assert_eq!(paid["input"], 301);
    // Every input is accounted for exactly once.
    let sum = paid["keep"].as_u64().unwrap()
        + paid["dropped"].as_u64().unwrap()
        + paid["rejected"].as_u64().unwrap();
    assert_eq!(sum, 301);
    assert_eq!(paid["keep"], 100);
    assert_eq!(rep["written"], 100);
    assert_eq!(rep["rejected"], 1);
    assert_eq!(rep["committed"]["in/0"], 301, "everything read is done");
    assert!(stderr(&o).contains("Completed"), "summary printed");
}

#[test]
fn flat_map_reject_and_fail_stop_before_the_failed_message() {
    let s = scratch!();
    let vals = ["a", "dup", "reject", "b", "fail", "c", "d"];
    s.jsonl(
        "in.jsonl",
        &vals.iter().map(|v| json!({"value": v})).collect::<Vec<_>>(),
    );
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("m", plugins::MISBEHAVE, &[]), ""),
    );
    let o = s.run(&["run", "p.yaml"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a stage fail exits 1: {}",
        stderr(&o)
    );
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "dup", "dup", "b"]);
    assert_eq!(values(&s.read_jsonl("rejected.jsonl")), ["reject"]);
    let rep = s.report();
    assert_eq!(rep["state"], "failed");
    assert_eq!(rep["failure"]["offset"], 4);
    assert_eq!(rep["failure"]["stage"], "m");
    assert!(rep["failure"]["reason"]
        .as_str()
        .unwrap()
        .contains("asked to fail at offset 4"));
    assert_eq!(
        rep["committed"]["in/0"], 4,
        "nothing at or after the failed message counts as done"
    );
    // Every input is accounted for: the two after the fail were given but never answered.
    let m = &rep["stages"][0];
    let answered: u64 = [
        "keep",
        "next",
        "dropped",
        "rejected",
        "failed",
        "unanswered",
    ]
    .iter()
    .map(|k| m[*k].as_u64().unwrap())
    .sum();
    assert_eq!((m["input"].as_u64(), answered), (Some(7), 7), "{m}");
    assert_eq!(m["unanswered"], 2, "{m}");
    // The same on the typed path.
    let typed = stage("m", plugins::MISBEHAVE, &[]) + "    contract: typed\n";
    s.write("p.yaml", &pipeline_yaml(&typed, ""));
    assert_eq!(s.run(&["run", "p.yaml"]).status.code(), Some(1));
    let m = &s.report()["stages"][0];
    assert_eq!(
        (m["input"].as_u64(), m["unanswered"].as_u64()),
        (Some(7), Some(2)),
        "{m}"
    );
    assert!(stderr(&o).contains("failed at offset 4"));
}

#[test]
fn a_fail_in_a_later_stage_truncates_what_earlier_stages_emitted() {
    let s = scratch!();
    // Stage one (typed path) emits a copy of every message, the one after "fail" too;
    // stage two flat-maps "dup" and fails on "fail".
    let vals = ["dup", "x", "fail", "dup"];
    s.jsonl(
        "in.jsonl",
        &vals.iter().map(|v| json!({"value": v})).collect::<Vec<_>>(),
    );
    let stages = [
        stage("one", plugins::TYPED_ONLY, &[]),
        stage("two", plugins::MISBEHAVE, &[]),
    ]
    .concat();
    s.write("p.yaml", &pipeline_yaml(&stages, ""));
    let o = s.run(&["run", "p.yaml"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["dup", "dup", "x"]);
    let rep = s.report();
    assert_eq!(rep["failure"]["stage"], "two");
    assert_eq!(rep["failure"]["offset"], 2);
    assert_eq!(
        rep["stages"][0]["next"], 4,
        "stage one answered the message after the fail too"
    );
    assert_eq!(rep["stages"][0]["contract"], "typed");
    assert_eq!(rep["stages"][1]["contract"], "batch");
    assert_eq!(
        rep["committed"]["in/0"], 2,
        "committed up to the failed offset"
    );
}

#[test]
fn typed_and_batch_paths_give_identical_results() {
    let vals = ["a", "dup", "reject", "b", "", "dup"];
    let mut outs = Vec::new();
    for contract in ["batch", "typed"] {
        let s = scratch!();
        let mut lines: Vec<Value> = vals
            .iter()
            .map(|v| json!({"value": v, "key": "k", "headers": [["h", "1"], ["n", null]]}))
            .collect();
        lines.push(json!({"key": {"base64": "/wD+"}, "value": {"base64": "gICA"}, "timestamp": 5}));
        s.jsonl("in.jsonl", &lines);
        let st = stage("m", plugins::MISBEHAVE, &[]) + &format!("    contract: {contract}\n");
        s.write("p.yaml", &pipeline_yaml(&st, "batch:\n  max_messages: 3\n"));
        let o = s.run(&["run", "p.yaml"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(s.report()["stages"][0]["contract"], contract);
        outs.push((s.read_jsonl("out.jsonl"), s.read_jsonl("rejected.jsonl")));
    }
    assert_eq!(outs[0], outs[1]);
    let (out, _) = &outs[0];
    // 7 inputs, two "dup" add one each, one "reject" leaves.
    assert_eq!(out.len(), 8);
    let last = out.last().unwrap();
    assert_eq!(
        last["key"],
        json!({"base64": "/wD+"}),
        "non-UTF-8 bytes round-trip"
    );
    assert_eq!(last["value"], json!({"base64": "gICA"}));
    assert_eq!(last["timestamp"], 5);
    assert_eq!(out[0]["headers"], json!([["h", "1"], ["n", null]]));
}

#[test]
fn a_component_without_the_sdk_runs_on_the_typed_contract() {
    let s = scratch!();
    s.jsonl(
        "in.jsonl",
        &[json!({"value": "hello"}), json!({"value": "reject"})],
    );
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("typed", plugins::TYPED_ONLY, &[("tag", "v1")]), ""),
    );
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(
        out,
        vec![json!({"value": "hello", "headers": [["x-typed", "v1"]]})]
    );
    assert_eq!(
        s.read_jsonl("rejected.jsonl")[0]["reject"]["reason"],
        "typed stage rejects `reject`"
    );
    assert!(
        stderr(&o).contains("typed-only ready"),
        "guest log reaches host logs"
    );
    assert_eq!(s.report()["stages"][0]["contract"], "typed");
}

#[test]
fn malformed_input_lines_go_to_the_reject_path() {
    let s = scratch!();
    s.write(
        "in.jsonl",
        "{\"value\": \"a\"}\nnot json at all\n{\"valeu\": 1}\n{\"value\": \"b\"}\n",
    );
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("p", plugins::PASSTHROUGH, &[]), ""),
    );
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(values(&s.read_jsonl("out.jsonl")), ["a", "b"]);
    let rej = s.read_jsonl("rejected.jsonl");
    assert_eq!(values(&rej), ["not json at all", "{\"valeu\": 1}"]);
    assert_eq!(rej[0]["reject"]["stage"], "source");
    assert!(rej[1]["reject"]["reason"]
        .as_str()
        .unwrap()
        .contains("line 3"));
    assert_eq!(s.report()["malformed"], 2);
}

#[test]
fn order_is_kept_across_many_batches_and_an_empty_chain_passes_through() {
    let s = scratch!();
    let input: Vec<Value> = (0..5000)
        .map(|i| json!({"value": format!("m{i}")}))
        .collect();
    s.jsonl("in.jsonl", &input);
    s.write(
        "p.yaml",
        &pipeline_yaml(
            &stage("p", plugins::PASSTHROUGH, &[]),
            "batch:\n  max_messages: 64\n  max_bytes: 2KiB\n",
        ),
    );
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Vec<String> = (0..5000).map(|i| format!("m{i}")).collect();
    assert_eq!(values(&s.read_jsonl("out.jsonl")), want);

    let s2 = scratch!();
    s2.jsonl("in.jsonl", &input[..10]);
    s2.write(
        "p.yaml",
        &pipeline_yaml("  []", "").replace("stages:\n  []", "stages: []"),
    );
    let o = s2.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(s2.read_jsonl("out.jsonl").len(), 10);
}
