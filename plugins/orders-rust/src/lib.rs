//! The cross-language example stage (the same job in `plugins/orders-{rust,c,python,js}`; see
//! docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field` is
//! the string `equals`, add the string field `tag` = `tag_value`, drop the others, and reject
//! input that has no value, is not JSON, or is not a JSON object.
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
#[derive(Debug)]
pub struct Orders {
    field: String,
    equals: String,
    tag: String,
    tag_value: String,
}

/// Reads the config: `field`, `equals`, `tag` and `tag_value` are all required.
pub fn setup(config: &Config) -> Result<Orders, String> {
    Ok(Orders {
        field: config.require("field")?.to_owned(),
        equals: config.require("equals")?.to_owned(),
        tag: config.require("tag")?.to_owned(),
        tag_value: config.require("tag_value")?.to_owned(),
    })
}

/// Decides one message.
#[weir_sdk::stage(init = setup)]
pub fn orders(msg: &Message<'_>, o: &Orders) -> Outcome {
    let Some(value) = msg.value() else {
        return Outcome::reject("no value");
    };
    let mut doc = match serde_json::from_slice::<serde_json::Value>(value) {
        Ok(serde_json::Value::Object(doc)) => doc,
        Ok(_) => return Outcome::reject("not a JSON object"),
        Err(_) => return Outcome::reject("malformed JSON"),
    };
    if doc.get(&o.field).and_then(serde_json::Value::as_str) != Some(o.equals.as_str()) {
        return Outcome::drop();
    }
    doc.insert(o.tag.clone(), o.tag_value.clone().into());
    let mut out = msg.to_owned();
    out.value = Some(serde_json::to_vec(&doc).expect("a JSON map always serializes"));
    Outcome::map(out)
}
