//! Drops a message whose id was seen before: the id is the string or number at the JSON
//! field `id` of the value (config `field`), else the message key. Seen ids are kept in the
//! state bucket `seen`; the pipeline's `state.ttl` says how long an id counts as seen.
//! A message with no id is rejected.
//!
//! Pipeline YAML: `state: { buckets: [seen], ttl: 1d }`.
use weir_sdk::json::Object;
use weir_sdk::state::Bucket;
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
pub struct Dedup {
    field: String,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Dedup, String> {
    Ok(Dedup {
        field: config.get("field").unwrap_or("id").to_owned(),
    })
}

fn id_of(msg: &Message<'_>, field: &str) -> Option<String> {
    let from_value = msg
        .value()
        .and_then(|v| Object::parse(v).ok())
        .and_then(|doc| {
            let v = doc.get(field)?;
            match v.as_str() {
                Some(s) => Some(s.into_owned()),
                None => {
                    let n = v.to_value();
                    n.is_number().then(|| n.to_string())
                }
            }
        });
    from_value.or_else(|| msg.key_str().map(str::to_owned))
}

/// Keeps the first message of each id, drops the rest.
#[weir_sdk::stage(init = setup)]
pub fn dedup(msg: &Message<'_>, d: &Dedup) -> Outcome {
    let Some(id) = id_of(msg, &d.field) else {
        return Outcome::reject(format!("no id: neither a field `{}` nor a key", d.field));
    };
    let seen = match Bucket::open("seen") {
        Ok(b) => b,
        Err(e) => return Outcome::fail(format!("state: {e}")),
    };
    match seen.exists(&id) {
        Ok(true) => Outcome::drop(),
        Ok(false) => match seen.set(&id, msg.offset().to_le_bytes()) {
            Ok(()) => Outcome::Keep,
            Err(e) => Outcome::fail(format!("state: {e}")),
        },
        Err(e) => Outcome::fail(format!("state: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{reset_state, TestMessage};

    #[test]
    fn the_first_of_each_id_passes() {
        reset_state();
        let d = setup(&Config::from_pairs([] as [(&str, &str); 0])).unwrap();
        let m = |v: &str| TestMessage::value(v.to_owned());
        assert_eq!(dedup(&m(r#"{"id":"a"}"#).borrow(), &d), Outcome::Keep);
        assert_eq!(dedup(&m(r#"{"id":"b"}"#).borrow(), &d), Outcome::Keep);
        assert_eq!(dedup(&m(r#"{"id":"a"}"#).borrow(), &d), Outcome::drop());
        assert_eq!(dedup(&m(r#"{"id":7}"#).borrow(), &d), Outcome::Keep);
        assert_eq!(dedup(&m(r#"{"id":7}"#).borrow(), &d), Outcome::drop());
        assert!(matches!(dedup(&m("{}").borrow(), &d), Outcome::Reject(_)));
        assert_eq!(dedup(&m("{}").key("k").borrow(), &d), Outcome::Keep);
    }
}
