//! Kafka helpers: a `weir broker` process (librdkafka's mock cluster on loopback TCP) or an
//! Apache Kafka cluster ([`crate::apache`]), and a producer and readers that talk to either
//! over TCP like any client would.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::Scratch;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Headers, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A broker in its own process (`weir broker`), or an Apache Kafka cluster; killed on drop.
pub struct Broker {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// The Apache Kafka nodes, when it is one ([`Broker::apache`]).
    cluster: Option<crate::apache::Cluster>,
    /// `bootstrap.servers`.
    pub bootstrap: String,
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
            child: Some(child),
            stdin,
            cluster: None,
            bootstrap: line.trim().to_owned(),
            registry: registry.then(|| url.trim().to_owned()),
        }
    }

    /// A one-node Apache Kafka cluster ([`crate::apache`]) with these topics.
    pub fn apache(topics: &[(&str, i32)]) -> Broker {
        Self::apache_cluster(1, topics)
    }

    /// An Apache Kafka cluster of `nodes` nodes with these topics (replicated on up to 3).
    pub fn apache_cluster(nodes: usize, topics: &[(&str, i32)]) -> Broker {
        Self::on(crate::apache::Cluster::start(nodes), topics)
    }

    /// A broker on a cluster started by the caller, with these topics.
    pub fn on(cluster: crate::apache::Cluster, topics: &[(&str, i32)]) -> Broker {
        let b = Broker {
            child: None,
            stdin: None,
            bootstrap: cluster.bootstrap.clone(),
            cluster: Some(cluster),
            registry: None,
        };
        for (t, p) in topics {
            b.create_topic(t, *p);
        }
        b
    }

    /// Runs one of Kafka's own tools against this (Apache Kafka) broker: `main` with
    /// `--bootstrap-server` and `args`; (exit success, its output).
    pub fn kafka_tool(&self, main: &str, args: &[&str]) -> (bool, String) {
        let cluster = self.cluster.as_ref().expect("an Apache Kafka broker");
        let mut all = vec!["--bootstrap-server", self.bootstrap.as_str()];
        all.extend_from_slice(args);
        cluster.tool(main, &all)
    }

    /// The node id of the broker that leads `topic`'s `partition` now.
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let c: BaseConsumer = self.client().create().expect("consumer");
        let meta = c
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        meta.topics()[0]
            .partitions()
            .iter()
            .find(|p| p.id() == partition)
            .map(|p| p.leader())
            .unwrap_or_else(|| panic!("{topic}/{partition} has no metadata"))
    }

    /// The group's type as Kafka's own `kafka-consumer-groups --list --type` shows it
    /// (`Classic`, `Consumer`).
    pub fn group_type(&self, group: &str) -> String {
        let (ok, out) = self.kafka_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            &["--list", "--type"],
        );
        assert!(ok, "kafka-consumer-groups --list --type: {out}");
        out.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(group)).then(|| w.next().unwrap_or_default().to_owned())
            })
            .unwrap_or_else(|| panic!("group {group} is not listed: {out}"))
    }

    /// The transactions that Kafka's own `kafka-transactions list` shows open (`Ongoing`,
    /// `PrepareCommit`, `PrepareAbort`) whose transactional id starts with `prefix`, as
    /// whole lines of its table.
    pub fn open_transactions(&self, prefix: &str) -> Vec<String> {
        let (ok, out) = self.kafka_tool("org.apache.kafka.tools.TransactionsCommand", &["list"]);
        assert!(ok, "kafka-transactions list: {out}");
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .filter(|l| l.contains("Ongoing") || l.contains("Prepare"))
            .map(str::to_owned)
            .collect()
    }

    /// The node id of the broker coordinating `transactional_id`'s transactions, as Kafka's
    /// own `kafka-transactions describe` shows it.
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        let (ok, out) = self.kafka_tool(
            "org.apache.kafka.tools.TransactionsCommand",
            &["describe", "--transactional-id", transactional_id],
        );
        assert!(ok, "kafka-transactions describe: {out}");
        // A header (`CoordinatorId  TransactionalId  ProducerId …`) and one row.
        let mut lines = out.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let row: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        header
            .iter()
            .position(|h| *h == "CoordinatorId")
            .and_then(|i| row.get(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no coordinator in kafka-transactions describe: {out}"))
    }

    /// The group's committed offset and the log end offset per partition of `topic`, as
    /// Kafka's own `kafka-consumer-groups --describe` shows them: `(partition, current, end)`
    /// (`current` is `None` for `-`).
    pub fn group_offsets(&self, group: &str, topic: &str) -> Vec<(i32, Option<i64>, i64)> {
        let (ok, out) = self.kafka_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            &["--describe", "--group", group, "--offsets"],
        );
        assert!(ok, "kafka-consumer-groups --describe: {out}");
        let mut rows: Vec<(i32, Option<i64>, i64)> = out
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() < 5 || w[0] != group || w[1] != topic {
                    return None;
                }
                Some((w[2].parse().ok()?, w[3].parse().ok(), w[4].parse().ok()?))
            })
            .collect();
        rows.sort_unstable();
        rows
    }

    /// The Apache Kafka cluster (to kill, stop and restart nodes, or run Kafka's tools).
    pub fn cluster(&mut self) -> &mut crate::apache::Cluster {
        self.cluster.as_mut().expect("an Apache Kafka broker")
    }

    /// The broker's log files (Apache Kafka's nodes; `weir broker` logs to the test's stderr).
    pub fn logs(&self) -> Vec<std::path::PathBuf> {
        self.cluster
            .as_ref()
            .map_or_else(Vec::new, crate::apache::Cluster::logs)
    }

    /// Creates a topic through the admin API, replicated on up to 3 nodes (Apache Kafka;
    /// `weir broker` takes `create` on stdin).
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let rf = self.cluster.as_ref().map_or(1, |c| c.size().min(3)) as i32;
        self.create_topic_with(topic, partitions, rf);
    }

    /// Creates `topic` with `partitions` partitions, each on `rf` brokers.
    pub fn create_topic_with(&self, topic: &str, partitions: i32, rf: i32) {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().expect("admin client");
        let new = [NewTopic::new(
            topic,
            partitions,
            TopicReplication::Fixed(rf),
        )];
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let rt = futures_executor::block_on(admin.create_topics(&new, &opts));
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

    /// Produces `(partition, key, value)` records, waiting for every acknowledgement.
    pub fn produce(&self, topic: &str, records: &[(i32, String, String)]) {
        produce(&self.bootstrap, topic, records);
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
        // Until every partition reached its end offset and nothing more comes for a moment.
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
                    // A broker of a cluster that was killed: the client reads from the others.
                    Err(e)
                        if matches!(
                            e.rdkafka_error_code(),
                            Some(
                                RDKafkaErrorCode::BrokerTransportFailure
                                    | RDKafkaErrorCode::AllBrokersDown
                            )
                        ) =>
                    {
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

    /// A transaction left open by `transactional_id` holding `group`'s offset `at` for
    /// `topic`'s partition 0, as a member killed between sending its offsets and ending its
    /// transaction leaves one. It stays open (for ten minutes) until a producer with the same
    /// id fences it, or the returned producer is dropped.
    pub fn open_transaction_with_offsets(
        &self,
        transactional_id: &str,
        group: &str,
        topic: &str,
        at: i64,
    ) -> BaseProducer {
        let p: BaseProducer = self
            .client()
            .set("transactional.id", transactional_id)
            .set("transaction.timeout.ms", "600000")
            .create()
            .expect("transactional producer");
        let t = Duration::from_secs(30);
        p.init_transactions(t).expect("init transactions");
        p.begin_transaction().expect("begin transaction");
        let c: BaseConsumer = self
            .client()
            .set("group.id", group)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(at))
            .expect("offset");
        let meta = c.group_metadata().expect("group metadata");
        p.send_offsets_to_transaction(&tpl, &meta, t)
            .expect("offsets sent to the transaction");
        p
    }

    /// The group's committed offset per partition (`None`: nothing committed).
    ///
    /// Asked as a `read_uncommitted` client: a `read_committed` one (librdkafka's default)
    /// asks for stable offsets, and the broker answers `UNSTABLE_OFFSET_COMMIT` while a
    /// transaction holding the group's offsets is open. A member killed between sending its
    /// offsets and ending its transaction leaves one open until the transaction timeout
    /// (60 s) or until its successor fences it, so asking before starting the successor
    /// waited out the whole timeout. The committed offsets are the same either way.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
        let c: BaseConsumer = self
            .client()
            .set("group.id", group)
            .set("isolation.level", "read_uncommitted")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        // A coordinator not ready yet (a cluster just started, a coordinator that moved)
        // answers so for a moment, and a metadata fetch right after a broker was killed
        // can time out while the client still waits on the dead one: ask again.
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            match c.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
                Err(e)
                    if matches!(
                        e.rdkafka_error_code(),
                        Some(
                            RDKafkaErrorCode::NotCoordinator
                                | RDKafkaErrorCode::CoordinatorNotAvailable
                                | RDKafkaErrorCode::CoordinatorLoadInProgress
                                | RDKafkaErrorCode::OperationTimedOut
                                | RDKafkaErrorCode::RequestTimedOut
                                | RDKafkaErrorCode::BrokerTransportFailure
                                | RDKafkaErrorCode::AllBrokersDown
                        )
                    ) && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => break r.expect("committed offsets"),
            }
        };
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
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
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

