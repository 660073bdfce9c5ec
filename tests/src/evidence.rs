//! What an end-to-end test saw, for its failure message: a test that fails says how many
//! inputs came out and which did not (or came out twice), where the group's offsets stand,
//! how far each topic got, and the end of every log of the run (each `weir` process's, and the
//! broker's). One helper, so every Kafka test explains itself the same way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::kafka::Broker;
use crate::Scratch;

/// Lines of each log shown.
const TAIL: usize = 40;
/// Keys shown of what is missing or duplicated.
const SAMPLE: usize = 10;

/// How the inputs `expected` compare with what came out (`seen`: key → copies): counts, and a
/// sample of what is lost and what is duplicated.
pub fn delivery(expected: &[String], seen: &BTreeMap<String, usize>) -> String {
    let lost: Vec<&String> = expected.iter().filter(|k| !seen.contains_key(*k)).collect();
    let dups: Vec<(&String, &usize)> = seen.iter().filter(|(_, c)| **c > 1).collect();
    let unexpected = seen
        .keys()
        .filter(|k| !expected.contains(k))
        .take(SAMPLE)
        .collect::<Vec<_>>();
    let mut out = format!(
        "{} inputs, {} distinct came out ({} records); {} lost, {} duplicated",
        expected.len(),
        seen.len(),
        seen.values().sum::<usize>(),
        lost.len(),
        dups.len()
    );
    if !lost.is_empty() {
        let _ = write!(
            out,
            "\n  lost (first {SAMPLE}): {:?}",
            &lost[..lost.len().min(SAMPLE)]
        );
    }
    if !dups.is_empty() {
        let _ = write!(
            out,
            "\n  duplicated (first {SAMPLE}, key and copies): {:?}",
            &dups[..dups.len().min(SAMPLE)]
        );
    }
    if !unexpected.is_empty() {
        let _ = write!(out, "\n  not an input (first {SAMPLE}): {unexpected:?}");
    }
    out
}

/// Where a run stands on `broker`: the group's committed offsets on the input topic, the
/// records per partition of every topic named, and the tail of every `*.log` in the scratch
/// folder and of the broker's log.
pub fn state(
    broker: &Broker,
    s: &Scratch,
    group: &str,
    input: (&str, i32),
    topics: &[(&str, i32)],
) -> String {
    let mut out = String::new();
    let (topic, parts) = input;
    let _ = write!(
        out,
        "group `{group}` committed on `{topic}`: {:?}",
        broker.committed(group, topic, parts)
    );
    for (t, p) in std::iter::once(&input).chain(topics) {
        let _ = write!(
            out,
            "\nrecords per partition of `{t}` (read_committed): {:?}",
            crate::kafka::high_watermarks(broker, t, *p)
        );
    }
    let mut logs: Vec<_> = std::fs::read_dir(s.dir.path())
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    for log in logs {
        out.push_str(&tail(&log));
    }
    for log in broker.logs() {
        out.push_str(&tail(&log));
    }
    out
}

/// Waits (at most 60 s) until `group`'s committed offsets on `input` differ from `before`;
/// otherwise fails saying what `what` was waiting for (a log of the scratch folder: its tail
/// comes first) and [`state`] with `outputs`.
pub fn wait_commit_progress(
    broker: &Broker,
    s: &Scratch,
    group: &str,
    input: (&str, i32),
    outputs: &[(&str, i32)],
    before: &[Option<i64>],
    what: &str,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while broker.committed(group, input.0, input.1) == before {
        if std::time::Instant::now() >= deadline {
            // The log waited on first: a run with several members prints many, and a long
            // failure message is cut.
            let waited = s.path(what);
            let waited = if waited.exists() {
                tail(&waited)
            } else {
                String::new()
            };
            panic!(
                "no commit after {what}, within 60 s:{waited}\n--- the whole run ---\n{}",
                state(broker, s, group, input, outputs)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The last `TAIL` lines of a file, under a heading naming it.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(TAIL);
    // Weir's own warnings and errors from the whole log first (what went wrong is often
    // long before the end), then the tail.
    let warned: Vec<&str> = lines[..from]
        .iter()
        .filter(|l| l.contains(" WARN weir::") || l.contains(" ERROR weir::"))
        .copied()
        .collect();
    let warned = &warned[warned.len().saturating_sub(4 * TAIL)..];
    format!(
        "\n--- {} (Weir's last {} warnings before the tail) ---\n{}\n--- {} (last {} of {} lines) ---\n{}",
        path.display(),
        warned.len(),
        warned.join("\n"),
        path.display(),
        lines.len() - from,
        lines.len(),
        lines[from..].join("\n")
    )
}
