//! The `weir` command line. Each subcommand lives in its own file.
//!
//! Exit codes: 0 success, 1 the pipeline failed (a stage said `fail`, or a sink broke),
//! 2 bad configuration, plugin or usage.

mod admin;
mod broker;
mod check;
mod compile;
pub mod component;
mod http;
mod inspect;
mod new;
mod replay;
mod run;
mod state;
mod test;
mod top;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand, ValueEnum};

/// Weir runs chains of sandboxed WebAssembly stages over a stream of messages.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    /// Log format (also from `WEIR_LOG_FORMAT`, for containers).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "WEIR_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline until its source ends, a stage fails, or SIGINT/SIGTERM.
    Run(run::RunArgs),
    /// Parse a pipeline, load and instantiate every stage, call `init`, print the chain.
    Check {
        /// The pipeline YAML.
        pipeline: PathBuf,
        /// Also connect to the Kafka cluster with the pipeline's settings (first): the
        /// brokers answer, TLS and SASL pass, the topics exist and can be read, the group can
        /// be used, the sink and reject topics exist or may be created, and under exactly-once
        /// a transactional id can be initialised. One line per check; exit 2 at the first that
        /// fails.
        #[arg(long)]
        connect: bool,
    },
    /// Run one stage over local messages and print each outcome as a JSON line.
    Test(test::TestArgs),
    /// Compile plugins into the compiled-code cache ahead of time (an image build, a deploy
    /// step), so no start pays for it.
    Compile(compile::CompileArgs),
    /// Show which contract a plugin implements and what it imports.
    Inspect {
        /// The plugin component (`.wasm`).
        plugin: PathBuf,
    },
    /// Replay dead-letter records (a DLQ topic or a reject JSONL file) to their source topics.
    Replay(replay::ReplayArgs),
    /// Look inside stage state (`list`, `get`; from the state dir or the changelog), or
    /// `reset` a stage's store.
    State(state::StateArgs),
    /// Print the JSON Schema of the pipeline YAML.
    Schema,
    /// Run a throw-away Kafka-protocol broker in this process (development and tests).
    Broker(broker::BrokerArgs),
    /// Scaffold a stage project (source, build script, sample input, pipeline) for `weir test`.
    New(new::NewArgs),
    /// Build steps for non-Rust SDKs: the contract's WIT, C bindings, core module → component.
    Component(component::ComponentArgs),
    /// A live view of a running pipeline (stages, partitions, flow), from its metrics address.
    Top(top::TopArgs),
    /// Each stage of a running pipeline: live version, rollout in progress, the last one.
    Status(admin::StatusArgs),
    /// Try a new version of a stage on live traffic (shadow or canary) in a running pipeline.
    Rollout(admin::RolloutArgs),
    /// Make a rollout's candidate the live version now.
    Promote(admin::DecideArgs),
    /// Drop a rollout's candidate now; the live version runs on.
    Rollback(admin::DecideArgs),
}

/// Exit code: the pipeline failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad configuration, plugin or usage.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_logging(cli.log_format);
    // The verbs that print and end are cut short quietly when their reader goes away; the
    // long-running ones (`run`, `replay`, `broker`) keep Rust's default, so a broken stdout
    // sink is a sink error (exit 1) and sockets never take the process down.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Replay(_) | Command::Broker(_)
    ) {
        crate::sigpipe::restore_default();
    }
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Check { pipeline, connect } => check::check(&pipeline, connect),
        Command::Test(args) => test::test(&args),
        Command::Compile(args) => compile::compile(&args),
        Command::Inspect { plugin } => inspect::inspect(&plugin),
        Command::New(args) => new::new(&args),
        Command::Broker(args) => broker::broker(&args),
        Command::Replay(args) => replay::replay(&args),
        Command::Component(args) => component::component(&args),
        Command::Top(args) => top::top(&args),
        Command::Status(args) => admin::status(&args),
        Command::Rollout(args) => admin::rollout(&args),
        Command::Promote(args) => admin::decide(&args, "promote"),
        Command::Rollback(args) => admin::decide(&args, "rollback"),
        Command::State(args) => state::state(&args),
        Command::Schema => {
            print!("{}", crate::config::schema());
            ExitCode::SUCCESS
        }
    }
}

/// Set when logs are JSON: then every line on stderr is a JSON log event (for containers), so
/// the human lines (errors, the exit summary, notes) go through the log too.
static JSON_LOGS: AtomicBool = AtomicBool::new(false);

/// A line for the person at the terminal: on stderr, or a log event when logs are JSON.
fn note(text: &str) {
    let text = crate::redact::redact(text);
    if JSON_LOGS.load(Ordering::Relaxed) {
        tracing::info!("{text}");
    } else {
        // Not `eprintln!`: a closed stderr must not turn a finished run into a panic.
        let _ = writeln!(std::io::stderr(), "{text}");
    }
}

/// The exit summary of a run: its text on stderr, or one log event carrying the whole report
/// as JSON when logs are JSON.
fn summary(report: &crate::report::RunReport) {
    if JSON_LOGS.load(Ordering::Relaxed) {
        tracing::info!(
            state = ?report.state,
            report = %serde_json::to_string(report).expect("report serializes"),
            "exit report"
        );
    } else {
        let text = report.summary();
        let _ = write!(std::io::stderr(), "{}", crate::redact::redact(&text));
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,cranelift=warn,wasmtime=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // Secrets the pipeline holds never reach the log (crate::redact).
        .with_writer(|| crate::redact::Redacting(std::io::stderr()))
        // A closed stderr (`weir run … 2>&1 | head`) drops log lines; it must not panic a thread.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => {
            JSON_LOGS.store(true, Ordering::Relaxed);
            builder.json().init()
        }
    }
}

/// What errors call a plugin that runs outside a pipeline (`weir test`, `weir inspect`): its
/// file name.
fn plugin_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Prints a Kafka client failure and returns its exit code (2 for configuration and
/// credentials, 1 otherwise).
fn client_failure(what: &str, f: &crate::kafka::fatal::ClientFailure) -> ExitCode {
    let code = f.kind.exit_code();
    bad_input(format_args!("{what}{f}"));
    ExitCode::from(code)
}

/// Prints an error for bad input and returns exit code 2.
fn bad_input(e: impl std::fmt::Display) -> ExitCode {
    let e = e.to_string();
    let e = crate::redact::redact(&e);
    if JSON_LOGS.load(Ordering::Relaxed) {
        tracing::error!("{e}");
    } else {
        eprintln!("error: {e}");
    }
    ExitCode::from(EXIT_BAD_INPUT)
}
