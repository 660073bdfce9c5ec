//! Helpers for Weir's integration tests: plugin paths, a scratch folder per test, and a runner
//! for the real `weir` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Paths of the plugin components built from `plugins/` by this crate's build script.
pub mod plugins {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}

/// The `weir` binary of the same profile as the running test.
pub fn weir_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/weir
    let bin = exe.parent().and_then(Path::parent).expect("target folder").join("weir");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` so the binary is built",
        bin.display()
    );
    bin
}

/// A scratch folder with a private compiled-code cache.
pub struct Scratch {
    /// The folder (deleted on drop).
    pub dir: tempfile::TempDir,
}

impl Scratch {
    /// A new empty folder.
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A path inside the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a file and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write scratch file");
        p
    }

    /// Writes JSONL input lines.
    pub fn jsonl(&self, name: &str, lines: &[Value]) -> PathBuf {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.write(name, &text)
    }

    /// A `weir` command with this folder's cache and the given arguments.
    pub fn weir(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(weir_bin());
        cmd.args(args)
            .env("WEIR_CACHE_DIR", self.path("cache"))
            .env("WEIR_LOG", "info")
            .current_dir(self.dir.path());
        cmd
    }

    /// Runs `weir` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.weir(args).output().expect("running weir")
    }

    /// Reads a JSONL output file (missing file: no lines).
    pub fn read_jsonl(&self, name: &str) -> Vec<Value> {
        read_jsonl(&self.path(name))
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads a JSONL file (missing file: no lines).
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(t) => t.lines().map(|l| serde_json::from_str(l).expect("output line is JSON")).collect(),
        Err(_) => Vec::new(),
    }
}

/// stderr of a finished command, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A pipeline YAML with a JSONL source `in.jsonl`, sink `out.jsonl`, reject `rejected.jsonl`,
/// report `report.json`, and these stages (YAML list items, already indented by two spaces).
pub fn pipeline_yaml(stages: &str, extra: &str) -> String {
    format!(
        "name: test\nsource:\n  jsonl:\n    path: in.jsonl\n    topic: in\nstages:\n{stages}\nsink:\n  jsonl:\n    path: out.jsonl\nreject:\n  jsonl:\n    path: rejected.jsonl\nruntime:\n  report: report.json\n{extra}"
    )
}

/// One stage as a YAML list item.
pub fn stage(name: &str, plugin: &str, config: &[(&str, &str)]) -> String {
    let mut s = format!("  - name: {name}\n    plugin: {plugin}\n");
    if !config.is_empty() {
        s.push_str("    config:\n");
        for (k, v) in config {
            s.push_str(&format!("      {k}: {v:?}\n"));
        }
    }
    s
}
