//! The rebalance pause (issue 49, point 5): how long partitions that do **not** move stop
//! delivering while a group rebalances, under the classic protocol with the eager assignor,
//! the classic protocol with cooperative-sticky, and KIP-848's consumer protocol.
//!
//! On three Apache Kafka brokers (a fresh cluster per protocol; the topics' partitions on
//! `--replication` of them, 1 by default: with 3, this machine's two cores could not carry the
//! brokers' replication and five members, and partitions stalled for seconds with no event): an input topic of
//! `--partitions` partitions (240) written at `--rate` records a second (1,200: 5 a second
//! per partition; at 4,800 the three brokers and five members saturated this machine's two
//! cores and every partition stalled for seconds with no event at all), four `weir` members in one group (at-least-once), each tagging what it
//! delivers with its name (the `json-enrich` stage), and a reader of the output that notes
//! when each input partition's records arrive and who delivered them. Then, 30 s apart:
//!
//! * **join**: a fifth member joins;
//! * **leave**: that member stops (SIGTERM);
//! * **kill**: one of the four is killed (`kill -9`; its session is 6 s).
//!
//! * **none** comes first: the same 30 s with no event, the measure's noise floor.
//!
//! For each event and each partition: its owner before the event and once the group settled
//! (who delivered its last record before the event, and its last record in the window), and its
//! **pause**: the longest gap between two of its outputs from the event to 30 s after it
//! (a partition delivers every 200 ms at the default rate). A partition that did not move is
//! one whose owner is the same before and after. The result: per event, the partitions that
//! moved and did not, and their pauses (median, 99th percentile, largest).
//!
//! Run: `benches/scripts/rebalance-pause.sh` (results: docs/BENCHMARKS.md, "Rebalance pause").
//!   rebalance-pause --weir target/release/weir [--partitions 240] [--rate 1200] [--replication 1]
//!                   [--protocols eager,cooperative,consumer]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_tests::kafka::{send, sigterm, spawn_weir, Broker, Running};
use weir_tests::plugins::JSON_ENRICH;
use weir_tests::Scratch;

/// Output partitions (the pause is about the input's).
const OUT_PARTITIONS: i32 = 12;
/// How long each event is watched.
const WINDOW: Duration = Duration::from_secs(30);

struct Args {
    weir: String,
    partitions: i32,
    rate: usize,
    replication: i32,
    protocols: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        weir: "target/release/weir".into(),
        partitions: 240,
        rate: 1200,
        replication: 1,
        protocols: vec!["eager".into(), "cooperative".into(), "consumer".into()],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--weir" => a.weir = value,
            "--partitions" => a.partitions = value.parse().expect("--partitions N"),
            "--rate" => a.rate = value.parse().expect("--rate N"),
            "--replication" => a.replication = value.parse().expect("--replication N"),
            "--protocols" => a.protocols = value.split(',').map(str::to_owned).collect(),
            other => panic!(
                "unknown flag {other} (--weir, --partitions, --rate, --replication, --protocols)"
            ),
        }
    }
    a
}

/// One output record as the reader saw it: when, and which member delivered it.
type Arrivals = Vec<Vec<(Instant, u8)>>;

fn main() {
    let a = args();
    let weir = std::fs::canonicalize(&a.weir)
        .unwrap_or_else(|e| panic!("the weir binary {}: {e}", a.weir))
        .display()
        .to_string();
    println!(
        "| protocol | event | moved | pause of moved: p50 / max | not moved | pause of not moved: p50 / p99 / max |"
    );
    println!("|---|---|---:|---|---:|---|");
    let mut summary = BTreeMap::new();
    for protocol in &a.protocols {
        // A fresh cluster per protocol: the same conditions for each, and no earlier round's
        // topics to replicate.
        eprintln!("{protocol}: starting three Apache Kafka brokers");
        let b = Broker::apache_cluster(3, &[("dlq", 1)]);
        let rows = round(&b, &weir, protocol, &a);
        for (event, r) in &rows {
            println!(
                "| {protocol} | {event} | {} | {} / {} | {} | {} / {} / {} |",
                r.moved.len(),
                ms(pct(&r.moved, 50)),
                ms(pct(&r.moved, 100)),
                r.stayed.len(),
                ms(pct(&r.stayed, 50)),
                ms(pct(&r.stayed, 99)),
                ms(pct(&r.stayed, 100)),
            );
        }
        summary.insert(protocol.clone(), rows);
    }
    if let Some(eager) = summary.get("eager") {
        for other in ["cooperative", "consumer"] {
            let Some(rows) = summary.get(other) else {
                continue;
            };
            for ((event, e), (_, o)) in eager.iter().zip(rows) {
                let (e, o) = (pct(&e.stayed, 100), pct(&o.stayed, 100));
                println!(
                    "{other} / eager, {event}, largest pause of a partition that did not move: {} / {} = {:.0} %",
                    ms(o),
                    ms(e),
                    100.0 * o.as_secs_f64() / e.as_secs_f64().max(1e-9)
                );
            }
        }
    }
}

