//! A running total per key, kept in the state bucket `totals`: each message's value is a JSON
//! object with an integer field (config `field`, default `amount`); the stage adds it to its
//! key's total and emits the message with the field `total` set to the new total. A message
//! without a key, or whose field is not an integer, is rejected (and counts nothing).
//!
//! Pipeline YAML: `state: { buckets: [totals] }`.
use weir_sdk::json::Object;
use weir_sdk::state::Bucket;
use weir_sdk::{Config, Message, Outcome};

/// The parsed config.
pub struct Totals {
    field: String,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Totals, String> {
    Ok(Totals {
        field: config.get("field").unwrap_or("amount").to_owned(),
    })
}

/// Adds the message's amount to its key's total and emits the message with the total.
#[weir_sdk::stage(init = setup)]
pub fn running_total(msg: &Message<'_>, t: &Totals) -> Outcome {
    let Some(key) = msg.key_str() else {
        return Outcome::reject("no key (or a key that is not UTF-8)");
    };
    let mut doc = match Object::parse(msg.value().unwrap_or_default()) {
        Ok(d) => d,
        Err(e) => return Outcome::reject(e.to_string()),
    };
    let Some(amount) = doc.get(&t.field).and_then(|v| v.to_value().as_i64()) else {
        return Outcome::reject(format!("field `{}` is not an integer", t.field));
    };
    let total = match Bucket::open("totals").and_then(|b| b.increment(key, amount)) {
        Ok(total) => total,
        // The store is not usable: stop rather than emit a wrong total.
        Err(e) => return Outcome::fail(format!("state: {e}")),
    };
    if let Err(e) = doc.set_json("total", &total) {
        return Outcome::fail(e.to_string());
    }
    Outcome::map(msg.to_owned().value(doc.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{reset_state, TestMessage};

    fn total_of(out: Outcome) -> i64 {
        let Outcome::Next(msgs) = out else {
            panic!("expected a message, got {out:?}")
        };
        let v = msgs[0].value.clone().unwrap();
        let doc = Object::parse(&v).unwrap();
        doc.get("total").unwrap().to_value().as_i64().unwrap()
    }

    #[test]
    fn totals_are_per_key_and_run_on() {
        reset_state();
        let t = setup(&Config::from_pairs([] as [(&str, &str); 0])).unwrap();
        let m = |k: &str, a: i64| TestMessage::value(format!("{{\"amount\":{a}}}")).key(k);
        assert_eq!(total_of(running_total(&m("a", 5).borrow(), &t)), 5);
        assert_eq!(total_of(running_total(&m("b", 2).borrow(), &t)), 2);
        assert_eq!(total_of(running_total(&m("a", -1).borrow(), &t)), 4);
        let bad = TestMessage::value("{\"amount\":\"x\"}").key("a");
        assert!(matches!(
            running_total(&bad.borrow(), &t),
            Outcome::Reject(_)
        ));
        assert_eq!(total_of(running_total(&m("a", 0).borrow(), &t)), 4);
    }
}
