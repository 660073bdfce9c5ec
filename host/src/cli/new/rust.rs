//! The Rust scaffold: a crate on `weir-sdk` (packed fast path) with a native unit test.

use std::path::Path;

use super::{Sdk, VERSION};

const LIB_RS: &str = r##"//! {{name}}: keeps JSON messages whose `field` equals `equals`, tags them, rejects the rest
//! of the malformed input. Edit freely: `weir test` shows what each message becomes.
use weir_sdk::{Config, Message, Outcome};

/// What `init` makes from the YAML `config`.
pub struct Settings {
    field: String,
    equals: String,
}

/// Reads the config; an error here stops the pipeline at start-up, naming the stage.
pub fn setup(config: &Config) -> Result<Settings, String> {
    Ok(Settings {
        field: config.require("field")?.to_owned(),
        equals: config.require("equals")?.to_owned(),
    })
}

/// Decides one message.
#[weir_sdk::stage(init = setup)]
pub fn process(msg: &Message<'_>, s: &Settings) -> Outcome {
    let Some(text) = msg.value_str() else {
        return Outcome::reject("value is not UTF-8 text");
    };
    // A tiny matcher so the template has no dependencies; use serde_json for real work.
    let needle = format!("\"{}\":\"{}\"", s.field, s.equals);
    if !text.trim_start().starts_with('{') {
        Outcome::reject("value is not a JSON object")
    } else if text.replace(' ', "").contains(&needle) {
        Outcome::map(msg.to_owned().header("{{name}}", "matched"))
    } else {
        Outcome::drop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::TestMessage;

    #[test]
    fn keeps_tags_drops_and_rejects() {
        let s = setup(&Config::from_pairs([("field", "status"), ("equals", "paid")])).unwrap();
        let run = |v: &str| process(&TestMessage::value(v).borrow(), &s);
        assert!(matches!(run(r#"{"status": "paid"}"#), Outcome::Next(m) if m.len() == 1));
        assert_eq!(run(r#"{"status": "open"}"#), Outcome::drop());
        assert!(matches!(run("nope"), Outcome::Reject(_)));
    }
}
"##;

const BUILD_SH: &str = r#"#!/usr/bin/env bash
# Builds the stage component: stage.wasm (cargo's output,
# target/wasm32-wasip2/release/{{crate}}.wasm, moved into place in one step, so that a running
# `weir run` swaps it in whole).
set -euo pipefail
cd "$(dirname "$0")"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" stage.wasm.tmp
mv stage.wasm.tmp stage.wasm
echo "built stage.wasm"
"#;

const README: &str = r#"# {{name}}

A Weir stage. Build, try, run:

```sh
./build.sh                                   # -> stage.wasm
cargo test                                   # the stage function, natively
weir test stage.wasm --input sample.jsonl --config field=status --config equals=paid
weir run pipeline.yaml
```

The SDK's API reference, with an example for each function: `cargo doc -p weir-sdk --open`
(the pages of https://docs.rs/weir-sdk/{{version}}).
{{sdk_note}}{{weir_note}}"#;

pub fn scaffold(root: &Path, name: &str, sdk: &Sdk) -> std::io::Result<()> {
    let krate = name.replace('-', "_");
    let (dependency, patch, sdk_note) = match sdk {
        Sdk::Folder(dir) => (
            format!("weir-sdk = {{ path = {:?} }}", dir.display().to_string()),
            String::new(),
            format!(
                "\nThe SDK is the folder `{}` (`weir new --sdk`); `weir-sdk = \"{VERSION}\"` \
                 in Cargo.toml takes it from crates.io instead.\n",
                dir.display()
            ),
        ),
        Sdk::Packed(dir) => {
            let mut patch = format!(
                "\n# The SDK packages packed from a Weir checkout (scripts/pack-sdks). Delete this \
                 section to take\n# weir-sdk {VERSION} from crates.io.\n[patch.crates-io]\n"
            );
            for krate in ["weir-sdk", "weir-sdk-macro", "weir-abi"] {
                let path = dir.join("rust").join(format!("{krate}-{VERSION}"));
                patch += &format!("{krate} = {{ path = {:?} }}\n", path.display().to_string());
            }
            let note = format!(
                "\n`weir-sdk {VERSION}` comes from the packages packed in `{}`: the \
                 `[patch.crates-io]` section of Cargo.toml; delete it to use crates.io's.\n",
                dir.display()
            );
            (format!("weir-sdk = \"{VERSION}\""), patch, note)
        }
        Sdk::Registry => (
            format!("weir-sdk = \"{VERSION}\""),
            String::new(),
            String::new(),
        ),
    };
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{crate}}", &krate)
            .replace("{{version}}", VERSION)
            .replace("{{sdk_note}}", &sdk_note)
            .replace("{{weir_note}}", &super::weir_note(sdk, false))
    };
    let cargo = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\n[dependencies]\n{dependency}\n{patch}\n\
         # A project of its own, even when created inside another workspace.\n[workspace]\n"
    );
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::write(root.join("Cargo.toml"), cargo)?;
    std::fs::write(root.join("src/lib.rs"), fill(LIB_RS))?;
    super::write_common(
        root,
        name,
        "",
        &fill(README),
        "/target\n*.wasm\nrejected.jsonl\n",
    )?;
    super::write_script(&root.join("build.sh"), &fill(BUILD_SH))
}
