//! `weir run`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::pipeline::{self, RunOptions};
use crate::report::ExitState;

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
}

pub fn run(args: &RunArgs) -> ExitCode {
    let cfg = match crate::config::load(&args.pipeline) {
        Ok(c) => c,
        Err(e) => return super::bad_input(e),
    };
    let opts = RunOptions {
        report: args.report.clone(),
    };
    match pipeline::run(&cfg, &opts) {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("report serializes")
                );
            } else {
                eprint!("{}", report.summary());
            }
            match report.state {
                ExitState::Completed | ExitState::Interrupted => ExitCode::SUCCESS,
                ExitState::Failed => ExitCode::from(super::EXIT_FAILED),
            }
        }
        Err(e) => super::bad_input(e),
    }
}
