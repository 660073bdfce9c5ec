//! Kafka helpers: a `weir broker` process (librdkafka's mock cluster on loopback TCP), and a
//! producer and readers that talk to it over TCP like any client would.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::Scratch;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A broker in its own process, killed on drop.
pub struct Broker {
    child: Child,
    stdin: Option<ChildStdin>,
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// Produce every record as a record batch of its own (tansu; see [`Broker::tansu`]).
    pub one_record_batches: bool,
    /// The broker's log (tansu's output), kept for failure messages.
    log: Option<tempfile::NamedTempFile>,
    /// The development schema registry's address (`weir broker --schema-registry`).
    pub registry: Option<String>,
}

impl Broker {
    /// Starts `weir broker` with these topics (name, partitions).
    pub fn start(weir: &str, topics: &[(&str, i32)]) -> Broker {
        Self::start_with(weir, topics, false)
    }

    /// Starts `weir broker --schema-registry` (the registry's address in `registry`).
    pub fn with_registry(weir: &str, topics: &[(&str, i32)]) -> Broker {
        Self::start_with(weir, topics, true)
    }

    fn start_with(weir: &str, topics: &[(&str, i32)], registry: bool) -> Broker {
        let mut cmd = Command::new(weir);
        cmd.arg("broker");
        if registry {
            cmd.arg("--schema-registry");
        }
        for (t, p) in topics {
            cmd.arg("--topic").arg(format!("{t}:{p}"));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting weir broker");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line)
            .expect("reading the bootstrap address");
        let mut url = String::new();
        if registry {
            out.read_line(&mut url)
                .expect("reading the registry's address");
            assert!(
                url.starts_with("http://"),
                "weir broker printed {url:?} for the registry"
            );
        }
        let stdin = child.stdin.take();
        assert!(line.contains(':'), "weir broker printed {line:?}");
        Broker {
            child,
            stdin,
            bootstrap: line.trim().to_owned(),
            one_record_batches: false,
            log: None,
            registry: registry.then(|| url.trim().to_owned()),
        }
    }

    /// Starts tansu (an independent Kafka-compatible broker, `scripts/ensure-tansu`) on a free
    /// loopback port with in-memory storage, and creates these topics through the admin API.
    ///
    /// Records are produced to it one per record batch: tansu 0.6 answers a fetch that starts
    /// inside a batch with the rest of the batch all labelled with the batch's last offset
    /// (seen in librdkafka's fetch log: 16 records, every one at offset 40, for a fetch at 25
    /// of the batch 0–40), so a consumer restarting from a committed offset inside a batch
    /// would get corrupt offsets from the broker. Weir refuses offsets that do not increase
    /// (warns and skips them), which with such a broker means the rest of the batch is lost.
    pub fn tansu(bin: &str, topics: &[(&str, i32)]) -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let log = tempfile::Builder::new()
            .prefix("tansu-")
            .suffix(".log")
            .tempfile()
            .expect("a log file");
        let out = log.reopen().expect("the log file");
        let err = log.reopen().expect("the log file");
        let child = Command::new(bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting tansu ({bin}): {e}"));
        let b = Broker {
            child,
            stdin: None,
            bootstrap: format!("127.0.0.1:{port}"),
            one_record_batches: true,
            log: Some(log),
            registry: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        for (t, p) in topics {
            b.create_topic(t, *p);
        }
        b
    }

    /// The broker's log file (tansu's output; `weir broker` logs to the test's stderr).
    pub fn log(&self) -> Option<&std::path::Path> {
        self.log.as_ref().map(|l| l.path())
    }

    /// Creates a topic through the admin API (tansu; `weir broker` takes `create` on stdin).
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().expect("admin client");
        let new = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
        let rt = futures_executor::block_on(admin.create_topics(&new, &AdminOptions::new()));
        for r in rt.expect("create topics") {
            r.expect("topic created");
        }
    }

    /// Sends a command to `weir broker` (`refuse-topic …`, `refuse …`) and gives it a moment.
    pub fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("a `weir broker`");
        writeln!(stdin, "{line}").expect("broker command");
        stdin.flush().expect("broker command");
        std::thread::sleep(Duration::from_millis(200));
    }

