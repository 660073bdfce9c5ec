//! Glue between the component exports and a [`Stage`]. Not part of the public API.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::message::{HeaderView, Message};
use crate::{Config, Level, Outcome, Stage};

#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "stage-fast",
        path: "wit",
        // The stage state interfaces (`wasi:keyvalue`, in wit/deps): `weir_sdk::state`.
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_stage",
        default_bindings_module: "weir_sdk::__private::bindings",
    });
}

pub use bindings::__export_stage;
pub use bindings::exports::weir::stage::batch::Guest as BatchGuest;
pub use bindings::exports::weir::stage::stage::Guest as StageGuest;
use bindings::weir::stage::log as host_log;
use bindings::weir::stage::types::Header as WitHeader;
pub use bindings::weir::stage::types::{
    Message as WitMessage, Metadata as WitMetadata, Outcome as WitOutcome,
};

thread_local! {
    /// Set once the stage opened a bucket: what begins and ends each call's state writes
    /// (`weir_sdk::state` keeps them in the guest until the call returns).
    static STATE_CALLS: std::cell::Cell<Option<fn(bool)>> = const { std::cell::Cell::new(None) };
}

/// The stage uses state: `calls(false)` when a call begins, `calls(true)` when it returns.
pub fn state_in_use(calls: fn(bool)) {
    STATE_CALLS.set(Some(calls));
}

fn call_begins() {
    if let Some(f) = STATE_CALLS.get() {
        f(false);
    }
}

fn call_returns() {
    if let Some(f) = STATE_CALLS.get() {
        f(true);
    }
}

/// The per-instance state cell the export macro declares.
pub type State<T> = LocalKey<RefCell<Option<T>>>;

pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => host_log::Level::Trace,
        Level::Debug => host_log::Level::Debug,
        Level::Info => host_log::Level::Info,
        Level::Warn => host_log::Level::Warn,
        Level::Error => host_log::Level::Error,
    };
    host_log::log(level, message);
}

pub fn init<T: Stage>(
    state: &'static State<T>,
    config: Vec<(String, String)>,
) -> Result<(), String> {
    let stage = T::init(&Config::from_pairs(config))?;
    state.with(|s| *s.borrow_mut() = Some(stage));
    Ok(())
}

fn with_stage<T: Stage, R>(state: &'static State<T>, f: impl FnOnce(&T) -> R) -> R {
    state.with(|s| {
        let s = s.borrow();
        let stage = s.as_ref().expect("weir: process called before init");
        f(stage)
    })
}

pub fn process_typed<T: Stage>(
    state: &'static State<T>,
    msg: WitMessage,
    meta: WitMetadata,
) -> WitOutcome {
    let headers: Vec<(String, Option<Vec<u8>>)> =
        msg.headers.into_iter().map(|h| (h.key, h.value)).collect();
    let view = Message {
        key: msg.key.as_deref(),
        value: msg.value.as_deref(),
        headers: HeaderView::Owned(&headers),
        timestamp: msg.timestamp,
        topic: &meta.topic,
        partition: meta.partition,
        offset: meta.offset,
    };
    call_begins();
    let outcome = with_stage(state, |s| s.process(&view));
    call_returns();
    match outcome {
        Outcome::Keep => WitOutcome::Keep,
        Outcome::Next(out) => WitOutcome::Next(
            out.into_iter()
                .map(|m| WitMessage {
                    key: m.key,
                    value: m.value,
                    headers: m
                        .headers
                        .into_iter()
                        .map(|(key, value)| WitHeader { key, value })
                        .collect(),
                    timestamp: m.timestamp,
                    topic: m.topic,
                })
                .collect(),
        ),
        Outcome::Reject(r) => WitOutcome::Reject(r),
        Outcome::Fail(r) => WitOutcome::Fail(r),
    }
}

pub fn process_batch<T: Stage>(state: &'static State<T>, input: &[u8]) -> Vec<u8> {
    let reader = match weir_abi::BatchReader::new(input) {
        Ok(r) => r,
        Err(e) => panic!("weir: {e}"),
    };
    let (topic, partition) = (reader.topic, reader.partition);
    let mut out = weir_abi::ResultWriter::new(reader.count as usize);
    call_begins();
    with_stage(state, |stage| {
        for m in reader {
            let m = m.unwrap_or_else(|e| panic!("weir: {e}"));
            let view = Message {
                key: m.key,
                value: m.value,
                headers: HeaderView::Packed(m.headers),
                timestamp: m.timestamp,
                topic,
                partition,
                offset: m.offset,
            };
            match stage.process(&view) {
                Outcome::Keep => out.keep(),
                Outcome::Next(msgs) => {
                    out.next(msgs.len());
                    for o in &msgs {
                        out.message(
                            o.timestamp,
                            o.topic.as_deref(),
                            o.key.as_deref(),
                            o.value.as_deref(),
                            o.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
                        );
                    }
                }
                Outcome::Reject(r) => out.reject(&r),
                Outcome::Fail(r) => {
                    out.fail(&r);
                    break;
                }
            }
        }
    });
    call_returns();
    out.finish()
}