/// The consumer group protocol a test's pipeline runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The classic protocol, cooperative-sticky ([`kafka_pipeline`]'s own).
    Classic,
    /// KIP-848's (`group_protocol: consumer`): the broker owns the session (6 s on the test
    /// cluster, as the classic pipelines set it) and the assignment.
    Consumer,
}

impl Protocol {
    /// `yaml` (made by [`kafka_pipeline`]) under this protocol.
    pub fn apply(self, yaml: &str) -> String {
        match self {
            Protocol::Classic => yaml.to_owned(),
            Protocol::Consumer => {
                let classic = "    properties:\n      session.timeout.ms: 6000\n      heartbeat.interval.ms: 500\n";
                assert!(yaml.contains(classic), "not a kafka_pipeline: {yaml}");
                yaml.replace(classic, "    group_protocol: consumer\n")
            }
        }
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
pub fn produce(bootstrap: &str, topic: &str, records: &[(i32, String, String)]) {
    produce_with(&producer(bootstrap), topic, records);
}

/// The tests' producer of input records.
fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // A send retried through a broker fault must not write the input twice (a cluster
        // stopped for 20 s gave one partition 17 records twice, which the exactly-once check
        // then counted as Weir's duplicates).
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("batch.num.messages", "10000")
        .create()
        .expect("producer")
}

/// Produces `records` with `p`, waiting for every acknowledgement.
fn produce_with(p: &BaseProducer, topic: &str, records: &[(i32, String, String)]) {
    for (part, k, v) in records {
        let rec = BaseRecord::to(topic)
            .partition(*part)
            .key(k.as_bytes())
            .payload(v.as_bytes())
            .headers(OwnedHeaders::new().insert(Header {
                key: "origin",
                value: Some(k.as_bytes()),
            }));
        send(p, rec);
    }
    // Long enough to ride out a cluster stopped for a while (the fault tests).
    p.flush(Duration::from_secs(120)).expect("flush");
}

/// Sends `rec`, polling while the producer's queue is full.
pub fn send<K, P>(p: &BaseProducer, mut rec: BaseRecord<'_, K, P>)
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((_, r)) => {
                rec = r;
                p.poll(Duration::from_millis(5));
            }
        }
    }
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

