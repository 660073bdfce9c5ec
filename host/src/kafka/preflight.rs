//! The start-up checks against the Kafka cluster (`weir check --connect`, and `weir run`
//! before any stage is called).
//!
//! Each check connects with the pipeline's own client settings (its `security` block and
//! `properties`) and answers one line. The clients' checks run side by side; the first that
//! fails, in the table's order, ends them with a [`ClientFailure`] naming it: a TLS or SASL failure, a missing topic, a refused group or
//! transactional id (exit 2), or no broker answering within `runtime.connect_timeout`
//! (exit 1: a broker that is down may come back).
//!
//! | check | how |
//! |---|---|
//! | the source's brokers answer | a Metadata request with the consumer's settings |
//! | each source topic exists (a `^pattern` matches what it matches now) | the same metadata |
//! | each source topic can be read | ListOffsets on its first partition |
//! | the group can be used | OffsetFetch of the group's committed offsets (needs the group ACL) |
//! | the sink and reject topics exist, or the broker creates topics | Metadata with the producer's settings, then the broker's `auto.create.topics.enable` |
//! | a transactional id can be initialised (`delivery: exactly-once`) | InitProducerId with `<prefix>.preflight` |

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::Client;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::fatal::{classify, ClientFailure, FailureKind};
use super::retry::{any_of, asked_again, COORDINATOR_MOVING, LEADER_MOVING};
use crate::config::{
    is_pattern, Delivery, KafkaSink, KafkaSource, PipelineConfig, SinkConfig, SourceConfig,
};

/// Remembers what librdkafka reported while a check ran; logs only at debug level (the
/// check's own line says what happened).
#[derive(Default)]
pub struct Capture {
    errors: Mutex<Vec<(KafkaError, String)>>,
    /// librdkafka's error-level log lines that say why a connection failed (they come at
    /// once; the error events can lag them by seconds).
    fails: Mutex<Vec<String>>,
    /// A broker closed the connection while the client asked for its API versions (the first
    /// request): what a listener expecting TLS or SASL does to a plaintext client.
    closed_at_hello: std::sync::atomic::AtomicBool,
}

impl Capture {
    /// The first error that cannot heal, as a failure of `client`.
    fn fatal(&self, client: &str) -> Option<ClientFailure> {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let event = errors.iter().find_map(|(e, reason)| {
            let kind = classify(e.rdkafka_error_code()?, reason)?;
            Some(failure(client, kind, describe(e, reason)))
        });
        event.or_else(|| {
            let fails = self.fails.lock().unwrap_or_else(|p| p.into_inner());
            fails.iter().find_map(|line| {
                let kind = super::fatal::classify_log(line)?;
                Some(failure(client, kind, line.clone()))
            })
        })
    }

    /// Whether librdkafka said every broker is down.
    fn all_down(&self) -> bool {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.iter().any(|(e, _)| {
            e.rdkafka_error_code() == Some(rdkafka::error::RDKafkaErrorCode::AllBrokersDown)
        })
    }

    /// The last error seen that says more than "all brokers are down" (for a time-out's
    /// message).
    fn last(&self) -> Option<String> {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let telling = |(e, _): &&(KafkaError, String)| {
            e.rdkafka_error_code() != Some(rdkafka::error::RDKafkaErrorCode::AllBrokersDown)
        };
        errors
            .iter()
            .rev()
            .find(telling)
            .or(errors.last())
            .map(|(e, r)| describe(e, r))
    }
}

fn describe(e: &KafkaError, reason: &str) -> String {
    let e = e.to_string();
    if reason.is_empty() || e.contains(reason) {
        e
    } else {
        format!("{e}: {reason}")
    }
}

impl ClientContext for Capture {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        if matches!(level, RDKafkaLogLevel::Debug) {
            return;
        }
        tracing::debug!(target: "librdkafka", "preflight {fac}: {msg}");
        if msg.contains("Disconnected") && msg.contains("in state APIVERSION_QUERY") {
            self.closed_at_hello
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            // "[thrd:ssl://host:9093/bootstrap]: ssl://host:9093/bootstrap: …": the thread
            // name says nothing the rest does not.
            let msg = match msg.strip_prefix("[thrd:").and_then(|r| r.split_once("]: ")) {
                Some((_, rest)) => rest,
                None => msg,
            };
            self.fails
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(msg.to_owned());
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!("preflight: {error}: {reason}");
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((error, reason.to_owned()));
    }
}

