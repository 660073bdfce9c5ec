//! `weir inspect`.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

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
    let out = json!({
        "path": path.display().to_string(),
        "hash": plugin.hash,
        "contract": "weir:stage@0.1.0",
        "shape": plugin.contract,
        "exports": plugin.exports,
        "imports": plugin.imports,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    ExitCode::SUCCESS
}
