//! Reading a pipeline YAML: interpolation, parsing, errors that point at the problem.

use std::path::{Path, PathBuf};

use super::locate::line_of_path;
use super::{PipelineConfig, SinkConfig, SourceConfig};

/// A pipeline file that cannot be used. The message names the file, line and field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could be read but is not a valid pipeline.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// Loads the pipeline at `path`, resolving relative paths against its folder.
pub fn load(path: &Path) -> Result<PipelineConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut cfg = parse(path, &text, &|k| std::env::var(k).ok())?;
    let base = path.parent().unwrap_or(Path::new("."));
    resolve_paths(&mut cfg, base);
    let invalid = |(line, message)| ConfigError::Invalid {
        path: path.to_owned(),
        line,
        message,
    };
    check_granted_dirs(&cfg, &text).map_err(invalid)?;
    load_security_files(&mut cfg, &text).map_err(invalid)?;
    share_security(&mut cfg);
    register_secret_properties(&cfg);
    Ok(cfg)
}

/// Each Kafka client's `security` block (its own, or the pipeline's), with the YAML path it
/// was written at.
fn security_blocks(cfg: &mut PipelineConfig) -> Vec<(&'static str, &mut super::Security)> {
    let mut out: Vec<(&'static str, &mut super::Security)> = Vec::new();
    if let SourceConfig::Kafka(k) = &mut cfg.source {
        if let Some(s) = &mut k.security {
            out.push(("source.kafka.security", &mut **s));
        }
    }
    if let SinkConfig::Kafka(k) = &mut cfg.sink {
        if let Some(s) = &mut k.security {
            out.push(("sink.kafka.security", &mut **s));
        }
    }
    if let Some(SinkConfig::Kafka(k)) = &mut cfg.reject {
        if let Some(s) = &mut k.security {
            out.push(("reject.kafka.security", &mut **s));
        }
    }
    out
}

/// Reads the `*_file` secrets of every `security` block and checks the certificate files
/// (before the pipeline's block is shared with the clients that have none).
fn load_security_files(cfg: &mut PipelineConfig, text: &str) -> Result<(), (usize, String)> {
    for (at_path, s) in security_blocks(cfg) {
        s.load_files()
            .map_err(|(field, msg)| at(text, &format!("{at_path}.{field}"), msg))?;
    }
    if let Some(s) = &mut cfg.security {
        s.load_files()
            .map_err(|(field, msg)| at(text, &format!("security.{field}"), msg))?;
    }
    Ok(())
}

/// Granted folders must exist (checked once paths are resolved against the YAML's folder).
fn check_granted_dirs(cfg: &PipelineConfig, text: &str) -> Result<(), (usize, String)> {
    for (i, s) in cfg.stages.iter().enumerate() {
        for (j, d) in s.allow.dirs.iter().enumerate() {
            if !d.host.is_dir() {
                return Err(at(
                    text,
                    &format!("stages[{i}].allow.dirs[{j}].host"),
                    format_args!("{} is not a folder", d.host.display()),
                ));
            }
        }
    }
    Ok(())
}

/// Parses pipeline YAML `text` (named `path` in errors), with `env` for `${VAR}`. Paths stay
/// as written and `*_file` secrets unread (see [`load`]).
pub fn load_str(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PipelineConfig, ConfigError> {
    let mut cfg = parse(path, text, env)?;
    share_security(&mut cfg);
    register_secret_properties(&cfg);
    Ok(cfg)
}

/// Parses and validates; each client keeps only its own `security` block.
fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PipelineConfig, ConfigError> {
    let invalid = |line: usize, message: String| ConfigError::Invalid {
        path: path.to_owned(),
        line,
        message,
    };
    let text = interpolate(text, env).map_err(|(line, m)| invalid(line, m))?;
    let de = serde_yaml::Deserializer::from_str(&text);
    let cfg: PipelineConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let line = inner.location().map_or(0, |l| l.line());
        let mut msg = strip_location(&inner.to_string());
        if let Some(s) = suggestion(&msg) {
            msg.push_str(&format!("; did you mean `{s}`?"));
        }
        let at = if field == "." {
            String::new()
        } else {
            format!("field `{field}`: ")
        };
        invalid(line, format!("{at}{msg}"))
    })?;
    validate(&cfg, &text).map_err(|(line, m)| invalid(line, m))?;
    Ok(cfg)
}

