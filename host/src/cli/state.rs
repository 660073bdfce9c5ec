//! `weir state`: look inside a pipeline's stage state (`list`, `get`), from the state dir or
//! from the changelog, and `reset` a stage's store. Output is one JSON object per line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::config::{PipelineConfig, SourceConfig};
use crate::message::PartitionKey;
use crate::state::{StageStore, StateSpec};

/// `weir state` arguments.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// Every key of a stage's buckets (with its value), per partition.
    List(Select),
    /// One key's value.
    Get {
        #[command(flatten)]
        select: Select,
        /// The key.
        #[arg(long)]
        key: String,
    },
    /// Delete a stage's store (all its partitions). Refused while the pipeline runs (the store
    /// is locked) or, with a Kafka source, while its consumer group has members. The state
    /// comes back from the changelog at the next start unless its topics are deleted too.
    Reset {
        /// The pipeline YAML.
        pipeline: PathBuf,
        /// The stage (default: every stage that keeps state).
        #[arg(long)]
        stage: Option<String>,
    },
}

#[derive(Debug, Args)]
struct Select {
    /// The pipeline YAML.
    pipeline: PathBuf,
    /// The stage.
    #[arg(long)]
    stage: String,
    /// The bucket (default: every bucket of the stage).
    #[arg(long)]
    bucket: Option<String>,
    /// The source partition, `TOPIC/N` (default: every partition the store holds; with
    /// `--changelog`, every partition of the changelog topic).
    #[arg(long)]
    partition: Option<String>,
    /// Read the changelog topic (the state as a restore would rebuild it) instead of the
    /// state dir.
    #[arg(long)]
    changelog: bool,
}

pub fn state(args: &StateArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::bad_input(e),
    }
}

fn run(args: &StateArgs) -> Result<(), String> {
    match &args.command {
        StateCommand::List(select) => show(select, None),
        StateCommand::Get { select, key } => show(select, Some(key)),
        StateCommand::Reset { pipeline, stage } => reset(pipeline, stage.as_deref()),
    }
}

fn load(path: &Path) -> Result<PipelineConfig, String> {
    crate::config::load(path).map_err(|e| e.to_string())
}

fn spec_of(cfg: &PipelineConfig, stage: &str) -> Result<StateSpec, String> {
    let c = cfg
        .stages
        .iter()
        .find(|s| s.name == stage)
        .ok_or_else(|| format!("no stage `{stage}` in pipeline `{}`", cfg.name))?;
    StateSpec::of(&cfg.name, c).ok_or_else(|| format!("stage `{stage}` keeps no state"))
}

fn store_dir(cfg: &PipelineConfig) -> PathBuf {
    cfg.runtime
        .state_dir
        .clone()
        .unwrap_or_else(|| "weir-state".into())
        .join(&cfg.name)
}

fn parse_partition(p: &str) -> Result<PartitionKey, String> {
    let (t, n) = p
        .rsplit_once(['/', ':'])
        .ok_or_else(|| format!("partition {p:?}: expected TOPIC/N"))?;
    let n = n
        .parse()
        .map_err(|_| format!("partition {p:?}: expected TOPIC/N"))?;
    Ok(PartitionKey::new(t, n))
}

