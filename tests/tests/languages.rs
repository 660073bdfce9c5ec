//! Stages in Rust, C, Python, JavaScript and Go, each built from source by its SDK
//! (`scripts/build-plugins`) and run through the real `weir` binary: the same job gives the same
//! results in every language, the sandbox holds for the heavy runtimes (no files, environment
//! or network unless granted; memory cap and deadline), and compiled code is cached.

use serde_json::{json, Value};
use weir_tests::languages::{plugin, shared_cache};
use weir_tests::{pipeline_yaml, scratch, stage, stderr, Scratch};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const LANGS: [&str; 5] = ["rust", "c", "python", "js", "go"];
const ORDERS_CONFIG: [(&str, &str); 4] = [
    ("field", "status"),
    ("equals", "paid"),
    ("tag", "checked"),
    ("tag_value", "yes"),
];

fn input() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/orders-languages.jsonl"
    ))
    .expect("tests/data/orders-languages.jsonl")
}

/// `runtime:` lines (the YAML from `pipeline_yaml` ends inside its `runtime:` block) that use
/// the compiled-code cache shared by these tests.
fn shared_cache_yaml() -> String {
    format!("  cache_dir: {}\n", shared_cache().display())
}

/// JSON with every number as f64, so `-500`, `-500.0` and `-0.5e+3` compare equal (the
/// languages' JSON libraries print numbers differently; the values are the same).
fn canonical(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().expect("finite number")),
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        other => other.clone(),
    }
}

/// One language's results: every output (key, headers, timestamp, parsed value) and every
/// reject (key, reason, stage), in order, plus the report's counts.
fn run_orders(lang: &str) -> (Vec<Value>, Vec<Value>, Value) {
    run_orders_on(lang, "")
}

/// The orders stage of `lang` over the shared input; `contract` is extra stage YAML (e.g.
/// `contract: typed` for the per-message path of a component that exports both).
fn run_orders_on(lang: &str, contract: &str) -> (Vec<Value>, Vec<Value>, Value) {
    let s = scratch!();
    s.write("in.jsonl", &input());
    let name = format!("orders-{lang}");
    let st = stage(&name, &plugin(WEIR, &name), &ORDERS_CONFIG) + contract;
    s.write("p.yaml", &pipeline_yaml(&st, &shared_cache_yaml()));
    let o = s.run(&["run", "p.yaml"]);
    assert!(o.status.success(), "{lang}: {}", stderr(&o));
    let out = s
        .read_jsonl("out.jsonl")
        .iter()
        .map(|m| {
            let value: Value = serde_json::from_str(m["value"].as_str().expect("text value"))
                .unwrap_or_else(|e| panic!("{lang}: output value is not JSON ({e}): {m}"));
            json!({"key": m["key"], "headers": m["headers"], "timestamp": m["timestamp"],
                   "value": canonical(&value)})
        })
        .collect();
    let rejected = s
        .read_jsonl("rejected.jsonl")
        .iter()
        .map(|m| json!({"key": m["key"], "value": m["value"], "reason": m["reject"]["reason"]}))
        .collect();
    let counts = s.report()["stages"][0].clone();
    (out, rejected, counts)
}

