//! A stage author's first hour, walked the way the docs tell a newcomer to walk it, with `weir`
//! found the documented way (`scripts/install` links it into a folder that is then first on
//! PATH; no `WEIR` variable): per language, `weir new` and then the scaffold README's commands,
//! run as written; and a C stage against the bare WIT, built by running the files and commands
//! of `docs/contract.md` literally, so neither the scaffolds nor the contract page can rot.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use weir_tests::languages::root;
use weir_tests::stderr;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A user's shell: a scratch home for projects, `weir` installed by `scripts/install` into a
/// folder first on PATH, and a compiled-code cache of its own (empty at first).
struct Shell {
    dir: weir_tests::Scratch,
    path: String,
    env: Vec<(String, String)>,
}

impl Shell {
    fn new() -> Self {
        let dir = weir_tests::scratch!();
        let bin = dir.path("bin");
        let o = Command::new(root().join("scripts").join("install"))
            .args(["--from", WEIR])
            .arg(&bin)
            .output()
            .expect("running scripts/install");
        assert!(o.status.success(), "scripts/install: {}", stderr(&o));
        let link = std::fs::canonicalize(bin.join("weir")).expect("weir installed");
        assert_eq!(
            link,
            std::fs::canonicalize(WEIR).unwrap(),
            "the link is this build"
        );
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let cache = dir.path("cache").display().to_string();
        Shell {
            dir,
            path,
            env: vec![("WEIR_CACHE_DIR".into(), cache)],
        }
    }

    fn home(&self) -> &Path {
        self.dir.dir.path()
    }

    /// Runs one shell line in `cwd`, as typed.
    fn sh(&self, cwd: &Path, line: &str) -> Output {
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", line])
            .current_dir(cwd)
            .env("PATH", &self.path)
            .env_remove("WEIR")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap_or_else(|e| panic!("running `{line}`: {e}"))
    }
}

/// The lines of the first ```sh block of a README, trailing `# comments` removed.
fn sh_block(markdown: &str) -> Vec<String> {
    let mut lines = markdown
        .lines()
        .skip_while(|l| l.trim() != "```sh")
        .skip(1)
        .take_while(|l| l.trim() != "```");
    let mut out = Vec::new();
    for line in lines.by_ref() {
        let code = line.split(" #").next().unwrap_or("").trim();
        if !code.is_empty() {
            out.push(code.to_owned());
        }
    }
    out
}

fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `weir new NAME --lang LANG`, then every command of the scaffold's README in order. Checks
/// what `weir test` and `weir run` answer on the scaffold's sample, and returns the project.
fn walk_scaffold(sh: &mut Shell, lang: &str) -> PathBuf {
    let name = format!("first-{lang}");
    let o = sh.sh(sh.home(), &format!("weir new {name} --lang {lang}"));
    assert!(o.status.success(), "{lang}: weir new: {}", stderr(&o));
    let project = sh.home().join(&name);
    let readme = std::fs::read_to_string(project.join("README.md")).expect("README.md");
    assert!(
        readme.contains("scripts/install"),
        "{lang}: the README says how to get `weir` on PATH: {readme}"
    );
    assert!(
        readme.contains("API reference"),
        "{lang}: the README links the SDK's API reference: {readme}"
    );
    // The project depends on the SDK packages at weir's version (packed by scripts/install
    // until they are on the registries), never on the SDK's folder in the checkout.
    let manifest = match lang {
        "rust" => "Cargo.toml",
        "js" => "package.json",
        "python" => "requirements.txt",
        _ => "",
    };
    if !manifest.is_empty() {
        let text = std::fs::read_to_string(project.join(manifest)).expect("the manifest");
        let checkout = std::fs::canonicalize(root()).unwrap();
        let packed = checkout.join("target").join("sdk-packages");
        let folder = checkout.join("sdk").join(lang);
        assert!(
            text.contains(env!("CARGO_PKG_VERSION"))
                && text.contains(&packed.display().to_string())
                && !text.contains(&folder.display().to_string()),
            "{lang}: {manifest} asks for weir-sdk {} from {}: {text}",
            env!("CARGO_PKG_VERSION"),
            packed.display()
        );
    }
    let commands = sh_block(&readme);
    let mut seen = Vec::new();
    for line in &commands {
        let o = sh.sh(&project, line);
        assert!(o.status.success(), "{lang}: `{line}`: {}", stderr(&o));
        let verb = line
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        match verb.as_str() {
            "weir test" => {
                let outcomes = json_lines(&o);
                assert_eq!(outcomes.len(), 3, "{lang}: {outcomes:?}");
                assert_eq!(
                    outcomes[0]["messages"][0]["headers"],
                    json!([[name, "matched"]]),
                    "{lang}: kept and tagged"
                );
                assert_eq!(outcomes[1]["messages"], json!([]), "{lang}: dropped");
                assert_eq!(outcomes[2]["outcome"], "reject", "{lang}");
                // The first start of a Python or JS stage compiles for seconds: it says so.
                if matches!(lang, "python" | "js") {
                    assert!(
                        stderr(&o).contains("compiling") && stderr(&o).contains("cache"),
                        "{lang}: the first start says it is compiling: {}",
                        stderr(&o)
                    );
                }
            }
            "weir run" => {
                assert_eq!(
                    String::from_utf8_lossy(&o.stdout).lines().count(),
                    1,
                    "{lang}: one message out"
                );
                assert!(
                    stderr(&o).contains("written 1, rejected 1"),
                    "{lang}: {}",
                    stderr(&o)
                );
                assert!(
                    !stderr(&o).contains("compiling"),
                    "{lang}: the second start loads the cache: {}",
                    stderr(&o)
                );
            }
            _ => {}
        }
        seen.push(verb);
    }
    let verbs: &[&str] = if lang == "go" {
        &["go test", "./build.sh", "weir test", "weir run"]
    } else {
        &["./build.sh", "weir test", "weir run"]
    };
    for verb in verbs {
        assert!(
            seen.iter().any(|v| v == *verb),
            "{lang}: the README walks through `{verb}`: {commands:?}"
        );
    }
    project
}

#[test]
fn a_rust_stage_from_weir_new_builds_tests_and_runs_as_its_readme_says() {
    let mut sh = Shell::new();
    // One cargo target folder for every run of this test (the SDK's dependencies compile once).
    let target = root().join("target").join("scaffold");
    sh.env
        .push(("CARGO_TARGET_DIR".into(), target.display().to_string()));
    let project = walk_scaffold(&mut sh, "rust");
    assert!(project.join("src/lib.rs").exists() && project.join("stage.wasm").exists());
    let again = sh.sh(sh.home(), "weir new first-rust");
    assert_eq!(again.status.code(), Some(2), "never overwrites");
    let bad = sh.sh(sh.home(), "weir new Bad_Name");
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

#[test]
fn a_c_stage_from_weir_new_builds_tests_and_runs_as_its_readme_says() {
    walk_scaffold(&mut Shell::new(), "c");
}

#[test]
fn a_python_stage_from_weir_new_builds_tests_and_runs_as_its_readme_says() {
    let mut sh = Shell::new();
    let project = walk_scaffold(&mut sh, "python");
    // componentize-py's own export is explained, not listed with the contract.
    let o = sh.sh(&project, "weir inspect stage.wasm");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Both contract shapes: the SDK adds the packed path over the same function.
    assert_eq!(
        v["exports"],
        json!(["weir:stage/stage@0.1.0", "weir:stage/batch@0.1.0"]),
        "{v}"
    );
    assert_eq!(v["shape"], "batch", "{v}");
    assert_eq!(v["other_exports"][0]["name"], "exports", "{v}");
    assert!(
        v["other_exports"][0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("componentize-py") && w.contains("never called")),
        "{v}"
    );
}

#[test]
fn a_js_stage_from_weir_new_builds_tests_and_runs_as_its_readme_says() {
    walk_scaffold(&mut Shell::new(), "js");
}

#[test]
fn a_go_stage_from_weir_new_tests_builds_and_runs_as_its_readme_says() {
    let mut sh = Shell::new();
    let project = walk_scaffold(&mut sh, "go");
    // The README's `go test .` ran the scaffold's own test; a broken stage fails it.
    let source = project.join("stage.go");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, text.replace("weir.Drop()", "weir.Keep()")).unwrap();
    let o = sh.sh(&project, "go test .");
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stdout).contains("dropped"),
        "go test passed a stage that keeps what it should drop: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// The blocks of a page marked `<!-- walk: WHAT -->` (the fenced block right after the
