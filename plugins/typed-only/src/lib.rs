//! A stage of "any other origin": the typed `weir:stage/stage` contract implemented with stock
//! wit-bindgen and no SDK, the way a generic bindings generator in any language does it.
//! It tags every message with header `x-typed: <tag config>` and rejects the value `reject`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ world: "stage-typed", path: "../../wit", generate_all });

use exports::weir::stage::stage::Guest;
use weir::stage::types::{Header, Message, Metadata, Outcome};

static TAG: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

struct Typed;

impl Guest for Typed {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let tag = config.into_iter().find(|(k, _)| k == "tag").map(|(_, v)| v);
        *TAG.lock().unwrap() = tag.unwrap_or_else(|| "yes".into());
        weir::stage::log::log(weir::stage::log::Level::Info, "typed-only ready");
        Ok(())
    }

    fn process(mut msg: Message, _meta: Metadata) -> Outcome {
        if msg.value.as_deref() == Some(b"reject") {
            return Outcome::Reject("typed stage rejects `reject`".into());
        }
        msg.headers.push(Header {
            key: "x-typed".into(),
            value: Some(TAG.lock().unwrap().clone().into_bytes()),
        });
        Outcome::Next(vec![msg])
    }
}

export!(Typed);
