//! `weir component`: the build steps every non-Rust SDK needs, without a wit-bindgen or
//! wasm-tools CLI: the contract's WIT, C bindings for it, and wrapping a core module into a
//! component.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wit_bindgen_core::wit_parser::{Resolve, WorldId};

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
    /// component, adapting WASI preview 1 imports to preview 2. A module built without that
    /// object (a toolchain that cannot link the C bindings' `.o`: Go's `//go:wasmexport`
    /// functions on the canonical names, hand-written glue) names its world with `--world`,
    /// and the world's type is embedded from the contract first.
    New {
        /// The core module.
        module: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        out: PathBuf,
        /// Embed this world of the contract (`stage-typed` or `stage-fast`) as the module's
        /// type before wrapping it.
        #[arg(long)]
        world: Option<String>,
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
        ComponentCommand::New { module, out, world } => {
            new_component(module, world.as_deref(), out).map(|()| vec![out.clone()])
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

/// The contract with the packages it uses, and its world `world`.
fn contract(world: &str) -> Result<(Resolve, WorldId), ComponentError> {
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
    Ok((resolve, world_id))
}

/// Generates the C bindings of `world` into `out` and returns the files written.
pub fn c_bindings(out: &Path, world: &str) -> Result<Vec<PathBuf>, ComponentError> {
    let (mut resolve, world_id) = contract(world)?;
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

/// Wraps the core module at `module` into a component at `out`; with `world`, that world of
/// the contract is embedded as the module's type first.
pub fn new_component(module: &Path, world: Option<&str>, out: &Path) -> Result<(), ComponentError> {
    let mut bytes = std::fs::read(module).map_err(io(module))?;
    if let Some(world) = world {
        let (resolve, world_id) = contract(world)?;
        wit_component::embed_component_metadata(
            &mut bytes,
            &resolve,
            world_id,
            wit_component::StringEncoding::UTF8,
            false,
        )
        .map_err(|e| ComponentError::Tool(e.context(format!("embedding the world {world}"))))?;
    }
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

#[cfg(test)]
mod tests {
    use super::new_component;

    /// Wraps `module` (with `world` embedded first, when given); the error's text.
    fn wrap(module: &[u8], world: Option<&str>) -> Result<Vec<u8>, String> {
        let dir = tempfile::tempdir().expect("dir");
        let (input, out) = (dir.path().join("core.wasm"), dir.path().join("c.wasm"));
        std::fs::write(&input, module).expect("module written");
        new_component(&input, world, &out).map_err(|e| format!("{e:#}"))?;
        Ok(std::fs::read(&out).expect("component"))
    }

    #[test]
    fn a_module_without_the_type_object_is_held_to_the_world_it_names() {
        // The smallest core module: no exports, no component-type section.
        let empty = b"\0asm\x01\0\0\0";
        // Without a world, nothing is asked of it: an empty component.
        wrap(empty, None).expect("an empty module wraps into an empty component");
        // With one, the world's type is embedded and its exports are required: the
        // encoder names the first one missing (so a Go or hand-written module learns what to
        // define).
        let e = wrap(empty, Some("stage-typed")).expect_err("the stage's exports are missing");
        assert!(
            e.contains("weir:stage/stage@0.1.0") && e.contains("init"),
            "the error does not name the missing export: {e}"
        );
        let e = wrap(empty, Some("stage-slow")).expect_err("no such world");
        assert!(e.contains("stage-slow"), "{e}");
    }
}
