//! Adds fields to JSON objects: every config key `set.NAME` sets field `NAME` to the string
//! value; `upper` names a string field to upper-case. Rejects values that are not JSON objects.
//! The object is read in place and written back in its own field order (`weir_sdk::json`), new
//! fields last.
use weir_sdk::json::Object;
use weir_sdk::{Config, Message, OutMessage, Outcome};

/// The parsed config.
pub struct Enrich {
    set: Vec<(String, String)>,
    upper: Option<String>,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Enrich, String> {
    let set: Vec<_> = config
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("set.")
                .map(|name| (name.to_owned(), v.to_owned()))
        })
        .collect();
    let upper = config.get("upper").map(str::to_owned);
    if set.is_empty() && upper.is_none() {
        return Err("nothing to do: give `set.NAME` keys or `upper`".into());
    }
    Ok(Enrich { set, upper })
}

/// Transforms one message.
#[weir_sdk::stage(init = setup)]
pub fn json_enrich(msg: &Message<'_>, e: &Enrich) -> Outcome {
    let Some(value) = msg.value() else {
        return Outcome::reject("no value");
    };
    let mut doc = match Object::parse(value) {
        Ok(doc) => doc,
        Err(err) => return Outcome::reject(err.to_string()),
    };
    for (k, v) in &e.set {
        doc.set_str(k, v);
    }
    if let Some(field) = &e.upper {
        if let Some(upper) = doc
            .get(field)
            .and_then(|v| v.as_str())
            .map(|s| s.to_uppercase())
        {
            doc.set_str(field, &upper);
        }
    }
    let mut out: OutMessage = msg.to_owned();
    out.value = Some(doc.to_vec());
    Outcome::map(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::TestMessage;

    #[test]
    fn adds_and_uppercases() {
        let e = setup(&Config::from_pairs([
            ("set.source", "weir"),
            ("upper", "name"),
        ]))
        .unwrap();
        let out = json_enrich(
            &TestMessage::value(r#"{"name":"ada"}"#).key("k").borrow(),
            &e,
        );
        let Outcome::Next(msgs) = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            msgs[0].value.as_deref(),
            Some(&br#"{"name":"ADA","source":"weir"}"#[..])
        );
        assert_eq!(msgs[0].key.as_deref(), Some(&b"k"[..]));
    }
}
