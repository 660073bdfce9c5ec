//! Shadow comparison: the live version's answer and the candidate's for the same message.
//!
//! Answers are compared by what they deliver: `keep` is the input message going on, so a
//! `keep` and a `next` with an identical message agree. Then the kind (next, dropped,
//! reject, fail), then per output message, in order: count, value, key, headers, topic,
//! timestamp. Two rejects agree whatever their reasons say.

use serde_json::{json, Value};

use crate::engine::Verdict;
use crate::jsonl::message_json;
use crate::message::{Envelope, Lane, Message};

/// How two answers differ: the metric's `result` label.
pub const RESULTS: [&str; 8] = [
    "agree",
    "differ_kind",
    "differ_count",
    "differ_value",
    "differ_key",
    "differ_headers",
    "differ_topic",
    "differ_timestamp",
];

/// Compares the answers to one input; `"agree"` or the first way they differ.
pub fn compare(input: &Envelope, live: &Verdict, candidate: &Verdict) -> &'static str {
    let live = delivered(input, live);
    let cand = delivered(input, candidate);
    match (live, cand) {
        (Delivered::Messages(a), Delivered::Messages(b)) => {
            if a.len() != b.len() {
                return "differ_count";
            }
            for (x, y) in a.iter().zip(b.iter()) {
                if x.value != y.value {
                    return "differ_value";
                }
                if x.key != y.key {
                    return "differ_key";
                }
                if x.headers != y.headers {
                    return "differ_headers";
                }
                if x.topic != y.topic {
                    return "differ_topic";
                }
                if x.timestamp != y.timestamp {
                    return "differ_timestamp";
                }
            }
            "agree"
        }
        (a, b) if a.kind() == b.kind() => "agree",
        _ => "differ_kind",
    }
}

enum Delivered<'a> {
    Messages(Vec<&'a Message>),
    Reject,
    Fail,
}

impl Delivered<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Delivered::Messages(m) if m.is_empty() => "dropped",
            Delivered::Messages(_) => "next",
            Delivered::Reject => "reject",
            Delivered::Fail => "fail",
        }
    }
}

fn delivered<'a>(input: &'a Envelope, v: &'a Verdict) -> Delivered<'a> {
    match v {
        Verdict::Keep => Delivered::Messages(vec![&input.msg]),
        Verdict::Next(m) => Delivered::Messages(m.iter().collect()),
        Verdict::Reject(_) => Delivered::Reject,
        Verdict::Fail(_) => Delivered::Fail,
    }
}

/// An answer as JSON, for the differences file and `GET /stages`.
pub fn verdict_json(v: &Verdict) -> Value {
    match v {
        Verdict::Keep => json!({ "outcome": "keep" }),
        Verdict::Next(m) => json!({
            "outcome": if m.is_empty() { "dropped" } else { "next" },
            "messages": m.iter().map(|m| Value::Object(message_json(m))).collect::<Vec<_>>(),
        }),
        Verdict::Reject(r) => json!({ "outcome": "reject", "reason": r }),
        Verdict::Fail(r) => json!({ "outcome": "fail", "reason": r }),
    }
}

/// One difference found in shadow: the input's place, both answers, how they differ.
pub fn difference_json(
    lane: &Lane,
    input: &Envelope,
    result: &str,
    live: &Verdict,
    candidate: &Verdict,
) -> Value {
    json!({
        "topic": &*lane.topic,
        "partition": lane.partition,
        "offset": input.offset,
        "differ": result.trim_start_matches("differ_"),
        "input": Value::Object(message_json(&input.msg)),
        "live": verdict_json(live),
        "candidate": verdict_json(candidate),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(v: &str) -> Envelope {
        Envelope {
            offset: 7,
            msg: Message {
                value: Some(v.as_bytes().to_vec()),
                ..Message::default()
            },
        }
    }

    #[test]
    fn keep_agrees_with_an_identical_next_and_rejects_agree_whatever_the_reason() {
        let e = env("a");
        assert_eq!(
            compare(&e, &Verdict::Keep, &Verdict::Next(vec![e.msg.clone()])),
            "agree"
        );
        assert_eq!(
            compare(
                &e,
                &Verdict::Reject("x".into()),
                &Verdict::Reject("y".into())
            ),
            "agree"
        );
        assert_eq!(
            compare(&e, &Verdict::Keep, &Verdict::Next(vec![])),
            "differ_count"
        );
        assert_eq!(
            compare(&e, &Verdict::Keep, &Verdict::Reject("no".into())),
            "differ_kind"
        );
        let mut other = e.msg.clone();
        other.key = Some(b"k".to_vec());
        assert_eq!(
            compare(&e, &Verdict::Keep, &Verdict::Next(vec![other])),
            "differ_key"
        );
        let mut other = e.msg.clone();
        other.value = Some(b"b".to_vec());
        assert_eq!(
            compare(&e, &Verdict::Keep, &Verdict::Next(vec![other])),
            "differ_value"
        );
    }
}
