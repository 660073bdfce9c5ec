//! `delivery: exactly-once` end to end: the real `weir` binary against a real Kafka-protocol
//! broker over TCP (Apache Kafka, one node), real components, real signals and `kill -9`. A `read_committed`
//! reader (the default of librdkafka, which the test reader is) must find every input exactly
//! once in the outputs and the dead-letter topic together: 0 duplicates, 0 lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_tests::kafka::{
    high_watermarks, kafka, kafka_pipeline, log_shows, records, sigterm, spawn_weir, trickle,
    wait_ok, Broker, Protocol, Running,
};
use weir_tests::plugins::MISBEHAVE;
use weir_tests::{evidence, scratch, stage, Scratch};

const PARTS: i32 = 3;

/// Input values: every 10th is rejected by the stage (to the dead-letter topic).
fn value(i: usize) -> String {
    if i % 10 == 7 {
        "reject".into()
    } else {
        format!("v-{i}")
    }
}

fn pipeline(b: &Broker, s: &Scratch, group: &str) {
    pipeline_with(b, s, group, "exactly-once", Protocol::Classic);
}

fn pipeline_with(b: &Broker, s: &Scratch, group: &str, delivery: &str, protocol: Protocol) {
    let stages = stage("m", MISBEHAVE, &[]);
    s.write(
        "p.yaml",
        &protocol.apply(&kafka_pipeline(
            &b.bootstrap,
            group,
            &stages,
            "",
            &format!("delivery: {delivery}\n"),
        )),
    );
}

/// How often each input key is in `out` and `dlq` together (read_committed).
fn copies(b: &Broker) -> BTreeMap<String, usize> {
    copies_in(b, OUTPUTS)
}

/// The exactly-once pipelines' output topics (the sink's and the dead-letter topic).
const OUTPUTS: (&str, &str) = ("out", "dlq");

/// How often each input key is in these output topics together (read_committed).
fn copies_in(b: &Broker, (out, dlq): (&str, &str)) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for r in b.read(out).into_iter().chain(b.read(dlq)) {
        *seen.entry(r.key).or_default() += 1;
    }
    seen
}

/// What the run left, for a failure message: the inputs against `out` + `dlq`
/// (read_committed), the group's offsets, the topics, and the end of every log.
fn explain(b: &Broker, s: &Scratch, group: &str, n: usize) -> String {
    explain_in(b, s, group, n, OUTPUTS)
}

/// [`explain`] for these output topics.
fn explain_in(b: &Broker, s: &Scratch, group: &str, n: usize, outputs: (&str, &str)) -> String {
    let expected: Vec<String> = (0..n).map(|i| format!("k-{i}")).collect();
    format!(
        "{}\n{}",
        evidence::delivery(&expected, &copies_in(b, outputs)),
        evidence::state(
            b,
            s,
            group,
            ("in", PARTS),
            &[(outputs.0, PARTS), (outputs.1, 1)]
        )
    )
}

