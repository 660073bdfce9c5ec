//! Replays dead-letter records: each record goes back to the topic it was read from
//! (`weir.source.topic`), as the original message, without the `weir.*` headers the reject
//! path added. Config (all optional filters; a record that does not match is dropped):
//! `stage` (the stage that rejected it), `reason` (a regular expression the reason must
//! match), `plugin` (a prefix of the rejecting plugin's hash). A record without
//! `weir.source.topic` is not a dead-letter record and is rejected.
use weir_sdk::{Config, Message, OutMessage, Outcome};

/// The filters.
pub struct Filters {
    stage: Option<String>,
    reason: Option<regex_lite::Regex>,
    plugin: Option<String>,
}

/// Reads the filters.
pub fn setup(config: &Config) -> Result<Filters, String> {
    let reason = match config.get("reason").filter(|r| !r.is_empty()) {
        Some(r) => Some(regex_lite::Regex::new(r).map_err(|e| format!("`reason`: {e}"))?),
        None => None,
    };
    let non_empty = |k: &str| config.get(k).filter(|v| !v.is_empty()).map(str::to_owned);
    Ok(Filters {
        stage: non_empty("stage"),
        reason,
        plugin: non_empty("plugin"),
    })
}

/// One dead-letter record back to its source topic.
#[weir_sdk::stage(init = setup)]
pub fn dlq_replay(msg: &Message<'_>, f: &Filters) -> Outcome {
    let header = |name: &str| {
        msg.header(name)
            .flatten()
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let Some(topic) = header("weir.source.topic") else {
        return Outcome::reject("not a dead-letter record: no `weir.source.topic` header");
    };
    let stage_ok = f
        .stage
        .as_deref()
        .is_none_or(|s| header("weir.stage") == Some(s));
    let reason_ok = f
        .reason
        .as_ref()
        .is_none_or(|r| header("weir.reason").is_some_and(|h| r.is_match(h)));
    let plugin_ok = f
        .plugin
        .as_deref()
        .is_none_or(|p| header("weir.plugin").is_some_and(|h| h.starts_with(p)));
    if !(stage_ok && reason_ok && plugin_ok) {
        return Outcome::drop();
    }
    Outcome::map(OutMessage {
        key: msg.key().map(<[u8]>::to_vec),
        value: msg.value().map(<[u8]>::to_vec),
        headers: msg
            .headers()
            .filter(|(k, _)| !k.starts_with("weir."))
            .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
            .collect(),
        timestamp: msg.timestamp(),
        topic: Some(topic.to_owned()),
    })
}
