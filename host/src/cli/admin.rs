//! `weir status | rollout | promote | rollback ADDR`: the admin API of a running pipeline
//! (on its `runtime.metrics` address) from the command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::bad_input;
use super::http::request;

/// Where the pipeline is and how to be let in.
#[derive(Debug, Args)]
pub struct Target {
    /// The pipeline's metrics address (`host:port`, its `runtime.metrics`).
    addr: String,
    /// The admin token (the value of the variable `runtime.admin_token_env` names).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// `weir status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `weir rollout`.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    target: Target,
    /// The stage to roll the candidate out on.
    #[arg(long)]
    stage: String,
    /// The candidate component (`.wasm`), a file the pipeline's machine can read.
    plugin: PathBuf,
    /// `shadow` or `canary` (default: the stage's `rollout.mode`, else `shadow`).
    #[arg(long)]
    mode: Option<String>,
    /// Canary share (`10%`).
    #[arg(long)]
    share: Option<String>,
    /// Canary split: `lane` or `key`.
    #[arg(long)]
    by: Option<String>,
    /// Observation window (`100000 messages`, `10m`).
    #[arg(long)]
    observe: Option<String>,
}

/// `weir promote` and `weir rollback`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    #[command(flatten)]
    target: Target,
    /// The stage whose rollout to end.
    #[arg(long)]
    stage: String,
}

/// How long a rollout request may take (the candidate is compiled first when not cached).
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sends one request; the JSON answer on success, exit 2 with the API's error otherwise.
fn call(
    t: &Target,
    method: &str,
    path: &str,
    body: Option<Value>,
    timeout: Duration,
) -> Result<Value, ExitCode> {
    let (status, text) = request(
        method,
        &t.addr,
        path,
        t.token.as_deref(),
        body.as_ref(),
        timeout,
    )
    .map_err(bad_input)?;
    let v: Value = serde_json::from_str(&text).map_err(|_| {
        bad_input(format_args!(
            "{}: answered {status} without JSON: is this a Weir metrics address?",
            t.addr
        ))
    })?;
    if (200..300).contains(&status) {
        Ok(v)
    } else {
        let why = v["error"].as_str().unwrap_or("no reason given");
        Err(bad_input(format_args!(
            "{} {path}: {status}: {why}",
            method
        )))
    }
}

/// `weir status ADDR [--json]`.
pub fn status(args: &StatusArgs) -> ExitCode {
    match call(&args.target, "GET", "/stages", None, TIMEOUT) {
        Ok(v) if args.json => {
            println!("{}", serde_json::to_string_pretty(&v).expect("JSON prints"));
            ExitCode::SUCCESS
        }
        Ok(v) => {
            print!("{}", table(&v));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `weir rollout ADDR --stage NAME PLUGIN.wasm [--mode canary ...]`.
pub fn rollout(args: &RolloutArgs) -> ExitCode {
    let plugin = match std::fs::canonicalize(&args.plugin) {
        Ok(p) => p,
        // The file may exist only on the pipeline's machine: send it as given.
        Err(_) => args.plugin.clone(),
    };
    let mut body = json!({ "plugin": plugin });
    for (key, v) in [
        ("mode", &args.mode),
        ("share", &args.share),
        ("by", &args.by),
        ("observe", &args.observe),
    ] {
        if let Some(v) = v {
            body[key] = json!(v);
        }
    }
    let path = format!("/stages/{}/rollout", args.stage);
    match call(&args.target, "POST", &path, Some(body), ROLLOUT_TIMEOUT) {
        Ok(r) => {
            println!(
                "rollout started on stage `{}`: {} {} → {} (observe {})",
                args.stage,
                r["mode"].as_str().unwrap_or("?"),
                short(&r["live"]),
                short(&r["candidate"]),
                args.observe.as_deref().unwrap_or("per the stage's policy"),
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `weir promote|rollback ADDR --stage NAME`.
pub fn decide(args: &DecideArgs, verb: &str) -> ExitCode {
    let path = format!("/stages/{}/{verb}", args.stage);
    match call(&args.target, "POST", &path, None, TIMEOUT) {
        Ok(r) => {
            println!(
                "stage `{}`: {} {}; live version now {}",
                args.stage,
                short(&r["candidate"]),
                r["outcome"].as_str().unwrap_or("?").replace('_', " "),
                if r["outcome"] == "promoted" {
                    short(&r["candidate"])
                } else {
                    short(&r["live"])
                },
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn short(v: &Value) -> String {
    v.as_str().unwrap_or("?").chars().take(12).collect()
}

/// One line per stage, then per rollout its counters and its first differences.
fn table(v: &Value) -> String {
    let mut out = format!(
        "{:<16} {:<13} {:<10} {}\n",
        "STAGE", "LIVE", "POLICY", "ROLLOUT"
    );
    let none = Vec::new();
    for s in v["stages"].as_array().unwrap_or(&none) {
        let rollout = &s["rollout"];
        let now = if rollout.is_null() {
            "-".to_owned()
        } else {
            describe(rollout)
        };
        out.push_str(&format!(
            "{:<16} {:<13} {:<10} {}\n",
            s["name"].as_str().unwrap_or("?"),
            short(&s["live"]),
            s["policy"].as_str().unwrap_or("?"),
            now
        ));
        if !rollout.is_null() {
            out.push_str(&differences(rollout));
        }
        let last = &s["last_rollout"];
        if !last.is_null() {
            out.push_str(&format!(
                "{:<16} last: {} {} → {}: {}{}\n",
                "",
                last["mode"].as_str().unwrap_or("?"),
                short(&last["live"]),
                short(&last["candidate"]),
                last["outcome"].as_str().unwrap_or("?"),
                last["detail"]
                    .as_str()
                    .map(|d| format!(" ({}: {d})", last["reason"].as_str().unwrap_or("?")))
                    .unwrap_or_default(),
            ));
            out.push_str(&differences(last));
        }
    }
    out
}

fn describe(r: &Value) -> String {
    let o = &r["observed"];
    let n = |k: &str| o[k].as_u64().unwrap_or(0);
    let differ: u64 = o["differ"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let mut s = format!(
        "{} {} ({}, {:.0} s): {} messages, {} rejected, {} failed, {} traps",
        r["mode"].as_str().unwrap_or("?"),
        short(&r["candidate"]),
        r["trigger"].as_str().unwrap_or("?"),
        r["duration_ms"].as_f64().unwrap_or(0.0) / 1e3,
        n("messages"),
        n("rejected"),
        n("failed"),
        n("traps"),
    );
    if r["mode"] == "shadow" {
        s.push_str(&format!(", {} of {} differ", differ, n("compared")));
    }
    s
}

fn differences(r: &Value) -> String {
    let none = Vec::new();
    let mut out = String::new();
    for d in r["differences"].as_array().unwrap_or(&none).iter().take(5) {
        out.push_str(&format!(
            "{:<16}   {}/{}@{} differs in {}: live {} / candidate {}\n",
            "",
            d["topic"].as_str().unwrap_or("?"),
            d["partition"],
            d["offset"],
            d["differ"].as_str().unwrap_or("?"),
            d["live"],
            d["candidate"],
        ));
    }
    out
}