/// Records per partition of `topic` as a `read_committed` reader counts them (a
/// transactional topic's end offset counts its markers too).
pub fn high_watermarks(b: &Broker, topic: &str, parts: i32) -> Vec<i64> {
    let recs = b.read(topic);
    (0..parts)
        .map(|p| recs.iter().filter(|r| r.partition == p).count() as i64)
        .collect()
}

/// A one-node Apache Kafka cluster with these topics (`scripts/test` fetches Kafka and sets
/// `WEIR_KAFKA_HOME`; without it these tests fail, they are not skipped).
pub fn kafka(topics: &[(&str, i32)]) -> Broker {
    Broker::apache(topics)
}

/// Produces `records` in `chunks` pieces, one every `every`, from a background thread.
pub fn trickle(
    b: &Broker,
    topic: &'static str,
    records: Vec<(i32, String, String)>,
    chunks: usize,
    every: Duration,
) -> std::thread::JoinHandle<()> {
    // One producer for every chunk (an idempotent producer's first send waits for its
    // producer id: a new one per chunk slowed the input down during broker faults).
    let p = producer(&b.bootstrap);
    std::thread::spawn(move || {
        let per = records.len().div_ceil(chunks);
        for chunk in records.chunks(per) {
            produce_with(&p, topic, chunk);
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

/// Whether the log file `log` in `s` shows `text` within `within` (read again every 50 ms).
pub fn log_shows(s: &Scratch, log: &str, text: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if std::fs::read_to_string(s.path(log))
            .unwrap_or_default()
            .contains(text)
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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
