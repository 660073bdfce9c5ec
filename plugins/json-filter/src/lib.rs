//! Keeps JSON messages whose `field` equals `equals` (or, without `equals`, has the field at all);
//! filters the others out and rejects values that are not JSON objects.
//!
//! Config: `field` (required; a top-level name or a JSON pointer such as `/user/country`),
//! `equals` (optional; compared with the field's string value, or its JSON text otherwise).
//!
//! The value is read in place (`weir_sdk::json`): one checking scan, no tree of maps.
use weir_sdk::json::{Object, Pointer};
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
#[derive(Debug)]
pub struct Filter {
    pointer: Pointer,
    equals: Option<String>,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Filter, String> {
    let field = config.require("field")?;
    Ok(Filter {
        pointer: Pointer::parse(field),
        equals: config.get("equals").map(str::to_owned),
    })
}

/// Decides one message.
#[weir_sdk::stage(init = setup)]
pub fn json_filter(msg: &Message<'_>, f: &Filter) -> Outcome {
    let Some(value) = msg.value() else {
        return Outcome::reject("no value");
    };
    let doc = match Object::parse(value) {
        Ok(doc) => doc,
        Err(e) => return Outcome::reject(e.to_string()),
    };
    let keep = match (doc.pointer(&f.pointer), &f.equals) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(v), Some(want)) => match v.as_str() {
            Some(s) => s == want.as_str(),
            // Not a string: compared as compact JSON text, e.g. `12`, `true`, `{"a":1}`.
            None => serde_json::to_string(&v.to_value()).is_ok_and(|text| text == *want),
        },
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
