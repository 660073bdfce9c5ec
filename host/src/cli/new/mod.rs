//! `weir new`: scaffolds a stage project ready for `weir test`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod go;
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
    /// Go with the Go SDK (`sdk/go`: typed + packed fast path), built by Go 1.24+ for wasip1.
    Go,
}

impl Lang {
    /// The SDK folder under `sdk/`, and the file that proves a folder is that SDK.
    fn sdk(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("rust", "Cargo.toml"),
            Lang::C => ("c", "weir-build-c"),
            Lang::Python => ("python", "weir-build-python"),
            Lang::Js => ("js", "weir-build-js"),
            Lang::Go => ("go", "weir-build-go"),
        }
    }

    /// The file `scripts/pack-sdks` makes for this language, at this binary's version (C and
    /// Go have none: a C project compiles the SDK's files in, a Go module names the SDK's
    /// folder in a `replace`, since the module is not published).
    fn package_file(self) -> Option<String> {
        match self {
            Lang::Rust => Some(format!("weir-sdk-{VERSION}.crate")),
            Lang::Js => Some(format!("weir-sdk-{VERSION}.tgz")),
            Lang::Python => Some(format!("weir_sdk-{VERSION}-py3-none-any.whl")),
            Lang::C | Lang::Go => None,
        }
    }

    /// The language's name in messages.
    fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::C => "C",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::Go => "Go",
        }
    }
}

/// The SDK version a scaffold depends on: this binary's, so the contract matches.
pub(super) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a scaffold's SDK comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sdk {
    /// The package registry (crates.io, npm, PyPI) at [`VERSION`].
    Registry,
    /// The packages `scripts/pack-sdks` made, in this folder: the project depends on
    /// [`VERSION`] and the package manager's override points at these files.
    Packed(PathBuf),
    /// An SDK source folder (`sdk/<lang>` of a Weir checkout): for working on Weir itself.
    Folder(PathBuf),
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
    /// Where the SDK comes from: `registry` (crates.io, npm or PyPI, at this binary's version),
    /// a folder of packed SDK packages (`scripts/pack-sdks`), or an SDK source folder
    /// (`sdk/<lang>` of a Weir checkout, for working on Weir itself). Default: the packages
    /// packed in the checkout this `weir` was built from (`scripts/install` packs them), else
    /// the registry. C has no package: its SDK is always a folder (default: the checkout's).
    #[arg(long)]
    sdk: Option<String>,
}