fn show(sel: &Select, key: Option<&String>) -> Result<(), String> {
    let cfg = load(&sel.pipeline)?;
    let spec = spec_of(&cfg, &sel.stage)?;
    let buckets: Vec<(usize, &String)> = match &sel.bucket {
        Some(b) => {
            let i = spec.bucket(b).ok_or_else(|| {
                format!(
                    "stage `{}` has no bucket `{b}` (it declares {:?})",
                    sel.stage, spec.buckets
                )
            })?;
            vec![(i as usize, &spec.buckets[i as usize])]
        }
        None => spec.buckets.iter().enumerate().collect(),
    };
    let wanted = sel.partition.as_deref().map(parse_partition).transpose()?;
    let mut out = std::io::stdout().lock();
    if sel.changelog {
        let SourceConfig::Kafka(src) = &cfg.source else {
            return Err(
                "--changelog: the pipeline's source is not Kafka (its state has no changelog)"
                    .into(),
            );
        };
        let changelog =
            crate::sink::changelog::KafkaChangelog::open(src, None, Default::default(), None)
                .map_err(|e| e.to_string())?;
        let parts = crate::sink::changelog::KafkaChangelog::partitions(src, &spec.changelogs[0])?;
        for (i, bucket) in buckets {
            for p in &parts {
                let part = PartitionKey::new(&src.topics[0], *p);
                if wanted.as_ref().is_some_and(|w| *w != part) {
                    continue;
                }
                let mut latest: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
                crate::sink::Changelog::restore(
                    &changelog,
                    &spec.changelogs[i],
                    *p,
                    0,
                    &mut |_, k, v| {
                        latest.insert(k.to_owned(), v.map(<[u8]>::to_vec));
                    },
                )?;
                for (k, v) in latest {
                    let Some(v) = v else { continue };
                    if key.is_none_or(|want| *want == k) {
                        line(&mut out, &part, bucket, &k, &v);
                    }
                }
            }
        }
        return Ok(());
    }
    let store = StageStore::open(&store_dir(&cfg), &sel.stage).map_err(|e| e.to_string())?;
    let parts: Vec<PartitionKey> = match wanted {
        Some(w) => vec![w],
        None => store
            .partitions()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|p| parse_partition(p))
            .collect::<Result<_, _>>()?,
    };
    for part in &parts {
        for (_, bucket) in &buckets {
            match key {
                Some(k) => {
                    if let Some(v) = store.get(part, bucket, k).map_err(|e| e.to_string())? {
                        line(&mut out, part, bucket, k, &v);
                    }
                }
                None => {
                    let mut after: Option<String> = None;
                    loop {
                        let page = store
                            .scan(part, bucket, after.as_deref(), 10_000)
                            .map_err(|e| e.to_string())?;
                        for (k, v) in &page {
                            line(&mut out, part, bucket, k, v);
                        }
                        match page.last() {
                            Some((k, _)) if page.len() == 10_000 => after = Some(k.clone()),
                            _ => break,
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// One key as a JSON line: the value as text (UTF-8 without control characters), as an
/// integer (8 bytes, what `increment` stores), else as hex; and when it was written.
fn line(
    out: &mut impl std::io::Write,
    part: &PartitionKey,
    bucket: &str,
    key: &str,
    stored: &[u8],
) {
    let (at, v) = crate::state::decode(stored);
    let mut o = json!({
        "partition": part.to_string(),
        "bucket": bucket,
        "key": key,
        "written_ms": at,
    });
    let text = std::str::from_utf8(v)
        .ok()
        .filter(|t| !t.chars().any(char::is_control));
    match (text, <[u8; 8]>::try_from(v)) {
        (Some(t), _) => o["value"] = Value::from(t),
        (None, Ok(b)) => o["int"] = Value::from(i64::from_le_bytes(b)),
        (None, Err(_)) => o["hex"] = Value::from(hex::encode(v)),
    }
    let _ = writeln!(out, "{o}");
}

fn reset(pipeline: &Path, stage: Option<&str>) -> Result<(), String> {
    let cfg = load(pipeline)?;
    let stages: Vec<String> = match stage {
        Some(s) => vec![spec_of(&cfg, s)?.stage],
        None => cfg
            .stages
            .iter()
            .filter(|s| s.state.is_some())
            .map(|s| s.name.clone())
            .collect(),
    };
    if let SourceConfig::Kafka(src) = &cfg.source {
        let members = crate::sink::changelog::KafkaChangelog::group_members(src)?;
        if members > 0 {
            return Err(format!(
                "group `{}` has {members} member(s): stop every `weir run` of it before a reset",
                src.group
            ));
        }
    }
    let dir = store_dir(&cfg);
    for s in stages {
        // Opening takes the lock: a running pipeline holds it.
        let store = StageStore::open(&dir, &s).map_err(|e| e.to_string())?;
        let path = store.path().to_owned();
        drop(store);
        std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        super::note(&format!(
            "stage `{s}`: state store {} deleted",
            path.display()
        ));
    }
    Ok(())
}
