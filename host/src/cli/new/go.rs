//! The Go scaffold: a `main` package on the Go SDK (typed + packed fast path) with a native
//! test, a `go.mod` whose `replace` names the SDK's folder (the module `weir.dev/sdk` is not
//! published), and a `build.sh` that calls the SDK's `weir-build-go`.

use std::path::Path;

use super::Sdk;

const STAGE_GO: &str = include_str!("templates/go/stage.go");
const STAGE_TEST_GO: &str = include_str!("templates/go/stage_test.go");

const BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm (Go 1.24 or later, with the Weir SDK at {{sdk}},
# which go.mod names). Reproducible: the same sources give the same bytes.
set -euo pipefail
cd "$(dirname "$0")"
export WEIR="${WEIR:-{{weir}}}"
{{sdk}}/weir-build-go -o stage.wasm .
"#;

const README: &str = r#"# {{name}}

A Weir stage in Go. Test, build, try, run:

```sh
go test .                                    # stage_test.go: the stage natively
./build.sh                                   # -> stage.wasm
weir test stage.wasm --input sample.jsonl --config field=status --config equals=paid
weir run pipeline.yaml
```

Edit `stage.go`. The SDK's API reference, with an example for each function:
`go doc -all weir.dev/sdk` (in this folder), or `{{sdk}}/example_test.go`.

Go 1.24 or later builds it (`//go:wasmexport`); `build.sh` also finds Go in `/usr/local/go/bin`.
`go.mod` takes the SDK from the folder `{{sdk}}` (the module `weir.dev/sdk` is not published).
{{weir_note}}"#;

/// Writes the Go scaffold into `root`.
pub fn scaffold(root: &Path, name: &str, sdk: &Sdk) -> std::io::Result<()> {
    let folder = match sdk {
        Sdk::Folder(dir) => dir.display().to_string(),
        Sdk::Registry | Sdk::Packed(_) => unreachable!("the Go SDK is a folder"),
    };
    let weir = super::this_weir();
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{sdk}}", &folder)
            .replace("{{weir}}", &weir)
            .replace("{{weir_note}}", &super::weir_note(sdk, true))
    };
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join("stage.go"), fill(STAGE_GO))?;
    std::fs::write(root.join("stage_test.go"), fill(STAGE_TEST_GO))?;
    std::fs::write(
        root.join("go.mod"),
        format!(
            "module {name}\n\ngo 1.24\n\nrequire weir.dev/sdk v0.0.0\n\nreplace weir.dev/sdk => \
             {folder}\n"
        ),
    )?;
    super::write_common(root, name, "", &fill(README), "*.wasm\nrejected.jsonl\n")?;
    super::write_script(&root.join("build.sh"), &fill(BUILD_SH))
}