impl ConsumerContext for Capture {}
impl ProducerContext for Capture {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

fn failure(client: &str, kind: FailureKind, message: String) -> ClientFailure {
    ClientFailure {
        client: client.to_owned(),
        kind,
        message,
    }
}

/// One answered check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    /// Which client (`source`, `sink`, `reject path`).
    pub client: String,
    /// What was checked, and what the cluster answered.
    pub what: String,
}

impl std::fmt::Display for CheckLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ok    {:<12} {}", self.client, self.what)
    }
}

/// Whether the pipeline has a Kafka client to check.
pub fn applies(cfg: &PipelineConfig) -> bool {
    matches!(cfg.source, SourceConfig::Kafka(_))
        || std::iter::once(&cfg.sink)
            .chain(cfg.reject.as_ref())
            .any(|s| matches!(s, SinkConfig::Kafka(_)))
}

/// Who runs the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `weir check --connect`: a cluster that does not answer within the timeout fails.
    Check,
    /// `weir run`: a broker that is merely down is librdkafka's to retry, as it always was;
    /// that client's checks are skipped with a warning as soon as every broker refused, and
    /// the run starts.
    Run,
}

/// Runs every check, reporting each that passes to `ok`; the first that fails is the error.
pub fn run(
    cfg: &PipelineConfig,
    timeout: Duration,
    mode: Mode,
    ok: &mut dyn FnMut(&CheckLine),
) -> Result<(), ClientFailure> {
    let down = |r: Result<(), ClientFailure>| match r {
        Err(f) if mode == Mode::Run && f.kind == FailureKind::Runtime => {
            tracing::warn!(
                "{}: {}; starting anyway (the client retries)",
                f.client,
                f.message
            );
            Ok(())
        }
        r => r,
    };
    // The checks are independent, so they run side by side (the slowest, a transactional
    // id's initialisation, takes about half a second by itself: issue 50 measured a restart);
    // their lines, and the first failure, still come in the table's order.
    type Check<'a> =
        Box<dyn FnOnce(&mut dyn FnMut(&CheckLine)) -> Result<(), ClientFailure> + Send + 'a>;
    let mut checks: Vec<Check<'_>> = Vec::new();
    if let SourceConfig::Kafka(k) = &cfg.source {
        checks.push(Box::new(move |ok| down(source(k, timeout, mode, ok))));
    }
    if let SinkConfig::Kafka(k) = &cfg.sink {
        checks.push(Box::new(move |ok| down(sink(k, "sink", timeout, mode, ok))));
    }
    if let Some(SinkConfig::Kafka(k)) = &cfg.reject {
        checks.push(Box::new(move |ok| {
            down(sink(k, "reject path", timeout, mode, ok))
        }));
    }
    if cfg.delivery == Delivery::ExactlyOnce {
        if let (SourceConfig::Kafka(src), SinkConfig::Kafka(k)) = (&cfg.source, &cfg.sink) {
            checks.push(Box::new(move |ok| transactions(k, &src.group, timeout, ok)));
        }
    }
    let answers: Vec<(Vec<CheckLine>, Result<(), ClientFailure>)> = std::thread::scope(|s| {
        let running: Vec<_> = checks
            .into_iter()
            .map(|check| {
                s.spawn(move || {
                    let mut lines = Vec::new();
                    let r = check(&mut |l: &CheckLine| lines.push(l.clone()));
                    (lines, r)
                })
            })
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for (lines, answer) in answers {
        for line in &lines {
            ok(line);
        }
        answer?;
    }
    Ok(())
}

/// Metadata of every topic, retried in short steps until `timeout`; an error that cannot heal
/// (TLS, SASL) ends it at once. `pump` serves the client's events, so its errors reach
/// `capture` (librdkafka hands them over only when the client is polled). A connection is
/// reported to `ok` with its brokers and how it is secured.
fn connect<C: ClientContext>(
    client: &Client<C>,
    (pump, capture): (&dyn Fn(), &Capture),
    (name, brokers, security): (&str, &str, Option<&crate::config::Security>),
    (timeout, mode): (Duration, Mode),
    ok: &mut dyn FnMut(&CheckLine),
) -> Result<Metadata, ClientFailure> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let step = left
            .min(Duration::from_millis(500))
            .max(Duration::from_millis(50));
        let got = client.fetch_metadata(None, step);
        pump();
        if let Some(f) = capture.fatal(name) {
            return Err(f);
        }
        match got {
            Ok(m) if !m.brokers().is_empty() => {
                let n = m.brokers().len();
                ok(&CheckLine {
                    client: name.to_owned(),
                    what: format!(
                        "connected to {brokers} ({n} {}; {})",
                        if n == 1 { "broker" } else { "brokers" },
                        security.map_or_else(|| "plaintext".to_owned(), |s| s.describe())
                    ),
                });
                return Ok(m);
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(kind) = e.rdkafka_error_code().and_then(|c| classify(c, "")) {
                    return Err(failure(name, kind, e.to_string()));
                }
            }
        }
        // Every connection closed at the first request: the listener speaks another protocol.
        let (kind, why) = if capture
            .closed_at_hello
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            (
                FailureKind::Configuration,
                format!(
                    "; the broker closed every connection at the client's first request, which is what a listener expecting TLS or SASL does to a client that speaks {}: set `security` (its `protocol`) as the listener expects",
                    security.map_or_else(|| "plaintext".to_owned(), |s| s.describe())
                ),
            )
        } else {
            (FailureKind::Runtime, String::new())
        };
        if mode == Mode::Run && capture.all_down() {
            return Err(failure(
                name,
                kind,
                format!(
                    "no broker of `{brokers}` is reachable ({}){why}",
                    capture.last().unwrap_or_default()
                ),
            ));
        }
        if Instant::now() >= deadline {
            let last = capture
                .last()
                .map_or_else(String::new, |l| format!(" (last error: {l})"));
            return Err(failure(
                name,
                kind,
                format!(
                    "no broker of `{brokers}` answered within {} (runtime.connect_timeout){last}{why}",
                    humantime::format_duration(timeout)
                ),
            ));
        }
    }
}

