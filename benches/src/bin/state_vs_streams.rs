//! Stateful stages against Kafka Streams (issue 50): the same job, on the same Apache Kafka
//! broker, in one sitting. Weir runs `plugins/running-total` (the sum of `amount` per key, the
//! new total emitted for every input record); Kafka Streams runs its peer,
//! `benches/peers/kafka-streams` (`groupByKey().aggregate(...)` on RocksDB).
//!
//! **`throughput`** (the default): for each key count, each delivery and each round, each side
//! in turn reads a fresh input topic of `--records` records over 8 partitions (record i has key
//! `k{i % keys}`, on partition `(i % keys) % 8`, amount `i % 100 + 1`), written before the side
//! starts, and a reader of the output (`read_committed`) notes every key's latest total.
//! * **throughput**: input records per second from the first output to the moment every key's
//!   latest total equals its sum;
//! * **CPU**: the side's process CPU seconds (`/proc/PID/stat`: user + system, every thread)
//!   over the same span, per million records, and the broker's;
//! * **latency**: then `--live` more records are sent at `--rate` a second; for each of their
//!   outputs, the time from the record's timestamp (the input's, which both sides keep on the
//!   output) to its arrival at the reader: p50 and p99;
//! * **memory**: the side's resident memory (`VmRSS`) after that;
//! * **check**: every key's last total equals the sum of its amounts, and the outputs counted
//!   (with the cache off, one per input; exactly one under exactly-once).
//!
//! Both sides use 2 threads (Weir's `runtime.drivers`, Streams' `num.stream.threads`), a 100 ms
//! commit interval (Streams' default under exactly-once), a 6 s session (and with `--static
//! true`, static membership: `group.instance.id`, as a StatefulSet's members would); Streams' state-store
//! cache is off (`statestore.cache.max.bytes=0`: every update emitted, as Weir does) except on
//! the side `streams-cached` (its default 10 MiB; fewer outputs).
//!
//! **`restart`**: exactly-once, `--restart-keys` keys (1,000,000): each side reads
//! `--restart-keys` + 20 % records, is killed (`kill -9`) once every key has a total, and is
//! started again on the same state directory: the time from its start to its first output, and
//! the records it restored (Weir's log, Streams' restore listener). Then the same with the state
//! directory wiped. Each run then goes on until every total is exact.
//!
//! Run: `benches/scripts/state-vs-streams.sh` (results: docs/BENCHMARKS.md, "Weir and Kafka
//! Streams").
//!   state-vs-streams --weir target/release/weir --peer DIR [--plugin running_total.wasm] [throughput|restart]
//!                    [--records N] [--keys 1000,100000] [--deliveries exactly-once,at-least-once]
//!                    [--rounds 3] [--sides weir,streams,streams-cached] [--live N] [--rate N]
//!                    [--restart-keys N] [--static true|false] [--weir-alt OTHER_WEIR]
//!
//! The sides `misbehave-state` and `misbehave-stateless` are the same Weir pipeline with the
//! `misbehave` stage, with one `get` and one `set` per message (`get_set`) and without state:
//! what state costs end to end (their outputs are counted, not checked: they carry no total).
//!
//! `WEIR_BENCH_LOG` sets Weir's log filter (default `warn,weir::runtime::driver=info`: the
//! restore lines); `WEIR_BENCH_KEEP=1` keeps every run's folder (logs, pipeline, state).
//!
//! `--weir-alt` adds the side `weir-alt` (name it in `--sides`): another build of `weir`, for a
//! change's before and after in one sitting.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_tests::apache::{Cluster, Options};
use weir_tests::kafka::send;

/// Input and output partitions.
const PARTITIONS: i32 = 8;

struct Args {
    mode: String,
    weir: PathBuf,
    /// Another build of `weir`, the side `weir-alt` (a change's before and after, same sitting).
    weir_alt: Option<PathBuf>,
    plugin: PathBuf,
    peer: PathBuf,
    records: usize,
    keys: Vec<usize>,
    deliveries: Vec<String>,
    rounds: usize,
    sides: Vec<String>,
    live: usize,
    rate: usize,
    restart_keys: usize,
    /// Static group membership (`group.instance.id`) on both sides.
    static_members: bool,
}

