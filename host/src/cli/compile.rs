//! `weir compile`: fills the compiled-component cache ahead of time, so the first start of a
//! large stage (a Python or JavaScript runtime compiles for seconds) happens in an image build
//! or a deploy step instead of on the pipeline's start.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::engine::{CacheOutcome, WeirEngine};

/// `weir compile` arguments.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Pipeline YAML files (every stage's plugin and rollout candidate) or plugin components
    /// (`.wasm`).
    #[arg(required = true)]
    targets: Vec<PathBuf>,
    /// The cache folder to fill. Default: the pipeline's `runtime.cache_dir`, else
    /// `$WEIR_CACHE_DIR`, `$XDG_CACHE_HOME/weir` or `~/.cache/weir`.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

/// Stage memory of the engine a bare component is compiled for (the engine's code does not
/// depend on it; a pipeline's engine finds the same cache entry).
const BARE_MEMORY: usize = 64 << 20;

pub fn compile(args: &CompileArgs) -> ExitCode {
    let mut count = 0;
    for target in &args.targets {
        let done = if is_component(target) {
            compile_plugin(args, target)
        } else {
            compile_pipeline(args, target)
        };
        match done {
            Ok(n) => count += n,
            Err(code) => return code,
        }
    }
    super::note(&format!("{count} component(s) in the compiled cache"));
    ExitCode::SUCCESS
}

fn is_component(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
}

fn compile_plugin(args: &CompileArgs, path: &Path) -> Result<usize, ExitCode> {
    let cache = args
        .cache_dir
        .clone()
        .or_else(crate::engine::default_cache_dir);
    let engine = WeirEngine::new(BARE_MEMORY, cache).map_err(super::bad_input)?;
    one(&engine, &super::plugin_name(path), path)?;
    Ok(1)
}

fn compile_pipeline(args: &CompileArgs, path: &Path) -> Result<usize, ExitCode> {
    let mut cfg = crate::config::load(path).map_err(super::bad_input)?;
    if args.cache_dir.is_some() {
        cfg.runtime.cache_dir = args.cache_dir.clone();
    }
    let engine = crate::runtime::engine_for(&cfg).map_err(super::bad_input)?;
    let mut n = 0;
    for s in &cfg.stages {
        for plugin in std::iter::once(&s.plugin).chain(s.rollout.candidate.as_ref()) {
            one(&engine, &s.name, plugin)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Loads (compiling unless cached) one component and says which it was.
fn one(engine: &WeirEngine, stage: &str, path: &Path) -> Result<(), ExitCode> {
    let p = engine.load_plugin(stage, path).map_err(super::bad_input)?;
    let what = match p.cache {
        CacheOutcome::Hit => "already cached",
        CacheOutcome::Miss => "compiled",
    };
    println!(
        "{stage:<16} {}  plugin={} {what} in {} ms",
        path.display(),
        p.short_hash(),
        p.load_time.as_millis()
    );
    Ok(())
}
