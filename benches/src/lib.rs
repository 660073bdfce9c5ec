//! Shared pieces of Weir's benchmarks: the message set, stage specs and instances, measured
//! through the same `StageInstance::process` the pipeline's drivers call.

pub mod kafka;

use std::sync::Arc;
use std::time::Duration;

use weir::config::{ContractChoice, TrapPolicy};
use weir::engine::{StageInstance, StageSpec, WeirEngine};
use weir::message::{Envelope, Header, Lane, Message};

/// ~100-byte JSON objects (valid JSON: the stages parse them), a 9-byte key, one header;
/// every other message has `"status":"paid"`.
pub fn value(i: usize) -> String {
    let status = if i.is_multiple_of(2) { "paid" } else { "open" };
    let v =
        format!(r#"{{"id":{i},"status":"{status}","region":"eu","customer":"c-{i:06}","pad":""#);
    format!(
        "{v}{}\"}}",
        "x".repeat(100usize.saturating_sub(v.len() + 2))
    )
}

pub fn messages(n: usize) -> Vec<Envelope> {
    (0..n)
        .map(|i| Envelope {
            offset: i as i64,
            msg: Message {
                key: Some(format!("key-{i:05}").into_bytes()),
                value: Some(value(i).into_bytes()),
                headers: vec![Header {
                    key: "trace".into(),
                    value: Some(b"abc".to_vec().into()),
                }],
                timestamp: Some(1_700_000_000_000),
                topic: None,
            },
        })
        .collect()
}

pub fn spec(contract: ContractChoice, config: &[(&str, &str)]) -> Arc<StageSpec> {
    Arc::new(StageSpec {
        name: "bench".into(),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        memory: 64 << 20,
        timeout: Duration::from_secs(5),
        max_output: 4 << 20,
        on_trap: TrapPolicy::Reject,
        contract,
        grants: Default::default(),
        state: None,
    })
}

pub fn instance(
    engine: &WeirEngine,
    plugin: &str,
    contract: ContractChoice,
    config: &[(&str, &str)],
) -> StageInstance {
    let p = Arc::new(
        engine
            .load_plugin("bench", std::path::Path::new(plugin))
            .expect("plugin loads"),
    );
    StageInstance::new(engine, spec(contract, config), p).expect("instantiates")
}

pub fn engine() -> WeirEngine {
    WeirEngine::new(64 << 20, None).expect("engine")
}

pub fn lane() -> Lane {
    Lane {
        topic: "bench".into(),
        partition: 0,
        generation: 0,
    }
}
