//! `weir run`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{PipelineConfig, SinkConfig, SourceConfig};
use crate::kafka::embedded::EmbeddedBroker;
use crate::report::ExitState;
use crate::runtime::{self, RunOptions};

/// Arguments of `weir run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline YAML.
    pipeline: PathBuf,
    /// Also write the JSON run report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the JSON run report on stdout instead of the summary on stderr.
    #[arg(long)]
    json: bool,
    /// Start a Kafka-protocol broker in this process (librdkafka's mock cluster) and point
    /// every Kafka source and sink of the pipeline at it.
    #[arg(long)]
    embedded_broker: bool,
    /// With `--embedded-broker`: produce a JSONL file to a topic before the run (repeatable).
    #[arg(long, value_name = "TOPIC=FILE", requires = "embedded_broker")]
    seed: Vec<String>,
    /// With `--embedded-broker`: partitions of each topic the pipeline names.
    #[arg(long, default_value_t = 3, requires = "embedded_broker")]
    partitions: i32,
    /// With `--embedded-broker`: after the run, write each topic the pipeline produced to
    /// `DIR/TOPIC.jsonl`.
    #[arg(long, value_name = "DIR", requires = "embedded_broker")]
    dump: Option<PathBuf>,
    /// Before the run, move the group's committed offsets on every partition of the source
    /// topics: `earliest`, `latest`, a time (`2026-12-01T00:00:00Z`), a time ago (`-1h`) or
    /// an offset (`+1000`). Refused while the group has active members.
    #[arg(long, value_name = "WHERE", value_parser = crate::config::StartFrom::parse)]
    reset_to: Option<crate::config::StartFrom>,
}

pub fn run(args: &RunArgs) -> ExitCode {
    let mut cfg = match crate::config::load(&args.pipeline) {
        Ok(c) => c,
        Err(e) => return super::bad_input(e),
    };
    let broker = if args.embedded_broker {
        match embedded(&mut cfg, args) {
            Ok(b) => Some(b),
            Err(e) => return super::bad_input(e),
        }
    } else {
        None
    };
    if let Some(to) = args.reset_to {
        let SourceConfig::Kafka(k) = &cfg.source else {
            return super::bad_input("--reset-to needs a Kafka source");
        };
        match crate::kafka::reset::reset(k, to, cfg.runtime.connect_timeout) {
            Ok(moved) => {
                for (topic, partition, old, new) in moved {
                    let old = old.map_or_else(|| "none".to_owned(), |o| o.to_string());
                    super::note(&format!(
                        "weir: group `{}`: {topic}/{partition} committed {old} -> {new}",
                        k.group
                    ));
                }
            }
            Err(f) => return super::client_failure("--reset-to: ", &f),
        }
    }
    let opts = RunOptions {
        report: args.report.clone(),
        progress: !args.json,
    };
    match runtime::run(&cfg, &opts) {
        Ok(report) => {
            if let (Some(b), Some(dir)) = (&broker, &args.dump) {
                if let Err(e) = dump(b, &cfg, dir) {
                    super::note(&format!("error: {e}"));
                }
            }
            if args.json {
                let json = serde_json::to_string_pretty(&report).expect("report serializes");
                println!("{}", crate::redact::redact(&json));
            } else {
                super::summary(&report);
            }
            match report.state {
                ExitState::Completed | ExitState::Interrupted => ExitCode::SUCCESS,
                // A Kafka client failure says its own code (2: credentials and configuration
                // the cluster refused).
                ExitState::Failed => ExitCode::from(
                    report
                        .error_kind
                        .map_or(super::EXIT_FAILED, |k| k.exit_code()),
                ),
            }
        }
        Err(runtime::StartError::Kafka(f)) => super::client_failure("start-up check: ", &f),
        Err(e) => super::bad_input(e),
    }
}

/// Starts the embedded broker, points the pipeline at it, creates its topics, seeds them.
fn embedded(cfg: &mut PipelineConfig, args: &RunArgs) -> Result<EmbeddedBroker, String> {
    let broker = EmbeddedBroker::start(1).map_err(|e| e.to_string())?;
    let bootstrap = broker.bootstrap().to_owned();
    let mut topics = Vec::new();
    if let SourceConfig::Kafka(k) = &mut cfg.source {
        k.brokers = bootstrap.clone();
        // A `^pattern` names no topic to create.
        topics.extend(
            k.topics
                .iter()
                .filter(|t| !crate::config::is_pattern(t))
                .cloned(),
        );
    }
    for s in std::iter::once(&mut cfg.sink).chain(cfg.reject.as_mut()) {
        if let SinkConfig::Kafka(k) = s {
            k.brokers = bootstrap.clone();
            topics.push(k.topic.clone());
        }
    }
    if topics.is_empty() {
        return Err(
            "--embedded-broker needs a pipeline with a Kafka source, sink or reject path".into(),
        );
    }
    for t in &topics {
        broker
            .create_topic(t, args.partitions)
            .map_err(|e| e.to_string())?;
    }
    for s in &args.seed {
        let (topic, file) = super::broker::parse_seed(s)?;
        let n = broker
            .seed_jsonl(&topic, &file)
            .map_err(|e| e.to_string())?;
        super::note(&format!(
            "weir: embedded broker {bootstrap}: seeded {n} messages into `{topic}`"
        ));
    }
    Ok(broker)
}

/// Writes every topic other than the sources to `dir/TOPIC.jsonl`.
fn dump(broker: &EmbeddedBroker, cfg: &PipelineConfig, dir: &Path) -> Result<(), String> {
    let sources: &[String] = match &cfg.source {
        SourceConfig::Kafka(k) => &k.topics,
        _ => &[],
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for topic in broker.topics().map_err(|e| e.to_string())? {
        let by_pattern = sources.iter().any(|p| {
            crate::config::is_pattern(p)
                && regex_lite::Regex::new(p).is_ok_and(|re| re.is_match(&topic))
        });
        if sources.contains(&topic) || by_pattern || topic.starts_with("__") {
            continue;
        }
        let msgs = broker.read_topic(&topic).map_err(|e| e.to_string())?;
        let path = dir.join(format!("{topic}.jsonl"));
        let mut text = String::new();
        for (_, _, m) in &msgs {
            text.push_str(&serde_json::Value::Object(crate::jsonl::message_json(m)).to_string());
            text.push('\n');
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        super::note(&format!(
            "weir: topic `{topic}`: {} messages -> {}",
            msgs.len(),
            path.display()
        ));
    }
    Ok(())
}
