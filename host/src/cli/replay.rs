//! `weir replay`: dead-letter records back to the topics they came from.
//!
//! A thin verb over an ordinary pipeline (docs/replay.md shows it as YAML): the source is the
//! dead-letter topic (or a reject JSONL file, whose `reject` fields read as the same `weir.*`
//! headers), the one stage is the built-in `dlq-replay` component (filters, then the original
//! message without the `weir.*` headers, routed to `weir.source.topic`), the sink is Kafka.
//! `--dry-run` sends to discard instead and reads the topic with a throw-away group, so it
//! commits nothing: the report says how many records would be replayed.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::report::ExitState;
use crate::runtime::{self, RunOptions};

mod builtin {
    include!(concat!(env!("OUT_DIR"), "/builtin.rs"));
}

/// Arguments of `weir replay`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("from").required(true).args(["topic", "file"])))]
pub struct ReplayArgs {
    /// The dead-letter topic to read (with `--brokers`).
    #[arg(long)]
    topic: Option<String>,
    /// A reject JSONL file to read (what a `reject: jsonl` path wrote).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Bootstrap servers of the dead-letter topic, and of the source topics unless
    /// `--to-brokers` is given.
    #[arg(long)]
    brokers: Option<String>,
    /// Bootstrap servers to replay to.
    #[arg(long)]
    to_brokers: Option<String>,
    /// Consumer group for the dead-letter topic: a second replay with the same group only
    /// sees records that arrived since.
    #[arg(long, default_value = "weir-replay")]
    group: String,
    /// A librdkafka property for the Kafka clients (`security.protocol=SASL_SSL`, …;
    /// repeatable).
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// Only records rejected by this stage.
    #[arg(long)]
    stage: Option<String>,
    /// Only records whose reason matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    reason: Option<String>,
    /// Only records rejected by a plugin whose hash starts with this.
    #[arg(long, value_name = "HASH")]
    plugin: Option<String>,
    /// Count what would be replayed; produce and commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the JSON run report on stdout.
    #[arg(long)]
    json: bool,
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The `properties:` block of a Kafka section (empty when none are given).
fn properties(args: &ReplayArgs) -> Result<String, String> {
    let mut out = String::new();
    for p in &args.properties {
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--property `{p}`: expected KEY=VALUE"))?;
        out.push_str(&format!("      {}: {}\n", quoted(k), quoted(v)));
    }
    Ok(if out.is_empty() {
        out
    } else {
        format!("    properties:\n{out}")
    })
}

/// The pipeline YAML `weir replay` runs.
fn pipeline(args: &ReplayArgs, plugin: &std::path::Path) -> Result<String, String> {
    let props = properties(args)?;
    let source = match (&args.topic, &args.file) {
        (Some(topic), _) => {
            let brokers = args.brokers.as_deref().ok_or("--topic needs --brokers")?;
            let group = if args.dry_run {
                format!("weir-replay-dry-run-{}", std::process::id())
            } else {
                args.group.clone()
            };
            format!(
                "  kafka:\n    brokers: {}\n    topics: [{}]\n    group: {}\n    stop_at_end: true\n{props}",
                quoted(brokers),
                quoted(topic),
                quoted(&group)
            )
        }
        (None, Some(file)) => format!(
            "  jsonl:\n    path: {}\n",
            quoted(&file.display().to_string())
        ),
        (None, None) => unreachable!("clap requires one"),
    };
    let sink = if args.dry_run {
        "  discard: {}\n".to_owned()
    } else {
        let to = args
            .to_brokers
            .as_deref()
            .or(args.brokers.as_deref())
            .ok_or("replaying needs --to-brokers (or --brokers)")?;
        // Every replayed record names its topic; this one is never used.
        format!(
            "  kafka:\n    brokers: {}\n    topic: weir-replay-unrouted\n{props}",
            quoted(to)
        )
    };
    let mut config = String::new();
    for (k, v) in [
        ("stage", &args.stage),
        ("reason", &args.reason),
        ("plugin", &args.plugin),
    ] {
        if let Some(v) = v {
            config.push_str(&format!("      {k}: {}\n", quoted(v)));
        }
    }
    if !config.is_empty() {
        config.insert_str(0, "    config:\n");
    }
    Ok(format!(
        "name: replay\nsource:\n{source}stages:\n  - name: replay\n    plugin: {}\n{config}sink:\n{sink}runtime:\n  watch_plugins: false\n",
        quoted(&plugin.display().to_string())
    ))
}

/// Writes the built-in component where the engine can load (and cache) it.
fn builtin_plugin() -> Result<PathBuf, String> {
    let dir = crate::engine::default_cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("builtin");
    let hash = crate::engine::content_hash(builtin::DLQ_REPLAY);
    let path = dir.join(format!("dlq-replay-{}.wasm", &hash[..16]));
    if !path.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(&path, builtin::DLQ_REPLAY)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(path)
}

pub fn replay(args: &ReplayArgs) -> ExitCode {
    let yaml = match builtin_plugin().and_then(|p| pipeline(args, &p)) {
        Ok(y) => y,
        Err(e) => return super::bad_input(e),
    };
    let cfg = match crate::config::load_str(std::path::Path::new("weir-replay"), &yaml, &|_| None) {
        Ok(c) => c,
        Err(e) => return super::bad_input(e),
    };
    let opts = RunOptions {
        report: None,
        progress: !args.json,
    };
    let report = match runtime::run(&cfg, &opts) {
        Ok(r) => r,
        Err(e) => return super::bad_input(e),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    }
    let stage = report.stages.first();
    let filtered = stage.map_or(0, |s| s.counts.dropped);
    let not_dlq = stage.map_or(0, |s| s.counts.rejected);
    let verb = if args.dry_run {
        "would replay"
    } else {
        "replayed"
    };
    super::note(&format!(
        "weir replay: {verb} {} of {} records ({filtered} filtered out, {not_dlq} not dead-letter records)",
        report.written, report.read
    ));
    match report.state {
        ExitState::Completed | ExitState::Interrupted => ExitCode::SUCCESS,
        ExitState::Failed => {
            super::summary(&report);
            ExitCode::from(super::EXIT_FAILED)
        }
    }
}
