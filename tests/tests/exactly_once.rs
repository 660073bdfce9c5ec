//! `delivery: exactly-once` end to end: the real `weir` binary against a real Kafka-protocol
//! broker over TCP (Apache Kafka, one node), real components, real signals and `kill -9`. A `read_committed`
//! reader (the default of librdkafka, which the test reader is) must find every input exactly
//! once in the outputs and the dead-letter topic together: 0 duplicates, 0 lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_tests::kafka::{
    high_watermarks, kafka, kafka_pipeline, records, sigterm, spawn_weir, trickle, wait_ok, Broker,
    Protocol, Running,
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
    let mut seen = BTreeMap::new();
    for r in b.read("out").into_iter().chain(b.read("dlq")) {
        *seen.entry(r.key).or_default() += 1;
    }
    seen
}

/// What the run left, for a failure message: the inputs against `out` + `dlq`
/// (read_committed), the group's offsets, the topics, and the end of every log.
fn explain(b: &Broker, s: &Scratch, group: &str, n: usize) -> String {
    let expected: Vec<String> = (0..n).map(|i| format!("k-{i}")).collect();
    format!(
        "{}\n{}",
        evidence::delivery(&expected, &copies(b)),
        evidence::state(b, s, group, ("in", PARTS), &[("out", PARTS), ("dlq", 1)])
    )
}

/// Waits (up to 90 s) until every one of the `n` inputs is visible.
fn wait_all_visible(b: &Broker, s: &Scratch, group: &str, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if copies(b).len() == n {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: not every input came out within 90 s: {}",
                explain(b, s, group, n)
            );
        }
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
    committing_with(b, group, n, chunks, log, &|yaml| yaml.to_owned())
}

/// [`committing`] with the pipeline's YAML changed by `edit`.
fn committing_with(
    b: &Broker,
    group: &str,
    n: usize,
    chunks: usize,
    log: &str,
    edit: &dyn Fn(&str) -> String,
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
    let yaml = std::fs::read_to_string(s.path("p.yaml")).expect("yaml");
    s.write("p.yaml", &edit(&yaml));
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
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(s.path("zombie.log"))
        .unwrap_or_default()
        .contains("partitions assigned")
    {
        assert!(Instant::now() < deadline, "the zombie got no partitions");
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// Point 4, case 1 of issue 49: on three brokers (replication factor 3, `min.insync.replicas`
/// 2), the broker that leads the source's first partition (and the sink's, the topics being
/// created alike) is killed with `kill -9` mid-stream. The run goes on without a restart or an
/// error exit, every input is visible exactly once (read_committed), and Kafka's own
/// `kafka-transactions` tool finds no transaction left open.
#[test]
fn on_three_brokers_killing_the_partition_leader_mid_stream_loses_and_doubles_nothing() {
    let mut b = Broker::apache_cluster(3, &[("in", PARTS), ("out", PARTS), ("dlq", 1)]);
    let n = 3000;
    // The session outlasts a group coordinator's move (Kafka's default is 45 s): with the
    // 6 s of the other tests, killing the coordinator's broker ends the member's session, and
    // an exactly-once commit then refused with UNKNOWN_MEMBER_ID stops the run (exit 1;
    // issue 49, still open).
    let (producer, s, c) = committing_with(&b, "g-eos-leader", n, 60, "run.log", &|yaml| {
        yaml.replace("session.timeout.ms: 6000", "session.timeout.ms: 30000")
    });
    let leader = b.leader("in", 0);
    let node = usize::try_from(leader - 1).expect("node ids are 1..=3");
    let before = b.committed("g-eos-leader", "in", PARTS);
    let killed = Instant::now();
    b.cluster().kill(node);
    wait_commit_progress(&b, "g-eos-leader", &before, &s, "run.log");
    eprintln!(
        "leader {leader} killed: the next commit after {} ms",
        killed.elapsed().as_millis()
    );
    producer.join().expect("producer");
    wait_all_visible(
        &b,
        &s,
        "g-eos-leader",
        n,
        "the run after the leader was killed",
    );
    sigterm(&c);
    wait_ok(c, "the run after the leader was killed", &s, "run.log");
    assert_exactly_once(&b, &s, "g-eos-leader", n);
    let (ok, listed) = b.kafka_tool("org.apache.kafka.tools.TransactionsCommand", &["list"]);
    assert!(ok, "kafka-transactions list: {listed}");
    assert!(
        listed.contains("weir.g-eos-leader.in.0"),
        "the partitions' transactional ids are listed: {listed}"
    );
    let open: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("Ongoing") || l.contains("Prepare"))
        .collect();
    assert!(
        open.is_empty(),
        "transactions left open: {open:?}\n{listed}"
    );
}
