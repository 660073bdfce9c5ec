//! `weir new`: scaffolds a stage project ready for `weir test`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod other;
mod rust;

/// Languages `weir new` can scaffold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with `weir-sdk` (packed fast path).
    Rust,
    /// C with the C SDK (`sdk/c`: typed + packed fast path), built by clang for wasm32-wasi.
    C,
    /// Python with the Python SDK (`sdk/python`), built by componentize-py.
    Python,
    /// JavaScript with the JS SDK (`sdk/js`), bundled by esbuild, built by componentize-js.
    Js,
}

impl Lang {
    /// The SDK folder under `sdk/`, and the file that proves a folder is that SDK.
    fn sdk(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("rust", "Cargo.toml"),
            Lang::C => ("c", "weir-build-c"),
            Lang::Python => ("python", "weir-build-python"),
            Lang::Js => ("js", "weir-build-js"),
        }
    }

    /// The language's name in messages.
    fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::C => "C",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

/// Arguments of `weir new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// Stage (and folder) name: lowercase letters, digits and `-`.
    name: String,
    /// Language of the stage.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// Where to create the folder.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The language's SDK (`sdk/<lang>` of a Weir checkout). Default: the one this `weir` was
    /// built from.
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// The sample input every scaffold gets: one message kept, one dropped, one rejected.
pub(super) const SAMPLE: &str = r#"{"key": "1", "value": {"id": 1, "status": "paid"}}
{"key": "2", "value": {"id": 2, "status": "open"}}
{"key": "3", "value": "not json"}
"#;

/// The pipeline every scaffold gets: the sample in, the stage, stdout out, rejects to a file.
/// `{{plugin}}` is the built component's path, `{{limits}}` extra stage lines (or nothing).
pub(super) const PIPELINE: &str = r#"# Run with: weir run pipeline.yaml
source:
  jsonl: { path: sample.jsonl }
stages:
  - name: {{name}}
    plugin: {{plugin}}
    config: { field: status, equals: paid }{{limits}}
sink:
  stdout: {}
reject:
  jsonl: { path: rejected.jsonl }
"#;

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub fn new(args: &NewArgs) -> ExitCode {
    if !valid_name(&args.name) {
        return super::bad_input(format!(
            "invalid stage name {:?}: use lowercase letters, digits and `-`, starting with a letter",
            args.name
        ));
    }
    let (folder, marker) = args.lang.sdk();
    let sdk = args.sdk.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sdk")
            .join(folder)
    });
    let sdk = match std::fs::canonicalize(&sdk) {
        Ok(p) if p.join(marker).exists() => p,
        _ => {
            return super::bad_input(format!(
                "the {} SDK is not at {}: pass --sdk PATH/TO/weir/sdk/{folder}",
                args.lang.label(),
                sdk.display()
            ))
        }
    };
    let root = args.dir.join(&args.name);
    if root.exists() {
        return super::bad_input(format!("{} already exists", root.display()));
    }
    let made = match args.lang {
        Lang::Rust => rust::scaffold(&root, &args.name, &sdk),
        lang => other::scaffold(lang, &root, &args.name, &sdk),
    };
    match made {
        Ok(()) => {
            println!(
                "created {} ({} stage); next: cd {} && ./build.sh",
                root.display(),
                args.lang.label(),
                root.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => super::bad_input(format!("{}: {e}", root.display())),
    }
}

/// The scaffold README's note on finding `weir`: the binary that made the project, and how to
/// put it on PATH when the shell does not find it.
fn weir_note() -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "weir".into());
    let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install");
    let install = std::fs::canonicalize(&install).map_or_else(
        |_| "`cargo install --path host --locked` in a Weir checkout".to_owned(),
        |p| format!("`{}`", p.display()),
    );
    format!(
        "\n`weir` is the binary that created this project, `{exe}`. If your shell does not find \
         `weir`, run {install} (it links `weir` into `~/.cargo/bin`), or call it by that path; \
         `build.sh` finds it either way.\n"
    )
}

/// Writes `build.sh` executable.
fn write_script(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}
