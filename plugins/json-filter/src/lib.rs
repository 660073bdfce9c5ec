//! Keeps JSON messages whose `field` equals `equals` (or, without `equals`, has the field at all);
//! filters the others out and rejects values that are not JSON objects.
//!
//! Config: `field` (required; a top-level name or a JSON pointer such as `/user/country`),
//! `equals` (optional; compared with the field's string value, or its JSON text otherwise).
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
#[derive(Debug)]
pub struct Filter {
    pointer: String,
    equals: Option<String>,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Filter, String> {
    let field = config.require("field")?;
    let pointer = if field.starts_with('/') {
        field.to_owned()
    } else {
        format!("/{field}")
    };
    Ok(Filter {
        pointer,
        equals: config.get("equals").map(str::to_owned),
    })
}

/// Decides one message.
#[weir_sdk::stage(init = setup)]
pub fn json_filter(msg: &Message<'_>, f: &Filter) -> Outcome {
    let Some(value) = msg.value() else {
        return Outcome::reject("no value");
    };
    let doc: serde_json::Value = match serde_json::from_slice(value) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(_) => return Outcome::reject("value is not a JSON object"),
        Err(e) => return Outcome::reject(format!("malformed JSON: {e}")),
    };
    let keep = match (doc.pointer(&f.pointer), &f.equals) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(serde_json::Value::String(s)), Some(want)) => s == want,
        (Some(other), Some(want)) => serde_json::to_string(other).is_ok_and(|text| text == *want),
    };
    Outcome::from(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::TestMessage;

    fn filter() -> Filter {
        setup(&Config::from_pairs([
            ("field", "country"),
            ("equals", "NL"),
        ]))
        .unwrap()
    }

    #[test]
    fn keeps_matching_drops_other_rejects_malformed() {
        let f = filter();
        let run = |v: &str| json_filter(&TestMessage::value(v).borrow(), &f);
        assert_eq!(run(r#"{"country":"NL"}"#), Outcome::Keep);
        assert_eq!(run(r#"{"country":"DE"}"#), Outcome::drop());
        assert_eq!(run(r#"{"other":1}"#), Outcome::drop());
        assert!(matches!(run("{not json"), Outcome::Reject(r) if r.starts_with("malformed JSON")));
        assert!(matches!(run("[1]"), Outcome::Reject(_)));
    }

    #[test]
    fn field_is_required() {
        assert!(setup(&Config::default()).unwrap_err().contains("field"));
    }
}
