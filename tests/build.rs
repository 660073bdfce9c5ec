//! Builds every plugin in `plugins/` for `wasm32-wasip2` (installing the target when missing)
//! into its own target folder, and emits `pub const NAME: &str` paths to the components.

#[path = "wasm_build.rs"]
mod wasm_build;

use std::path::{Path, PathBuf};

const PLUGINS: &[(&str, &str, &str)] = &[
    // (const name, package, artifact file)
    ("PASSTHROUGH", "passthrough", "passthrough.wasm"),
    ("JSON_FILTER", "json-filter", "json_filter.wasm"),
    ("JSON_ENRICH", "json-enrich", "json_enrich.wasm"),
    ("ROUTER", "router", "router.wasm"),
    ("MISBEHAVE", "misbehave", "misbehave.wasm"),
    ("TYPED_ONLY", "typed-only", "typed_only.wasm"),
    ("WRONG_WORLD", "wrong-world", "wrong-world.wasm"),
    ("ORDERS_RUST", "orders-rust", "orders_rust.wasm"),
    ("DLQ_REPLAY", "dlq-replay", "dlq_replay.wasm"),
    ("FORGE", "forge", "forge.wasm"),
    ("RUNNING_TOTAL", "running-total", "running_total.wasm"),
    ("DEDUP", "dedup", "dedup.wasm"),
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_owned();
    let packages: Vec<&str> = PLUGINS.iter().map(|(_, pkg, _)| *pkg).collect();
    let out_dir = wasm_build::build(&root, &packages);
    let mut src = String::from("// Paths of the plugin components, built by build.rs.\n");
    for (name, _, file) in PLUGINS {
        let path = out_dir.join(file);
        assert!(path.exists(), "missing {}", path.display());
        src.push_str(&format!(
            "/// `plugins/` component `{file}`.\npub const {name}: &str = {:?};\n",
            path.display().to_string()
        ));
    }
    std::fs::write(
        Path::new(&std::env::var("OUT_DIR").unwrap()).join("plugins.rs"),
        src,
    )
    .unwrap();
}
