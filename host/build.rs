//! Builds Weir's built-in stage (`plugins/dlq-replay`, what `weir replay` runs) for
//! `wasm32-wasip2` and embeds it in the binary.

#[path = "../tests/wasm_build.rs"]
mod wasm_build;

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_owned();
    let dir = wasm_build::build(&root, &["dlq-replay"]);
    let wasm = dir.join("dlq_replay.wasm");
    assert!(wasm.exists(), "missing {}", wasm.display());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("builtin.rs");
    std::fs::write(
        out,
        format!(
            "/// The `dlq-replay` component (`plugins/dlq-replay`).\npub const DLQ_REPLAY: &[u8] = include_bytes!({:?});\n",
            wasm.display().to_string()
        ),
    )
    .unwrap();
}
