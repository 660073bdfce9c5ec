//! `weir inspect`.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

/// The exports the host calls are the contract's interfaces.
const CONTRACT_PREFIX: &str = "weir:stage/";

/// What an export outside the contract is, for the ones stock toolchains add. The host never
/// calls any of them.
fn why_exported(name: &str) -> &'static str {
    match name {
        "exports" => {
            "added by componentize-py (Python): its build-time initialiser (an `init` function \
             and type descriptors used while pre-initialising the interpreter); not part of \
             the Weir contract, never called by the host"
        }
        _ => "not part of the Weir contract; the host never calls it",
    }
}

pub fn inspect(path: &Path) -> ExitCode {
    let engine = match crate::engine::WeirEngine::new(64 << 20, crate::engine::default_cache_dir())
    {
        Ok(e) => e,
        Err(e) => return super::bad_input(e),
    };
    let plugin = match engine.load_plugin(&super::plugin_name(path), path) {
        Ok(p) => p,
        Err(e) => return super::bad_input(e),
    };
    let (contract, other): (Vec<&String>, Vec<&String>) = plugin
        .exports
        .iter()
        .partition(|e| e.starts_with(CONTRACT_PREFIX));
    let other: Vec<_> = other
        .into_iter()
        .map(|name| json!({"name": name, "why": why_exported(name)}))
        .collect();
    let out = json!({
        "path": path.display().to_string(),
        "hash": plugin.hash,
        "contract": "weir:stage@0.1.0",
        "shape": plugin.contract,
        "exports": contract,
        "other_exports": other,
        "imports": plugin.imports,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    ExitCode::SUCCESS
}