    /// Takes the (single) broker down or up (`weir broker` only).
    pub fn set_up(&mut self, up: bool) {
        let stdin = self.stdin.as_mut().expect("a `weir broker`");
        writeln!(stdin, "{} 1", if up { "up" } else { "down" }).expect("broker command");
        stdin.flush().expect("broker command");
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c
    }

    /// A client-only handle on a running broker (for other threads).
    pub fn producer(&self) -> Client {
        Client {
            bootstrap: self.bootstrap.clone(),
            one_record_batches: self.one_record_batches,
        }
    }

    /// Produces `(partition, key, value)` records, waiting for every acknowledgement.
    pub fn produce(&self, topic: &str, records: &[(i32, String, String)]) {
        produce(&self.bootstrap, topic, records, self.one_record_batches);
    }

    /// Every record of `topic` in partition/offset order, as a `read_committed` consumer
    /// (librdkafka's default) sees it: records of aborted transactions and transaction
    /// markers are not delivered.
    pub fn read(&self, topic: &str) -> Vec<Record> {
        let c: BaseConsumer = self
            .client()
            .set("group.id", "weir-tests-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // A transactional topic ends in markers (and may hold aborted records), which are
            // never delivered: the end of a partition is then known from the EOF event.
            .set("enable.partition.eof", "true")
            .create()
            .expect("consumer");
        let mut ends = HashMap::new();
        let mut tpl = TopicPartitionList::new();
        let meta = c
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .expect("metadata");
        for p in meta.topics()[0].partitions() {
            let (lo, hi) = c
                .fetch_watermarks(topic, p.id(), Duration::from_secs(5))
                .expect("watermarks");
            if hi > lo {
                ends.insert(p.id(), hi - 1);
                tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                    .expect("tpl");
            }
        }
        let mut out = Vec::new();
        if ends.is_empty() {
            return out;
        }
        c.assign(&tpl).expect("assign");
        drop(tpl);
        // Until every partition reached its end offset and nothing more comes for a moment
        // (a broker whose end offsets lag, like tansu 0.6's, still reads completely).
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut idle_since = Instant::now();
        while !ends.is_empty() || idle_since.elapsed() < Duration::from_millis(300) {
            assert!(Instant::now() < deadline, "reading {topic} timed out");
            if let Some(m) = c.poll(Duration::from_millis(50)) {
                idle_since = Instant::now();
                let m = match m {
                    Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                        ends.remove(&p);
                        continue;
                    }
                    m => m.expect("consume"),
                };
                if ends.get(&m.partition()).is_some_and(|&e| m.offset() >= e) {
                    ends.remove(&m.partition());
                }
                out.push(Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                    value: String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                    headers: m.headers().map_or_else(Vec::new, |hs| {
                        hs.iter()
                            .map(|h| {
                                (
                                    h.key.to_owned(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default())
                                        .into_owned(),
                                )
                            })
                            .collect()
                    }),
                });
            }
        }
        out.sort_by_key(|r| (r.partition, r.offset));
        out
    }

    /// The group's committed offset per partition (`None`: nothing committed).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
        let c: BaseConsumer = self
            .client()
            .set("group.id", group)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = c
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        let out = (0..partitions)
            .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            })
            .collect();
        drop(got);
        out
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A producer handle on a broker this test does not own.
pub struct Client {
    bootstrap: String,
    one_record_batches: bool,
}

impl Client {
    /// See [`Broker::produce`].
    pub fn produce(&self, topic: &str, records: &[(i32, String, String)]) {
        produce(&self.bootstrap, topic, records, self.one_record_batches);
    }
}

/// One consumed record.
#[derive(Debug, Clone)]
pub struct Record {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key as text.
    pub key: String,
    /// Value as text.
    pub value: String,
    /// Headers as text.
    pub headers: Vec<(String, String)>,
}