/// marker), in order.
fn walk_blocks(page: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(what) = line
            .trim()
            .strip_prefix("<!-- walk:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or("");
        assert!(fence.starts_with("```"), "a fenced block follows `{line}`");
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push((what.trim().to_owned(), body.join("\n") + "\n"));
    }
    blocks
}

/// The C toolchain's variables as the contract page names them, from the pinned install
/// (`scripts/ensure-languages c`, Debian's clang-19 and wasi-libc).
fn c_toolchain() -> Vec<(String, String)> {
    let vars = weir_tests::script_vars("ensure-languages", &["c"]);
    vec![
        ("CC".into(), vars["WEIR_CLANG"].clone()),
        ("WASI_SYSROOT".into(), vars["WEIR_WASI_SYSROOT"].clone()),
    ]
}

#[test]
fn a_c_stage_built_from_the_contract_page_alone_answers_as_the_page_shows() {
    let page = std::fs::read_to_string(root().join("docs").join("contract.md")).unwrap();
    let blocks = walk_blocks(&page);
    let mut sh = Shell::new();
    sh.env.extend(c_toolchain());
    let dir = sh.home().join("mask");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut tried, mut expected) = (None, None);
    for (what, body) in &blocks {
        match what.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["file", name] => std::fs::write(dir.join(name), body).unwrap(),
            ["run"] => {
                let o = sh.sh(&dir, body);
                assert!(o.status.success(), "`{body}`: {}", stderr(&o));
            }
            ["try"] => {
                let o = sh.sh(&dir, body);
                assert_eq!(
                    o.status.code(),
                    Some(1),
                    "stops at the sentinel: {}",
                    stderr(&o)
                );
                tried = Some(String::from_utf8_lossy(&o.stdout).into_owned());
            }
            ["output"] => expected = Some(body.clone()),
            _ => panic!("unknown walk block `{what}`"),
        }
    }
    let (tried, expected) = (
        tried.expect("the page has a walk: try block"),
        expected.expect("the page has a walk: output block"),
    );
    assert_eq!(tried, expected, "the page shows what the stage answers");
    assert!(
        expected.contains("\"outcome\":\"fail\"") && expected.contains("\"topic\":\"eu\""),
        "{expected}"
    );

    // The same stage with the C SDK (utf-8 check, topic from part of the key) answers the
    // same, on the packed path and on the typed one.
    let sdk = root().join("sdk").join("c").join("weir-build-c");
    let source = root().join("tests/data/first-hour/mask-sdk.c");
    let o = sh.sh(
        &dir,
        &format!("{} {} -o mask-sdk.wasm", sdk.display(), source.display()),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for typed in ["", " --typed"] {
        let o = sh.sh(
            &dir,
            &format!("weir test mask-sdk.wasm --input sample.jsonl --config word=secret{typed}"),
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), expected, "SDK{typed}");
    }

    // The page's ownership rules hold up under load: 20,000 messages of 1 KiB through the bare
    // stage under a 4 MiB memory cap, half moved into `next` and half kept (the argument freed):
    // leaking either would trap long before the end.
    let input: String = (0..20_000)
        .map(|i| {
            let line = if i % 2 == 0 {
                json!({"key": format!("eu:{i}"), "value": "secret ".repeat(146)})
            } else {
                json!({"key": format!("{i}"), "value": "public ".repeat(146)})
            };
            format!("{line}\n")
        })
        .collect();
    std::fs::write(dir.join("many.jsonl"), input).unwrap();
    std::fs::write(
        dir.join("pipeline.yaml"),
        "source: { jsonl: { path: many.jsonl } }\n\
         stages:\n  - name: mask\n    plugin: mask.wasm\n    config: { word: secret }\n    \
         limits: { memory: 4MiB }\n\
         sink: { jsonl: { path: out.jsonl } }\n\
         reject: { jsonl: { path: rejected.jsonl } }\n\
         runtime: { report: report.json }\n",
    )
    .unwrap();
    let o = sh.sh(&dir, "weir run pipeline.yaml");
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let stage = &report["stages"][0];
    assert_eq!(
        (
            stage["next"].as_u64(),
            stage["keep"].as_u64(),
            stage["sandbox"]["traps"].as_u64(),
            stage["sandbox"]["memory_exceeded"].as_u64()
        ),
        (Some(10_000), Some(10_000), Some(0), Some(0)),
        "{stage}"
    );
    let first = std::fs::read_to_string(dir.join("out.jsonl")).unwrap();
    let first: Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(first["topic"], "eu");
    assert!(
        !first["value"].as_str().unwrap().contains("secret"),
        "{first}"
    );
}

