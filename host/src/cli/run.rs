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
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("report serializes")
                );
            } else {
                super::summary(&report);
            }
            match report.state {
                ExitState::Completed | ExitState::Interrupted => ExitCode::SUCCESS,
                ExitState::Failed => ExitCode::from(super::EXIT_FAILED),
            }
        }
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
        topics.extend(k.topics.iter().cloned());
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
        if sources.contains(&topic) || topic.starts_with("__") {
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
