//! The C, Python and JavaScript scaffolds: one source file on the language's SDK, a `build.sh`
//! that calls the SDK's build script (which installs the pinned toolchain when missing), the
//! shared sample input and a pipeline, all ready for `weir test` and `weir run`.

use std::path::Path;

use super::{Lang, Sdk, VERSION};

const C_STAGE: &str = include_str!("templates/c/stage.c");
const PY_STAGE: &str = include_str!("templates/python/stage.py");
const JS_STAGE: &str = include_str!("templates/js/stage.js");

const C_BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm (C, with the Weir SDK at {{sdk}}).
# The SDK's script installs its pinned toolchain the first time (see its header).
set -euo pipefail
cd "$(dirname "$0")"
export WEIR="${WEIR:-{{weir}}}"
{{sdk}}/weir-build-c stage.c -o stage.wasm
"#;

const JS_BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm (JavaScript, with the weir-sdk package of package.json,
# which brings its build tools, componentize-js and esbuild: `npm install` the first time and
# whenever package.json changes).
set -euo pipefail
cd "$(dirname "$0")"
export WEIR="${WEIR:-{{weir}}}"
[[ node_modules/.package-lock.json -nt package.json ]] || npm install --no-audit --no-fund --loglevel=error
node_modules/.bin/weir-build-js stage.js -o stage.wasm
"#;

const PY_BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm (Python, with the weir-sdk package of requirements.txt,
# which brings its build tool, componentize-py, into this project's .venv: installed the first
# time and again whenever requirements.txt changes).
set -euo pipefail
cd "$(dirname "$0")"
export WEIR="${WEIR:-{{weir}}}"
if ! cmp -s requirements.txt .venv/weir-requirements.txt; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  cp requirements.txt .venv/weir-requirements.txt
fi
.venv/bin/weir-build-python stage.py -o stage.wasm
"#;

const README: &str = r#"# {{name}}

A Weir stage in {{lang}}. Build, try, run:

```sh
./build.sh                                   # -> stage.wasm
weir test stage.wasm --input sample.jsonl --config field=status --config equals=paid
weir run pipeline.yaml
```

Edit `{{source}}`. The SDK's API reference, with an example for each function: {{api}}.
{{sdk_note}}{{weir_note}}"#;

/// Writes the scaffold for `lang` (not Rust) into `root`.
pub fn scaffold(lang: Lang, root: &Path, name: &str, sdk: &Sdk) -> std::io::Result<()> {
    let label = lang.label();
    let (source, text, build) = match lang {
        Lang::C => ("stage.c", C_STAGE, C_BUILD_SH),
        Lang::Python => ("stage.py", PY_STAGE, PY_BUILD_SH),
        Lang::Js => ("stage.js", JS_STAGE, JS_BUILD_SH),
        Lang::Rust | Lang::Go => {
            unreachable!("the Rust and Go scaffolds have modules of their own")
        }
    };
    // SpiderMonkey's heap settles above 64 MiB now and then (docs/languages/js.md).
    let limits = if lang == Lang::Js {
        "\n    limits: { memory: 128MiB }"
    } else {
        ""
    };
    let weir = super::this_weir();
    let folder = match sdk {
        Sdk::Folder(dir) => dir.display().to_string(),
        Sdk::Registry | Sdk::Packed(_) => String::new(),
    };
    let api = match lang {
        Lang::C => format!("`{folder}/API.md` (and the comments of `{folder}/weir.h`)"),
        Lang::Python => "`.venv/bin/weir-build-python --api` (after the first build)".to_owned(),
        Lang::Js => "`node_modules/weir-sdk/API.md` (after the first build)".to_owned(),
        Lang::Rust | Lang::Go => unreachable!(),
    };
    let manifest = if lang == Lang::Js {
        "package.json"
    } else {
        "requirements.txt"
    };
    let sdk_note = match sdk {
        Sdk::Registry if lang != Lang::C => format!(
            "\n`{manifest}` asks for weir-sdk {VERSION}, the version of the `weir` that made this \
             project.\n"
        ),
        Sdk::Packed(dir) => format!(
            "\n`{manifest}` takes weir-sdk {VERSION} from the packages packed in `{}` \
             (scripts/pack-sdks); {} to take it from the registry.\n",
            dir.display(),
            if lang == Lang::Js {
                format!("write `\"{VERSION}\"` in place of the `file:` path")
            } else {
                "delete its `--find-links` line".to_owned()
            }
        ),
        Sdk::Folder(dir) if lang != Lang::C => format!(
            "\n`{manifest}` takes the SDK from the folder `{}` (`weir new --sdk`, for working on \
             Weir itself).\n",
            dir.display()
        ),
        _ => String::new(),
    };
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{lang}}", label)
            .replace("{{source}}", source)
            .replace("{{api}}", &api)
            .replace("{{sdk}}", &folder)
            .replace("{{weir}}", &weir)
            .replace("{{limits}}", limits)
            .replace("{{sdk_note}}", &sdk_note)
            .replace("{{weir_note}}", &super::weir_note(sdk, true))
    };
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join(source), fill(text))?;
    let ignore = match lang {
        Lang::Js => "*.wasm\nrejected.jsonl\nnode_modules/\n",
        Lang::Python => "*.wasm\nrejected.jsonl\n.venv/\n",
        _ => "*.wasm\nrejected.jsonl\n",
    };
    super::write_common(root, name, limits, &fill(README), ignore)?;
    match (lang, sdk) {
        (Lang::Js, sdk) => {
            let spec = match sdk {
                Sdk::Registry => VERSION.to_owned(),
                Sdk::Packed(dir) => format!("file:{}/weir-sdk-{VERSION}.tgz", dir.display()),
                Sdk::Folder(dir) => format!("file:{}", dir.display()),
            };
            let text = format!(
                "{{\n  \"name\": {name:?},\n  \"private\": true,\n  \"type\": \"module\",\n  \
                 \"scripts\": {{ \"build\": \"./build.sh\" }},\n  \
                 \"devDependencies\": {{ \"weir-sdk\": {spec:?} }}\n}}\n"
            );
            std::fs::write(root.join("package.json"), text)?;
        }
        (Lang::Python, sdk) => {
            let text = match sdk {
                Sdk::Registry => format!("weir-sdk=={VERSION}\n"),
                Sdk::Packed(dir) => {
                    format!("--find-links {}\nweir-sdk=={VERSION}\n", dir.display())
                }
                Sdk::Folder(dir) => format!("{}\n", dir.display()),
            };
            std::fs::write(root.join("requirements.txt"), text)?;
        }
        _ => {}
    }
    super::write_script(&root.join("build.sh"), &fill(build))
}