/// A client that could not be made from its settings. A client key librdkafka cannot read
/// says only `ssl.key.location failed: … PEM lib`: named here, with its likely causes.
fn settings_err<'a>(
    name: &'a str,
    security: Option<&'a crate::config::Security>,
) -> impl Fn(KafkaError) -> ClientFailure + 'a {
    move |e| {
        let text = e.to_string();
        match security.and_then(|s| s.key.as_ref()) {
            Some(key) if text.contains("ssl.key.location") => failure(
                name,
                FailureKind::Configuration,
                format!(
                    "the client key `{}` could not be read: its password (`key_password` or `key_password_file`) is wrong, or the file is not a PEM private key ({text})",
                    key.display()
                ),
            ),
            _ => client_err(name, "the client settings")(e),
        }
    }
}

fn client_err<'a>(name: &'a str, what: &str) -> impl Fn(KafkaError) -> ClientFailure + 'a {
    let what = what.to_owned();
    move |e| {
        let kind = e
            .rdkafka_error_code()
            .and_then(|c| classify(c, ""))
            .unwrap_or(FailureKind::Configuration);
        failure(name, kind, format!("{what}: {e}"))
    }
}

fn source(
    k: &KafkaSource,
    timeout: Duration,
    mode: Mode,
    ok: &mut dyn FnMut(&CheckLine),
) -> Result<(), ClientFailure> {
    let name = "source";
    let line = |what: String| CheckLine {
        client: name.to_owned(),
        what,
    };
    let mut config: ClientConfig = super::client::consumer_config(k);
    config.set("log_level", "3");
    // The group check reads the committed offsets only to show that the group is usable.
    // A `read_committed` client asks for stable ones, which the broker refuses while a
    // transaction holding the group's offsets is open: a member killed between sending its
    // offsets and ending its transaction leaves one open until its successor's producer
    // fences it, which comes after these checks, so its successor could not start.
    config.set("isolation.level", "read_uncommitted");
    super::queued::disable(&mut config);
    let consumer = BaseConsumer::from_config_and_context(&config, Capture::default())
        .map_err(settings_err(name, k.security.as_deref()))?;
    let capture = consumer.context();
    // Polling serves the error events (they reach `capture` through the context).
    let pump = || while consumer.poll(Duration::ZERO).is_some() {};
    let meta = connect(
        consumer.client(),
        (&pump, capture),
        (name, &k.brokers, k.security.as_deref()),
        (timeout, mode),
        ok,
    )?;
    let mut tpl = TopicPartitionList::new();
    for t in &k.topics {
        if is_pattern(t) {
            let re = regex_lite::Regex::new(t)
                .map_err(|e| failure(name, FailureKind::Configuration, format!("`{t}`: {e}")))?;
            let matched: Vec<&str> = meta
                .topics()
                .iter()
                .map(|m| m.name())
                .filter(|n| !n.starts_with("__") && re.is_match(n))
                .collect();
            ok(&line(format!(
                "pattern `{t}` matches {} topic(s) now{}{} (topics created later join at a metadata refresh)",
                matched.len(),
                if matched.is_empty() { "" } else { ": " },
                matched.join(", ")
            )));
            for m in matched {
                topic_partitions(&meta, m, &mut tpl);
            }
            continue;
        }
        let Some(m) = meta.topics().iter().find(|m| m.name() == t) else {
            return Err(failure(
                name,
                FailureKind::Configuration,
                format!("topic `{t}` does not exist on {}", k.brokers),
            ));
        };
        if let Some(e) = m.error() {
            let code = rdkafka::error::RDKafkaErrorCode::from(e);
            let kind = classify(code, "").unwrap_or(FailureKind::Configuration);
            let what = match code {
                rdkafka::error::RDKafkaErrorCode::UnknownTopicOrPartition => {
                    format!("topic `{t}` does not exist on {}", k.brokers)
                }
                _ => format!("topic `{t}`: {code}"),
            };
            return Err(failure(name, kind, what));
        }
        let parts = m.partitions().len();
        let first = m.partitions().first().map_or(0, |p| p.id());
        let (lo, hi) = asked_again(timeout, any_of(LEADER_MOVING), |left| {
            consumer.fetch_watermarks(t, first, left)
        })
        .map_err(client_err(name, &format!("reading topic `{t}`")))?;
        ok(&line(format!(
            "topic `{t}`: {parts} partition(s), readable (partition {}: offsets {lo}..{hi})",
            m.partitions().first().map_or(0, |p| p.id())
        )));
        topic_partitions(&meta, t, &mut tpl);
    }
    let committed = committed_offsets(&consumer, &tpl, timeout)
        .map_err(client_err(name, &format!("group `{}`", k.group)))?;
    let n = committed
        .elements()
        .iter()
        .filter(|e| matches!(e.offset(), Offset::Offset(_)))
        .count();
    if let Some(f) = capture.fatal(name) {
        return Err(f);
    }
    ok(&line(format!(
        "group `{}`: usable ({n} partition(s) with a committed offset)",
        k.group
    )));
    Ok(())
}

