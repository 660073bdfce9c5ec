//! A running pipeline under a continuous stream: hot swap (file watch and SIGHUP), a refused
//! reload, and SIGTERM draining.

use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_tests::{plugins, scratch, Scratch};

struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    log_path: std::path::PathBuf,
    next: usize,
}

impl Live {
    fn start(s: &Scratch, watch: bool) -> Live {
        std::fs::copy(plugins::MISBEHAVE, s.path("stage.wasm")).unwrap();
        s.write(
            "p.yaml",
            &format!(
                "source:\n  stdin: {{}}\nstages:\n  - name: swappable\n    plugin: stage.wasm\n    config:\n      set.by: v2\nsink:\n  jsonl: {{ path: out.jsonl }}\nbatch:\n  max_messages: 8\n  linger: 1ms\nruntime:\n  report: report.json\n  watch_plugins: {watch}\n"
            ),
        );
        let log_path = s.path("weir.log");
        let mut child = s
            .weir(&["run", "p.yaml"])
            .stdin(Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let live = Live {
            child,
            stdin,
            log_path,
            next: 0,
        };
        let t = Instant::now();
        while !live.log().contains("pipeline running") {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "never started:\n{}",
                live.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        live
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Writes `n` messages `{"n": i}`, a millisecond apart.
    fn feed(&mut self, n: usize) {
        let stdin = self.stdin.as_mut().unwrap();
        for _ in 0..n {
            let sent = writeln!(stdin, "{{\"value\": {{\"n\": {}}}}}", self.next)
                .and_then(|()| stdin.flush());
            if let Err(e) = sent {
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "weir stopped reading ({e}), {:?}:\n{}",
                    self.child.try_wait(),
                    self.log()
                );
            }
            self.next += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Feeds messages until the log shows `what` (at most 60 s).
    fn feed_until_logged(&mut self, what: &str) {
        let t = Instant::now();
        while !self.log().contains(what) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "never logged {what:?}:\n{}",
                self.log()
            );
            self.feed(5);
        }
    }

    fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let log = self.log();
        (status, log)
    }
}

fn replace_atomically(s: &Scratch, from: &str) {
    std::fs::copy(from, s.path("stage.wasm.tmp")).unwrap();
    std::fs::rename(s.path("stage.wasm.tmp"), s.path("stage.wasm")).unwrap();
}

/// Every message 0..n exactly once and in order; returns which were processed by v2.
fn versions(s: &Scratch, n: usize) -> Vec<bool> {
    let out = s.read_jsonl("out.jsonl");
    assert_eq!(out.len(), n, "no message lost or duplicated");
    out.iter()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line["value"].as_str().unwrap()).unwrap();
            assert_eq!(v["n"], i, "order kept");
            v.get("by").is_some_and(|b| b == "v2")
        })
        .collect()
}

#[test]
fn replacing_the_plugin_file_swaps_at_a_batch_boundary_without_loss() {
    let s = scratch!();
    let mut live = Live::start(&s, true);
    live.feed(100);
    replace_atomically(&s, plugins::JSON_ENRICH);
    live.feed_until_logged("plugin swapped");
    live.feed(100);
    let n = live.next;
    let (status, log) = live.finish();
    assert!(status.success(), "{log}");
    let v = versions(&s, n);
    let first_v2 = v
        .iter()
        .position(|b| *b)
        .expect("some messages ran on the new version");
    assert!(first_v2 >= 100, "nothing before the swap ran on v2");
    assert!(
        v[first_v2..].iter().all(|b| *b),
        "after the swap every message runs on v2, once"
    );
    let rep = s.report();
    assert_eq!(rep["stages"][0]["swaps"], 1);
    assert_eq!(rep["reloads"]["published"], 1);
    assert!(log.contains("new plugin version published"), "{log}");
}

#[test]
fn a_broken_replacement_is_refused_and_the_old_version_keeps_running() {
    let s = scratch!();
    let mut live = Live::start(&s, true);
    live.feed(50);
    std::fs::write(s.path("stage.wasm.tmp"), b"\0asm garbage").unwrap();
    std::fs::rename(s.path("stage.wasm.tmp"), s.path("stage.wasm")).unwrap();
    live.feed_until_logged("reload refused");
    // A component of the wrong world is refused too.
    replace_atomically(&s, plugins::WRONG_WORLD);
    live.feed_until_logged("is not a Weir stage");
    live.feed(50);
    let n = live.next;
    let (status, log) = live.finish();
    assert!(status.success(), "{log}");
    assert!(versions(&s, n).iter().all(|b| !b), "all on the old version");
    let rep = s.report();
    assert_eq!(rep["stages"][0]["swaps"], 0);
    assert!(rep["reloads"]["refused"].as_u64().unwrap() >= 2);
    assert_eq!(rep["reloads"]["published"], 0);
}

#[test]
fn sighup_reloads_when_watching_is_off() {
    let s = scratch!();
    let mut live = Live::start(&s, false);
    live.feed(50);
    replace_atomically(&s, plugins::JSON_ENRICH);
    live.feed(100);
    assert!(
        !live.log().contains("plugin swapped"),
        "no watcher: no swap yet"
    );
    live.signal("-HUP");
    live.feed_until_logged("plugin swapped");
    live.feed(20);
    let n = live.next;
    let (status, log) = live.finish();
    assert!(status.success(), "{log}");
    let v = versions(&s, n);
    assert!(v[..150].iter().all(|b| !b) && v[n - 20..].iter().all(|b| *b));
    assert_eq!(s.report()["stages"][0]["swaps"], 1);
}

#[test]
fn sigterm_drains_what_was_read_and_exits_cleanly() {
    let s = scratch!();
    let mut live = Live::start(&s, false);
    live.feed(200);
    let t = Instant::now();
    while s.read_jsonl("out.jsonl").len() < 200 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "messages never came out"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    live.signal("-TERM");
    // stdin stays open: the drain must not wait for end of input.
    let status = live.child.wait().unwrap();
    assert!(status.success(), "{}", live.log());
    let rep = s.report();
    assert_eq!(rep["state"], "interrupted");
    assert_eq!(rep["read"], rep["written"], "everything read was written");
    assert_eq!(rep["written"], 200);
    versions(&s, 200);
}
