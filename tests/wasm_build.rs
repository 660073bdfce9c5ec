//! Building plugins of this workspace for `wasm32-wasip2` from a build script (shared by
//! `tests/build.rs` and `host/build.rs`, which include this file as a module).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `packages` (release, `wasm32-wasip2`) into `ROOT/target/plugins` and returns the
/// folder the components are in. Installs the target first when it is missing.
pub fn build(root: &Path, packages: &[&str]) -> PathBuf {
    for dir in ["plugins", "sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    ensure_target();
    let target_dir = root.join("target").join("plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        // Under `cargo clippy` these point at clippy; the plugins are linted natively instead.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER");
    for pkg in packages {
        cmd.args(["-p", pkg]);
    }
    let status = cmd.status().expect("running cargo to build the plugins");
    assert!(
        status.success(),
        "building the plugins for wasm32-wasip2 failed"
    );
    target_dir.join("wasm32-wasip2").join("release")
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