fn args() -> Args {
    let mut a = Args {
        mode: "throughput".into(),
        weir: "target/release/weir".into(),
        weir_alt: None,
        plugin: weir_tests::plugins::RUNNING_TOTAL.into(),
        peer: PathBuf::new(),
        records: 1_000_000,
        keys: vec![1_000, 100_000],
        deliveries: vec!["exactly-once".into(), "at-least-once".into()],
        rounds: 3,
        sides: vec!["weir".into(), "streams".into(), "streams-cached".into()],
        live: 3_000,
        rate: 1_000,
        restart_keys: 1_000_000,
        static_members: false,
    };
    let list = |v: &str| v.split(',').map(str::to_owned).collect::<Vec<_>>();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if !flag.starts_with("--") {
            a.mode = flag;
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let num = |v: &str| v.replace('_', "").parse::<usize>().expect("a number");
        match flag.as_str() {
            "--weir" => a.weir = value.into(),
            "--weir-alt" => {
                a.weir_alt = Some(std::fs::canonicalize(&value).expect("--weir-alt PATH"))
            }
            "--plugin" => a.plugin = value.into(),
            "--peer" => a.peer = value.into(),
            "--records" => a.records = num(&value),
            "--keys" => a.keys = list(&value).iter().map(|k| num(k)).collect(),
            "--deliveries" => a.deliveries = list(&value),
            "--rounds" => a.rounds = num(&value),
            "--sides" => a.sides = list(&value),
            "--live" => a.live = num(&value),
            "--rate" => a.rate = num(&value),
            "--restart-keys" => a.restart_keys = num(&value),
            "--static" => a.static_members = value.parse().expect("--static true|false"),
            other => panic!("unknown flag {other}"),
        }
    }
    for p in [&mut a.weir, &mut a.plugin, &mut a.peer] {
        *p = std::fs::canonicalize(&*p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    a
}

fn main() {
    let a = args();
    eprintln!("starting one Apache Kafka broker");
    let cluster = Cluster::with(
        1,
        &Options {
            // A broker as users run it (the tests' is capped and C1-only), the same for both.
            jvm: vec![
                "-Xmx1g".into(),
                "-XX:TieredStopAtLevel=4".into(),
                "-XX:-UseSerialGC".into(),
                "-XX:+UseG1GC".into(),
            ],
            ..Options::default()
        },
    );
    let mut work = tempfile::Builder::new()
        .prefix("state-vs-streams-")
        .tempdir()
        .expect("a work folder");
    if std::env::var_os("WEIR_BENCH_KEEP").is_some() {
        work.disable_cleanup(true);
        eprintln!("work folder kept: {}", work.path().display());
    }
    let bench = Bench {
        a: &a,
        bootstrap: cluster.bootstrap.clone(),
        broker_pid: cluster.pid(0).expect("the broker runs"),
        work: work.path().to_owned(),
        admin: ClientConfig::new()
            .set("bootstrap.servers", &cluster.bootstrap)
            .create()
            .expect("an admin client"),
        runs: std::cell::Cell::new(0),
    };
    match a.mode.as_str() {
        "throughput" => bench.throughput(),
        "restart" => bench.restart(),
        other => panic!("unknown mode {other} (throughput, restart)"),
    }
}

struct Bench<'a> {
    a: &'a Args,
    bootstrap: String,
    broker_pid: u32,
    work: PathBuf,
    admin: AdminClient<DefaultClientContext>,
    runs: std::cell::Cell<usize>,
}

/// One run's figures.
struct Figures {
    side: String,
    keys: usize,
    delivery: String,
    per_s: f64,
    cpu_per_m: f64,
    broker_cpu_per_m: f64,
    p50_ms: f64,
    p99_ms: f64,
    rss_mib: f64,
    outputs: u64,
}

impl Bench<'_> {
    fn throughput(&self) {
        let a = self.a;
        let mut all = Vec::new();
        println!(
            "| side | keys | delivery | round | records/s | CPU s per M (side) | CPU s per M (broker) | latency p50 / p99 ms | RSS MiB | outputs | totals |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---|---:|---:|---|");
        // A broker just started runs its first minute slower (its JIT): one run of each side
        // first, not counted.
        for side in &a.sides {
            let f = self.throughput_run(side, a.keys[0], &a.deliveries[0]);
            eprintln!("warm-up {side}: {:.0} records/s", f.per_s);
        }
        for &keys in &a.keys {
            for delivery in &a.deliveries {
                for round in 1..=a.rounds {
                    for side in &a.sides {
                        let f = self.throughput_run(side, keys, delivery);
                        println!(
                            "| {side} | {keys} | {delivery} | {round} | {:.0} | {:.2} | {:.2} | {:.0} / {:.0} | {:.0} | {} | {} |",
                            f.per_s,
                            f.cpu_per_m,
                            f.broker_cpu_per_m,
                            f.p50_ms,
                            f.p99_ms,
                            f.rss_mib,
                            f.outputs,
                            // (A run whose totals are not exact stops the bench.)
                            if f.side.starts_with("misbehave") { "counted" } else { "exact" }
                        );
                        all.push(f);
                    }
                }
            }
        }
        println!("\nMedians over the rounds, and Weir's ratio to each Streams side:\n");
        println!(
            "| keys | delivery | side | records/s | CPU s per M | broker CPU s per M | p50 / p99 ms | RSS MiB | Weir's throughput × | Weir's CPU × |"
        );
        println!("|---:|---|---|---:|---:|---:|---|---:|---:|---:|");
        for &keys in &a.keys {
            for delivery in &a.deliveries {
                let of = |side: &str| -> Vec<&Figures> {
                    all.iter()
                        .filter(|f| f.side == side && f.keys == keys && &f.delivery == delivery)
                        .collect()
                };
                let weir = of("weir");
                for side in &a.sides {
                    let rows = of(side);
                    if rows.is_empty() {
                        continue;
                    }
                    let m = |g: fn(&Figures) -> f64, rows: &[&Figures]| {
                        median(rows.iter().map(|f| g(f)).collect())
                    };
                    let (tp, cpu) = (m(|f| f.per_s, &rows), m(|f| f.cpu_per_m, &rows));
                    let ratio = |w: f64, s: f64| {
                        if weir.is_empty() || side == "weir" {
                            "".to_owned()
                        } else {
                            format!("{:.2}", w / s)
                        }
                    };
                    println!(
                        "| {keys} | {delivery} | {side} | {tp:.0} | {cpu:.2} | {:.2} | {:.0} / {:.0} | {:.0} | {} | {} |",
                        m(|f| f.broker_cpu_per_m, &rows),
                        m(|f| f.p50_ms, &rows),
                        m(|f| f.p99_ms, &rows),
                        m(|f| f.rss_mib, &rows),
                        ratio(m(|f| f.per_s, &weir), tp),
                        ratio(m(|f| f.cpu_per_m, &weir), cpu),
                    );
                }
            }
        }
    }

    /// A fresh run name, and its input and output topics (the input written).
    fn topics(&self, records: usize, keys: usize) -> (String, Input) {
        self.runs.set(self.runs.get() + 1);
        let run = format!("r{}", self.runs.get());
        let (input, output) = (format!("{run}-in"), format!("{run}-out"));
        let topics = [
            NewTopic::new(&input, PARTITIONS, TopicReplication::Fixed(1)),
            NewTopic::new(&output, PARTITIONS, TopicReplication::Fixed(1)),
        ];
        let res =
            futures_executor::block_on(self.admin.create_topics(&topics, &AdminOptions::new()))
                .expect("creating topics");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
        }
        let mut inp = Input {
            producer: producer(&self.bootstrap),
            topic: input,
            keys,
            sent: 0,
            sums: vec![0; keys],
        };
        inp.send(records);
        (run, inp)
    }

    /// Deletes a run's topics (its input, output and changelogs) and, unless
    /// `WEIR_BENCH_KEEP` is set, its folder: the disk holds one run.
    fn clean(&self, run: &str) {
        if std::env::var_os("WEIR_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(self.work.join(run));
        }
        let meta = self
            .admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(10))
            .expect("metadata");
        let names: Vec<String> = meta
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|n| n.starts_with(&format!("{run}-")) || n.starts_with(&format!("{run}.")))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let _ = futures_executor::block_on(self.admin.delete_topics(&names, &AdminOptions::new()));
    }

    fn throughput_run(&self, side: &str, keys: usize, delivery: &str) -> Figures {
        let a = self.a;
        let (run, mut input) = self.topics(a.records, keys);
        let counting = side.starts_with("misbehave");
        let reader = Reader::start(
            &self.bootstrap,
            &format!("{run}-out"),
            input.sums.clone(),
            counting,
            input.sent,
        );
        let mut proc = self.spawn(side, &run, delivery, &run);
        let t0 = Instant::now();
        let first = wait(Duration::from_secs(600), || reader.outputs() > 0)
            .unwrap_or_else(|| proc.fail("no output within 600 s", &reader));
        let (cpu0, bcpu0) = (cpu_s(proc.pid()), cpu_s(self.broker_pid));
        eprintln!(
            "{run} {side} {keys} keys {delivery}: first output {:.1} s after start",
            (first - t0).as_secs_f64()
        );
        let done = wait(Duration::from_secs(900), || reader.exact())
            .unwrap_or_else(|| proc.fail("totals not exact within 900 s", &reader));
        let (cpu1, bcpu1) = (cpu_s(proc.pid()), cpu_s(self.broker_pid));
        let span = (done - reader.first().expect("a first output")).as_secs_f64();
        let m = a.records as f64 / 1e6;
        // Live records: their latency.
        reader.expect(now_ms(), None, input.sent);
        let every = Duration::from_secs_f64(1.0 / a.rate as f64);
        let start = Instant::now();
        for i in 0..a.live {
            input.send(1);
            let due = start + every * (i as u32 + 1);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        input
            .producer
            .flush(Duration::from_secs(30))
            .expect("flush");
        reader.expect(i64::MIN, Some(input.sums.clone()), input.sent);
        wait(Duration::from_secs(120), || reader.exact())
            .unwrap_or_else(|| proc.fail("live totals not exact within 120 s", &reader));
        let rss = rss_mib(proc.pid());
        proc.stop();
        let (outputs, mut lat) = reader.finish();
        lat.sort_unstable();
        let pct = |p: usize| {
            if lat.is_empty() {
                f64::NAN
            } else {
                lat[(lat.len() - 1) * p / 100] as f64
            }
        };
        self.clean(&run);
        Figures {
            side: side.to_owned(),
            keys,
            delivery: delivery.to_owned(),
            per_s: a.records as f64 / span,
            cpu_per_m: (cpu1 - cpu0) / m,
            broker_cpu_per_m: (bcpu1 - bcpu0) / m,
            p50_ms: pct(50),
            p99_ms: pct(99),
            rss_mib: rss,
            outputs,
        }
    }

    fn restart(&self) {
        let keys = self.a.restart_keys;
        println!(
            "| side | state dir | outputs before kill -9 | first output after restart (s) | records restored | restore (s, its log) | totals |"
        );
        println!("|---|---|---:|---:|---:|---:|---|");
        for wiped in [false, true] {
            for side in self.a.sides.iter().filter(|s| *s != "streams-cached") {
                let (run, input) = self.topics(keys + keys / 5, keys);
                let reader = Reader::start(
                    &self.bootstrap,
                    &format!("{run}-out"),
                    input.sums,
                    false,
                    input.sent,
                );
                let mut proc = self.spawn(side, &run, "exactly-once", &format!("{run}-a"));
                // Every key has a total (each came once): the store holds `keys` keys.
                wait(Duration::from_secs(900), || {
                    reader.outputs() >= keys as u64 + keys as u64 / 20
                })
                .unwrap_or_else(|| proc.fail("not far enough within 900 s", &reader));
                proc.kill();
                std::thread::sleep(Duration::from_secs(2));
                let before = reader.outputs();
                if wiped {
                    std::fs::remove_dir_all(self.work.join(&run).join("state"))
                        .expect("wiping the state dir");
                }
                let mut proc = self.spawn(side, &run, "exactly-once", &format!("{run}-b"));
                let t0 = Instant::now();
                let first = wait(Duration::from_secs(900), || reader.outputs() > before)
                    .unwrap_or_else(|| proc.fail("no output after restart within 900 s", &reader));
                let exact = wait(Duration::from_secs(900), || reader.exact()).is_some();
                let (restored, restore_ms) = proc.restored();
                proc.stop();
                println!(
                    "| {side} | {} | {before} | {:.2} | {restored} | {:.2} | {} |",
                    if wiped { "wiped" } else { "kept" },
                    (first - t0).as_secs_f64(),
                    restore_ms as f64 / 1e3,
                    if exact { "exact" } else { "WRONG" }
                );
                drop(reader);
                self.clean(&run);
            }
        }
    }

    /// Starts `side` on run `run`'s topics; its state under `work/run/state`, its log
    /// `work/run/<log>.log`.
    fn spawn(&self, side: &str, run: &str, delivery: &str, log: &str) -> Side {
        let dir = self.work.join(run);
        std::fs::create_dir_all(&dir).expect("run folder");
        let log = dir.join(format!("{log}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = match side {
            "weir" | "weir-alt" | "misbehave-state" | "misbehave-stateless" => {
                let yaml = format!(
                    "name: {run}
delivery: {delivery}
source:
  kafka:
    brokers: {b}
    topics: [{run}-in]
    group: {run}
    commit_interval: 100ms
    properties: {{ session.timeout.ms: 6000, heartbeat.interval.ms: 500{instance} }}
stages:
  - name: total
    plugin: {plugin}
{stage}sink:
  kafka: {{ brokers: {b}, topic: {run}-out }}
runtime:
  drivers: 2
  watch_plugins: false
  state_dir: {state}
  cache_dir: {cache}
",
                    b = self.bootstrap,
                    plugin = if side.starts_with("misbehave") {
                        weir_tests::plugins::MISBEHAVE.to_owned()
                    } else {
                        self.a.plugin.display().to_string()
                    },
                    stage = match side {
                        "misbehave-state" => {
                            "    config: { get_set: kv }\n    state: { buckets: [kv] }\n"
                        }
                        "misbehave-stateless" => "",
                        _ => "    state: { buckets: [totals] }\n",
                    },
                    state = dir.join("state").display(),
                    cache = self.work.join("cache").display(),
                    instance = if self.a.static_members {
                        format!(", group.instance.id: {run}-member")
                    } else {
                        String::new()
                    },
                );
                std::fs::write(dir.join("p.yaml"), yaml).expect("pipeline yaml");
                let bin = if side == "weir-alt" {
                    self.a.weir_alt.as_ref().expect("--weir-alt PATH for the side weir-alt")
                } else {
                    &self.a.weir
                };
                let mut c = Command::new(bin);
                c.arg("run")
                    .arg(dir.join("p.yaml"))
                    .env(
                        "WEIR_LOG",
                        std::env::var("WEIR_BENCH_LOG")
                            .unwrap_or_else(|_| "warn,weir::runtime::driver=info".into()),
                    );
                c
            }
            "streams" | "streams-cached" => {
                let peer = self.a.peer.display();
                let mut c = Command::new("java");
                c.args(["-Xmx1g", "-cp"])
                    .arg(format!("{peer}/*:{peer}/libs/*"))
                    .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                    .arg("weir.peer.RunningTotal")
                    .args(["--bootstrap", &self.bootstrap])
                    .args(["--input", &format!("{run}-in")])
                    .args(["--output", &format!("{run}-out")])
                    .args(["--app-id", run])
                    .arg("--state-dir")
                    .arg(dir.join("state"))
                    .args([
                        "--guarantee",
                        if delivery == "exactly-once" {
                            "exactly_once_v2"
                        } else {
                            "at_least_once"
                        },
                    ])
                    .args([
                        "--cache-bytes",
                        if side == "streams" { "0" } else { "10485760" },
                    ])
                    .args(["--threads", "2", "--commit-ms", "100"])
                    .args(["--session-ms", "6000", "--heartbeat-ms", "500"]);
                if self.a.static_members {
                    c.args(["--instance-id", &format!("{run}-member")]);
                }
                c
            }
            other => panic!(
                "unknown side {other} (weir, weir-alt, misbehave-state, misbehave-stateless, streams, streams-cached)"
            ),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {side}: {e}"));
        Side {
            child,
            side: side.to_owned(),
            log,
        }
    }
}

/// A side's process, killed when dropped.
struct Side {
    child: Child,
    side: String,
    log: PathBuf,
}

impl Side {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn fail(&mut self, what: &str, reader: &Reader) -> ! {
        panic!(
            "{}: {what} ({} outputs; {} of {} keys exact; exited: {:?}){}",
            self.side,
            reader.outputs(),
            reader.matching(),
            reader.keys(),
            self.child.try_wait().ok().flatten(),
            weir_tests::evidence::tail(&self.log)
        );
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and up to 60 s to exit (then kill -9).
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        if wait(Duration::from_secs(60), || {
            self.child.try_wait().ok().flatten().is_some()
        })
        .is_none()
        {
            eprintln!("{} did not stop within 60 s of SIGTERM", self.side);
            self.kill();
        }
    }

    /// Records restored and the longest restore (ms), from the log: Weir's `state restored
    /// from the changelog` lines (`records=`, `ms=`), or the peer's `restored R records in M ms`.
    fn restored(&self) -> (u64, u64) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let field = |line: &str, name: &str| -> u64 {
            line.split(name)
                .nth(1)
                .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (mut records, mut ms) = (0, 0);
        for line in log.lines() {
            if line.contains("state restored from the changelog") {
                records += field(line, "records=");
                ms = ms.max(field(line, " ms="));
            } else if let Some(rest) = line.strip_prefix("restored ") {
                // The peer prints a running sum.
                records = field(&format!(" {rest}"), " ");
                ms = ms.max(field(line, "records in "));
            }
        }
        (records, ms)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// The input topic and what was sent to it.
struct Input {
    producer: BaseProducer,
    topic: String,
    keys: usize,
    sent: usize,
    /// Each key's sum of amounts so far.
    sums: Vec<i64>,
}

impl Input {
    /// Sends the next `n` records (record i: key `k{i % keys}`, amount `i % 100 + 1`).
    fn send(&mut self, n: usize) {
        for i in self.sent..self.sent + n {
            let k = i % self.keys;
            let amount = (i % 100 + 1) as i64;
            self.sums[k] += amount;
            let key = format!("k{k}");
            let value = format!("{{\"amount\":{amount}}}");
            send(
                &self.producer,
                BaseRecord::to(&self.topic)
                    .partition((k % PARTITIONS as usize) as i32)
                    .key(&key)
                    .payload(&value),
            );
        }
        self.sent += n;
        if n > 1 {
            self.producer.flush(Duration::from_secs(60)).expect("flush");
        } else {
            self.producer.poll(Duration::ZERO);
        }
    }
}

fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("a producer")
}

/// What the output's reader saw.
struct Seen {
    /// What each key's total should reach.
    target: Vec<i64>,
    /// Each key's latest total.
    latest: Vec<i64>,
    /// Keys whose latest total is their target.
    matching: usize,
    /// Outputs carry no total (the `misbehave` sides): done at this many outputs.
    counting: Option<u64>,
    outputs: u64,
    first: Option<Instant>,
    /// Outputs of records timestamped at or after this (ms since the epoch) have their
    /// latency noted.
    live_from: i64,
    latencies: Vec<i64>,
}

/// A thread reading the output topic from its start, `read_committed`.
struct Reader {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    /// A reader of `topic` expecting every key's total to reach `target`, or, when
    /// `counting`, as many outputs as `sent`.
    fn start(
        bootstrap: &str,
        topic: &str,
        target: Vec<i64>,
        counting: bool,
        sent: usize,
    ) -> Reader {
        let keys = target.len();
        let seen = Arc::new(Mutex::new(Seen {
            counting: counting.then_some(sent as u64),
            matching: target.iter().filter(|&&t| t == 0).count(),
            latest: vec![0; keys],
            target,
            outputs: 0,
            first: None,
            live_from: i64::MAX,
            latencies: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "state-vs-streams-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "10")
            .create()
            .expect("a consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition");
        }
        consumer.assign(&tpl).expect("assign");
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(m) = consumer.poll(Duration::from_millis(50)) else {
                        continue;
                    };
                    let m = m.expect("reading the output");
                    let at = now_ms();
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    let mut s = seen.lock().expect("seen");
                    s.outputs += 1;
                    s.first.get_or_insert_with(Instant::now);
                    if s.counting.is_none() {
                        let key = m.key().expect("a key");
                        let k: usize = std::str::from_utf8(&key[1..])
                            .ok()
                            .and_then(|k| k.parse().ok())
                            .expect("a key k<N>");
                        let total = total(m.payload().expect("a value"));
                        if s.latest[k] == s.target[k] {
                            s.matching -= 1;
                        }
                        s.latest[k] = total;
                        if total == s.target[k] {
                            s.matching += 1;
                        }
                    }
                    if ts >= s.live_from {
                        s.latencies.push(at - ts);
                    }
                }
            })
        };
        Reader {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn outputs(&self) -> u64 {
        self.seen.lock().expect("seen").outputs
    }

    fn first(&self) -> Option<Instant> {
        self.seen.lock().expect("seen").first
    }

    fn matching(&self) -> usize {
        self.seen.lock().expect("seen").matching
    }

    fn keys(&self) -> usize {
        self.seen.lock().expect("seen").target.len()
    }

    /// Whether every key's latest total is its target (counting: every output came).
    fn exact(&self) -> bool {
        let s = self.seen.lock().expect("seen");
        match s.counting {
            Some(n) => s.outputs >= n,
            None => s.matching == s.target.len(),
        }
    }

    /// Notes the latency of outputs of records timestamped from `live_from` on (`i64::MIN`:
    /// no change), and sets new targets.
    fn expect(&self, live_from: i64, target: Option<Vec<i64>>, sent: usize) {
        let mut s = self.seen.lock().expect("seen");
        if live_from != i64::MIN {
            s.live_from = live_from;
        }
        if let Some(n) = &mut s.counting {
            *n = sent as u64;
        }
        if let Some(target) = target {
            s.matching = s.latest.iter().zip(&target).filter(|(l, t)| l == t).count();
            s.target = target;
        }
    }

    /// The outputs counted and the latencies noted.
    fn finish(mut self) -> (u64, Vec<i64>) {
        // Outputs still on their way (none, when every total is exact and the cache is off).
        std::thread::sleep(Duration::from_millis(500));
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("reader");
        }
        let mut s = self.seen.lock().expect("seen");
        (s.outputs, std::mem::take(&mut s.latencies))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The integer after `"total":` in an output value.
fn total(value: &[u8]) -> i64 {
    let at = value
        .windows(8)
        .position(|w| w == b"\"total\":")
        .unwrap_or_else(|| panic!("no total in {}", String::from_utf8_lossy(value)));
    let digits: String = value[at + 8..]
        .iter()
        .map(|&b| b as char)
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().expect("an integer total")
}

/// Polls `cond` every 10 ms up to `within`; when it held.
fn wait(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// A process's CPU seconds so far (user + system, all its threads).
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which ends with the last ')'): 14 and 15 overall.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    f.iter().sum::<f64>() / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("getconf");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("CLK_TCK")
    })
}

/// A process's resident memory, MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