/// The group's committed offsets, asked again while its coordinator is not ready.
fn committed_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &TopicPartitionList,
    timeout: Duration,
) -> Result<TopicPartitionList, KafkaError> {
    asked_again(timeout, any_of(COORDINATOR_MOVING), |left| {
        consumer.committed_offsets(tpl.clone(), left)
    })
}

fn topic_partitions(meta: &Metadata, topic: &str, tpl: &mut TopicPartitionList) {
    if let Some(m) = meta.topics().iter().find(|m| m.name() == topic) {
        for p in m.partitions() {
            tpl.add_partition(topic, p.id());
        }
    }
}

fn sink(
    k: &KafkaSink,
    name: &str,
    timeout: Duration,
    mode: Mode,
    ok: &mut dyn FnMut(&CheckLine),
) -> Result<(), ClientFailure> {
    let line = |what: String| CheckLine {
        client: name.to_owned(),
        what,
    };
    let mut config = super::client::producer_config(k);
    config.remove("transactional.id");
    // Only metadata is asked for: an idempotent producer would also fetch a producer id.
    config.set("enable.idempotence", "false");
    config.set("log_level", "3");
    super::queued::disable(&mut config);
    let producer: BaseProducer<Capture> =
        BaseProducer::from_config_and_context(&config, Capture::default())
            .map_err(settings_err(name, k.security.as_deref()))?;
    let capture = producer.context();
    let pump = || {
        producer.poll(Duration::ZERO);
    };
    let meta = connect(
        producer.client(),
        (&pump, capture),
        (name, &k.brokers, k.security.as_deref()),
        (timeout, mode),
        ok,
    )?;
    let t = &k.topic;
    let exists = meta
        .topics()
        .iter()
        .find(|m| m.name() == t)
        .filter(|m| m.error().is_none());
    if let Some(m) = exists {
        ok(&line(format!(
            "topic `{t}`: {} partition(s)",
            m.partitions().len()
        )));
        return Ok(());
    }
    if let Some(e) = meta
        .topics()
        .iter()
        .find(|m| m.name() == t)
        .and_then(|m| m.error())
    {
        let code = rdkafka::error::RDKafkaErrorCode::from(e);
        if matches!(classify(code, ""), Some(FailureKind::Credentials)) {
            return Err(failure(
                name,
                FailureKind::Credentials,
                format!("topic `{t}`: {code}"),
            ));
        }
    }
    match auto_create(&config, &meta, timeout) {
        Some(true) => {
            ok(&line(format!(
                "topic `{t}`: missing; the broker creates it on the first write (auto.create.topics.enable)"
            )));
            Ok(())
        }
        Some(false) => Err(failure(
            name,
            FailureKind::Configuration,
            format!(
                "topic `{t}` does not exist on {} and the broker does not create topics (auto.create.topics.enable=false)",
                k.brokers
            ),
        )),
        None => {
            ok(&line(format!(
                "topic `{t}`: missing; created on the first write only if the broker auto-creates topics (its setting could not be read)"
            )));
            Ok(())
        }
    }
}

