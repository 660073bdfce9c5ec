//! Apache Kafka for the end-to-end tests (issue 49): a KRaft cluster of 1 or 3 combined nodes
//! (each a broker and a controller) on free loopback ports, run from the jars that
//! `scripts/ensure-kafka` fetched (`WEIR_KAFKA_HOME`; `scripts/test` sets it).
//!
//! Each node's storage is formatted with `kafka.tools.StorageTool format`, then the node is
//! started with `kafka.Kafka` and is ready when its log says `Kafka Server started`. The heap is
//! capped (3 nodes and the suite fit on a small machine), the cleaner's buffer is small and
//! `group.initial.rebalance.delay.ms` is 0. Nodes can be killed (`kill -9`), stopped (SIGTERM)
//! and started again on the same ports and storage; all are killed when the cluster is
//! dropped. Their logs are kept in the cluster's folder for the tests' evidence.
//!
//! This drives Kafka's own main classes rather than `KafkaClusterTestKit`: a test needs real
//! processes to kill with a signal, and the same start command is what users run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Heap per node: Kafka with a few test topics stays far below it.
const HEAP: &str = "-Xmx320m";

/// One node: a broker and a controller in one process.
struct Node {
    id: usize,
    port: u16,
    /// The listener between brokers (plaintext, whatever the clients' listener takes).
    internal: u16,
    controller: u16,
    child: Option<Child>,
}

/// An Apache Kafka cluster in KRaft mode, killed when dropped.
pub struct Cluster {
    home: PathBuf,
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    /// [`Options::jvm`].
    jvm: Vec<String>,
    /// `bootstrap.servers`: every node's client listener.
    pub bootstrap: String,
}

/// `WEIR_KAFKA_HOME`: where `scripts/ensure-kafka` put Kafka (its `libs/` and `log4j2.xml`).
pub fn home() -> PathBuf {
    let home = std::env::var("WEIR_KAFKA_HOME").expect(
        "WEIR_KAFKA_HOME is not set: run the tests with ./scripts/test (it fetches Apache Kafka with scripts/ensure-kafka), or set it to what that script prints",
    );
    let home = PathBuf::from(home);
    assert!(
        home.join("libs").is_dir(),
        "WEIR_KAFKA_HOME={} has no libs/ (run scripts/ensure-kafka)",
        home.display()
    );
    home
}

use crate::free_port;

/// How a cluster is set up beyond the defaults.
#[derive(Default, Clone)]
pub struct Options {
    /// Broker properties added to (or overriding) every node's.
    pub properties: Vec<(String, String)>,
    /// `--add-scram` arguments for the format (`SCRAM-SHA-256=[name=u,password=p]`).
    pub scram: Vec<String>,
    /// The client listener's security protocol, when not `PLAINTEXT` (`SASL_PLAINTEXT`,
    /// `SSL`, `SASL_SSL`).
    pub protocol: Option<String>,
    /// The host name clients are given for the client listener (`127.0.0.1` when unset; a
    /// TLS test gives `localhost`, the name on the server's certificate).
    pub host: Option<String>,
    /// JVM options put after the defaults (so they win: a benchmark's `-Xmx1g`,
    /// `-XX:TieredStopAtLevel=4`).
    pub jvm: Vec<String>,
}

impl Cluster {
    /// Starts `nodes` (1 or 3) nodes with the defaults.
    pub fn start(nodes: usize) -> Cluster {
        Self::with(nodes, &Options::default())
    }