#[test]
fn the_orders_stage_gives_the_same_results_in_rust_c_python_js_and_go() {
    let (out, rejected, counts) = run_orders("rust");
    // What the job means, on the Rust stage: the 8 paid orders tagged, 8 valid others dropped,
    // 19 rejected with one of three reasons.
    let keys: Vec<_> = out.iter().map(|m| m["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["o-1", "o-2", "o-3", "o-4", "o-5", "o-6", "o-7", "o-8"]
    );
    for m in &out {
        assert_eq!(m["value"]["status"], "paid", "{m}");
        assert_eq!(m["value"]["checked"], "yes", "{m}");
    }
    assert_eq!(
        out[0]["headers"],
        json!([["trace", "t-1"], ["empty", null]])
    );
    assert_eq!(out[0]["timestamp"], 1_700_000_000_000_i64);
    assert_eq!(out[3]["value"]["name"], "Zoë 😀", "escapes decoded");
    let reasons: Vec<_> = rejected
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == "not a JSON object")
            .count(),
        5
    );
    assert_eq!(
        reasons.iter().filter(|r| **r == "malformed JSON").count(),
        13
    );
    assert_eq!(reasons.iter().filter(|r| **r == "no value").count(), 1);
    assert_eq!(
        (counts["input"].as_u64(), counts["dropped"].as_u64()),
        (Some(35), Some(8))
    );

    // Every SDK exports the packed path, which the host prefers; C, Python, JS and Go once
    // more on the typed path (`contract: typed`), and the JS stage compiled ahead of time
    // (`weir-build-js --aot`, weval): the same answers every way.
    let runs = LANGS[1..]
        .iter()
        .map(|lang| (*lang, ""))
        .chain(["c", "python", "js", "go"].map(|lang| (lang, "    contract: typed\n")))
        .chain([("js-aot", "")]);
    for (lang, contract) in runs {
        let (o, r, c) = run_orders_on(lang, contract);
        let path = if contract.is_empty() {
            "batch"
        } else {
            "typed"
        };
        assert_eq!(c["contract"], path, "{lang}: {c}");
        assert_eq!(o, out, "{lang} ({path}): outputs differ from Rust's");
        assert_eq!(r, rejected, "{lang} ({path}): rejects differ from Rust's");
        for k in [
            "input", "next", "emitted", "dropped", "rejected", "failed", "traps",
        ] {
            assert_eq!(c[k], counts[k], "{lang} ({path}): count `{k}` differs: {c}");
        }
    }
}

