//! Builds every plugin in `plugins/` for `wasm32-wasip2` (installing the target when missing)
//! into its own target folder, and emits `pub const NAME: &str` paths to the components.

use std::path::{Path, PathBuf};
use std::process::Command;

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
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_owned();
    for dir in ["plugins", "sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    ensure_target();
    let target_dir = root.join("target").join("plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        // Under `cargo clippy` these point at clippy; the plugins are linted natively instead.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER");
    for (_, pkg, _) in PLUGINS {
        cmd.args(["-p", pkg]);
    }
    let status = cmd.status().expect("running cargo to build the plugins");
    assert!(
        status.success(),
        "building the plugins for wasm32-wasip2 failed"
    );
    let out_dir = target_dir.join("wasm32-wasip2").join("release");
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

/// Installs the wasm32-wasip2 target through rustup when its standard library is missing.
fn ensure_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let libdir = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", "wasm32-wasip2"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if libdir.is_some_and(|d| {
        d.join("libstd").exists()
            || std::fs::read_dir(&d)
                .map(|mut r| r.next().is_some())
                .unwrap_or(false)
    }) {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "the wasm32-wasip2 target is missing and `rustup target add wasm32-wasip2` failed"
    );
}