/// The pipeline's `security` block goes to every Kafka client that has none of its own.
fn share_security(cfg: &mut PipelineConfig) {
    let Some(shared) = cfg.security.clone() else {
        return;
    };
    if let SourceConfig::Kafka(k) = &mut cfg.source {
        k.security.get_or_insert_with(|| Box::new(shared.clone()));
    }
    for sink in std::iter::once(&mut cfg.sink).chain(cfg.reject.as_mut()) {
        if let SinkConfig::Kafka(k) = sink {
            k.security.get_or_insert_with(|| Box::new(shared.clone()));
        }
    }
}

/// Secrets written as librdkafka `properties` (`sasl.password`, …) are redacted too.
fn register_secret_properties(cfg: &PipelineConfig) {
    let mut props: Vec<&std::collections::BTreeMap<String, serde_yaml::Value>> = Vec::new();
    if let SourceConfig::Kafka(k) = &cfg.source {
        props.push(&k.properties);
    }
    for sink in std::iter::once(&cfg.sink).chain(cfg.reject.as_ref()) {
        if let SinkConfig::Kafka(k) = sink {
            props.push(&k.properties);
        }
    }
    for map in props {
        for (k, v) in map {
            if crate::redact::is_sensitive_property(k) {
                crate::redact::register(&super::property_text(v));
            }
        }
    }
}

/// serde_yaml prefixes its own path ("stages[0]: ") and appends " at line L column C"; both
/// are reported separately.
fn strip_location(msg: &str) -> String {
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].trim_end_matches(','),
        None => msg,
    };
    match msg.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') && !path.contains('`') => rest.to_owned(),
        _ => msg.to_owned(),
    }
}

/// For "unknown field `x`, expected one of `a`, `b`" (and variants), the nearest valid name.
fn suggestion(msg: &str) -> Option<String> {
    let rest = msg
        .strip_prefix("unknown field `")
        .or_else(|| msg.strip_prefix("unknown variant `"))?;
    let (bad, rest) = rest.split_once('`')?;
    let candidates: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(bad, c), c))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_owned())
}