/// The pauses of one event.
struct Pauses {
    moved: Vec<Duration>,
    stayed: Vec<Duration>,
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// The `p`th percentile (100: the largest); zero for none.
fn pct(v: &[Duration], p: usize) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) * p).div_ceil(100)]
}

/// One protocol's round: its topics, four members, the three events; the pauses per event.
fn round(b: &Broker, weir: &str, protocol: &str, a: &Args) -> Vec<(&'static str, Pauses)> {
    let (input, output) = (format!("in-{protocol}"), format!("out-{protocol}"));
    b.create_topic_with(&input, a.partitions, a.replication);
    b.create_topic_with(&output, OUT_PARTITIONS, a.replication);
    // Kept (not deleted) when the round fails, or always with `WEIR_KEEP`: the members' logs.
    let scratch = std::mem::ManuallyDrop::new(Scratch::new(weir));
    let s: &Scratch = &scratch;
    let keep = std::env::var_os("WEIR_KEEP").is_some();
    eprintln!(
        "{protocol}: the members' files are in {}",
        s.dir.path().display()
    );
    // `WEIR_PAUSE_DEBUG=cgrp,topic`: librdkafka's debug contexts in every member's log.
    let debug = std::env::var("WEIR_PAUSE_DEBUG")
        .map(|d| format!("      debug: {d}\n"))
        .unwrap_or_default();
    let properties = |classic: bool| {
        let mut p = String::new();
        if classic {
            p.push_str("      session.timeout.ms: 6000\n      heartbeat.interval.ms: 500\n");
        }
        p.push_str(&debug);
        if p.is_empty() {
            p
        } else {
            format!("    properties:\n{p}")
        }
    };
    let group_settings = match protocol {
        "eager" => format!("    assignor: eager\n{}", properties(true)),
        "cooperative" => properties(true),
        "consumer" => format!("    group_protocol: consumer\n{}", properties(false)),
        other => panic!("unknown protocol {other} (eager, cooperative, consumer)"),
    };
    for m in 0..5 {
        s.write(
            &format!("m{m}.yaml"),
            &format!(
                "name: pause-{protocol}
source:
  kafka:
    brokers: {bootstrap}
    topics: [{input}]
    group: g-pause-{protocol}
{group_settings}stages:
{stage}sink:
  kafka:
    brokers: {bootstrap}
    topic: {output}
reject:
  kafka:
    brokers: {bootstrap}
    topic: dlq
",
                bootstrap = b.bootstrap,
                stage = weir_tests::stage("tag", JSON_ENRICH, &[("set.m", &m.to_string())]),
            ),
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let arrivals: Arc<Mutex<Arrivals>> =
        Arc::new(Mutex::new(vec![Vec::new(); a.partitions as usize]));
    let reader = read(b, &output, arrivals.clone(), stop.clone());
    let writer = write(b, &input, a.partitions, a.rate, stop.clone());
    let mut members: Vec<Option<Running>> = Vec::new();
    for m in 0..4 {
        members.push(Some(spawn_weir(
            s,
            &format!("m{m}.yaml"),
            &format!("m{m}.log"),
        )));
        std::thread::sleep(Duration::from_secs(3));
    }
    eprintln!("{protocol}: four members started; settling");
    settle(&arrivals, Duration::from_secs(120));
    for (m, c) in members.iter_mut().enumerate() {
        if let Some(st) = c.as_mut().and_then(|c| c.try_wait().expect("a member")) {
            panic!(
                "member {m} exited ({st}): {}",
                std::fs::read_to_string(s.path(&format!("m{m}.log"))).unwrap_or_default()
            );
        }
    }
    std::thread::sleep(Duration::from_secs(10));
    let mut events = Vec::new();
    // No event: what the same measure gives while nothing happens (the noise floor).
    events.push(("none", Instant::now()));
    std::thread::sleep(WINDOW);
    eprintln!("{protocol}: a fifth member joins");
    events.push(("join", Instant::now()));
    members.push(Some(spawn_weir(s, "m4.yaml", "m4.log")));
    std::thread::sleep(WINDOW);
    eprintln!("{protocol}: the fifth member leaves");
    events.push(("leave", Instant::now()));
    let mut leaving = members[4].take().expect("the fifth member");
    sigterm(&leaving);
    let deadline = Instant::now() + Duration::from_secs(60);
    while leaving
        .try_wait()
        .expect("waiting for the fifth member")
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the fifth member did not stop within 60 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(WINDOW);
    eprintln!("{protocol}: a member is killed");
    events.push(("kill", Instant::now()));
    let mut killed = members[3].take().expect("the fourth member");
    killed.kill().expect("kill -9");
    let _ = killed.wait();
    std::thread::sleep(WINDOW);
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    reader.join().expect("reader");
    for m in members.iter().flatten() {
        sigterm(m);
    }
    drop(members);
    if !keep {
        drop(std::mem::ManuallyDrop::into_inner(scratch));
    }
    let arrivals = arrivals.lock().expect("arrivals");
    events
        .into_iter()
        .map(|(name, at)| (name, pauses(&arrivals, at)))
        .collect()
}

/// Waits until every partition has delivered within the last second.
fn settle(arrivals: &Mutex<Arrivals>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = Instant::now();
        let quiet = arrivals
            .lock()
            .expect("arrivals")
            .iter()
            .filter(|v| {
                v.last()
                    .is_none_or(|(t, _)| now.duration_since(*t) > Duration::from_secs(1))
            })
            .count();
        if quiet == 0 {
            return;
        }
        assert!(
            now < deadline,
            "{quiet} partitions delivered nothing in the last second, {within:?} after the start"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Each partition's pause around the event at `at`, split by whether it moved.
fn pauses(arrivals: &Arrivals, at: Instant) -> Pauses {
    let end = at + WINDOW;
    let mut p = Pauses {
        moved: Vec::new(),
        stayed: Vec::new(),
    };
    for (i, v) in arrivals.iter().enumerate() {
        let Some(&(before_t, before)) = v.iter().rev().find(|(t, _)| *t < at) else {
            continue;
        };
        let during: Vec<&(Instant, u8)> = v.iter().filter(|(t, _)| *t >= at && *t < end).collect();
        let after = during.last().map(|(_, m)| *m);
        // The longest gap from the last output before the event, and when it ended (none
        // after the event: the whole window).
        let (mut gap, mut ended) = (Duration::ZERO, None);
        let mut last = before_t;
        for (t, _) in &during {
            if t.duration_since(last) > gap {
                (gap, ended) = (t.duration_since(last), Some(*t));
            }
            last = *t;
        }
        if after.is_none() {
            gap = end.duration_since(before_t);
        }
        if std::env::var_os("WEIR_DETAIL").is_some() && gap > Duration::from_millis(400) {
            eprintln!(
                "partition {i}: member {before} before, {after:?} after, pause {gap:?} ending {:?} after the event",
                ended.map(|t| t.duration_since(at))
            );
        }
        if after == Some(before) {
            p.stayed.push(gap);
        } else {
            p.moved.push(gap);
        }
    }
    p
}

/// Writes `rate` records a second over every partition of `topic`, in 10 ms ticks.
fn write(
    b: &Broker,
    topic: &str,
    partitions: i32,
    rate: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let topic = topic.to_owned();
    std::thread::spawn(move || {
        let per_tick = rate.div_ceil(100);
        let mut seq = 0usize;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..per_tick {
                let part = (seq % partitions as usize) as i32;
                let value = format!("{{\"p\":{part},\"seq\":{seq}}}");
                let key = format!("p{part}");
                send(
                    &p,
                    BaseRecord::to(&topic)
                        .partition(part)
                        .key(&key)
                        .payload(&value),
                );
                seq += 1;
            }
            p.poll(Duration::ZERO);
            next += Duration::from_millis(10);
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let _ = p.flush(Duration::from_secs(30));
    })
}

/// Reads every partition of `topic`, noting per input partition when a record arrived and
/// which member delivered it.
fn read(
    b: &Broker,
    topic: &str,
    arrivals: Arc<Mutex<Arrivals>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("group.id", "pause-reader")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for part in 0..OUT_PARTITIONS {
        tpl.add_partition_offset(topic, part, Offset::Beginning)
            .expect("partition");
    }
    c.assign(&tpl).expect("assign");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Some(Ok(m)) = c.poll(Duration::from_millis(100)) else {
                continue;
            };
            let now = Instant::now();
            let Some(v) = m
                .payload()
                .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
            else {
                continue;
            };
            let (Some(p), Some(member)) = (
                v["p"].as_u64(),
                v["m"].as_str().and_then(|m| m.parse::<u8>().ok()),
            ) else {
                continue;
            };
            if let Some(list) = arrivals.lock().expect("arrivals").get_mut(p as usize) {
                list.push((now, member));
            }
        }
    })
}