impl Record {
    /// A header's value.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A pipeline YAML reading `topic` as `group`, with these stages, producing to `out` and
/// rejecting to `dlq`; `source_extra` / `extra` are appended to the source and the file.
pub fn kafka_pipeline(
    bootstrap: &str,
    group: &str,
    stages: &str,
    source_extra: &str,
    extra: &str,
) -> String {
    format!(
        "name: kafka-test
source:
  kafka:
    brokers: {bootstrap}
    topics: [in]
    group: {group}
    commit_interval: 100ms
    properties:
      session.timeout.ms: 6000
      heartbeat.interval.ms: 500
{source_extra}
stages:
{stages}
sink:
  kafka:
    brokers: {bootstrap}
    topic: out
reject:
  kafka:
    brokers: {bootstrap}
    topic: dlq
runtime:
  report: report.json
{extra}"
    )
}

/// Produces `(partition, key, value)` records to `topic`, waiting for every acknowledgement.
/// With `one_record_batches` every record is a record batch of its own.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    records: &[(i32, String, String)],
    one_record_batches: bool,
) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "2")
        .set(
            "batch.num.messages",
            if one_record_batches { "1" } else { "10000" },
        )
        .create()
        .expect("producer");
    for (part, k, v) in records {
        let mut rec = BaseRecord::to(topic)
            .partition(*part)
            .key(k.as_bytes())
            .payload(v.as_bytes())
            .headers(OwnedHeaders::new().insert(Header {
                key: "origin",
                value: Some(k.as_bytes()),
            }));
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(5));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// The sum of the offsets a run report says were committed (`kafka.committed`), i.e. how many
/// messages the run committed when every partition started at 0.
pub fn committed_total(report: &serde_json::Value) -> i64 {
    report["committed"]
        .as_object()
        .expect("a Kafka run report")
        .values()
        .map(|v| v.as_i64().expect("committed offsets are integers"))
        .sum()
}

/// `n` records `k-i` spread over `parts` partitions (record i on partition i % parts).
pub fn records(
    n: usize,
    parts: i32,
    value: impl Fn(usize) -> String,
) -> Vec<(i32, String, String)> {
    (0..n)
        .map(|i| ((i as i32) % parts, format!("k-{i}"), value(i)))
        .collect()
}

/// Records per partition of `topic` as a reader counts them (tansu's end offsets lag).
pub fn high_watermarks(b: &Broker, topic: &str, parts: i32) -> Vec<i64> {
    let recs = b.read(topic);
    (0..parts)
        .map(|p| recs.iter().filter(|r| r.partition == p).count() as i64)
        .collect()
}

/// tansu (an independent Kafka implementation) with these topics. `scripts/test` installs it
/// (cached) and sets `WEIR_TANSU_BIN`; without it the tansu tests fail, they are not skipped.
pub fn tansu(topics: &[(&str, i32)]) -> Broker {
    let bin = std::env::var("WEIR_TANSU_BIN").expect(
        "WEIR_TANSU_BIN is not set: run the tests with ./scripts/test (it installs tansu), or set it",
    );
    Broker::tansu(&bin, topics)
}

/// Produces `records` in `chunks` pieces, one every `every`, from a background thread.
pub fn trickle(
    b: &Broker,
    topic: &'static str,
    records: Vec<(i32, String, String)>,
    chunks: usize,
    every: Duration,
) -> std::thread::JoinHandle<()> {
    let client = b.producer();
    std::thread::spawn(move || {
        let per = records.len().div_ceil(chunks);
        for chunk in records.chunks(per) {
            client.produce(topic, chunk);
            std::thread::sleep(every);
        }
    })
}

/// A `weir run` child process, killed (SIGKILL) and reaped when dropped while still running,
/// so a failing test leaves no pipeline behind.
pub struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `weir run YAML` in `s`, its log (stderr) in the file `log`.
pub fn spawn_weir(s: &Scratch, yaml: &str, log: &str) -> Running {
    let err = std::fs::File::create(s.path(log)).expect("log file");
    Running(
        s.weir(&["run", yaml])
            .env(
                "WEIR_LOG",
                std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "info,weir::kafka=debug".into()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawning weir"),
    )
}

pub fn sigterm(c: &Child) {
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok);
}

pub fn wait_ok(mut c: Running, what: &str, s: &Scratch, log: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = c.try_wait().expect("wait") {
            let text = std::fs::read_to_string(s.path(log)).unwrap_or_default();
            assert!(st.success(), "{what} exited {st}: {text}");
            return;
        }
        assert!(Instant::now() < deadline, "{what} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}
