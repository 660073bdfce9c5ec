//! Helpers for Weir's integration tests: plugin paths, a scratch folder per test, and a runner
//! for the real `weir` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub mod apache;
pub mod evidence;
pub mod kafka;
pub mod languages;
pub mod secure;

/// Paths of the plugin components built from `plugins/` by this crate's build script.
pub mod plugins {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}

/// A [`Scratch`] folder for the `weir` binary that cargo built for this test target.
/// (The integration tests are targets of the `weir` package, so cargo rebuilds the binary
/// before running them.)
#[macro_export]
macro_rules! scratch {
    () => {
        $crate::Scratch::new(env!("CARGO_BIN_EXE_weir"))
    };
}

/// A scratch folder with a private compiled-code cache.
pub struct Scratch {
    /// The folder (deleted on drop, unless the test failed: then it stays, named on stderr,
    /// with every log and file of the run).
    pub dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Scratch {
    /// A new empty folder, running `bin` as `weir`.
    pub fn new(bin: &str) -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
            bin: PathBuf::from(bin),
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
        let mut cmd = Command::new(&self.bin);
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

    /// The JSON run report `report.json` (what [`pipeline_yaml`] configures).
    pub fn report(&self) -> Value {
        let text = std::fs::read_to_string(self.path("report.json")).expect("report written");
        serde_json::from_str(&text).expect("report is JSON")
    }

    /// The reject reasons in `rejected.jsonl`, in order.
    pub fn reject_reasons(&self) -> Vec<String> {
        self.read_jsonl("rejected.jsonl")
            .iter()
            .map(|l| {
                l["reject"]["reason"]
                    .as_str()
                    .expect("reject reason")
                    .to_owned()
            })
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "scratch folder of the failed test kept: {}",
                self.dir.path().display()
            );
        }
    }
}

/// Reads a JSONL file (missing file: no lines).
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(t) => json_lines(t.as_bytes()),
        Err(_) => Vec::new(),
    }
}

/// The JSON lines of a command's output (`weir test`, a stdout sink).
pub fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// The `outcome` of each of `weir test`'s answers.
pub fn outcomes(answers: &[Value]) -> Vec<&str> {
    answers
        .iter()
        .map(|a| a["outcome"].as_str().expect("an answer has an outcome"))
        .collect()
}

/// The `value` of each JSONL line, as text (a non-string value reads as "").
pub fn values(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["value"].as_str().unwrap_or("").to_owned())
        .collect()
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

/// A free loopback port for a listener a test starts (a broker, a metrics endpoint).
///
/// Chosen at random below the kernel's ephemeral range, and never the same twice in one
/// process. A port the kernel hands out (binding port 0) is an ephemeral one, which every
/// client connection of every test running beside this one can take as its own port between
/// the moment it is let go and the moment the broker binds it, or while a broker is down
/// between restarts: Kafka then fails with `Unable to start acceptor`.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, ephemeral.max(10_001));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let port = lo + (h.finish() % u64::from(hi - lo)) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port in {lo}..{hi} after 1000 tries");
}

/// `GET path` on a local HTTP listener: status code and body.
pub fn scrape(port: u16, path: &str) -> (u16, String) {
    try_scrape(port, path).expect("metrics listener")
}

/// `GET path` on a local HTTP listener, or why not (not listening yet, connection reset).
pub fn try_scrape(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text)?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_owned();
    Ok((code, body))
}

/// The value of the first sample of metric `name` (with or without labels) in a scrape.
pub fn gauge(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Runs one of the repository's `scripts/ensure-*` installers and returns the `NAME=VALUE`
/// lines it prints (the tools' paths). Panics with its stderr when it fails: a missing tool is
/// a failure, never a skip.
pub fn script_vars(script: &str, args: &[&str]) -> std::collections::HashMap<String, String> {
    let o = Command::new(languages::root().join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running scripts/{script}: {e}"));
    assert!(o.status.success(), "scripts/{script}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