#[test]
fn the_c_stage_answers_the_same_on_the_packed_and_the_typed_path() {
    let s = scratch!();
    let input = s.write("in.jsonl", &input());
    let orders = plugin(WEIR, "orders-c");
    let inspect = s.run(&["inspect", &orders]);
    let shape: Value = serde_json::from_slice(&inspect.stdout).expect("inspect prints JSON");
    assert_eq!(
        shape["shape"], "batch",
        "the C SDK exports the packed path: {shape}"
    );
    let mut args = vec!["test".to_owned(), orders.clone(), "--input".into()];
    args.push(input.display().to_string());
    for (k, v) in ORDERS_CONFIG {
        args.extend(["--config".to_owned(), format!("{k}={v}")]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let packed = s.run(&argv);
    let typed = s.run(&[&argv[..], &["--typed"]].concat());
    assert!(
        packed.status.success() && typed.status.success(),
        "{}{}",
        stderr(&packed),
        stderr(&typed)
    );
    let lines = String::from_utf8(packed.stdout).unwrap();
    assert_eq!(lines.lines().count(), 35);
    assert_eq!(lines, String::from_utf8(typed.stdout).unwrap());
}

#[test]
fn a_missing_config_key_stops_start_up_naming_the_stage_in_every_language() {
    for lang in LANGS {
        let s = scratch!();
        s.write("in.jsonl", "");
        let name = format!("orders-{lang}");
        let st = stage(&name, &plugin(WEIR, &name), &ORDERS_CONFIG[..3]);
        s.write("p.yaml", &pipeline_yaml(&st, &shared_cache_yaml()));
        let o = s.run(&["check", "p.yaml"]);
        assert_eq!(o.status.code(), Some(2), "{lang}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&name) && err.contains("tag_value"),
            "{lang}: {err}"
        );
    }
}

fn probe(s: &Scratch, plugin_name: &str, values: &[&str], stage_extra: &str) -> Vec<String> {
    s.jsonl(
        "in.jsonl",
        &values
            .iter()
            .map(|v| json!({ "value": v }))
            .collect::<Vec<_>>(),
    );
    let st = stage("probe", &plugin(WEIR, plugin_name), &[]) + stage_extra;
    s.write("p.yaml", &pipeline_yaml(&st, &shared_cache_yaml()));
    let o = s
        .weir(&["run", "p.yaml"])
        .env("WEIR_SECRET", "hunter2")
        .output()
        .expect("running weir");
    assert!(o.status.success(), "{}", stderr(&o));
    s.reject_reasons()
}

#[test]
fn a_python_stage_gets_no_files_environment_or_network_unless_granted() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let net = format!("net:{}", listener.local_addr().unwrap().port());
    let probes = [
        "read-file",
        "read-granted",
        "write-granted",
        "env",
        "env:WEIR_SECRET",
        &net,
    ];

    let s = scratch!();
    let r = probe(&s, "probe-python", &probes, "");
    assert_eq!(r.len(), 6, "{r:?}");
    assert!(r[0].starts_with("probe: file read denied"), "{}", r[0]);
    assert!(r[1].starts_with("probe: file read denied"), "{}", r[1]);
    assert!(r[2].starts_with("probe: file write denied"), "{}", r[2]);
    assert_eq!(r[3], "probe: 0 environment variables");
    assert_eq!(r[4], "probe: WEIR_SECRET=None");
    assert!(r[5].starts_with("probe: network denied"), "{}", r[5]);

    let s = scratch!();
    std::fs::create_dir(s.path("data")).unwrap();
    s.write("data/hello.txt", "granted hello\n");
    let grants = "    allow:\n      env: [WEIR_SECRET]\n      dirs:\n        - { host: data, guest: /data }\n      network: true\n";
    let r = probe(&s, "probe-python", &probes, grants);
    assert!(
        r[0].starts_with("probe: file read denied"),
        "only the granted folder: {}",
        r[0]
    );
    assert_eq!(r[1], "probe: file read allowed: granted hello");
    assert!(
        r[2].starts_with("probe: file write denied"),
        "read-only by default: {}",
        r[2]
    );
    assert!(!s.path("data/written.txt").exists());
    assert_eq!(
        r[3], "probe: 1 environment variables",
        "only the granted name"
    );
    assert_eq!(r[4], "probe: WEIR_SECRET=hunter2");
    assert_eq!(r[5], "probe: network allowed: connected");

    let s = scratch!();
    std::fs::create_dir(s.path("data")).unwrap();
    let grants = "    allow:\n      dirs:\n        - { host: data, guest: /data, write: true }\n";
    let r = probe(&s, "probe-python", &["write-granted"], grants);
    assert_eq!(r, ["probe: file write allowed: wrote"]);
    assert_eq!(
        std::fs::read_to_string(s.path("data/written.txt")).unwrap(),
        "from the stage"
    );
}

#[test]
fn python_js_and_go_stages_that_trap_loop_or_hoard_memory_are_contained() {
    for lang in ["python", "js", "go"] {
        let s = scratch!();
        // A deadline with room: it is wall-clock time, and on a loaded machine (a fresh CI run
        // builds and compiles other stages meanwhile) 300 ms once ran out on the first message
        // of a fresh Python instance.
        let limits = "    limits:\n      timeout: 2s\n      memory: 96MiB\n";
        let r = probe(
            &s,
            &format!("probe-{lang}"),
            &["a", "trap", "b", "loop", "c", "bomb", "d"],
            limits,
        );
        let out: Vec<_> = s
            .read_jsonl("out.jsonl")
            .iter()
            .map(|m| m["value"].clone())
            .collect();
        assert_eq!(
            out,
            ["a", "b", "c", "d"],
            "{lang}: every other message is delivered"
        );
        assert_eq!(r.len(), 3, "{lang}: {r:?}");
        assert!(
            r[0].starts_with("trap: ") && r[0].contains("probe asked to trap"),
            "{lang}: {}",
            r[0]
        );
        assert!(r[1].contains("deadline of 2s exceeded"), "{lang}: {}", r[1]);
        assert!(
            r[2].contains("memory limit of 96MiB exceeded"),
            "{lang}: {}",
            r[2]
        );
        let sb = &s.report()["stages"][0]["sandbox"];
        assert!(
            sb["timeouts"].as_u64() >= Some(1) && sb["memory_exceeded"].as_u64() >= Some(1),
            "{lang}: {sb}"
        );
    }
}

#[test]
fn the_js_runtime_imports_no_sockets_environment_or_http() {
    let s = scratch!();
    for name in ["orders-js", "probe-js"] {
        let o = s.run(&["inspect", &plugin(WEIR, name)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let info: Value = serde_json::from_slice(&o.stdout).unwrap();
        let imports: Vec<&str> = info["imports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap())
            .collect();
        assert!(imports.contains(&"weir:stage/log@0.1.0"), "{imports:?}");
        for banned in ["wasi:sockets/", "wasi:cli/environment", "wasi:http/"] {
            assert!(
                !imports.iter().any(|i| i.starts_with(banned)),
                "{name} imports {banned}: {imports:?}"
            );
        }
    }
    let r = probe(&s, "probe-js", &["env"], "");
    assert_eq!(r, ["probe: process.env none"]);
}

#[test]
fn a_second_start_of_a_python_or_js_pipeline_loads_compiled_code_from_the_cache() {
    for lang in ["python", "js"] {
        let s = scratch!(); // a private, empty cache
        s.write("in.jsonl", "");
        let name = format!("orders-{lang}");
        let st = stage(&name, &plugin(WEIR, &name), &ORDERS_CONFIG);
        s.write("p.yaml", &pipeline_yaml(&st, ""));
        let first = s.run(&["check", "p.yaml"]);
        let second = s.run(&["check", "p.yaml"]);
        assert!(
            first.status.success() && second.status.success(),
            "{}",
            stderr(&first)
        );
        let (a, b) = (
            String::from_utf8_lossy(&first.stdout),
            String::from_utf8_lossy(&second.stdout),
        );
        assert!(
            a.contains("cache=Miss"),
            "{lang}: first start compiles: {a}"
        );
        assert!(
            b.contains("cache=Hit"),
            "{lang}: second start loads the cache: {b}"
        );
    }
}

#[test]
fn all_five_languages_run_in_one_chain_on_kafka() {
    let s = scratch!();
    s.write("orders.jsonl", &input());
    let mut stages = String::new();
    for lang in LANGS {
        let name = format!("orders-{lang}");
        stages += &stage(&name, &plugin(WEIR, &name), &ORDERS_CONFIG);
    }
    let yaml = format!(
        "name: languages\nsource:\n  kafka:\n    brokers: ${{WEIR_BROKERS:-localhost:9092}}\n    topics: [orders]\n    group: languages\n    stop_at_end: true\nstages:\n{stages}sink:\n  kafka:\n    brokers: ${{WEIR_BROKERS:-localhost:9092}}\n    topic: checked\nreject:\n  kafka:\n    brokers: ${{WEIR_BROKERS:-localhost:9092}}\n    topic: dlq\nruntime:\n  report: report.json\n{}",
        shared_cache_yaml()
    );
    s.write("p.yaml", &yaml);
    let o = s.run(&[
        "run",
        "p.yaml",
        "--embedded-broker",
        "--seed",
        "orders=orders.jsonl",
        "--dump",
        "topics",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = s.read_jsonl("topics/checked.jsonl");
    let mut keys: Vec<_> = out
        .iter()
        .map(|m| m["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort(); // partitions interleave; order holds within each
    for m in &out {
        let v: Value = serde_json::from_str(m["value"].as_str().unwrap()).unwrap();
        assert_eq!(
            (&v["status"], &v["checked"]),
            (&json!("paid"), &json!("yes")),
            "{m}"
        );
    }
    assert_eq!(
        keys,
        ["o-1", "o-2", "o-3", "o-4", "o-5", "o-6", "o-7", "o-8"]
    );
    assert_eq!(s.read_jsonl("topics/dlq.jsonl").len(), 19);
    let report = s.report();
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages.len(), LANGS.len());
    for st in &stages[1..] {
        assert_eq!(
            (st["input"].as_u64(), st["next"].as_u64()),
            (Some(8), Some(8)),
            "{st}"
        );
    }
    let committed = weir_tests::kafka::committed_total(&report);
    assert_eq!(committed, 35, "every offset committed: {report}");
}

/// The expected final total of each key of `tests/data/running-total.jsonl`, folded here from
/// the input lines: a key that is a JSON string, a value that is a JSON object whose `amount`
/// is an integer within i64 (serde_json keeps the last of duplicate members).
fn expected_totals(lines: &[Value]) -> std::collections::BTreeMap<String, i64> {
    let mut totals = std::collections::BTreeMap::new();
    for line in lines {
        let Some(key) = line["key"].as_str() else {
            continue;
        };
        let doc: Option<Value> = match &line["value"] {
            Value::String(text) => serde_json::from_str(text).ok(),
            Value::Null => None,
            other => Some(other.clone()),
        };
        if let Some(amount) = doc.as_ref().and_then(|d| d.get("amount")?.as_i64()) {
            let t: &mut i64 = totals.entry(key.to_owned()).or_default();
            *t = t.wrapping_add(amount);
        }
    }
    totals
}

/// One language's running totals over the input in two runs (the second continues from the
/// state the first left): every output's (key, total), the offsets of the rejects, and the
/// final store as `weir state list` prints it (without the write times).
fn run_running_total(
    lang: &str,
    halves: [&[Value]; 2],
) -> (Vec<(String, i64)>, Vec<u64>, Vec<Value>) {
    let s = scratch!();
    let name = format!("running-total-{lang}");
    let plugin = if lang == "rust" {
        weir_tests::plugins::RUNNING_TOTAL.to_owned()
    } else {
        plugin(WEIR, &name)
    };
    s.write(
        "p.yaml",
        &format!(
            "name: totals\nsource: {{ jsonl: {{ path: in.jsonl }} }}\nstages:\n  - name: total\n    plugin: {plugin}\n    state: {{ buckets: [totals] }}\nsink: {{ jsonl: {{ path: out.jsonl }} }}\nreject: {{ jsonl: {{ path: rejected.jsonl }} }}\nruntime:\n  report: report.json\n{}",
            shared_cache_yaml()
        ),
    );
    let (mut outputs, mut rejects) = (Vec::new(), Vec::new());
    for (run, half) in halves.iter().enumerate() {
        s.jsonl("in.jsonl", half);
        let o = s.run(&["run", "p.yaml"]);
        assert!(o.status.success(), "{lang}, run {run}: {}", stderr(&o));
        for m in s.read_jsonl("out.jsonl") {
            let v: Value = serde_json::from_str(m["value"].as_str().expect("text value"))
                .unwrap_or_else(|e| panic!("{lang}: output value is not JSON ({e}): {m}"));
            let total = v["total"]
                .as_i64()
                .unwrap_or_else(|| panic!("{lang}: no integer total in {m}"));
            outputs.push((m["key"].as_str().expect("a text key").to_owned(), total));
        }
        for r in s.read_jsonl("rejected.jsonl") {
            let reason = r["reject"]["reason"].as_str().unwrap_or_default();
            assert!(
                !reason.starts_with("trap") && !reason.starts_with("state"),
                "{lang}: a reject that is not the stage's answer: {r}"
            );
            rejects.push(
                run as u64 * 1_000_000 + r["reject"]["source"]["offset"].as_u64().expect("offset"),
            );
        }
    }
    let o = s.run(&[
        "state", "list", "p.yaml", "--stage", "total", "--bucket", "totals",
    ]);
    assert!(
        o.status.success(),
        "{lang}: weir state list: {}",
        stderr(&o)
    );
    let store = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("a JSON line");
            v.as_object_mut().expect("an object").remove("written_ms");
            v
        })
        .collect();
    (outputs, rejects, store)
}

#[test]
fn the_running_total_stage_keeps_the_same_totals_in_rust_c_python_js_and_go() {
    let lines = weir_tests::read_jsonl(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/running-total.jsonl"
    )));
    let (first, second) = lines.split_at(lines.len() / 2);
    let want = expected_totals(&lines);
    assert!(want.len() >= 6, "the input covers several keys: {want:?}");
    let (rust_out, rust_rejects, rust_store) = run_running_total("rust", [first, second]);
    // What the job means, on the Rust stage: the last output of each key carries the key's
    // fold of the input, the store holds the same, and the 11 lines without a key or an
    // integer amount were rejected.
    let mut last = std::collections::BTreeMap::new();
    for (k, t) in &rust_out {
        last.insert(k.clone(), *t);
    }
    assert_eq!(last, want, "rust: last total per key");
    let store: std::collections::BTreeMap<String, i64> = rust_store
        .iter()
        .map(|v| {
            (
                v["key"].as_str().unwrap().to_owned(),
                v["int"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(store, want, "rust: the store after both runs");
    assert_eq!(rust_rejects.len(), 11, "rust rejects: {rust_rejects:?}");
    for lang in ["c", "python", "js", "go"] {
        let (out, rejects, store) = run_running_total(lang, [first, second]);
        assert_eq!(out, rust_out, "{lang}: outputs differ from rust's");
        assert_eq!(
            rejects, rust_rejects,
            "{lang}: rejected offsets differ from rust's"
        );
        assert_eq!(store, rust_store, "{lang}: the store differs from rust's");
    }
}

/// Builds `plugins/<dir>/<file>` (or `<dir>/<file>` where `dir` is absolute) with the `lang` SDK's
/// build script, run from `cwd`, into `out`.
fn sdk_build(lang: &str, dir: &str, file: &str, cwd: &std::path::Path, out: &std::path::Path) {
    let root = weir_tests::languages::root();
    let o = std::process::Command::new(root.join(format!("sdk/{lang}/weir-build-{lang}")))
        .arg(root.join("plugins").join(dir).join(file))
        .arg("-o")
        .arg(out)
        .current_dir(cwd)
        .env("WEIR", WEIR)
        .output()
        .expect("running the SDK's build script");
    assert!(o.status.success(), "{lang}: {}", stderr(&o));
    assert!(
        !stderr(&o).contains("not reproducible"),
        "{lang}: the build says it is not reproducible: {}",
        stderr(&o)
    );
}

/// Equal bytes, or a message with both sizes and where they first differ.
fn assert_same_bytes(what: &str, a: &std::path::Path, b: &std::path::Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    let first = x.iter().zip(&y).position(|(p, q)| p != q);
    assert!(
        x == y,
        "{what}: two builds of the same source differ: {} bytes and {} bytes, first difference at \
         byte {first:?}",
        x.len(),
        y.len()
    );
}

#[test]
fn the_examples_in_every_language_build_to_the_same_bytes_twice() {
    let s = scratch!();
    let (one, two) = (s.path("one"), s.path("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    // Each language twice, from two folders, into two files.
    for (lang, dir, file) in [
        ("c", "orders-c", "orders.c"),
        ("js", "orders-js", "orders.js"),
        ("go", "orders-go", "."),
    ] {
        sdk_build(lang, dir, file, &one, &one.join(format!("{lang}.wasm")));
        sdk_build(
            lang,
            dir,
            file,
            &two,
            &two.join(format!("{lang}-again.wasm")),
        );
        assert_same_bytes(
            lang,
            &one.join(format!("{lang}.wasm")),
            &two.join(format!("{lang}-again.wasm")),
        );
    }
    // Python: once from the checkout, once from a copy of the stage's folder as a fresh clone
    // would have it (other file and folder times) with a stale bytecode folder and a dot-file
    // beside it. Neither build leaves anything in the stage's folder.
    let root = weir_tests::languages::root();
    let copy = s.path("orders-python");
    std::fs::create_dir_all(copy.join("__pycache__")).unwrap();
    std::fs::copy(
        root.join("plugins/orders-python/orders.py"),
        copy.join("orders.py"),
    )
    .unwrap();
    std::fs::write(copy.join("__pycache__/orders.cpython-314.pyc"), b"stale").unwrap();
    std::fs::write(copy.join(".env"), b"NOT=copied").unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    for path in [copy.join("orders.py"), copy.clone()] {
        std::fs::File::open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let listing = |dir: &std::path::Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let checkout_before = listing(&root.join("plugins/orders-python"));
    sdk_build(
        "python",
        "orders-python",
        "orders.py",
        &one,
        &one.join("python.wasm"),
    );
    sdk_build(
        "python",
        copy.to_str().unwrap(),
        "orders.py",
        &two,
        &two.join("python-again.wasm"),
    );
    assert_same_bytes(
        "python",
        &one.join("python.wasm"),
        &two.join("python-again.wasm"),
    );
    assert_eq!(
        listing(&root.join("plugins/orders-python")),
        checkout_before,
        "python: the build wrote into the stage's folder"
    );
    assert_eq!(
        listing(&copy),
        [".env", "__pycache__", "orders.py"],
        "python: the build wrote into the stage's folder"
    );
    assert_eq!(
        listing(&copy.join("__pycache__")),
        ["orders.cpython-314.pyc"],
        "python: the build wrote bytecode beside the stage"
    );
    // Rust: the stage crate compiled twice (its dependencies are reused, as in any rebuild).
    let target = root.join("target").join("plugins");
    let cargo = |copy_to: &std::path::Path| {
        let o = std::process::Command::new("cargo")
            .args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip2",
                "-p",
                "orders-rust",
            ])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo");
        assert!(o.status.success(), "rust: {}", stderr(&o));
        assert!(
            stderr(&o).contains("Compiling orders-rust"),
            "rust: compiled: {}",
            stderr(&o)
        );
        std::fs::copy(
            target.join("wasm32-wasip2/release/orders_rust.wasm"),
            copy_to,
        )
        .unwrap();
    };
    // A new modification time makes cargo compile the crate again, both times. The file's
    // own time is put back afterwards (a guard, so a failure does too): a source newer than
    // the last build would make every later build run the build scripts that watch
    // `plugins/` again and recompile the host and the tests (~100 s per warm suite run).
    let lib = root.join("plugins/orders-rust/src/lib.rs");
    struct PutBack(std::path::PathBuf, std::time::SystemTime);
    impl Drop for PutBack {
        fn drop(&mut self) {
            if let Ok(f) = std::fs::File::options().append(true).open(&self.0) {
                let _ = f.set_modified(self.1);
            }
        }
    }
    let _put_back = PutBack(
        lib.clone(),
        std::fs::metadata(&lib).unwrap().modified().unwrap(),
    );
    let touch = || {
        std::fs::File::options()
            .append(true)
            .open(&lib)
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap()
    };
    touch();
    cargo(&one.join("rust.wasm"));
    touch();
    cargo(&two.join("rust-again.wasm"));
    assert_same_bytes("rust", &one.join("rust.wasm"), &two.join("rust-again.wasm"));
}

/// The Go SDK's tests and examples (its API reference: `go doc` shows them, and each checks
/// its output), and the Go examples' native tests (state in memory), run by `go test`; `go
/// vet` on both targets (natively, and wasip1 where the ABI code is).
#[test]
fn the_go_sdk_and_examples_pass_go_vet_and_their_native_tests() {
    let root = weir_tests::languages::root();
    for dir in ["sdk/go", "plugins/orders-go", "plugins/running-total-go"] {
        for (goos, args) in [
            ("", &["vet", "./..."][..]),
            ("wasip1", &["vet", "./..."]),
            ("", &["test", "-count=1", "./..."]),
        ] {
            let mut cmd = weir_tests::languages::go(&root.join(dir));
            cmd.args(args);
            if !goos.is_empty() {
                cmd.env("GOOS", goos).env("GOARCH", "wasm");
            }
            let o = cmd.output().expect("running go");
            assert!(
                o.status.success(),
                "{dir}: GOOS={goos} go {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                stderr(&o)
            );
        }
    }
}

/// Go's runtime in the sandbox: a goroutine runs within the call, `time.Sleep` sleeps (and a
/// sleep past the deadline is cut there, a trap like a loop), no file or environment variable
/// is visible, and the heap at the first message is small.
#[test]
fn a_go_stage_runs_goroutines_and_sleeps_and_sees_no_files_or_environment() {
    let s = scratch!();
    let r = probe(
        &s,
        "probe-go",
        &[
            "goroutine",
            "sleep:50",
            "read-file",
            "env",
            "memory",
            "sleep:5000",
            "state:200000",
        ],
        "    limits:\n      timeout: 2s\n    state: { buckets: [probe] }\n",
    );
    assert_eq!(r.len(), 7, "{r:?}");
    assert_eq!(r[0], "probe: goroutine answered 42");
    let slept: u64 = r[1]
        .strip_prefix("probe: slept ")
        .and_then(|t| t.strip_suffix(" ms"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", r[1]));
    assert!((50..2000).contains(&slept), "{}", r[1]);
    assert!(r[2].starts_with("probe: file read denied"), "{}", r[2]);
    assert_eq!(r[3], "probe: 0 environment variables");
    let heap_kib: u64 = r[4]
        .strip_prefix("probe: heap ")
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", r[4]));
    assert!(heap_kib < 4096, "{}", r[4]);
    assert!(r[5].contains("deadline of 2s exceeded"), "{}", r[5]);
    // The host writes a state call's answer into memory it asks the stage for while the call
    // is in progress: 20 reads of a 200 KB value, with garbage made between them.
    assert_eq!(r[6], "probe: state ok");
}

/// Go's runtime under allocation pressure, on both paths: every message is answered, none
/// traps. Two bugs did so: the runtime's own collections started inside the host's
/// `cabi_realloc` calls, where the component model forbids the imports they make ("cannot
/// leave component instance": 333 of 3,000 messages of 60 KB), and the WASI adapter's
/// allocations ran past the SDK's static area and corrupted the runtime's page allocator
/// ("fatal error: too many pages allocated in chunk?": 6 of 3,000 small messages).
#[test]
fn go_stages_answer_every_message_under_allocation_pressure() {
    let s = scratch!();
    let pad = "x".repeat(60_000);
    let mut lines: Vec<Value> = (0..3000)
        .map(|i| json!({"value": json!({"status": "paid", "id": i}).to_string()}))
        .collect();
    lines.extend(
        (0..300)
            .map(|i| json!({"value": json!({"status": "paid", "id": i, "pad": pad}).to_string()})),
    );
    s.jsonl("in.jsonl", &lines);
    for contract in ["", "    contract: typed\n"] {
        let st = stage("orders", &plugin(WEIR, "orders-go"), &ORDERS_CONFIG) + contract;
        s.write("p.yaml", &pipeline_yaml(&st, &shared_cache_yaml()));
        let o = s.run(&["run", "p.yaml"]);
        assert!(o.status.success(), "{contract}: {}", stderr(&o));
        let st = &s.report()["stages"][0];
        assert_eq!(
            (st["next"].as_u64(), st["sandbox"]["traps"].as_u64()),
            (Some(3300), Some(0)),
            "{contract}: {st}; first reject: {:?}",
            s.reject_reasons().first()
        );
    }
}