/// Waits (up to 90 s) until every one of the `n` inputs is visible.
fn wait_all_visible(b: &Broker, s: &Scratch, group: &str, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while copies(b).len() != n {
        assert!(
            Instant::now() < deadline,
            "{what}: not every input came out within 90 s: {}",
            explain(b, s, group, n)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// 0 duplicates, 0 lost.
fn assert_exactly_once(b: &Broker, s: &Scratch, group: &str, n: usize) {
    let seen = copies(b);
    let lost = (0..n).any(|i| !seen.contains_key(&format!("k-{i}")));
    let dups = seen.values().any(|c| *c > 1);
    assert!(
        !lost && !dups,
        "not exactly once: {}",
        explain(b, s, group, n)
    );
}

/// Waits until the group has committed something new (a transaction of this run).
fn wait_commit_progress(b: &Broker, group: &str, before: &[Option<i64>], s: &Scratch, log: &str) {
    let outputs = [("out", PARTS), ("dlq", 1)];
    evidence::wait_commit_progress(b, s, group, ("in", PARTS), &outputs, before, log);
}

/// `n` inputs trickling into `in` in `chunks` pieces, one every 100 ms, and a run of the
/// pipeline as `group` (its log in `log`) once it has committed.
fn committing(
    b: &Broker,
    group: &str,
    n: usize,
    chunks: usize,
    log: &str,
) -> (std::thread::JoinHandle<()>, Scratch, Running) {
    let producer = trickle(
        b,
        "in",
        records(n, PARTS, value),
        chunks,
        Duration::from_millis(100),
    );
    let s = scratch!();
    pipeline(b, &s, group);
    let c = spawn_weir(&s, "p.yaml", log);
    wait_commit_progress(b, group, &[None, None, None], &s, log);
    (producer, s, c)
}

#[test]
fn on_kafka_a_sigterm_mid_stream_and_a_restart_deliver_every_input_exactly_once() {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 2000;
    let (producer, s, c) = committing(&b, "g-eos-term", n, 20, "run-0.log");
    sigterm(&c);
    wait_ok(c, "the first run", &s, "run-0.log");
    producer.join().expect("producer");
    let c = spawn_weir(&s, "p.yaml", "run-1.log");
    wait_all_visible(&b, &s, "g-eos-term", n, "the second run");
    sigterm(&c);
    wait_ok(c, "the second run", &s, "run-1.log");
    assert_exactly_once(&b, &s, "g-eos-term", n);
    let ends: Vec<Option<i64>> = high_watermarks(&b, "in", PARTS)
        .into_iter()
        .map(Some)
        .collect();
    assert_eq!(b.committed("g-eos-term", "in", PARTS), ends);
}

#[test]
fn on_kafka_kill_9_at_several_points_then_a_restart_delivers_every_input_exactly_once() {
    let (b, s, n) = kill_9_three_times("exactly-once", Protocol::Classic);
    assert_exactly_once(&b, &s, "g-eos-kill", n);
}

/// The same under the consumer group protocol (KIP-848): the broker assigns, and a killed
/// member's partitions move when its session (6 s) ends.
#[test]
fn on_kafka_kip848_kill_9_at_several_points_then_a_restart_delivers_every_input_exactly_once() {
    let (b, s, n) = kill_9_three_times("exactly-once", Protocol::Consumer);
    assert_exactly_once(&b, &s, "g-eos-kill", n);
}

/// The control: the same kills at-least-once duplicate outputs (so the test above has teeth).
#[test]
fn on_kafka_the_same_kills_at_least_once_leave_duplicates() {
    let (b, s, n) = kill_9_three_times("at-least-once", Protocol::Classic);
    let seen = copies(&b);
    assert_eq!(seen.len(), n, "lost: {}", explain(&b, &s, "g-eos-kill", n));
    let dups = seen.values().filter(|c| **c > 1).count();
    assert!(
        dups > 0,
        "no duplicate: the kills did not land on uncommitted work"
    );
}

/// A member joins while the member before it, killed, is still in its session (6 s here): it
/// must end up owning the dead member's partitions. (On tansu this found a coordinator bug, a
/// joiner that owned nothing for ever: issue 28. The joiner starts 3.2 s after the kill, so it
/// joins and syncs while the dead member's session runs out.)
#[test]
fn on_kafka_a_member_joining_while_a_killed_one_is_in_its_session_gets_its_partitions() {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let group = "g-eos-heir";
    let n = 600;
    let all = records(n, PARTS, value);
    b.produce("in", &all[..n / 2]);
    let s = scratch!();
    pipeline(&b, &s, group);
    let mut c = spawn_weir(&s, "p.yaml", "killed.log");
    wait_commit_progress(&b, group, &[None, None, None], &s, "killed.log");
    c.kill().expect("kill -9");
    c.wait().expect("reaped");
    // Inputs only a member owning the partitions after the kill can deliver.
    b.produce("in", &all[n / 2..]);
    std::thread::sleep(Duration::from_millis(3200));
    let c = spawn_weir(&s, "p.yaml", "heir.log");
    wait_all_visible(&b, &s, group, n, "the member that joined after the kill");
    sigterm(&c);
    wait_ok(c, "the member that joined after the kill", &s, "heir.log");
    assert_exactly_once(&b, &s, group, n);
}

#[test]
fn on_kafka_offsets_a_killed_member_left_in_its_open_transaction_do_not_hold_up_the_next_one() {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 300;
    b.produce("in", &records(n, PARTS, value));
    // The partition's transactional id (`weir.<group>.<topic>.<partition>`): the next owner's
    // producer fences it, which aborts the transaction and its offsets.
    let group = "g-pending";
    let pending = b.open_transaction_with_offsets(&format!("weir.{group}.in.0"), group, "in", 50);
    let asked = Instant::now();
    assert_eq!(b.committed(group, "in", PARTS), [None, None, None]);
    let asked = asked.elapsed();
    assert!(
        asked < Duration::from_secs(5),
        "the committed offsets took {asked:?} to read while a transaction holds some"
    );
    let s = scratch!();
    pipeline(&b, &s, group);
    let started = Instant::now();
    let c = spawn_weir(&s, "p.yaml", "run.log");
    wait_all_visible(&b, &s, group, n, "the member after the killed one");
    let took = started.elapsed();
    sigterm(&c);
    wait_ok(c, "the member after the killed one", &s, "run.log");
    assert_exactly_once(&b, &s, group, n);
    // The open transaction would last ten minutes: only its fencing ends it this early.
    assert!(
        took < Duration::from_secs(30),
        "every input came out {took:?} after the start: {}",
        evidence::tail(&s.path("run.log"))
    );
    drop(pending);
}

#[test]
fn on_kafka_a_start_position_never_moves_a_partition_whose_committed_offset_a_transaction_holds() {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let group = "g-pending-start";
    let s = scratch!();
    let stages = stage("m", MISBEHAVE, &[]);
    // Where a partition without a committed offset starts: its first offset.
    s.write(
        "p.yaml",
        &kafka_pipeline(
            &b.bootstrap,
            group,
            &stages,
            "    start: \"+0\"\n",
            "delivery: exactly-once\n",
        ),
    );
    let n = 300;
    b.produce("in", &records(n, PARTS, value));
    let c = spawn_weir(&s, "p.yaml", "run-0.log");
    wait_all_visible(&b, &s, group, n, "the first run");
    sigterm(&c);
    wait_ok(c, "the first run", &s, "run-0.log");
    let all = records(2 * n, PARTS, value);
    b.produce("in", &all[n..]);
    // A member killed inside its commit: the committed offsets are not stable until the next
    // owner fences it, and a start position must not take their place meanwhile.
    let pending = b.open_transaction_with_offsets(&format!("weir.{group}.in.0"), group, "in", 150);
    let c = spawn_weir(&s, "p.yaml", "run-1.log");
    wait_all_visible(&b, &s, group, 2 * n, "the run after the killed member");
    sigterm(&c);
    wait_ok(c, "the run after the killed member", &s, "run-1.log");
    assert_exactly_once(&b, &s, group, 2 * n);
    drop(pending);
}

/// Killed during start-up, then twice with work produced and not committed, while the input
/// trickles in; then a run until every input is visible and a SIGTERM.
fn kill_9_three_times(delivery: &str, protocol: Protocol) -> (Broker, Scratch, usize) {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 3000;
    let producer = trickle(
        &b,
        "in",
        records(n, PARTS, value),
        60,
        Duration::from_millis(100),
    );
    let s = scratch!();
    pipeline_with(&b, &s, "g-eos-kill", delivery, protocol);
    // Commits every second: each kill lands with outputs produced and not committed.
    let yaml = std::fs::read_to_string(s.path("p.yaml")).expect("yaml");
    s.write(
        "p.yaml",
        &yaml.replace("commit_interval: 100ms", "commit_interval: 1s"),
    );
    for i in 0..3 {
        let log = format!("run-{i}.log");
        let before = b.committed("g-eos-kill", "in", PARTS);
        let mut c = spawn_weir(&s, "p.yaml", &log);
        if i > 0 {
            wait_commit_progress(&b, "g-eos-kill", &before, &s, &log);
            std::thread::sleep(Duration::from_millis(600));
        } else {
            // During start-up.
            std::thread::sleep(Duration::from_millis(150));
        }
        c.kill().expect("kill -9");
        c.wait().expect("reaped");
    }
    producer.join().expect("producer");
    let c = spawn_weir(&s, "p.yaml", "last.log");
    wait_all_visible(&b, &s, "g-eos-kill", n, "the last run");
    sigterm(&c);
    wait_ok(c, "the last run", &s, "last.log");
    (b, s, n)
}

/// Runs weir to its exit (it must stop by itself) and returns the report.
fn run_to_exit(
    s: &Scratch,
    c: weir_tests::kafka::Running,
    log: &str,
) -> (Option<i32>, serde_json::Value) {
    let mut c = c;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = c.try_wait().expect("wait") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "weir did not stop: {}",
            std::fs::read_to_string(s.path(log)).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), s.report())
}

#[test]
fn on_kafka_a_stage_fail_aborts_its_transaction_and_a_restart_meets_the_message_again() {
    let b = kafka(&[("in", 1), ("out", 1), ("dlq", 1)]);
    let s = scratch!();
    pipeline(&b, &s, "g-eos-fail");
    let first: Vec<(i32, String, String)> =
        (0..100).map(|i| (0, format!("k-{i}"), value(i))).collect();
    b.produce("in", &first);
    let c = spawn_weir(&s, "p.yaml", "run-0.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.committed("g-eos-fail", "in", 1) != [Some(100)] {
        assert!(
            Instant::now() < deadline,
            "the first 100 were not committed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One batch with a `fail` in its middle: the transaction holding 100..149 aborts.
    let rest: Vec<(i32, String, String)> = (100..200)
        .map(|i| {
            (
                0,
                format!("k-{i}"),
                if i == 150 { "fail".into() } else { value(i) },
            )
        })
        .collect();
    b.produce("in", &rest);
    let mut first_run = Some(c);
    for run in 0..2 {
        let log = format!("run-{run}.log");
        let c = match first_run.take() {
            Some(c) => c,
            None => spawn_weir(&s, "p.yaml", &log),
        };
        let (code, report) = run_to_exit(&s, c, &log);
        assert_eq!(code, Some(1), "run {run}: {report}");
        assert_eq!(report["failure"]["offset"], 150, "run {run}: {report}");
        assert!(
            report["transactions"]["aborted"].as_u64() >= Some(1),
            "run {run}: {report}"
        );
        let committed = b.committed("g-eos-fail", "in", 1)[0].expect("committed");
        assert!((100..=150).contains(&committed), "{committed}");
        // Exactly the inputs below the committed offset are visible, once each.
        let seen = copies(&b);
        for i in 0..200 {
            let n = seen.get(&format!("k-{i}")).copied().unwrap_or(0);
            let want = usize::from(i < committed as usize);
            assert_eq!(
                n, want,
                "run {run}: k-{i} visible {n} times (committed {committed})"
            );
        }
    }
}

/// Sends a signal by name (`STOP`, `CONT`) to a process.
fn signal(c: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &c.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig}");
}

#[test]
fn on_kafka_three_processes_joining_and_leaving_one_group_deliver_every_input_exactly_once() {
    three_processes_joining_and_leaving(Protocol::Classic);
}

/// The same under the consumer group protocol (KIP-848).
#[test]
fn on_kafka_kip848_three_processes_joining_and_leaving_one_group_deliver_every_input_exactly_once()
{
    three_processes_joining_and_leaving(Protocol::Consumer);
}

fn three_processes_joining_and_leaving(protocol: Protocol) {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 3000;
    let producer = trickle(
        &b,
        "in",
        records(n, PARTS, value),
        40,
        Duration::from_millis(100),
    );
    let s = scratch!();
    pipeline_with(&b, &s, "g-eos-group", "exactly-once", protocol);
    let mut members = Vec::new();
    for i in 0..3 {
        let log = format!("member-{i}.log");
        let before = b.committed("g-eos-group", "in", PARTS);
        members.push((spawn_weir(&s, "p.yaml", &log), log.clone()));
        wait_commit_progress(&b, "g-eos-group", &before, &s, &log);
    }
    // The group runs the protocol asked for, as Kafka's own tool sees it.
    let want = match protocol {
        Protocol::Classic => "Classic",
        Protocol::Consumer => "Consumer",
    };
    assert_eq!(b.group_type("g-eos-group"), want);
    // Two leave mid-stream (their partitions move to the one that stays).
    for _ in 0..2 {
        let (c, log) = members.remove(0);
        sigterm(&c);
        wait_ok(c, "a leaving member", &s, &log);
    }
    producer.join().expect("producer");
    let (c, log) = members.remove(0);
    wait_all_visible(&b, &s, "g-eos-group", n, "the last member");
    sigterm(&c);
    wait_ok(c, "the last member", &s, &log);
    assert_exactly_once(&b, &s, "g-eos-group", n);
}

/// A member paused (SIGSTOP) past its session, with transactions open, while another takes
/// its partitions: when it wakes, its transactions are fenced (nothing of them visible), it
/// lets the partitions go and joins again; no input is doubled or lost. (It used to exit 1.)
#[test]
fn on_kafka_a_zombie_paused_past_its_session_is_fenced_and_adds_no_duplicate() {
    zombie_fenced(Protocol::Classic);
}

/// The same under the consumer group protocol (KIP-848): the broker ends the paused
/// member's session and hands its partitions on; its transactions are fenced all the same,
/// and it joins again.
#[test]
fn on_kafka_kip848_a_zombie_paused_past_its_session_is_fenced_and_adds_no_duplicate() {
    zombie_fenced(Protocol::Consumer);
}

fn zombie_fenced(protocol: Protocol) {
    let b = kafka(&[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 2000;
    let producer = trickle(
        &b,
        "in",
        records(n, PARTS, value),
        40,
        Duration::from_millis(150),
    );
    let s = scratch!();
    pipeline_with(&b, &s, "g-eos-zombie", "exactly-once", protocol);
    // The zombie's transactions stay open (a long commit interval): when it is paused it
    // holds produced, uncommitted outputs for all its partitions.
    let yaml = std::fs::read_to_string(s.path("p.yaml")).expect("yaml");
    s.write(
        "zombie.yaml",
        &yaml.replace("commit_interval: 100ms", "commit_interval: 60s"),
    );
    let zombie = spawn_weir(&s, "zombie.yaml", "zombie.log");
    assert!(
        log_shows(
            &s,
            "zombie.log",
            "partitions assigned",
            Duration::from_secs(60)
        ),
        "the zombie got no partitions"
    );
    std::thread::sleep(Duration::from_secs(1));
    // Paused past the session timeout (6 s in the test pipeline) with its transactions open.
    signal(&zombie, "STOP");
    let heir = spawn_weir(&s, "p.yaml", "heir.log");
    wait_commit_progress(&b, "g-eos-zombie", &[None, None, None], &s, "heir.log");
    signal(&zombie, "CONT");
    // The zombie cannot commit for partitions it lost: its transactions are fenced (nothing
    // of them visible), it lets the partitions go and joins the group again as a member like
    // any other.
    let deadline = Instant::now() + Duration::from_secs(60);
    let zombie_log = || std::fs::read_to_string(s.path("zombie.log")).unwrap_or_default();
    while !zombie_log().contains("fenced") {
        assert!(
            Instant::now() < deadline,
            "the zombie was not fenced within 60 s: {}",
            zombie_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    producer.join().expect("producer");
    wait_all_visible(&b, &s, "g-eos-zombie", n, "the heir and the zombie");
    for (c, log) in [(heir, "heir.log"), (zombie, "zombie.log")] {
        sigterm(&c);
        wait_ok(c, log, &s, log);
    }
    assert_exactly_once(&b, &s, "g-eos-zombie", n);
}

/// A fault of point 4 of issue 49, on three brokers.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `kill -9` the broker leading the source's partition 0 (and the sink's: the topics
    /// are made alike), started again once the run has committed without it.
    LeaderKilled,
    /// `kill -9` the broker coordinating the exactly-once pipeline's transactions of
    /// partition 0, mid-transaction, started again likewise.
    CoordinatorKilled,
    /// SIGTERM a broker (a controlled shutdown), started again 10 s later.
    BrokerRestarted,
    /// Every broker stopped (SIGTERM) for 20 s, then started again.
    ClusterDown,
}

/// Messages a second into the fault tests' source: `WEIR_FAULT_RATE`, 500 unless set
/// (`benches/scripts/faults.sh` sets 5,000).
fn fault_rate() -> usize {
    std::env::var("WEIR_FAULT_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

/// One of the pipelines the faults strike.
struct Faulted {
    delivery: &'static str,
    group: &'static str,
    outputs: (&'static str, &'static str),
    dir: Scratch,
    run: Running,
}

/// Point 4 of issue 49: on three brokers (replication factor 3, `min.insync.replicas` 2)
/// two pipelines on one input, one exactly-once and one at-least-once (their own groups and
/// output topics), run through four faults in turn, with input arriving throughout (at
/// [`fault_rate`], from before each fault until after it is over). After each, with Kafka's
/// own tools and a `read_committed` reader: every input so far is visible (exactly-once:
/// once), each group's committed offsets (`kafka-consumer-groups --describe`) are the ends of
/// the input, and no transaction is open (`kafka-transactions list`). Both run through all
/// four without a restart or an error exit. What each fault cost goes to stderr
/// (`benches/scripts/faults.sh` collects it).
#[test]
fn on_three_brokers_four_faults_lose_nothing_and_exactly_once_doubles_nothing() {
    let mut b = Broker::apache_cluster(
        3,
        &[
            ("in", PARTS),
            ("out", PARTS),
            ("dlq", 1),
            ("out-alo", PARTS),
            ("dlq-alo", 1),
        ],
    );
    let rate = fault_rate();
    let start =
        |delivery: &'static str, group: &'static str, outputs: (&'static str, &'static str)| {
            let dir = scratch!();
            pipeline_with(&b, &dir, group, delivery, Protocol::Classic);
            let yaml = std::fs::read_to_string(dir.path("p.yaml")).expect("yaml");
            // The session outlasts a coordinator's move (Kafka's default is 45 s).
            let yaml = yaml
                .replace("session.timeout.ms: 6000", "session.timeout.ms: 30000")
                .replace("topic: out\n", &format!("topic: {}\n", outputs.0))
                .replace("topic: dlq\n", &format!("topic: {}\n", outputs.1));
            dir.write("p.yaml", &yaml);
            let run = spawn_weir(&dir, "p.yaml", "run.log");
            Faulted {
                delivery,
                group,
                outputs,
                dir,
                run,
            }
        };
    let mut runs = [
        start("exactly-once", "g-faults-eos", OUTPUTS),
        start("at-least-once", "g-faults-alo", ("out-alo", "dlq-alo")),
    ];
    let mut sent = 0;
    let faults = [
        Fault::LeaderKilled,
        Fault::CoordinatorKilled,
        Fault::BrokerRestarted,
        Fault::ClusterDown,
    ];
    // `WEIR_FAULTS` (names, comma-separated) picks some of them.
    let picked = std::env::var("WEIR_FAULTS").unwrap_or_default();
    let faults = faults
        .into_iter()
        .filter(|f| picked.is_empty() || picked.split(',').any(|p| p.trim() == format!("{f:?}")));
    for fault in faults {
        // Input goes on arriving until after the fault is over.
        let seconds = match fault {
            Fault::LeaderKilled | Fault::CoordinatorKilled => 8,
            Fault::BrokerRestarted => 20,
            Fault::ClusterDown => 30,
        };
        let per_fault = rate * seconds;
        let batch: Vec<(i32, String, String)> = (sent..sent + per_fault)
            .map(|i| ((i as i32) % PARTS, format!("k-{i}"), value(i)))
            .collect();
        sent += per_fault;
        let producer = trickle(&b, "in", batch, seconds * 10, Duration::from_millis(100));
        // Mid-stream: each run has committed input of this batch.
        for r in &runs {
            let before = b.committed(r.group, "in", PARTS);
            wait_commit_progress(&b, r.group, &before, &r.dir, "run.log");
        }
        std::thread::sleep(Duration::from_secs(2));
        let (hit, back) = strike(&mut b, fault, "g-faults-eos");
        // The offsets as they stand once the fault has struck (reading them may take a
        // moment after a kill: that time counts in what is reported), then the next commit.
        let before: Vec<_> = runs
            .iter()
            .map(|r| b.committed(r.group, "in", PARTS))
            .collect();
        let first = first_commits(&b, &runs, &before, back);
        if let Some(node) = hit {
            b.cluster().restart(node);
        }
        producer.join().expect("producer");
        let input_ended = Instant::now();
        let what = format!("after {fault:?}");
        // The input itself holds each record once (its producer is idempotent): a duplicate
        // found later is Weir's.
        let written = weir_tests::kafka::high_watermarks(&b, "in", PARTS);
        assert_eq!(
            written.iter().sum::<i64>(),
            sent as i64,
            "{what}: the input topic holds {written:?} records, {sent} were sent"
        );
        // A cluster stopped for 20 s takes its time: the transactions it interrupted are
        // given up after 30 s and read again.
        let caught_up = all_visible(&b, &runs, sent, &what, input_ended);
        for ((r, first), caught_up) in runs.iter().zip(first).zip(caught_up) {
            if r.delivery == "exactly-once" {
                assert_exactly_once(&b, &r.dir, r.group, sent);
            }
            assert_settled(&b, r, &what);
            eprintln!(
                "fault {fault:?} ({}, {rate} msg/s): first commit {} ms after it; every input visible {} ms after the last was produced",
                r.delivery,
                first.as_millis(),
                caught_up.as_millis()
            );
        }
    }
    for r in &mut runs {
        assert!(
            r.run.try_wait().expect("wait").is_none(),
            "the {} run ended during the faults: {}",
            r.delivery,
            evidence::tail(&r.dir.path("run.log"))
        );
    }
    for r in runs {
        sigterm(&r.run);
        wait_ok(r.run, r.delivery, &r.dir, "run.log");
    }
}

/// When each run's group has committed past `before`, counted from `since` (up to 60 s),
/// all watched side by side.
fn first_commits(
    b: &Broker,
    runs: &[Faulted],
    before: &[Vec<Option<i64>>],
    since: Instant,
) -> Vec<Duration> {
    let mut at: Vec<Option<Duration>> = vec![None; runs.len()];
    while let Some(missing) = at.iter().position(Option::is_none) {
        for (i, r) in runs.iter().enumerate() {
            if at[i].is_none() && b.committed(r.group, "in", PARTS) != before[i] {
                at[i] = Some(since.elapsed());
            }
        }
        if at[missing].is_none() && since.elapsed() > Duration::from_secs(60) {
            let r = &runs[missing];
            let outputs = [(r.outputs.0, PARTS), (r.outputs.1, 1)];
            panic!(
                "{} run: no commit within 60 s: {}",
                r.delivery,
                evidence::state(b, &r.dir, r.group, ("in", PARTS), &outputs)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    at.into_iter().flatten().collect()
}

/// When every one of the `n` inputs is visible in each run's outputs, counted from `since`
/// (up to 180 s), all watched side by side.
fn all_visible(
    b: &Broker,
    runs: &[Faulted],
    n: usize,
    what: &str,
    since: Instant,
) -> Vec<Duration> {
    let mut at: Vec<Option<Duration>> = vec![None; runs.len()];
    while let Some(missing) = at.iter().position(Option::is_none) {
        for (i, r) in runs.iter().enumerate() {
            if at[i].is_none() && copies_in(b, r.outputs).len() == n {
                at[i] = Some(since.elapsed());
            }
        }
        if at[missing].is_none() && since.elapsed() > Duration::from_secs(180) {
            let r = &runs[missing];
            panic!(
                "{what} ({}): not every input came out within 180 s: {}",
                r.delivery,
                explain_in(b, &r.dir, r.group, n, r.outputs)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    at.into_iter().flatten().collect()
}

/// Applies `fault`; returns the node left down (to be started again) and when the cluster
/// was whole enough again for the run to go on (the kill itself for a kill: the run must go
/// on without the node).
fn strike(b: &mut Broker, fault: Fault, eos_group: &str) -> (Option<usize>, Instant) {
    let node = |id: i32| usize::try_from(id - 1).expect("node ids are 1..=3");
    match fault {
        Fault::LeaderKilled => {
            let n = node(b.leader("in", 0));
            b.cluster().kill(n);
            (Some(n), Instant::now())
        }
        Fault::CoordinatorKilled => {
            let id = b.transaction_coordinator(&format!("weir.{eos_group}.in.0"));
            let n = node(id);
            b.cluster().kill(n);
            (Some(n), Instant::now())
        }
        Fault::BrokerRestarted => {
            let n = node(b.leader("in", 1));
            b.cluster().stop(n);
            std::thread::sleep(Duration::from_secs(10));
            b.cluster().restart(n);
            (None, Instant::now())
        }
        Fault::ClusterDown => {
            for n in 0..b.cluster().size() {
                b.cluster().stop(n);
            }
            std::thread::sleep(Duration::from_secs(20));
            b.cluster().restart_all();
            (None, Instant::now())
        }
    }
}

/// Within 60 s: the group's committed offsets, as `kafka-consumer-groups` shows them, are
/// the ends of the input (everything delivered is committed, nothing more), and no
/// transaction of the group is open (`kafka-transactions list`).
fn assert_settled(b: &Broker, r: &Faulted, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let prefix = format!("weir.{}.", r.group);
    loop {
        let offsets = b.group_offsets(r.group, "in");
        let settled = offsets.len() == PARTS as usize
            && offsets
                .iter()
                .all(|(_, current, end)| *current == Some(*end));
        let open = if r.delivery == "exactly-once" {
            b.open_transactions(&prefix)
        } else {
            Vec::new()
        };
        if settled && open.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} ({}): not settled within 60 s: kafka-consumer-groups (partition, committed, end): {offsets:?}; open transactions: {open:?}{}",
            r.delivery,
            evidence::tail(&r.dir.path("run.log"))
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
