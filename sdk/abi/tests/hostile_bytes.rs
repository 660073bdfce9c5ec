//! Property tests of the packed readers against bytes nobody should trust: the host's
//! `ResultReader` (a hostile stage writes its answer) and the guest's `BatchReader`.
//!
//! For arbitrary bytes, and for valid answers and batches with random mutations (bit flips,
//! overwritten lengths, cuts, inserted bytes): the readers never panic and never read outside
//! the buffer; an answer they accept is self-consistent (as many verdicts as `len`, each `next`
//! yields exactly its count of messages, every slice lies inside the input); a valid answer
//! reads back exactly as written. The host turns any refused answer into a trap
//! (`StageInstance::call_batch`).
//!
//! Cases: `WEIR_FUZZ_CASES` per property (default 20,000, what the suite runs), or
//! `WEIR_FUZZ_SECS` to keep generating until that many seconds have passed per property;
//! each property prints how many cases ran. By hand, ten minutes in all:
//! `WEIR_FUZZ_SECS=150 cargo test --release -p weir-abi --test hostile_bytes -- --nocapture --test-threads 1`.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use weir_abi::{BatchReader, BatchWriter, ResultReader, ResultWriter, Verdict};

/// One output message of a generated answer.
#[derive(Debug, Clone)]
struct Out {
    timestamp: Option<i64>,
    topic: Option<String>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// One generated verdict.
#[derive(Debug, Clone)]
enum Answer {
    Keep,
    Next(Vec<Out>),
    Reject(String),
    Fail(String),
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn out() -> impl Strategy<Value = Out> {
    (
        prop::option::of(any::<i64>()),
        prop::option::of("[a-z.]{0,8}"),
        prop::option::of(bytes(12)),
        prop::option::of(bytes(24)),
        prop::collection::vec(("[a-z]{0,6}", prop::option::of(bytes(6))), 0..3),
    )
        .prop_map(|(timestamp, topic, key, value, headers)| Out {
            timestamp,
            topic,
            key,
            value,
            headers,
        })
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        3 => Just(Answer::Keep),
        3 => prop::collection::vec(out(), 0..3).prop_map(Answer::Next),
        1 => "\\PC{0,12}".prop_map(Answer::Reject),
        1 => "\\PC{0,12}".prop_map(Answer::Fail),
    ]
}

/// Answers for a batch of `sent` messages (a fail ends them) and the bytes a guest writes.
fn written(answers: &[Answer], sent: usize) -> Vec<u8> {
    let mut w = ResultWriter::new(sent);
    for a in answers {
        if w.failed() {
            break;
        }
        match a {
            Answer::Keep => w.keep(),
            Answer::Next(outs) => {
                w.next(outs.len());
                for o in outs {
                    w.message(
                        o.timestamp,
                        o.topic.as_deref(),
                        o.key.as_deref(),
                        o.value.as_deref(),
                        o.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
                    );
                }
            }
            Answer::Reject(r) => w.reject(r),
            Answer::Fail(r) => w.fail(r),
        }
    }
    if !w.failed() {
        for _ in answers.len()..sent {
            w.keep();
        }
    }
    w.finish()
}

fn valid_answer() -> impl Strategy<Value = (Vec<Answer>, usize, Vec<u8>)> {
    prop::collection::vec(answer(), 0..12).prop_map(|answers| {
        let sent = answers.len();
        let buf = written(&answers, sent);
        (answers, sent, buf)
    })
}

/// One way to spoil a buffer.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Byte { at: usize, value: u8 },
    Length { at: usize, value: u32 },
    Cut { at: usize },
    Insert { at: usize, data: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let lengths = prop_oneof![
        Just(0u32),
        Just(1),
        Just(u32::MAX),
        Just(u32::MAX - 1),
        Just(i32::MAX as u32),
        Just(1 << 20),
        0u32..64,
    ];
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Byte { at, value }),
        (any::<usize>(), lengths).prop_map(|(at, value)| Mutation::Length { at, value }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        (any::<usize>(), bytes(9)).prop_map(|(at, data)| Mutation::Insert { at, data }),
    ]
}

fn mutate(mut buf: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let n = buf.len();
        match m {
            Mutation::Flip { at, bit } if n > 0 => buf[at % n] ^= 1 << bit,
            Mutation::Byte { at, value } if n > 0 => buf[at % n] = *value,
            Mutation::Length { at, value } if n >= 4 => {
                let at = at % (n - 3);
                buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
            Mutation::Cut { at } => buf.truncate(at % (n + 1)),
            Mutation::Insert { at, data } => {
                let at = at % (n + 1);
                buf.splice(at..at, data.iter().copied());
            }
            _ => {}
        }
    }
    buf
}

/// Whether `part` lies inside `whole` (a borrowed slice, not a copy).
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    part.is_empty() || (p >= w && p + part.len() <= w + whole.len())
}

