//! `weir test`: one stage over local messages, every outcome printed as a JSON line, up to
//! the first `fail` (exit 1), as `weir run` stops there.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::config::{ByteSize, ContractChoice, TrapPolicy};
use crate::engine::{StageInstance, StageSpec, Verdict, WeirEngine};
use crate::jsonl;
use crate::message::{Envelope, Lane};

/// Arguments of `weir test`.
#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The plugin component (`.wasm`).
    plugin: PathBuf,
    /// JSONL messages to run it on.
    #[arg(long)]
    input: PathBuf,
    /// A config entry for `init`, `key=value` (repeatable).
    #[arg(long = "config", value_parser = parse_kv)]
    config: Vec<(String, String)>,
    /// Call the typed per-message contract even if the packed path is exported.
    #[arg(long)]
    typed: bool,
    /// Memory cap.
    #[arg(long, default_value = "64MiB")]
    memory: ByteSize,
    /// Per-call deadline.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
    /// The stage's name in errors and logs. Default: the name a `pipeline.yaml` beside the
    /// component gives the stage whose plugin it is (as in a `weir new` project), else the
    /// component's file name.
    #[arg(long)]
    name: Option<String>,
    /// A schema registry (`http://host:8081`): values in its wire format (`{"base64": …}`) or
    /// written as JSON beside their schema (`{"schema_id": 7, "avro": {…}}`) are decoded to
    /// JSON text before the stage, as `source.*.decode` does in a pipeline.
    #[arg(long)]
    registry: Option<String>,
    /// With `--registry`: `auto` (the schema's type as registered), `avro`, `protobuf` or
    /// `json-schema`.
    #[arg(long, default_value = "auto", requires = "registry")]
    decode: String,
    /// Answer every message even after a `fail` (by default `weir test` stops at the first
    /// `fail`, as `weir run` does). Either way the exit code is 1 when a `fail` was answered.
    #[arg(long)]
    keep_going: bool,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// The codecs `--registry` and `--decode` ask for: values decoded as a local source's are.
fn local_codecs(url: &str, format: &str) -> Result<crate::schema::Codecs, String> {
    let cfg: crate::config::schema::Decode =
        serde_json::from_value(json!({"format": format, "registry": {"url": url}}))
            .map_err(|e| format!("--decode {format}: {e}"))?;
    Ok(crate::schema::Codecs {
        value: Some(crate::schema::Decoder::new(&cfg, false, None)?.for_local_source()),
        ..Default::default()
    })
}

/// The name `pipeline.yaml` beside `plugin` gives the stage whose `plugin` is this file.
fn name_in_pipeline(plugin: &std::path::Path) -> Option<String> {
    let plugin = std::fs::canonicalize(plugin).ok()?;
    let dir = plugin.parent()?;
    let text = std::fs::read_to_string(dir.join("pipeline.yaml")).ok()?;
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
    doc.get("stages")?.as_sequence()?.iter().find_map(|stage| {
        let path = dir.join(stage.get("plugin")?.as_str()?);
        let same = std::fs::canonicalize(path).ok()? == plugin;
        same.then(|| stage.get("name")?.as_str().map(str::to_owned))?
    })
}

pub fn test(args: &TestArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.input) {
        Ok(t) => t,
        Err(e) => return super::bad_input(format!("{}: {e}", args.input.display())),
    };
    let mut msgs = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match jsonl::parse_line(line) {
            Ok(msg) => msgs.push(Envelope {
                offset: i as i64,
                msg,
            }),
            Err(e) => return super::bad_input(format!("{}:{}: {e}", args.input.display(), i + 1)),
        }
    }
    let codecs = match args
        .registry
        .as_deref()
        .map(|url| local_codecs(url, &args.decode))
    {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return super::bad_input(format!("--registry: {e}")),
    };
    if let Some(c) = &codecs {
        if let Err(e) = c.fetch(msgs.iter().map(|e| &e.msg)) {
            return super::bad_input(format!("--registry: {e}"));
        }
    }
    let engine = match WeirEngine::new(args.memory.bytes(), crate::engine::default_cache_dir()) {
        Ok(e) => e,
        Err(e) => return super::bad_input(e),
    };
    let name = args
        .name
        .clone()
        .or_else(|| name_in_pipeline(&args.plugin))
        .unwrap_or_else(|| super::plugin_name(&args.plugin));
    let plugin = match engine.load_plugin(&name, &args.plugin) {
        Ok(p) => Arc::new(p),
        Err(e) => return super::bad_input(e),
    };
    let spec = Arc::new(StageSpec {
        name: name.as_str().into(),
        config: args.config.clone(),
        memory: args.memory.bytes(),
        timeout: args.timeout,
        max_output: 4 << 20,
        on_trap: TrapPolicy::Reject,
        contract: if args.typed {
            ContractChoice::Typed
        } else {
            ContractChoice::Auto
        },
        grants: Default::default(),
        state: None,
    });
    let mut inst = match StageInstance::new(&engine, spec, plugin) {
        Ok(i) => i,
        Err(e) => return super::bad_input(e),
    };
    let lane = Lane {
        topic: "test".into(),
        partition: 0,
        generation: 0,
    };
    // One message per call, so every outcome (traps included) is attributed exactly.
    let mut failed = None;
    for env in &mut msgs {
        if let Some(c) = &codecs {
            if let Err(r) = c.decode(&mut env.msg) {
                let line = json!({"offset": env.offset, "outcome": "reject", "stage": crate::chain::DECODE_STAGE, "reason": r.text});
                println!("{line}");
                continue;
            }
        }
        let env = &*env;
        let mut out = Vec::new();
        let traps_before = inst.stats.traps + inst.stats.oversized;
        if let Err(e) = inst.process(&lane, std::slice::from_ref(env), &mut out) {
            return super::bad_input(e);
        }
        let trapped = inst.stats.traps + inst.stats.oversized > traps_before;
        let line = match out.pop() {
            Some(Verdict::Keep) => json!({"offset": env.offset, "outcome": "keep"}),
            Some(Verdict::Next(m)) => json!({
                "offset": env.offset,
                "outcome": "next",
                "messages": m.iter().map(|m| Value::Object(jsonl::message_json(m))).collect::<Vec<_>>(),
            }),
            Some(Verdict::Reject(r)) if trapped => {
                json!({"offset": env.offset, "outcome": "trap", "reason": r})
            }
            Some(Verdict::Reject(r)) => {
                json!({"offset": env.offset, "outcome": "reject", "reason": r})
            }
            Some(Verdict::Fail(r)) => {
                failed.get_or_insert(env.offset);
                json!({"offset": env.offset, "outcome": "fail", "reason": r})
            }
            None => json!({"offset": env.offset, "outcome": "none"}),
        };
        println!("{line}");
        if let (Some(at), false) = (failed, args.keep_going) {
            eprintln!(
                "weir test: the stage answered `fail` at offset {at}; stopped there, as `weir run` does (--keep-going answers the rest)"
            );
            break;
        }
    }
    match failed {
        Some(_) => ExitCode::from(super::EXIT_FAILED),
        None => ExitCode::SUCCESS,
    }
}
