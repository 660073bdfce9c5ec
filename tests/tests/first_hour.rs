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
    for verb in ["./build.sh", "weir test", "weir run"] {
        assert!(
            seen.iter().any(|v| v == verb),
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