/// Replaces `${NAME}` and `${NAME:-default}`; `$${` stays a literal `${`.
fn interpolate(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, (usize, String)> {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let mut rest = line;
        while let Some(pos) = rest.find("${") {
            if rest[..pos].ends_with('$') {
                out.push_str(&rest[..pos - 1]);
                out.push_str("${");
                rest = &rest[pos + 2..];
                continue;
            }
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 2..];
            let end = after.find('}').ok_or_else(|| {
                (
                    i + 1,
                    "unterminated `${` (write `$${` for a literal)".to_owned(),
                )
            })?;
            let expr = &after[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            match env(name).or_else(|| default.map(str::to_owned)) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err((
                        i + 1,
                        format!("environment variable `{name}` is not set (use `${{{name}:-default}}` for a default)"),
                    ))
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
    }
    Ok(out)
}

/// An error about the field at `path`: its line, and the message naming the field.
fn at(text: &str, path: &str, what: impl std::fmt::Display) -> (usize, String) {
    (line_of_path(text, path), format!("field `{path}`: {what}"))
}

/// Every check that spans fields or needs more than a type: all in one place.
fn validate(cfg: &PipelineConfig, text: &str) -> Result<(), (usize, String)> {
    let mut seen = std::collections::HashSet::new();
    for (i, s) in cfg.stages.iter().enumerate() {
        if s.name.is_empty() {
            return Err(at(text, &format!("stages[{i}].name"), "must not be empty"));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(at(
                text,
                &format!("stages[{i}].name"),
                format_args!("stage name `{}` is used twice", s.name),
            ));
        }
        for (j, d) in s.allow.dirs.iter().enumerate() {
            if !d.guest.starts_with('/') {
                return Err(at(
                    text,
                    &format!("stages[{i}].allow.dirs[{j}].guest"),
                    format_args!("{:?} must be an absolute path such as /data", d.guest),
                ));
            }
        }
        if let Some(st) = &s.state {
            validate_state(st, &format!("stages[{i}].state"), text)?;
            if let SourceConfig::Kafka(k) = &cfg.source {
                if k.topics.len() != 1 || k.topics[0].starts_with('^') {
                    return Err(at(
                        text,
                        &format!("stages[{i}].state"),
                        "a stateful stage needs a Kafka source with exactly one topic (no pattern): its changelog is partitioned like that topic",
                    ));
                }
            }
        }
        let r = &s.rollout;
        if r.candidate.is_some() && r.mode == super::RolloutMode::Immediate {
            return Err(at(
                text,
                &format!("stages[{i}].rollout.candidate"),
                "needs `mode: shadow` or `mode: canary` (an immediate candidate is just the plugin)",
            ));
        }
        if r.mode == super::RolloutMode::Canary && r.share.0 <= 0.0 {
            return Err(at(
                text,
                &format!("stages[{i}].rollout.share"),
                "a canary needs a share above 0%",
            ));
        }
        if s.limits.timeout.is_zero() {
            return Err(at(
                text,
                &format!("stages[{i}].limits.timeout"),
                "must be above zero",
            ));
        }
    }
    if cfg.runtime.drivers == 0 {
        return Err(at(text, "runtime.drivers", "must be at least 1"));
    }
    if let Some(cores) = &cfg.runtime.cores {
        if cores.len() < cfg.runtime.drivers {
            return Err(at(
                text,
                "runtime.cores",
                format_args!(
                    "{} cores listed for {} drivers",
                    cores.len(),
                    cfg.runtime.drivers
                ),
            ));
        }
    }
    let mut blocks: Vec<(&str, &super::Security)> = Vec::new();
    if let Some(s) = &cfg.security {
        blocks.push(("security", s));
    }
    if let SourceConfig::Kafka(k) = &cfg.source {
        blocks.extend(k.security.as_deref().map(|s| ("source.kafka.security", s)));
    }
    if let SinkConfig::Kafka(k) = &cfg.sink {
        blocks.extend(k.security.as_deref().map(|s| ("sink.kafka.security", s)));
    }
    if let Some(SinkConfig::Kafka(k)) = &cfg.reject {
        blocks.extend(k.security.as_deref().map(|s| ("reject.kafka.security", s)));
    }
    for (path, s) in blocks {
        if let Some((field, msg)) = s.problems() {
            return Err(at(text, &format!("{path}.{field}"), msg));
        }
    }
    if let SourceConfig::Kafka(k) = &cfg.source {
        if k.topics.is_empty() {
            return Err(at(text, "source.kafka.topics", "name at least one topic"));
        }
        for (i, t) in k.topics.iter().enumerate() {
            if super::is_pattern(t) {
                if let Err(e) = regex_lite::Regex::new(t) {
                    return Err(at(
                        text,
                        &format!("source.kafka.topics[{i}]"),
                        format_args!("`{t}` is not a valid regular expression: {e}"),
                    ));
                }
            }
        }
        for key in ["enable.auto.commit", "enable.auto.offset.store", "group.id"] {
            if k.properties.contains_key(key) {
                return Err(at(
                    text,
                    &format!("source.kafka.properties.{key}"),
                    "set by Weir (commits follow handled messages; use `group`)",
                ));
            }
        }
        if k.properties.contains_key("group.protocol") {
            return Err(at(
                text,
                "source.kafka.properties.group.protocol",
                "set by Weir: use `group_protocol: classic` or `group_protocol: consumer` (KIP-848)",
            ));
        }
        validate_group_protocol(k, text)?;
    }
    if let Some(name) = &cfg.runtime.admin_token_env {
        if cfg.runtime.metrics.is_none() {
            return Err(at(
                text,
                "runtime.admin_token_env",
                "the admin API is served on `runtime.metrics`: set that address too",
            ));
        }
        if name.is_empty() {
            return Err(at(
                text,
                "runtime.admin_token_env",
                "name the environment variable",
            ));
        }
    }
    if cfg.batch.max_messages == 0 {
        return Err(at(text, "batch.max_messages", "must be at least 1"));
    }
    if cfg.delivery == super::Delivery::ExactlyOnce {
        validate_exactly_once(cfg, text)?;
    }
    Ok(())
}

/// What `group_protocol: consumer` (KIP-848) does not take: the broker owns the session,
/// the heartbeat and the assignment.
fn validate_group_protocol(k: &super::KafkaSource, text: &str) -> Result<(), (usize, String)> {
    let protocol = k.group_protocol;
    if protocol == super::GroupProtocol::Consumer && k.assignor == super::Assignor::Eager {
        return Err(at(
            text,
            "source.kafka.assignor",
            "`eager` needs `group_protocol: classic`: under the consumer protocol (KIP-848) the broker assigns, and only moved partitions are revoked",
        ));
    }
    for key in protocol.refused_properties() {
        if k.properties.contains_key(*key) {
            return Err(at(
                text,
                &format!("source.kafka.properties.{key}"),
                "not taken under `group_protocol: consumer` (KIP-848): the broker sets it (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms, group.consumer.assignors)",
            ));
        }
    }
    Ok(())
}

/// `delivery: exactly-once` commits outputs, dead-letter records and source offsets in one
/// Kafka transaction: all three must be Kafka, on one cluster.
/// Bucket names become parts of changelog topic names and file names: Kafka's topic alphabet.
fn validate_state(st: &super::StateConfig, path: &str, text: &str) -> Result<(), (usize, String)> {
    if st.buckets.is_empty() {
        return Err(at(
            text,
            &format!("{path}.buckets"),
            "name at least one bucket",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (j, b) in st.buckets.iter().enumerate() {
        let ok = !b.is_empty()
            && b.len() <= 64
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
        if !ok {
            return Err(at(
                text,
                &format!("{path}.buckets[{j}]"),
                format_args!("{b:?}: a bucket name is 1 to 64 of the letters a-z, A-Z, digits, `.`, `_` and `-`"),
            ));
        }
        if !seen.insert(b) {
            return Err(at(
                text,
                &format!("{path}.buckets[{j}]"),
                format_args!("bucket `{b}` is named twice"),
            ));
        }
    }
    if st.max_value.0 == 0 {
        return Err(at(text, &format!("{path}.max_value"), "must be above 0"));
    }
    Ok(())
}

fn validate_exactly_once(cfg: &PipelineConfig, text: &str) -> Result<(), (usize, String)> {
    let SourceConfig::Kafka(source) = &cfg.source else {
        return Err(at(
            text,
            "delivery",
            "exactly-once needs a Kafka source (`source.kafka`): its offsets are committed in the transaction",
        ));
    };
    let SinkConfig::Kafka(sink) = &cfg.sink else {
        return Err(at(
            text,
            "sink",
            "`delivery: exactly-once` needs a Kafka sink (`sink.kafka`): outputs are produced in Kafka transactions",
        ));
    };
    let dlq = match &cfg.reject {
        None => None,
        Some(SinkConfig::Kafka(k)) => Some(k),
        Some(_) => {
            return Err(at(
                text,
                "reject",
                "`delivery: exactly-once` needs a Kafka reject path (`reject.kafka`) or none: dead-letter records are produced in the same transaction",
            ))
        }
    };
    let same = |a: &str, b: &str| {
        let norm = |s: &str| {
            let mut v: Vec<String> = s.split(',').map(|x| x.trim().to_owned()).collect();
            v.sort();
            v
        };
        norm(a) == norm(b)
    };
    for (path, brokers) in std::iter::once(("sink.kafka.brokers", &sink.brokers))
        .chain(dlq.map(|d| ("reject.kafka.brokers", &d.brokers)))
    {
        if !same(brokers, &source.brokers) {
            return Err(at(
                text,
                path,
                format_args!(
                    "`delivery: exactly-once` commits outputs and source offsets in one transaction: must be the source's cluster (`{}`), not `{brokers}`",
                    source.brokers
                ),
            ));
        }
    }
    Ok(())
}

fn resolve_paths(cfg: &mut PipelineConfig, base: &Path) {
    let fix = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    };
    if let SourceConfig::Jsonl(s) = &mut cfg.source {
        fix(&mut s.path);
    }
    for sink in std::iter::once(&mut cfg.sink).chain(cfg.reject.as_mut()) {
        if let SinkConfig::Jsonl(s) = sink {
            fix(&mut s.path);
        }
    }
    for s in &mut cfg.stages {
        fix(&mut s.plugin);
        if let Some(c) = &mut s.rollout.candidate {
            fix(c);
        }
        if let Some(d) = &mut s.rollout.differences {
            fix(d);
        }
        for d in &mut s.allow.dirs {
            fix(&mut d.host);
        }
    }
    if let Some(d) = &mut cfg.runtime.cache_dir {
        fix(d);
    }
    if let Some(s) = &mut cfg.security {
        s.resolve_paths(base);
    }
    for (_, s) in security_blocks(cfg) {
        s.resolve_paths(base);
    }
    if let Some(r) = &mut cfg.runtime.report {
        fix(r);
    }
    let (decode, decode_key) = match &mut cfg.source {
        SourceConfig::Kafka(k) => (&mut k.decode, &mut k.decode_key),
        SourceConfig::Jsonl(j) => (&mut j.decode, &mut j.decode_key),
        SourceConfig::Stdin(i) => (&mut i.decode, &mut i.decode_key),
    };
    for d in [decode, decode_key].into_iter().flatten() {
        d.registry.resolve_paths(base);
    }
    if let SinkConfig::Kafka(k) = &mut cfg.sink {
        for e in [&mut k.encode, &mut k.encode_key].into_iter().flatten() {
            e.registry.resolve_paths(base);
            if let Some(s) = &mut e.schema {
                fix(s);
            }
        }
    }
    fix(cfg
        .runtime
        .state_dir
        .get_or_insert_with(|| "weir-state".into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PipelineConfig, String> {
        load_str(Path::new("p.yaml"), text, &|k| {
            (k == "SET").then(|| "out.jsonl".to_owned())
        })
        .map_err(|e| e.to_string())
    }

    const OK: &str = "source:\n  jsonl: { path: in.jsonl }\nsink:\n  jsonl: { path: ${SET} }\n";

    #[test]
    fn minimal_pipeline_parses_with_env() {
        let cfg = parse(OK).unwrap();
        let SinkConfig::Jsonl(s) = cfg.sink else {
            panic!()
        };
        assert_eq!(s.path, PathBuf::from("out.jsonl"));
    }

    #[test]
    fn unknown_key_names_file_line_field_and_suggestion() {
        let text = "source:\n  jsonl: { path: in.jsonl }\nsink:\n  discard: {}\nstages:\n  - name: a\n    plugin: a.wasm\n    limts: {}\n";
        let err = parse(text).unwrap_err();
        assert!(
            err.starts_with("p.yaml:8: field `stages[0].limts`: unknown field"),
            "{err}"
        );
        assert!(err.contains("unknown field `limts`"), "{err}");
        assert!(err.contains("did you mean `limits`?"), "{err}");
    }

    #[test]
    fn bad_size_and_duration_name_the_field() {
        let text = format!(
            "{OK}stages:\n  - name: a\n    plugin: a.wasm\n    limits: {{ memory: lots }}\n"
        );
        let err = parse(&text).unwrap_err();
        assert!(err.contains("stages[0].limits.memory"), "{err}");
        let text = format!("{OK}batch:\n  linger: soon\n");
        let err = parse(&text).unwrap_err();
        assert!(
            err.contains("batch.linger") && err.starts_with("p.yaml:6"),
            "{err}"
        );
    }

    #[test]
    fn unset_env_is_an_error_with_line() {
        let err = parse("source:\n  jsonl: { path: ${NOPE} }\n").unwrap_err();
        assert!(
            err.starts_with("p.yaml:2:") && err.contains("`NOPE` is not set"),
            "{err}"
        );
        let cfg =
            parse("source:\n  jsonl: { path: ${NOPE:-x.jsonl} }\nsink:\n  discard: {}\n").unwrap();
        let SourceConfig::Jsonl(s) = cfg.source else {
            panic!()
        };
        assert_eq!(s.path, PathBuf::from("x.jsonl"));
    }

    #[test]
    fn unknown_variant_is_suggested() {
        let err = parse("source:\n  jsnl: { path: in.jsonl }\nsink:\n  discard: {}\n").unwrap_err();
        assert!(err.contains("did you mean `jsonl`?"), "{err}");
    }

    #[test]
    fn duplicate_stage_names_are_refused() {
        let text = format!(
            "{OK}stages:\n  - name: a\n    plugin: a.wasm\n  - name: a\n    plugin: b.wasm\n"
        );
        assert!(parse(&text).unwrap_err().contains("used twice"));
    }

    #[test]
    fn exactly_once_needs_kafka_everywhere_on_one_cluster_and_names_the_field() {
        let src = "source:\n  kafka:\n    brokers: a:9092,b:9092\n    topics: [in]\n    group: g\n";
        let sink = "sink:\n  kafka:\n    brokers: b:9092, a:9092\n    topic: out\n";
        let eos = "delivery: exactly-once\n";
        // Kafka source, sink and dead-letter topic on one cluster (brokers in any order).
        let ok = format!(
            "{src}{sink}reject:\n  kafka:\n    brokers: a:9092,b:9092\n    topic: dlq\n{eos}"
        );
        assert_eq!(
            parse(&ok).unwrap().delivery,
            super::super::Delivery::ExactlyOnce
        );
        assert!(
            parse(&format!("{src}{sink}{eos}")).is_ok(),
            "no reject path: discard"
        );
        let cases = [
            (
                format!("source:\n  jsonl: {{ path: in.jsonl }}\n{sink}{eos}"),
                "p.yaml:7: field `delivery`",
                "needs a Kafka source",
            ),
            (
                format!("{src}sink:\n  discard: {{}}\n{eos}"),
                "p.yaml:6: field `sink`",
                "needs a Kafka sink",
            ),
            (
                format!("{src}{sink}reject:\n  jsonl: {{ path: r.jsonl }}\n{eos}"),
                "p.yaml:10: field `reject`",
                "needs a Kafka reject path",
            ),
            (
                format!("{src}sink:\n  kafka:\n    brokers: c:9092\n    topic: out\n{eos}"),
                "p.yaml:8: field `sink.kafka.brokers`",
                "must be the source's cluster",
            ),
            (
                format!("{src}{sink}reject:\n  kafka:\n    brokers: c:9092\n    topic: dlq\n{eos}"),
                "p.yaml:12: field `reject.kafka.brokers`",
                "must be the source's cluster",
            ),
            (
                format!("{src}{sink}delivery: exactly_once\n"),
                "p.yaml:10: field `delivery`",
                "did you mean `exactly-once`?",
            ),
        ];
        for (text, at, hint) in cases {
            let err = parse(&text).unwrap_err();
            assert!(err.starts_with(at) && err.contains(hint), "{text}\n{err}");
        }
    }
}
