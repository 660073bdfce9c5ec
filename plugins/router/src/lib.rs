//! Routes JSON messages to the topic `prefix` + the value of `field` (config keys); messages
//! without the field go to `default` when set and are rejected otherwise.
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
pub struct Router {
    field: String,
    prefix: String,
    default: Option<String>,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Router, String> {
    Ok(Router {
        field: config.require("field")?.to_owned(),
        prefix: config.get("prefix").unwrap_or("").to_owned(),
        default: config.get("default").map(str::to_owned),
    })
}

/// Routes one message.
#[weir_sdk::stage(init = setup)]
pub fn router(msg: &Message<'_>, r: &Router) -> Outcome {
    let doc: serde_json::Value = match msg.value().map(serde_json::from_slice) {
        Some(Ok(v)) => v,
        Some(Err(e)) => return Outcome::reject(format!("malformed JSON: {e}")),
        None => return Outcome::reject("no value"),
    };
    let topic = match doc.get(&r.field).and_then(|v| v.as_str()) {
        Some(name) => format!("{}{}", r.prefix, name),
        None => match &r.default {
            Some(d) => d.clone(),
            None => return Outcome::reject(format!("no string field `{}` to route on", r.field)),
        },
    };
    Outcome::map(msg.to_owned().topic(topic))
}
