//! The C, Python and JavaScript scaffolds: one source file on the language's SDK, a `build.sh`
//! that calls the SDK's build script (which installs the pinned toolchain when missing), the
//! shared sample input and a pipeline, all ready for `weir test` and `weir run`.

use std::path::Path;

use super::Lang;

const C_STAGE: &str = include_str!("templates/c/stage.c");
const PY_STAGE: &str = include_str!("templates/python/stage.py");
const JS_STAGE: &str = include_str!("templates/js/stage.js");

const BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm ({{lang}}, with the Weir SDK at {{sdk}}).
# The SDK's script installs its pinned toolchain the first time (see its header).
set -euo pipefail
cd "$(dirname "$0")"
export WEIR="${WEIR:-{{weir}}}"
{{sdk}}/weir-build-{{short}} {{source}} -o stage.wasm
"#;

const README: &str = r#"# {{name}}

A Weir stage in {{lang}}. Build, try, run:

```sh
./build.sh                                   # -> stage.wasm
weir test stage.wasm --input sample.jsonl --config field=status --config equals=paid
weir run pipeline.yaml
```

Edit `{{source}}`; the SDK's documentation is at the top of {{sdk_doc}}.
{{weir_note}}"#;

/// Writes the scaffold for `lang` (not Rust) into `root`.
pub fn scaffold(lang: Lang, root: &Path, name: &str, sdk: &Path) -> std::io::Result<()> {
    let label = lang.label();
    let (short, source, text, doc) = match lang {
        Lang::C => ("c", "stage.c", C_STAGE, "weir.h"),
        Lang::Python => ("python", "stage.py", PY_STAGE, "weir/__init__.py"),
        Lang::Js => ("js", "stage.js", JS_STAGE, "weir.js"),
        Lang::Rust => unreachable!("the Rust scaffold is rust::scaffold"),
    };
    // SpiderMonkey's heap settles above 64 MiB now and then (docs/languages/js.md).
    let limits = if lang == Lang::Js {
        "\n    limits: { memory: 128MiB }"
    } else {
        ""
    };
    let weir = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "weir".into());
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{lang}}", label)
            .replace("{{short}}", short)
            .replace("{{source}}", source)
            .replace("{{sdk_doc}}", &sdk.join(doc).display().to_string())
            .replace("{{sdk}}", &sdk.display().to_string())
            .replace("{{weir}}", &weir)
            .replace("{{limits}}", limits)
            .replace("{{weir_note}}", &super::weir_note())
    };
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join(source), fill(text))?;
    std::fs::write(root.join("sample.jsonl"), super::SAMPLE)?;
    std::fs::write(
        root.join("pipeline.yaml"),
        fill(super::PIPELINE).replace("{{plugin}}", "stage.wasm"),
    )?;
    std::fs::write(root.join("README.md"), fill(README))?;
    std::fs::write(root.join(".gitignore"), "*.wasm\nrejected.jsonl\n")?;
    super::write_script(&root.join("build.sh"), &fill(BUILD_SH))
}
