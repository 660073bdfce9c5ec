//! The subcommands and every class of bad input: a clear message, the right exit code, no panic.

use serde_json::{json, Value};
use weir_tests::{json_lines, outcomes, pipeline_yaml, plugins, scratch, stage, stderr, Scratch};

fn no_panic(text: &str) {
    assert!(
        !text.contains("panicked") && !text.contains("RUST_BACKTRACE"),
        "panic output: {text}"
    );
}

#[test]
fn invalid_yaml_names_file_line_and_field_with_a_suggestion() {
    let s = scratch!();
    s.write("in.jsonl", "");
    let yaml = pipeline_yaml(
        &(stage("a", plugins::PASSTHROUGH, &[]) + "    limts:\n      memory: 1MiB\n"),
        "",
    );
    let line = yaml.lines().position(|l| l.contains("limts")).unwrap() + 1;
    s.write("p.yaml", &yaml);
    for cmd in ["run", "check"] {
        let o = s.run(&[cmd, "p.yaml"]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains(&format!("p.yaml:{line}:")), "{e}");
        assert!(
            e.contains("field `stages[0].limts`") && e.contains("unknown field `limts`"),
            "{e}"
        );
        assert!(e.contains("did you mean `limits`?"), "{e}");
        no_panic(&e);
    }
}

#[test]
fn bad_values_name_their_field() {
    let s = scratch!();
    let cases = [
        (
            "    limits:\n      memory: lots\n",
            "stages[0].limits.memory",
        ),
        (
            "    limits:\n      timeout: soon\n",
            "stages[0].limits.timeout",
        ),
        ("    on_trap: explode\n", "stages[0].on_trap"),
    ];
    for (extra, field) in cases {
        s.write(
            "p.yaml",
            &pipeline_yaml(&(stage("a", plugins::PASSTHROUGH, &[]) + extra), ""),
        );
        let o = s.run(&["check", "p.yaml"]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains(field) && e.contains("p.yaml:"), "{field}: {e}");
        no_panic(&e);
    }
    s.write(
        "p.yaml",
        "source:\n  jsonl: { path: ${WEIR_TEST_UNSET_VAR} }\nsink:\n  discard: {}\n",
    );
    let e = stderr(&s.run(&["check", "p.yaml"]));
    assert!(
        e.contains("p.yaml:2:") && e.contains("`WEIR_TEST_UNSET_VAR` is not set"),
        "{e}"
    );
    s.write(
        "p.yaml",
        "source:\n  jsonl: { path: a }\n  stdin: {}\nsink:\n  discard: {}\n",
    );
    let e = stderr(&s.run(&["check", "p.yaml"]));
    assert!(e.contains("exactly one of `jsonl`, `stdin`"), "{e}");
    let o = s.run(&["check", "missing.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.yaml: cannot read"));
}

#[test]
fn missing_or_wrong_plugins_name_the_stage_and_what_was_expected() {
    let s = scratch!();
    s.write("garbage.wasm", "this is not wasm");
    // A core module: magic, version 1, no sections.
    std::fs::write(s.path("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let cases = [
        ("nope.wasm".to_owned(), "stage `bad`: cannot read plugin"),
        (
            s.path("garbage.wasm").display().to_string(),
            "is not a WebAssembly binary",
        ),
        (
            s.path("core.wasm").display().to_string(),
            "is a core WebAssembly module, not a component",
        ),
        (
            plugins::WRONG_WORLD.to_owned(),
            "is not a Weir stage: it exports wasi:cli/run",
        ),
    ];
    for (plugin, want) in cases {
        s.write("p.yaml", &pipeline_yaml(&stage("bad", &plugin, &[]), ""));
        for cmd in ["check", "run"] {
            let o = s.run(&[cmd, "p.yaml"]);
            assert_eq!(o.status.code(), Some(2), "{cmd} {plugin}");
            let e = stderr(&o);
            assert!(e.contains("stage `bad`") && e.contains(want), "{want}: {e}");
            no_panic(&e);
        }
    }
}

#[test]
fn init_errors_stop_start_up_naming_the_stage() {
    let s = scratch!();
    s.write("in.jsonl", "{\"value\":\"a\"}\n");
    s.write(
        "p.yaml",
        &pipeline_yaml(
            &stage(
                "needy",
                plugins::MISBEHAVE,
                &[("init_error", "missing api key")],
            ),
            "",
        ),
    );
    let o = s.run(&["check", "p.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("stage `needy`") && e.contains("init failed: missing api key"),
        "{e}"
    );
    // The SDK's own config errors read the same way.
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("filter", plugins::JSON_FILTER, &[]), ""),
    );
    let e = stderr(&s.run(&["run", "p.yaml"]));
    assert!(
        e.contains("stage `filter`") && e.contains("missing config key `field`"),
        "{e}"
    );
    assert!(!s.path("out.jsonl").exists(), "nothing ran");
    // The run report (`runtime.report`) is written all the same, with the error.
    let report = std::fs::read_to_string(s.path("report.json")).expect("a report");
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["state"], "failed", "{report}");
    assert_eq!(report["read"], 0, "{report}");
    assert!(
        report["error"].as_str().is_some_and(
            |e| e.contains("stage `filter`") && e.contains("missing config key `field`")
        ),
        "{report}"
    );
}