    /// Starts `nodes` nodes with `opts`, each formatted first.
    pub fn with(nodes: usize, opts: &Options) -> Cluster {
        assert!(nodes >= 1, "a cluster has nodes");
        let home = home();
        let dir = tempfile::Builder::new()
            .prefix("kafka-")
            .tempdir()
            .expect("a folder for the cluster");
        let nodes: Vec<Node> = (1..=nodes)
            .map(|id| Node {
                id,
                port: free_port(),
                internal: free_port(),
                controller: free_port(),
                child: None,
            })
            .collect();
        let host = opts.host.as_deref().unwrap_or("127.0.0.1");
        let bootstrap = nodes
            .iter()
            .map(|n| format!("{host}:{}", n.port))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            home,
            dir,
            nodes,
            jvm: opts.jvm.clone(),
            bootstrap,
        };
        let id = c.cluster_id();
        for i in 0..c.nodes.len() {
            let props = c.properties(i, opts);
            std::fs::write(c.config(i), props).expect("node config");
        }
        // Format every node's storage (in parallel: each is a JVM start).
        let formats: Vec<_> = (0..c.nodes.len())
            .map(|i| {
                let mut cmd = c.java("kafka.tools.StorageTool");
                cmd.args(["format", "-t", &id, "-c"])
                    .arg(c.config(i))
                    .arg("--ignore-formatted");
                for s in &opts.scram {
                    cmd.args(["--add-scram", s]);
                }
                cmd.stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("starting kafka.tools.StorageTool")
            })
            .collect();
        for (i, f) in formats.into_iter().enumerate() {
            let out = f.wait_with_output().expect("StorageTool format");
            assert!(
                out.status.success(),
                "formatting node {} failed: {}{}",
                i + 1,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for i in 0..c.nodes.len() {
            c.spawn(i);
        }
        for i in 0..c.nodes.len() {
            c.wait_started(i, 0);
        }
        c
    }

    /// A cluster id for the format (Kafka's own, from `StorageTool random-uuid`).
    fn cluster_id(&self) -> String {
        let out = self
            .java("kafka.tools.StorageTool")
            .arg("random-uuid")
            .stderr(Stdio::null())
            .output()
            .expect("StorageTool random-uuid");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(id.len() == 22, "StorageTool random-uuid printed {id:?}");
        id
    }

    /// `java` with the heap capped, Kafka's jars and its logging configuration.
    fn java(&self, main: &str) -> Command {
        let mut cmd = Command::new("java");
        cmd.args([
            HEAP,
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:MaxMetaspaceSize=128m",
            "-Djava.awt.headless=true",
        ])
        .args(&self.jvm)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            self.home.join("log4j2.xml").display()
        ))
        .arg("-cp")
        .arg(format!("{}/*", self.home.join("libs").display()))
        .arg(main)
        .stdin(Stdio::null());
        cmd
    }

    fn config(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node-{}.properties", i + 1))
    }

    /// Node `i`'s log file (its stdout and stderr, across restarts).
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node-{}.log", i + 1))
    }

    /// Every node's log file.
    pub fn logs(&self) -> Vec<PathBuf> {
        (0..self.nodes.len()).map(|i| self.log(i)).collect()
    }

    /// How many nodes the cluster has.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`'s client address.
    pub fn address(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].port)
    }

    /// Node `i`'s broker id (`node.id`).
    pub fn node_id(&self, i: usize) -> i32 {
        self.nodes[i].id as i32
    }

    fn properties(&self, i: usize, opts: &Options) -> String {
        let n = self.nodes.len();
        let node = &self.nodes[i];
        let voters = self
            .nodes
            .iter()
            .map(|m| format!("{}@127.0.0.1:{}", m.id, m.controller))
            .collect::<Vec<_>>()
            .join(",");
        let client = opts.protocol.as_deref().unwrap_or("PLAINTEXT");
        let rf = n.min(3);
        let isr = if n >= 3 { 2 } else { 1 };
        let mut p: Vec<(String, String)> = [
            ("process.roles", "broker,controller".to_owned()),
            ("node.id", node.id.to_string()),
            ("controller.quorum.voters", voters),
            (
                "listeners",
                format!(
                    "CLIENT://127.0.0.1:{},INTERNAL://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
                    node.port, node.internal, node.controller
                ),
            ),
            (
                "advertised.listeners",
                format!(
                    "CLIENT://{}:{},INTERNAL://127.0.0.1:{}",
                    opts.host.as_deref().unwrap_or("127.0.0.1"),
                    node.port,
                    node.internal
                ),
            ),
            ("controller.listener.names", "CONTROLLER".to_owned()),
            ("inter.broker.listener.name", "INTERNAL".to_owned()),
            (
                "listener.security.protocol.map",
                format!("CLIENT:{client},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"),
            ),
            (
                "log.dirs",
                self.dir
                    .path()
                    .join(format!("data-{}", node.id))
                    .display()
                    .to_string(),
            ),
            ("auto.create.topics.enable", "false".to_owned()),
            ("default.replication.factor", rf.to_string()),
            ("min.insync.replicas", isr.to_string()),
            ("offsets.topic.replication.factor", rf.to_string()),
            ("offsets.topic.num.partitions", "5".to_owned()),
            ("transaction.state.log.replication.factor", rf.to_string()),
            ("transaction.state.log.min.isr", isr.to_string()),
            ("transaction.state.log.num.partitions", "5".to_owned()),
            (
                "share.coordinator.state.topic.replication.factor",
                rf.to_string(),
            ),
            ("share.coordinator.state.topic.min.isr", isr.to_string()),
            ("group.initial.rebalance.delay.ms", "0".to_owned()),
            // The consumer protocol's (KIP-848) session and heartbeat, which the broker owns:
            // as short as the classic tests' (6 s, 0.5 s), so a killed member's partitions
            // move as soon under either protocol.
            ("group.consumer.min.session.timeout.ms", "6000".to_owned()),
            ("group.consumer.session.timeout.ms", "6000".to_owned()),
            ("group.consumer.min.heartbeat.interval.ms", "500".to_owned()),
            ("group.consumer.heartbeat.interval.ms", "500".to_owned()),
            // The smallest the broker takes (it wants more than 1 MiB per cleaner thread).
            ("log.cleaner.dedupe.buffer.size", "2097152".to_owned()),
            ("num.network.threads", "2".to_owned()),
            ("num.io.threads", "2".to_owned()),
            ("num.recovery.threads.per.data.dir", "1".to_owned()),
            ("background.threads", "2".to_owned()),
            ("log.segment.bytes", "16777216".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        for (k, v) in &opts.properties {
            match p.iter_mut().find(|(pk, _)| pk == k) {
                Some(e) => e.1 = v.clone(),
                None => p.push((k.clone(), v.clone())),
            }
        }
        let mut out = String::new();
        for (k, v) in p {
            let _ = writeln!(out, "{k}={v}");
        }
        out
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .expect("node log");
        let err = log.try_clone().expect("node log");
        let child = self
            .java("kafka.Kafka")
            .arg(self.config(i))
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("starting kafka.Kafka");
        self.nodes[i].child = Some(child);
    }

    /// Waits (up to 90 s) until node `i`'s log says `Kafka Server started` past byte `from`.
    fn wait_started(&mut self, i: usize, from: usize) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let text = std::fs::read(self.log(i)).unwrap_or_default();
            if text.len() > from
                && String::from_utf8_lossy(&text[from..]).contains("Kafka Server started")
            {
                return;
            }
            if let Some(st) = self.nodes[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "Kafka node {} exited ({st}) before it started:{}",
                    i + 1,
                    crate::evidence::tail(&self.log(i))
                );
            }
            assert!(
                Instant::now() < deadline,
                "Kafka node {} did not start within 90 s:{}",
                i + 1,
                crate::evidence::tail(&self.log(i))
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kill -9` node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops node `i` with SIGTERM (a controlled shutdown) and waits for it to exit.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Starts node `i` again (same ports, same storage) and waits until it is up.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {} is running", i + 1);
        let from = std::fs::metadata(self.log(i)).map_or(0, |m| m.len() as usize);
        self.spawn(i);
        self.wait_started(i, from);
    }

    /// Starts every stopped node again, side by side (a KRaft quorum needs a majority of its
    /// controllers before any node is up), and waits until each is up.
    pub fn restart_all(&mut self) {
        let stopped: Vec<usize> = (0..self.nodes.len()).filter(|&i| !self.is_up(i)).collect();
        let from: Vec<usize> = stopped
            .iter()
            .map(|&i| std::fs::metadata(self.log(i)).map_or(0, |m| m.len() as usize))
            .collect();
        for &i in &stopped {
            self.spawn(i);
        }
        for (&i, from) in stopped.iter().zip(from) {
            self.wait_started(i, from);
        }
    }

    /// Node `i`'s process id, while it runs (a benchmark reads its CPU time).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// Whether node `i` is running.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// The folder holding the nodes' configs, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs one of Kafka's own command-line tools (`org.apache.kafka.tools.TransactionsCommand`
    /// …) against the cluster with `args`; returns (exit success, stdout + stderr).
    pub fn tool(&self, main: &str, args: &[&str]) -> (bool, String) {
        let out = self
            .java(main)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {main}: {e}"));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
