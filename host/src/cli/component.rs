//! `weir component`: the build steps every non-Rust SDK needs, without a wit-bindgen or
//! wasm-tools CLI: the contract's WIT, C bindings for it, and wrapping a core module into a
//! component.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wit_bindgen_core::wit_parser::Resolve;

/// The stage contract this `weir` speaks, as shipped in `wit/weir.wit`.
pub const WIT: &str = include_str!("../../../wit/weir.wit");
/// File name of the contract inside a written WIT folder.
const WIT_FILE: &str = "weir.wit";

/// Arguments of `weir component`.
#[derive(Debug, clap::Args)]
pub struct ComponentArgs {
    #[command(subcommand)]
    command: ComponentCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ComponentCommand {
    /// Write the stage contract (`weir.wit`) into a folder, for bindings generators.
    Wit {
        /// Folder to write into (created when missing).
        out: PathBuf,
    },
    /// Generate C bindings for a world of the contract (`<world>.h`, `<world>.c`, and the
    /// `<world>_component_type.o` object that tells `component new` what the module exports).
    /// The default, `stage-typed`, is the portable contract a third-party stage implements
    /// (`exports_weir_stage_stage_init` and `exports_weir_stage_stage_process`);
    /// `stage-fast` adds the packed batch export, which an SDK implements
    /// (`exports_weir_stage_batch_process_batch`).
    Bindings {
        /// Folder to write into (created when missing).
        out: PathBuf,
        /// The world: `stage-typed` (the typed contract) or `stage-fast` (typed + packed batch,
        /// for SDKs).
        #[arg(long, default_value = "stage-typed")]
        world: String,
    },
    /// Wrap a core wasm module (built with wasm32-wasi and the bindings' type object) into a
    /// component, adapting WASI preview 1 imports to preview 2.
    New {
        /// The core module.
        module: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        out: PathBuf,
    },
}

/// Why a `weir component` step failed.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The world is not part of the contract.
    #[error("no world {0:?} in the stage contract (worlds: stage-fast, stage-typed)")]
    UnknownWorld(String),
    /// Bindings generation or component encoding failed.
    #[error("{0:#}")]
    Tool(anyhow::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ComponentError + '_ {
    move |source| ComponentError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Runs `weir component`.
pub fn component(args: &ComponentArgs) -> ExitCode {
    let done = match &args.command {
        ComponentCommand::Wit { out } => write_wit(out).map(|f| vec![f]),
        ComponentCommand::Bindings { out, world } => c_bindings(out, world).inspect(|files| {
            let to_define = functions_to_define(files);
            if !to_define.is_empty() {
                eprintln!("world {world}: the stage defines");
                for f in to_define {
                    eprintln!("  {f}");
                }
            }
        }),
        ComponentCommand::New { module, out } => {
            new_component(module, out).map(|()| vec![out.clone()])
        }
    };
    match done {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => super::bad_input(e),
    }
}

/// The state interfaces the stage worlds import (`wasi:keyvalue@0.2.0-draft2`), as
/// `deps/keyvalue/<file>` beside the contract.
pub const KEYVALUE: &[(&str, &str)] = &[
    (
        "store.wit",
        include_str!("../../../wit/deps/keyvalue/store.wit"),
    ),
    (
        "atomics.wit",
        include_str!("../../../wit/deps/keyvalue/atomics.wit"),
    ),
    (
        "batch.wit",
        include_str!("../../../wit/deps/keyvalue/batch.wit"),
    ),
    (
        "world.wit",
        include_str!("../../../wit/deps/keyvalue/world.wit"),
    ),
];

/// Writes the contract into `out/weir.wit`, and the packages it uses into `out/deps/`.
pub fn write_wit(out: &Path) -> Result<PathBuf, ComponentError> {
    let deps = out.join("deps").join("keyvalue");
    std::fs::create_dir_all(&deps).map_err(io(&deps))?;
    for (name, text) in KEYVALUE {
        let file = deps.join(name);
        std::fs::write(&file, text).map_err(io(&file))?;
    }
    let file = out.join(WIT_FILE);
    std::fs::write(&file, WIT).map_err(io(&file))?;
    Ok(file)
}

/// Generates the C bindings of `world` into `out` and returns the files written.
pub fn c_bindings(out: &Path, world: &str) -> Result<Vec<PathBuf>, ComponentError> {
    let mut resolve = Resolve::default();
    // The package the contract imports first, from its files.
    let mut deps = wit_bindgen_core::wit_parser::SourceMap::new();
    for (name, text) in KEYVALUE {
        deps.push_str(&format!("deps/keyvalue/{name}"), *text);
    }
    let group = deps
        .parse()
        .map_err(|(_, e)| ComponentError::Tool(anyhow::anyhow!("{e}")))?;
    resolve
        .push_group(group)
        .map_err(|e| ComponentError::Tool(anyhow::anyhow!("{e}")))?;
    let pkg = resolve
        .push_str(WIT_FILE, WIT)
        .map_err(ComponentError::Tool)?;
    let world_id = resolve
        .select_world(&[pkg], Some(world))
        .map_err(|_| ComponentError::UnknownWorld(world.to_owned()))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world_id, &mut files)
        .map_err(ComponentError::Tool)?;
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut written = Vec::new();
    for (name, bytes) in files.iter() {
        let file = out.join(name);
        std::fs::write(&file, bytes).map_err(io(&file))?;
        written.push(file);
    }
    Ok(written)
}

/// The exported functions a module must define for the bindings in `files`: the declarations
/// under the header's "Exported Functions" comments (so a missing-symbol link error can be read
/// against the world that was generated).
fn functions_to_define(files: &[PathBuf]) -> Vec<String> {
    let Some(header) = files
        .iter()
        .find(|f| f.extension().is_some_and(|e| e == "h"))
        .and_then(|f| std::fs::read_to_string(f).ok())
    else {
        return Vec::new();
    };
    let mut exported = false;
    let mut found = Vec::new();
    for line in header.lines() {
        if line.starts_with("// ") {
            exported = line.starts_with("// Exported Functions");
        } else if exported && line.contains('(') && line.ends_with(");") {
            found.push(line.to_owned());
        } else if line.trim().is_empty() {
            continue;
        } else {
            exported = false;
        }
    }
    found
}

/// Wraps the core module at `module` into a component at `out`.
pub fn new_component(module: &Path, out: &Path) -> Result<(), ComponentError> {
    let bytes = std::fs::read(module).map_err(io(module))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|e| {
            e.adapter(
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| ComponentError::Tool(e.context(format!("{}", module.display()))))?;
    std::fs::write(out, component).map_err(io(out))
}