/// The broker's `auto.create.topics.enable`, if it answers DescribeConfigs.
fn auto_create(config: &ClientConfig, meta: &Metadata, timeout: Duration) -> Option<bool> {
    let broker = meta.brokers().first()?.id();
    let admin: AdminClient<Capture> =
        AdminClient::from_config_and_context(config, Capture::default()).ok()?;
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let answer = futures_executor::block_on(
        admin.describe_configs(&[ResourceSpecifier::Broker(broker)], &opts),
    )
    .ok()?;
    let resource = answer.into_iter().next()?.ok()?;
    let entry = resource.get("auto.create.topics.enable")?;
    entry.value.as_deref().map(|v| v == "true")
}

fn transactions(
    k: &KafkaSink,
    group: &str,
    timeout: Duration,
    ok: &mut dyn FnMut(&CheckLine),
) -> Result<(), ClientFailure> {
    let name = "transactions";
    let mut config = super::client::producer_config(k);
    let prefix = config
        .get("transactional.id")
        .map_or_else(|| format!("weir.{group}"), str::to_owned);
    let id = format!("{prefix}.preflight");
    config.set("transactional.id", &id);
    config.set("log_level", "3");
    super::queued::disable(&mut config);
    let producer: BaseProducer<Capture> =
        BaseProducer::from_config_and_context(&config, Capture::default())
            .map_err(settings_err(name, k.security.as_deref()))?;
    producer.init_transactions(timeout).map_err(client_err(
        name,
        &format!("initialising transactional id `{id}`"),
    ))?;
    if let Some(f) = producer.context().fatal(name) {
        return Err(f);
    }
    ok(&CheckLine {
        client: name.to_owned(),
        what: format!("transactional id `{id}` initialised (exactly-once)"),
    });
    Ok(())
}