/// The checkout this binary was built from (it may be gone: the binary may have moved).
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Decides where the SDK comes from, or says what was wrong with `--sdk`.
fn resolve_sdk(lang: Lang, flag: Option<&str>) -> Result<Sdk, String> {
    let (folder, marker) = lang.sdk();
    let package = lang.package_file();
    let classify = |dir: &Path| -> Option<Sdk> {
        let dir = std::fs::canonicalize(dir).ok()?;
        if package.as_ref().is_some_and(|f| dir.join(f).is_file()) {
            Some(Sdk::Packed(dir))
        } else if dir.join(marker).is_file() {
            Some(Sdk::Folder(dir))
        } else {
            None
        }
    };
    match flag {
        Some("registry") if package.is_some() => Ok(Sdk::Registry),
        Some("registry") => Err(format!(
            "the {} SDK is not a package: pass --sdk PATH/TO/weir/sdk/{folder} (its folder)",
            lang.label()
        )),
        Some(path) => classify(Path::new(path)).ok_or_else(|| {
            let packed = package.map_or(String::new(), |f| {
                format!("a folder of packed SDK packages holding {f} (scripts/pack-sdks), or ")
            });
            format!(
                "--sdk {path}: not the {} SDK: expected `registry`, {packed}the SDK's source \
                 folder (weir/sdk/{folder}, holding {marker})",
                lang.label()
            )
        }),
        None => {
            let packed = checkout().join("target").join("sdk-packages");
            if package.is_some() {
                Ok(classify(&packed)
                    .filter(|s| matches!(s, Sdk::Packed(_)))
                    .unwrap_or(Sdk::Registry))
            } else {
                let dir = checkout().join("sdk").join(folder);
                classify(&dir).ok_or_else(|| {
                    format!(
                        "the {} SDK is not at {}: pass --sdk PATH/TO/weir/sdk/{folder}",
                        lang.label(),
                        dir.display()
                    )
                })
            }
        }
    }
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

/// Writes a scaffold's files shared by every language: the sample input, the pipeline that
/// runs `stage.wasm` on it (`limits`: extra stage lines, or nothing), the README (`readme`,
/// filled already) and the `.gitignore` (`ignore`).
fn write_common(
    root: &Path,
    name: &str,
    limits: &str,
    readme: &str,
    ignore: &str,
) -> std::io::Result<()> {
    std::fs::write(root.join("sample.jsonl"), SAMPLE)?;
    let pipeline = PIPELINE
        .replace("{{name}}", name)
        .replace("{{plugin}}", "stage.wasm")
        .replace("{{limits}}", limits);
    std::fs::write(root.join("pipeline.yaml"), pipeline)?;
    std::fs::write(root.join("README.md"), readme)?;
    std::fs::write(root.join(".gitignore"), ignore)
}

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
    let sdk = match resolve_sdk(args.lang, args.sdk.as_deref()) {
        Ok(sdk) => sdk,
        Err(e) => return super::bad_input(e),
    };
    let root = args.dir.join(&args.name);
    if root.exists() {
        return super::bad_input(format!("{} already exists", root.display()));
    }
    let made = match args.lang {
        Lang::Rust => rust::scaffold(&root, &args.name, &sdk),
        Lang::Go => go::scaffold(&root, &args.name, &sdk),
        lang => other::scaffold(lang, &root, &args.name, &sdk),
    };
    match made {
        Ok(()) => {
            let from = match &sdk {
                Sdk::Registry => format!("weir-sdk {VERSION} from the package registry"),
                Sdk::Packed(dir) => format!("weir-sdk {VERSION} packed in {}", dir.display()),
                Sdk::Folder(dir) => format!("the SDK folder {}", dir.display()),
            };
            println!(
                "created {} ({} stage on {from}); next: cd {} && ./build.sh",
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
/// put it on PATH when the shell does not find it (the `scripts/install` of the checkout it was
/// built from, or of the one `--sdk` names). `build_calls_weir`: whether `build.sh` needs it.
fn weir_note(sdk: &Sdk, build_calls_weir: bool) -> String {
    let exe = this_weir();
    let source = match sdk {
        Sdk::Folder(dir) => dir.join("../.."),
        Sdk::Registry | Sdk::Packed(_) => checkout(),
    };
    let install = std::fs::canonicalize(source.join("scripts/install")).map_or_else(
        |_| {
            "`scripts/install` in a Weir checkout (or `cargo install --path host --locked`)"
                .to_owned()
        },
        |p| format!("`{}`", p.display()),
    );
    let build = if build_calls_weir {
        " `build.sh` finds it either way (it uses `$WEIR` when set)."
    } else {
        ""
    };
    format!(
        "\n`weir` is the binary that created this project, `{exe}`. If your shell does not find \
         `weir`, run {install} (it links `weir` into `~/.cargo/bin`), or call it by that path.{build}\n"
    )
}

/// The path of this `weir` binary (the one a scaffold's `build.sh` and README name), or
/// `weir` when it cannot be told.
fn this_weir() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "weir".into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_comes_from_the_registry_a_packed_folder_or_a_source_folder() {
        assert_eq!(resolve_sdk(Lang::Js, Some("registry")), Ok(Sdk::Registry));
        let err = resolve_sdk(Lang::C, Some("registry")).unwrap_err();
        assert!(err.contains("not a package"), "{err}");
        let packed = tempfile::tempdir().unwrap();
        std::fs::write(packed.path().join(format!("weir-sdk-{VERSION}.tgz")), b"").unwrap();
        let dir = std::fs::canonicalize(packed.path()).unwrap();
        assert_eq!(
            resolve_sdk(Lang::Js, packed.path().to_str()),
            Ok(Sdk::Packed(dir))
        );
        // The same folder holds no wheel: for Python it is neither kind, and the error says
        // what was expected.
        let err = resolve_sdk(Lang::Python, packed.path().to_str()).unwrap_err();
        assert!(
            err.contains(&format!("weir_sdk-{VERSION}-py3-none-any.whl"))
                && err.contains("weir-build-python")
                && err.contains("registry"),
            "{err}"
        );
        let folder = checkout().join("sdk/python");
        assert_eq!(
            resolve_sdk(Lang::Python, folder.to_str()),
            Ok(Sdk::Folder(std::fs::canonicalize(&folder).unwrap()))
        );
    }

    #[test]
    fn scaffolds_depend_on_this_version_and_say_where_it_comes_from() {
        let home = tempfile::tempdir().unwrap();
        let packed = home.path().join("packages");
        rust::scaffold(&home.path().join("r"), "r", &Sdk::Registry).unwrap();
        let cargo = std::fs::read_to_string(home.path().join("r/Cargo.toml")).unwrap();
        assert!(
            cargo.contains(&format!("weir-sdk = \"{VERSION}\"")) && !cargo.contains("patch"),
            "{cargo}"
        );
        rust::scaffold(&home.path().join("p"), "p", &Sdk::Packed(packed.clone())).unwrap();
        let cargo = std::fs::read_to_string(home.path().join("p/Cargo.toml")).unwrap();
        assert!(
            cargo.contains("[patch.crates-io]")
                && cargo.contains(&format!("rust/weir-abi-{VERSION}")),
            "{cargo}"
        );
        other::scaffold(Lang::Js, &home.path().join("j"), "j", &Sdk::Registry).unwrap();
        let package = std::fs::read_to_string(home.path().join("j/package.json")).unwrap();
        let package: serde_json::Value = serde_json::from_str(&package).unwrap();
        assert_eq!(package["devDependencies"]["weir-sdk"], VERSION);
        other::scaffold(
            Lang::Python,
            &home.path().join("y"),
            "y",
            &Sdk::Packed(packed),
        )
        .unwrap();
        let req = std::fs::read_to_string(home.path().join("y/requirements.txt")).unwrap();
        assert!(
            req.starts_with("--find-links ") && req.contains(&format!("weir-sdk=={VERSION}")),
            "{req}"
        );
        let readme = std::fs::read_to_string(home.path().join("y/README.md")).unwrap();
        assert!(readme.contains("weir-build-python --api"), "{readme}");
        // The Rust build does not call weir, so its README does not say it finds it.
        let readme = std::fs::read_to_string(home.path().join("r/README.md")).unwrap();
        assert!(!readme.contains("build.sh` finds"), "{readme}");
    }
}