#[test]
fn check_prints_the_chain() {
    let s = scratch!();
    s.write("in.jsonl", "");
    let stages = [
        stage("f", plugins::JSON_FILTER, &[("field", "x")]),
        stage("t", plugins::TYPED_ONLY, &[]),
    ]
    .concat();
    s.write("p.yaml", &pipeline_yaml(&stages, ""));
    let o = s.run(&["check", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("2 stage(s)"), "{out}");
    assert!(
        out.contains("1. f") && out.contains("contract=Batch"),
        "{out}"
    );
    assert!(
        out.contains("2. t") && out.contains("contract=Typed"),
        "{out}"
    );
}

#[test]
fn weir_test_prints_every_outcome() {
    let s = scratch!();
    s.jsonl(
        "in.jsonl",
        &[
            json!({"value": "a"}),
            json!({"value": "dup"}),
            json!({"value": "reject"}),
            json!({"value": "trap"}),
            json!({"value": "fail"}),
        ],
    );
    let o = s.run(&["test", plugins::MISBEHAVE, "--input", "in.jsonl"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a `fail` was answered: {}",
        stderr(&o)
    );
    let lines = json_lines(&o.stdout);
    assert_eq!(outcomes(&lines), ["keep", "next", "reject", "trap", "fail"]);
    assert_eq!(lines[1]["messages"].as_array().unwrap().len(), 2);
    assert!(lines[3]["reason"]
        .as_str()
        .unwrap()
        .contains("asked to trap"));

    let o = s.run(&[
        "test",
        plugins::JSON_FILTER,
        "--input",
        "in.jsonl",
        "--config",
        "field=x",
    ]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("malformed JSON"));
    let o = s.run(&["test", plugins::JSON_FILTER, "--input", "in.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing config key `field`"));
    // Errors name the stage: `--name`, else the name a pipeline.yaml beside the component
    // gives it (a `weir new` project), else the file.
    let o = s.run(&[
        "test",
        plugins::JSON_FILTER,
        "--input",
        "in.jsonl",
        "--name",
        "censor",
    ]);
    assert!(stderr(&o).contains("stage `censor`"), "{}", stderr(&o));
    std::fs::copy(plugins::JSON_FILTER, s.path("stage.wasm")).unwrap();
    s.write(
        "pipeline.yaml",
        &pipeline_yaml(&stage("my-filter", "stage.wasm", &[]), ""),
    );
    let o = s.run(&["test", "stage.wasm", "--input", "in.jsonl"]);
    assert!(stderr(&o).contains("stage `my-filter`"), "{}", stderr(&o));
}

#[test]
fn inspect_shows_contract_and_imports() {
    let s = scratch!();
    let o = s.run(&["inspect", plugins::JSON_FILTER]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["shape"], "batch");
    assert!(v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i == "weir:stage/batch@0.1.0"));
    let v: Value =
        serde_json::from_slice(&s.run(&["inspect", plugins::TYPED_ONLY]).stdout).unwrap();
    assert_eq!(v["shape"], "typed");
    // It logs, so it imports the host's log interface (unused imports are stripped by the linker).
    assert!(
        v["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "weir:stage/log@0.1.0"),
        "{v}"
    );
    assert_eq!(
        s.run(&["inspect", plugins::WRONG_WORLD]).status.code(),
        Some(2)
    );
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let s = scratch!();
    assert_eq!(s.run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(s.run(&["run"]).status.code(), Some(2));
    for cmd in [&["--help"][..], &["run", "--help"], &["test", "--help"]] {
        let o = s.run(cmd);
        assert!(o.status.success());
        assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"));
    }
}

#[test]
fn the_committed_json_schema_is_current() {
    let s = scratch!();
    let o = s.run(&["schema"]);
    assert!(o.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/weir.schema.json"
    ))
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        committed,
        "run `weir schema > docs/weir.schema.json`"
    );
}

#[test]
fn weir_compile_fills_the_cache_before_the_first_start() {
    let s = scratch!();
    s.write("in.jsonl", "");
    let stages = stage("f", plugins::JSON_FILTER, &[("field", "x")])
        + &stage("e", plugins::JSON_ENRICH, &[("set.a", "b")])
        + "    limits:\n      memory: 96MiB\n";
    s.write("p.yaml", &pipeline_yaml(&stages, ""));
    // A bare component first (the image-build case), then the pipeline: the filter is found,
    // the enrich stage compiled.
    let bare = s.run(&["compile", plugins::JSON_FILTER]);
    assert!(bare.status.success(), "{}", stderr(&bare));
    let out = String::from_utf8_lossy(&bare.stdout);
    assert!(out.contains("compiled in"), "{out}");
    let pipeline = s.run(&["compile", "p.yaml"]);
    assert!(pipeline.status.success(), "{}", stderr(&pipeline));
    let out = String::from_utf8_lossy(&pipeline.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("f ") && lines[0].contains("already cached"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("e ") && lines[1].contains("compiled in"),
        "{out}"
    );
    assert!(stderr(&pipeline).contains("2 component(s) in the compiled cache"));
    // The start that follows compiles nothing.
    let check = s.run(&["check", "p.yaml"]);
    let out = String::from_utf8_lossy(&check.stdout);
    assert_eq!(out.matches("cache=Hit").count(), 2, "{out}");
    assert!(!out.contains("cache=Miss"), "{out}");
    // A stage whose plugin is missing: exit 2, naming the stage; a missing file likewise.
    s.write(
        "bad.yaml",
        &pipeline_yaml(&stage("lost", "nowhere.wasm", &[]), ""),
    );
    let bad = s.run(&["compile", "bad.yaml"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("stage `lost`"), "{}", stderr(&bad));
    let none = s.run(&["compile", "missing.yaml"]);
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
}

#[test]
fn compiled_components_are_cached_and_a_broken_entry_is_recompiled() {
    let s = scratch!();
    s.write("in.jsonl", "");
    s.write(
        "p.yaml",
        &pipeline_yaml(&stage("f", plugins::JSON_FILTER, &[("field", "x")]), ""),
    );
    let first = s.run(&["check", "p.yaml"]);
    assert!(first.status.success());
    assert!(String::from_utf8_lossy(&first.stdout).contains("cache=Miss"));
    let entries: Vec<_> = std::fs::read_dir(s.path("cache"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].extension().is_some_and(|e| e == "cwasm"));
    let second = s.run(&["check", "p.yaml"]);
    assert!(String::from_utf8_lossy(&second.stdout).contains("cache=Hit"));
    std::fs::write(&entries[0], b"corrupt").unwrap();
    let third = s.run(&["check", "p.yaml"]);
    assert!(third.status.success(), "{}", stderr(&third));
    assert!(String::from_utf8_lossy(&third.stdout).contains("cache=Miss"));
    assert!(stderr(&third).contains("compiled cache entry unusable"));
}

/// An example pipeline with this build's components.
fn example(name: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    std::fs::read_to_string(format!("{root}/examples/{name}"))
        .unwrap()
        .replace(
            "../target/wasm32-wasip2/release/json_filter.wasm",
            plugins::JSON_FILTER,
        )
        .replace(
            "../target/wasm32-wasip2/release/json_enrich.wasm",
            plugins::JSON_ENRICH,
        )
        .replace(
            "../target/wasm32-wasip2/release/router.wasm",
            plugins::ROUTER,
        )
}

#[test]
fn the_kafka_quickstart_runs_on_the_embedded_broker_as_documented() {
    let s = scratch!();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    s.write("quickstart-kafka.yaml", &example("quickstart-kafka.yaml"));
    let seed = format!("orders={root}/examples/orders.jsonl");
    let o = s.run(&[
        "run",
        "quickstart-kafka.yaml",
        "--embedded-broker",
        "--seed",
        &seed,
        "--dump",
        "topics",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("read 8, written 4, rejected 2"),
        "{}",
        stderr(&o)
    );
    let eu = s.read_jsonl("topics/orders-eu.jsonl");
    assert_eq!(eu.len(), 2);
    let first: Value = serde_json::from_str(eu[0]["value"].as_str().unwrap()).unwrap();
    assert_eq!(
        (first["customer"].as_str(), first["pipeline"].as_str()),
        (Some("ADA"), Some("weir-quickstart"))
    );
    assert_eq!(s.read_jsonl("topics/orders-us.jsonl").len(), 1);
    assert_eq!(s.read_jsonl("topics/orders-apac.jsonl").len(), 1);
    let dlq = s.read_jsonl("topics/orders-dlq.jsonl");
    assert_eq!(dlq.len(), 2);
    for d in &dlq {
        let headers = d["headers"].as_array().unwrap();
        assert!(
            headers
                .iter()
                .any(|h| h[0] == "weir.stage" && h[1] == "paid-only"),
            "{d}"
        );
    }
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("out/kafka/report.json")).unwrap())
            .unwrap();
    assert_eq!(report["reached_end"], true);
    let committed = weir_tests::kafka::committed_total(&report);
    assert_eq!(committed, 8, "every offset committed: {report}");
}

#[test]
fn the_external_kafka_example_checks() {
    let s = scratch!();
    s.write("kafka.yaml", &example("kafka.yaml"));
    let o = s
        .weir(&["check", "kafka.yaml"])
        .env("WEIR_BROKERS", "localhost:9092")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn the_quickstart_example_runs_as_documented() {
    let s = scratch!();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // Same pipeline, with this build's components and this folder's outputs.
    let yaml = example("quickstart.yaml").replace(
        "path: orders.jsonl",
        &format!("path: {root}/examples/orders.jsonl"),
    );
    s.write("quickstart.yaml", &yaml);
    let o = s.run(&["run", "quickstart.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = s.read_jsonl("out/orders-out.jsonl");
    let topics: Vec<&str> = out.iter().map(|l| l["topic"].as_str().unwrap()).collect();
    assert_eq!(
        topics,
        ["orders-eu", "orders-us", "orders-apac", "orders-eu"]
    );
    let first: Value = serde_json::from_str(out[0]["value"].as_str().unwrap()).unwrap();
    assert_eq!(first["customer"], "ADA");
    assert_eq!(first["pipeline"], "weir-quickstart");
    assert_eq!(out[3]["key"], json!({"base64": "/wD+"}));
    let rejected = s.read_jsonl("out/rejected.jsonl");
    assert_eq!(rejected.len(), 2);
    assert!(rejected.iter().all(|r| r["reject"]["stage"] == "paid-only"));
    let summary = stderr(&o);
    assert!(
        summary.contains("read 8, written 4, rejected 2"),
        "{summary}"
    );
    // A file has no partition assignments: the summary speaks of what it committed only.
    assert!(
        summary.contains("committed orders/0@8") && !summary.contains("assignments"),
        "{summary}"
    );
}

#[test]
fn stdin_to_stdout_pipes_like_a_filter() {
    use std::io::Write;
    let s = scratch!();
    s.write(
        "p.yaml",
        &format!(
            "source:\n  stdin: {{ topic: live }}\nstages:\n  - name: m\n    plugin: {}\nsink:\n  stdout: {{}}\n",
            plugins::MISBEHAVE
        ),
    );
    let mut child = s
        .weir(&["run", "p.yaml"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"value\": \"a\"}\n{\"value\": \"dup\"}\n{\"value\": \"reject\"}\n")
        .unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o.stdout);
    assert_eq!(
        lines,
        vec![
            json!({"value": "a"}),
            json!({"value": "dup"}),
            json!({"value": "dup"})
        ]
    );
    assert!(stderr(&o).contains("rejected 1"), "{}", stderr(&o));
}

#[test]
fn kafka_config_mistakes_name_the_file_line_and_field() {
    let s = scratch!();
    let src = "source:\n  kafka:\n    brokers: localhost:9092\n    topics: [in]\n    group: g\n";
    let sink = "sink:\n  discard: {}\n";
    let cases = [
        (
            format!("{src}    comit_interval: 1s\n{sink}"),
            "p.yaml:6: field `source.kafka.comit_interval`: unknown field",
            "did you mean `commit_interval`?",
        ),
        (
            format!("{src}    properties:\n      enable.auto.commit: true\n{sink}"),
            "p.yaml:7: field `source.kafka.properties.enable.auto.commit`",
            "set by Weir",
        ),
        (
            format!("{src}    assignor: sticky\n{sink}"),
            "field `source.kafka.assignor`",
            "cooperative",
        ),
        // The consumer group protocol (KIP-848): the broker owns the session, the heartbeat
        // and the assignment.
        (
            format!("{src}    group_protocol: consumer\n    properties:\n      session.timeout.ms: 6000\n{sink}"),
            "p.yaml:8: field `source.kafka.properties.session.timeout.ms`",
            "group.consumer.session.timeout.ms",
        ),
        (
            format!("{src}    group_protocol: consumer\n    properties:\n      partition.assignment.strategy: range\n{sink}"),
            "p.yaml:8: field `source.kafka.properties.partition.assignment.strategy`",
            "under `group_protocol: consumer`",
        ),
        (
            format!("{src}    group_protocol: consumer\n    assignor: eager\n{sink}"),
            "p.yaml:7: field `source.kafka.assignor`",
            "needs `group_protocol: classic`",
        ),
        (
            format!("{src}    properties:\n      group.protocol: consumer\n{sink}"),
            "p.yaml:7: field `source.kafka.properties.group.protocol`",
            "use `group_protocol",
        ),
        (
            format!("{src}    group_protocol: kip848\n{sink}"),
            "field `source.kafka.group_protocol`",
            "consumer",
        ),
        (
            // The line of the field itself, found by its path, not the first `timeout:`.
            format!("{src}stages:\n  - name: a\n    plugin: a.wasm\n    limits:\n      timeout: 1s\n  - name: b\n    plugin: b.wasm\n    limits:\n      timeout: 0s\n{sink}"),
            "p.yaml:14: field `stages[1].limits.timeout`",
            "must be above zero",
        ),
    ];
    for (yaml, at, hint) in cases {
        s.write("p.yaml", &yaml);
        let o = s.run(&["check", "p.yaml"]);
        assert_eq!(o.status.code(), Some(2), "{yaml}");
        let e = stderr(&o);
        assert!(e.contains(at) && e.contains(hint), "{yaml}\n{e}");
    }
}

/// `weir run` of the `misbehave` stage `m` (with `stage_extra` lines) on a stdin source, a
/// discard sink and a metrics listener (`extra`: more top-level YAML), fed `lines`. Returns
/// the running process, its stdin (still open: the source stays open) and the port.
fn live_with_metrics(
    s: &Scratch,
    stage_extra: &str,
    extra: &str,
    lines: &[&str],
) -> (std::process::Child, std::process::ChildStdin, u16) {
    use std::io::Write;
    let port = weir_tests::free_port();
    s.write(
        "p.yaml",
        &format!(
            "source:\n  stdin: {{ topic: live }}\nstages:\n  - name: m\n    plugin: {}\n{stage_extra}sink:\n  discard: {{}}\n{extra}runtime:\n  metrics: 127.0.0.1:{port}\n",
            plugins::MISBEHAVE
        ),
    );
    let mut child = s
        .weir(&["run", "p.yaml"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    (child, stdin, port)
}

/// Scrapes `/metrics` until `until` holds (30 s at most) and returns the body.
fn metrics_when(port: u16, what: &str, until: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = String::new();
    loop {
        if let Ok((_, body)) = weir_tests::try_scrape(port, "/metrics") {
            if until(&body) {
                return body;
            }
            last = body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not on /metrics within 30 s; the last scrape:\n{last}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Metrics are not only for Kafka: a local pipeline serves `/metrics`, `/healthz` and
/// `/readyz` too, with its stage and source counts.
#[test]
fn a_local_pipeline_serves_metrics_and_health() {
    let s = scratch!();
    let lines = [r#"{"value": "a"}"#, r#"{"value": "reject"}"#].repeat(10);
    let (child, stdin, port) = live_with_metrics(&s, "", "", &lines);
    // Wait until the twenty messages went through the stage (the source stays open).
    let body = metrics_when(port, "ten rejects", |b| {
        weir_tests::gauge(
            b,
            "weir_stage_messages_total{outcome=\"reject\",stage=\"m\"}",
        ) == Some(10.0)
    });
    assert_eq!(
        weir_tests::gauge(&body, "weir_consumed_messages_total"),
        Some(20.0)
    );
    assert_eq!(
        weir_tests::gauge(
            &body,
            "weir_stage_messages_total{outcome=\"keep\",stage=\"m\"}"
        ),
        Some(10.0)
    );
    assert!(body.contains("weir_plugin_info{plugin="), "{body}");
    // Where the memory is: the stage's linear memory (a wasm instance has at least a page),
    // its high-water mark, no recycles, and the process's own figures.
    let mem = weir_tests::gauge(&body, "weir_stage_memory_bytes{stage=\"m\"}").unwrap_or(0.0);
    let peak = weir_tests::gauge(&body, "weir_stage_memory_peak_bytes{stage=\"m\"}").unwrap_or(0.0);
    assert!(mem >= 65536.0 && peak >= mem, "memory {mem}, peak {peak}");
    assert_eq!(
        weir_tests::gauge(&body, "weir_stage_recycled_total{stage=\"m\"}"),
        Some(0.0)
    );
    let rss = weir_tests::gauge(&body, "process_resident_memory_bytes").unwrap_or(0.0);
    assert!(
        rss > 4.0 * 1024.0 * 1024.0,
        "process_resident_memory_bytes {rss}"
    );
    assert_eq!(weir_tests::scrape(port, "/healthz").0, 200);
    assert_eq!(weir_tests::scrape(port, "/readyz").0, 200);
    // Transparent huge pages are off for the process: with them, mimalloc's arenas held
    // hundreds of MB resident for a small heap (issue 28, docs/operations.md).
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["THP_enabled:", "0"]),
        "{status}"
    );
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// What a stateful stage's state holds in the host's memory shows on `/metrics`: after ten
/// messages counting into six keys (`seen` and five values), at least those keys' values and
/// at most every write of the ten messages plus the remembered values.
#[test]
fn a_stateful_stages_state_memory_shows_on_metrics() {
    let s = scratch!();
    let lines: Vec<String> = (0..10)
        .map(|i| format!(r#"{{"value": "v{}"}}"#, i % 5))
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (child, stdin, port) = live_with_metrics(
        &s,
        "    config: { count_in: counts }\n    state: { buckets: [counts] }\n",
        "",
        &lines,
    );
    let body = metrics_when(port, "ten messages through the stage", |b| {
        weir_tests::gauge(b, "weir_stage_messages_total{outcome=\"keep\",stage=\"m\"}")
            == Some(10.0)
    });
    let held = weir_tests::gauge(&body, "weir_state_memory_bytes{stage=\"m\"}")
        .expect("weir_state_memory_bytes for the stateful stage");
    // Per value: 112 bytes of overhead, the key, the 8-byte write time and the 8-byte count
    // (what the host's `state::log::Log::held_bytes` counts).
    let (keys, writes) = (6.0, 20.0);
    assert!(
        (keys * 112.0..=(writes + keys) * (112.0 + 4.0 + 16.0)).contains(&held),
        "weir_state_memory_bytes {held}"
    );
    // `weir top` shows it in a `state` column (only when a stage keeps state).
    let addr = format!("127.0.0.1:{port}");
    let top = s
        .weir(&["top", "--once", "--size", "160x32", &addr])
        .output()
        .unwrap();
    let frame = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{}", stderr(&top));
    let header = frame
        .lines()
        .find(|l| l.contains("stage") && l.contains("recycled"))
        .unwrap_or_else(|| panic!("no stage table header:\n{frame}"));
    assert!(
        header.trim_end_matches(['│', ' ']).ends_with("state"),
        "{frame}"
    );
    let row = frame
        .lines()
        .find(|l| l.trim_start_matches(['│', ' ']).starts_with("m "))
        .unwrap_or_else(|| panic!("no row for the stage:\n{frame}"));
    // The row ends with the state's size (without the column it ends with the recycles).
    let last = row.split_whitespace().rfind(|t| *t != "│");
    assert!(last.is_some_and(|u| u.ends_with('B')), "{frame}");
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// An instance recycled at its memory cap shows on `/metrics`: the recycles, and the
/// high-water mark of the stage's memory near the cap.
#[test]
fn recycled_instances_and_stage_memory_show_on_metrics() {
    let s = scratch!();
    // Each `leak` keeps 1 MiB: 40 of them reach the 16 MiB cap more than once.
    let lines = vec![r#"{"value": "leak"}"#; 40];
    let (child, stdin, port) = live_with_metrics(
        &s,
        "    limits:\n      memory: 16MiB\n",
        "batch:\n  max_messages: 4\n",
        &lines,
    );
    let body = metrics_when(port, "all 40 read and a recycle", |b| {
        weir_tests::gauge(b, "weir_consumed_messages_total") == Some(40.0)
            && weir_tests::gauge(b, "weir_stage_recycled_total{stage=\"m\"}")
                .is_some_and(|r| r >= 1.0)
    });
    let peak = weir_tests::gauge(&body, "weir_stage_memory_peak_bytes{stage=\"m\"}").unwrap_or(0.0);
    let mem = weir_tests::gauge(&body, "weir_stage_memory_bytes{stage=\"m\"}").unwrap_or(0.0);
    assert!(
        (8.0 * 1048576.0..=16.0 * 1048576.0).contains(&peak) && mem <= peak,
        "peak {peak}, now {mem}: {body}"
    );
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A long local run shows a progress line on a terminal, and none when stderr is not one.
#[test]
fn a_progress_line_shows_on_a_terminal_only() {
    let s = scratch!();
    s.jsonl("in.jsonl", &vec![json!({"value": "slow"}); 80]);
    s.write(
        "p.yaml",
        &format!(
            "source:\n  jsonl:\n    path: in.jsonl\nstages:\n  - name: m\n    plugin: {}\nsink:\n  discard: {{}}\nbatch:\n  max_messages: 1\n",
            plugins::MISBEHAVE
        ),
    );
    // `script` runs weir on a pseudo-terminal and copies what it shows to stdout.
    let weir = env!("CARGO_BIN_EXE_weir");
    let o = std::process::Command::new("script")
        .args(["-qec", &format!("{weir} run p.yaml"), "/dev/null"])
        .env("WEIR_CACHE_DIR", s.path("cache"))
        .current_dir(s.dir.path())
        .output()
        .expect("script (util-linux) runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains("msg/s)"), "{shown}");
    assert!(shown.contains(" read ("), "{shown}");
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains("msg/s)"), "{}", stderr(&o));
}

/// `weir test` stops at the first `fail` as `weir run` does (exit 1); `--keep-going` answers
/// the rest, still exit 1.
#[test]
fn weir_test_stops_at_the_first_fail_unless_told_to_keep_going() {
    let s = scratch!();
    s.jsonl(
        "in.jsonl",
        &[
            json!({"value": "a"}),
            json!({"value": "fail"}),
            json!({"value": "b"}),
        ],
    );
    let outcomes_of = |o: &std::process::Output| -> Vec<String> {
        outcomes(&json_lines(&o.stdout))
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    let o = s.run(&["test", plugins::MISBEHAVE, "--input", "in.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(outcomes_of(&o), ["keep", "fail"]);
    assert!(stderr(&o).contains("stopped there"), "{}", stderr(&o));
    let o = s.run(&[
        "test",
        plugins::MISBEHAVE,
        "--input",
        "in.jsonl",
        "--keep-going",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(outcomes_of(&o), ["keep", "fail", "keep"]);
    // Errors name the plugin file, not a stage called `test`.
    let o = s.run(&["test", "missing.wasm", "--input", "in.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("stage `missing.wasm`") && !stderr(&o).contains("`test`"),
        "{}",
        stderr(&o)
    );
}

/// A verb whose reader goes away ends quietly (no panic, no backtrace).
#[test]
fn output_cut_short_by_a_closed_pipe_ends_quietly() {
    let s = scratch!();
    for args in [vec!["inspect", plugins::MISBEHAVE], vec!["schema"]] {
        let mut child = s
            .weir(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before weir writes anything.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}