/// Reads an answer the way the host does; checks consistency when it is accepted.
fn read_answer(buf: &[u8], sent: usize) -> Result<Option<Vec<Verdict<'_>>>, TestCaseError> {
    let Ok(reader) = ResultReader::new(buf, sent) else {
        return Ok(None);
    };
    let len = reader.len();
    prop_assert!(len <= sent);
    let verdicts: Vec<_> = reader.collect();
    prop_assert_eq!(
        verdicts.len(),
        len,
        "an accepted answer yields every verdict"
    );
    for v in &verdicts {
        match v {
            Verdict::Next(msgs) => {
                let outs: Vec<_> = msgs.iter().collect();
                prop_assert_eq!(outs.len(), msgs.len(), "each `next` yields its count");
                prop_assert!(msgs.byte_len() <= buf.len());
                for o in outs {
                    for part in [o.key, o.value, o.topic.map(str::as_bytes)]
                        .into_iter()
                        .flatten()
                    {
                        prop_assert!(inside(part, buf));
                    }
                    prop_assert_eq!(o.headers.iter().count(), o.headers.len());
                    for (k, v) in o.headers.iter() {
                        prop_assert!(inside(k.as_bytes(), buf));
                        if let Some(v) = v {
                            prop_assert!(inside(v, buf));
                        }
                    }
                }
            }
            Verdict::Reject(r) | Verdict::Fail(r) => prop_assert!(inside(r.as_bytes(), buf)),
            Verdict::Keep => {}
        }
    }
    if let Some(i) = verdicts.iter().position(|v| matches!(v, Verdict::Fail(_))) {
        prop_assert_eq!(i + 1, verdicts.len(), "nothing after a fail");
    }
    Ok(Some(verdicts))
}

/// Reads a batch the way a guest does: every message, every header.
fn read_batch(buf: &[u8]) -> Result<(), TestCaseError> {
    let Ok(reader) = BatchReader::new(buf) else {
        return Ok(());
    };
    prop_assert!(inside(reader.topic.as_bytes(), buf));
    let count = reader.count as usize;
    let mut seen = 0;
    for m in reader {
        seen += 1;
        let Ok(m) = m else { break };
        for part in [m.key, m.value].into_iter().flatten() {
            prop_assert!(inside(part, buf));
        }
        prop_assert_eq!(m.headers.iter().count(), m.headers.len());
    }
    prop_assert!(seen <= count);
    Ok(())
}

fn batch_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(out(), 0..8).prop_map(|msgs| {
        let mut buf = Vec::new();
        let mut w = BatchWriter::new(&mut buf, "orders", 3);
        for (i, m) in msgs.iter().enumerate() {
            w.push(
                i as i64,
                m.timestamp,
                m.key.as_deref(),
                m.value.as_deref(),
                m.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
            );
        }
        w.finish();
        buf
    })
}

/// Runs `test` on values of `strategy`: `WEIR_FUZZ_CASES` cases (default 20,000), or for
/// `WEIR_FUZZ_SECS` seconds; prints the count.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let deadline = env("WEIR_FUZZ_SECS").map(|s| Instant::now() + Duration::from_secs(s));
    let chunk = env("WEIR_FUZZ_CASES").unwrap_or(20_000) as u32;
    let mut ran = 0u64;
    loop {
        let mut runner = TestRunner::new(Config {
            cases: chunk,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{name}: {e}");
        }
        ran += u64::from(chunk);
        if deadline.is_none_or(|d| Instant::now() >= d) {
            break;
        }
    }
    println!("{name}: {ran} cases");
}

#[test]
fn valid_answers_read_back_as_written() {
    fuzz("valid answers", valid_answer(), |(answers, sent, buf)| {
        let verdicts = read_answer(&buf, sent)?.expect("a written answer is accepted");
        let fail_at = answers.iter().position(|a| matches!(a, Answer::Fail(_)));
        prop_assert_eq!(verdicts.len(), fail_at.map_or(sent, |i| i + 1));
        for (v, a) in verdicts.iter().zip(&answers) {
            match (v, a) {
                (Verdict::Keep, Answer::Keep) => {}
                (Verdict::Reject(r), Answer::Reject(w)) | (Verdict::Fail(r), Answer::Fail(w)) => {
                    prop_assert_eq!(*r, w.as_str())
                }
                (Verdict::Next(msgs), Answer::Next(outs)) => {
                    for (m, o) in msgs.iter().zip(outs) {
                        prop_assert_eq!(m.timestamp, o.timestamp.filter(|t| *t != i64::MIN));
                        prop_assert_eq!(m.topic, o.topic.as_deref());
                        prop_assert_eq!(m.key, o.key.as_deref());
                        prop_assert_eq!(m.value, o.value.as_deref());
                        let h: Vec<_> = m.headers.iter().collect();
                        let want: Vec<_> = o
                            .headers
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.as_deref()))
                            .collect();
                        prop_assert_eq!(h, want);
                    }
                }
                (v, a) => prop_assert!(false, "read {v:?} for {a:?}"),
            }
        }
        Ok(())
    });
}

#[test]
fn mutated_answers_never_panic_and_stay_inside() {
    let strategy = (
        valid_answer(),
        prop::collection::vec(mutation(), 1..4),
        0usize..3,
    );
    fuzz(
        "mutated answers",
        strategy,
        |((_, sent, buf), mutations, extra)| {
            let bad = mutate(buf, &mutations);
            // Also against a batch size that does not match what the guest answered.
            for sent in [sent, sent + extra, sent.saturating_sub(extra)] {
                read_answer(&bad, sent)?;
            }
            Ok(())
        },
    );
}

#[test]
fn arbitrary_answers_never_panic() {
    fuzz(
        "arbitrary answers",
        (bytes(256), 0usize..16),
        |(buf, sent)| read_answer(&buf, sent).map(|_| ()),
    );
}

#[test]
fn mutated_and_arbitrary_batches_never_panic() {
    let strategy = (
        batch_bytes(),
        prop::collection::vec(mutation(), 0..4),
        bytes(128),
    );
    fuzz("batches", strategy, |(buf, mutations, noise)| {
        read_batch(&mutate(buf, &mutations))?;
        read_batch(&noise)
    });
}