#[test]
fn c_bindings_default_to_the_typed_contract_and_name_what_to_define() {
    let sh = Shell::new();
    let o = sh.sh(sh.home(), "weir component bindings gen");
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "stage_typed.h",
        "stage_typed.c",
        "stage_typed_component_type.o",
    ] {
        assert!(sh.home().join("gen").join(f).exists(), "{f}");
    }
    let said = stderr(&o);
    assert!(
        said.contains("world stage-typed")
            && said.contains("exports_weir_stage_stage_process(")
            && said.contains("exports_weir_stage_stage_init(")
            && !said.contains("process_batch"),
        "{said}"
    );
    let o = sh.sh(sh.home(), "weir component bindings fast --world stage-fast");
    assert!(
        stderr(&o).contains("exports_weir_stage_batch_process_batch("),
        "{}",
        stderr(&o)
    );
}

/// Runs a command in the checkout, asserting success; returns stdout.
fn run_in_root(program: &str, args: &[&str]) -> String {
    let o = Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(o.status.success(), "{program} {args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_sdks_are_packages_at_the_binarys_version_that_publish_cleanly() {
    let version = env!("CARGO_PKG_VERSION");
    // The three crates verify together (cargo's multi-package publish, against a local overlay
    // of the not yet published ones), exactly as `cargo publish` would send them.
    run_in_root(
        "cargo",
        &[
            "publish",
            "--dry-run",
            "--allow-dirty",
            "-p",
            "weir-abi",
            "-p",
            "weir-sdk-macro",
            "-p",
            "weir-sdk",
        ],
    );
    let s = weir_tests::scratch!();
    let out = s.path("packages");
    let printed = run_in_root("scripts/pack-sdks", &[out.to_str().unwrap()]);
    assert_eq!(
        Path::new(printed.trim()),
        std::fs::canonicalize(&out).unwrap()
    );
    for file in [
        format!("weir-abi-{version}.crate"),
        format!("weir-sdk-macro-{version}.crate"),
        format!("weir-sdk-{version}.crate"),
        format!("rust/weir-sdk-{version}/wit/weir.wit"),
        format!("weir-sdk-{version}.tgz"),
        format!("weir_sdk-{version}-py3-none-any.whl"),
    ] {
        assert!(out.join(&file).is_file(), "pack-sdks made {file}");
    }
    // The npm package: the SDK, its build script as a bin, its tools as dependencies.
    let tgz = out.join(format!("weir-sdk-{version}.tgz"));
    let tgz = tgz.to_str().unwrap();
    let list = run_in_root("tar", &["-tzf", tgz]);
    for f in [
        "weir.js",
        "state.js",
        "weir-build-js",
        "reproducible.c",
        "API.md",
        "README.md",
    ] {
        assert!(
            list.lines().any(|l| l == format!("package/{f}")),
            "{f} in the npm package: {list}"
        );
    }
    let manifest = run_in_root("tar", &["-xzOf", tgz, "package/package.json"]);
    let manifest: Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["version"], version);
    assert_eq!(manifest["bin"]["weir-build-js"], "weir-build-js");
    assert_eq!(
        manifest["dependencies"]["@bytecodealliance/componentize-js"],
        "0.23.0"
    );
    // The wheel: the `weir` package with its API reference, the build script, componentize-py.
    let wheel = out.join(format!("weir_sdk-{version}-py3-none-any.whl"));
    let list = run_in_root("python3", &["-m", "zipfile", "-l", wheel.to_str().unwrap()]);
    for f in [
        "weir/__init__.py".to_owned(),
        "weir/state.py".to_owned(),
        "weir/API.md".to_owned(),
        "weir/reproducible.c".to_owned(),
        format!("weir_sdk-{version}.data/scripts/weir-build-python"),
    ] {
        assert!(list.contains(&f), "{f} in the wheel: {list}");
    }
    let metadata = run_in_root(
        "python3",
        &[
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
             print(z.read(next(n for n in z.namelist() if n.endswith('METADATA'))).decode())",
            wheel.to_str().unwrap(),
        ],
    );
    assert!(
        metadata.contains(&format!("Version: {version}")),
        "{metadata}"
    );
    assert!(
        metadata.contains("Requires-Dist: componentize-py==0.25.1"),
        "{metadata}"
    );
}

