//! Stages in C, Python, JavaScript and Go for the tests: built from source, once per test binary,
//! through `scripts/build-plugins` (which installs each language's pinned toolchain when it is
//! missing) with the `weir` binary under test doing the bindings and component steps.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_owned()
}

/// `go` run in `dir`, with Go's usual folder after the caller's PATH: a shell that did not
/// read the login files may lack it (weir-build-go looks there too).
pub fn go(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir).env(
        "PATH",
        format!(
            "{}:/usr/local/go/bin",
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    cmd
}

/// Where the components land.
pub fn out_dir() -> PathBuf {
    root().join("target").join("lang-plugins")
}

/// A compiled-code cache shared by the language tests (the Python and JavaScript components
/// take seconds to compile; tests about the cache itself use their scratch folder's).
pub fn shared_cache() -> PathBuf {
    out_dir().join("cache")
}

/// Builds every language's plugins (once per process) and returns the folder holding
/// `<plugin>.wasm`. Panics with the build's output when a build fails: a missing toolchain is
/// a failure, never a skip.
pub fn built(weir: &str) -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = out_dir();
        let o = Command::new(root().join("scripts").join("build-plugins"))
            .args(["--out".as_ref(), out.as_os_str()])
            .env("WEIR", weir)
            .output()
            .expect("running scripts/build-plugins");
        assert!(
            o.status.success(),
            "scripts/build-plugins failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

/// The path of plugin `name` (e.g. `orders-python`), building all of them first.
pub fn plugin(weir: &str, name: &str) -> String {
    let p = built(weir).join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "scripts/build-plugins did not make {}",
        p.display()
    );
    p.display().to_string()
}