/// The `### name` headings of an API page, each checked to have a code block before the next
/// heading. `### Stage, Batch` names two.
fn documented(page: &str, lang: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current: Option<String> = None;
    let mut has_example = true;
    for line in page.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            assert!(
                has_example,
                "{lang}: `{}` has no example",
                current.unwrap_or_default()
            );
            let h = h.split('(').next().unwrap_or(h).trim();
            names.extend(h.split(", ").map(str::to_owned));
            current = Some(h.to_owned());
            has_example = false;
        } else if line.starts_with("## ") {
            assert!(
                has_example,
                "{lang}: `{}` has no example",
                current.clone().unwrap_or_default()
            );
            current = None;
            has_example = true;
        } else if line.starts_with("```") && current.is_some() {
            has_example = true;
        }
    }
    assert!(
        has_example,
        "{lang}: `{}` has no example",
        current.unwrap_or_default()
    );
    names
}

fn words_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
        })
        .filter(|w| !w.is_empty() && !w.starts_with('_'))
        .collect()
}

#[test]
fn each_sdks_api_reference_names_every_function_with_an_example() {
    let read =
        |p: &str| std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let check = |lang: &str, page: &str, exported: Vec<String>| {
        let names = documented(&read(page), lang);
        let missing: Vec<_> = exported.iter().filter(|e| !names.contains(e)).collect();
        assert!(
            missing.is_empty(),
            "{lang}: {page} does not document {missing:?}"
        );
        assert!(
            exported.len() >= 10,
            "{lang}: found the exports: {exported:?}"
        );
    };
    // JavaScript: the exported functions and classes, and Bucket's methods.
    let (weir_js, state_js) = (read("sdk/js/weir.js"), read("sdk/js/state.js"));
    let mut js: Vec<String> = [&weir_js, &state_js]
        .iter()
        .flat_map(|t| {
            words_after(t, "export function ")
                .into_iter()
                .chain(words_after(t, "export class "))
        })
        .map(str::to_owned)
        .collect();
    let bucket = &state_js[state_js.find("export class Bucket").unwrap()..];
    let bucket = &bucket[..bucket.find("\n}\n").unwrap()];
    js.extend(
        words_after(bucket, "  ")
            .into_iter()
            .filter(|m| *m != "constructor" && bucket.contains(&format!("\n  {m}(")))
            .map(|m| format!("Bucket.{m}")),
    );
    js.retain(|n| n != "Bucket");
    check("js", "sdk/js/API.md", js);
    // Python: `__all__` of both modules, and Bucket's methods.
    let all = |text: &str| -> Vec<String> {
        let start = text.find("__all__ = [").expect("__all__") + 11;
        let end = start + text[start..].find(']').unwrap();
        text[start..end]
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let (init_py, state_py) = (
        read("sdk/python/weir/__init__.py"),
        read("sdk/python/weir/state.py"),
    );
    let mut py = all(&init_py);
    py.extend(all(&state_py));
    let bucket = &state_py[state_py.find("class Bucket").unwrap()..];
    let bucket = &bucket[..bucket.find("\n\n\n").unwrap_or(bucket.len())];
    py.extend(
        words_after(bucket, "    def ")
            .into_iter()
            .map(|m| format!("Bucket.{m}")),
    );
    py.retain(|n| n != "Bucket");
    check("python", "sdk/python/weir/API.md", py);
    // C: every function weir.h declares.
    let header = read("sdk/c/weir.h");
    let c: Vec<String> = header
        .lines()
        .filter(|l| {
            !l.starts_with(' ')
                && !l.starts_with("typedef")
                && !l.starts_with('#')
                && !l.starts_with('/')
        })
        .filter_map(|l| {
            let open = l.find('(')?;
            let name = l[..open].rsplit([' ', '*']).next()?;
            name.starts_with("weir_").then(|| name.to_owned())
        })
        .collect();
    check("c", "sdk/c/API.md", c);
    // Go: the reference is `go doc`, its examples `sdk/go/example_test.go` (which `go test`
    // runs): every exported function and method has one (`ExampleName`, `ExampleType_Method`).
    for (dir, min) in [
        ("sdk/go", 20),
        ("sdk/go/exactjson", 1),
        ("sdk/go/jsonobject", 7),
    ] {
        check_go_examples(dir, min);
    }
}

/// Every exported function and method of the Go package in `dir` has an example in its
/// `example_test.go` (`ExampleName`, `ExampleType_Method`); at least `min` exports found.
fn check_go_examples(dir: &str, min: usize) {
    let mut go = Vec::new();
    for entry in std::fs::read_dir(root().join(dir)).unwrap() {
        let file = entry.unwrap().path();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".go") || name.ends_with("_test.go") {
            continue;
        }
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let Some(rest) = line.strip_prefix("func ") else {
                continue;
            };
            // `func (b *Bucket) Get(` → Bucket_Get; `func Keep(` → Keep.
            let (receiver, rest) = match rest.strip_prefix('(') {
                Some(r) => {
                    let close = r.find(')').unwrap();
                    let ty = r[..close].rsplit([' ', '*']).next().unwrap();
                    (format!("{ty}_"), r[close + 1..].trim_start())
                }
                None => (String::new(), rest),
            };
            let f = rest.split(['(', '[']).next().unwrap();
            if f.starts_with(char::is_uppercase)
                && (receiver.is_empty() || receiver.starts_with(char::is_uppercase))
            {
                go.push(format!("{receiver}{f}"));
            }
        }
    }
    let examples = std::fs::read_to_string(root().join(dir).join("example_test.go")).unwrap();
    let missing: Vec<_> = go
        .iter()
        .filter(|f| !examples.contains(&format!("func Example{f}()")))
        .collect();
    assert!(
        missing.is_empty(),
        "go: {dir}/example_test.go has no example of {missing:?}"
    );
    assert!(go.len() >= min, "go: found the exports of {dir}: {go:?}");
}
