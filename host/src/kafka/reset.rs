//! `weir run … --reset-to WHERE`: move an existing group's committed offsets before the run.
//!
//! Every partition of the source's topics (names and `^patterns`, as they match now) gets the
//! offset `WHERE` names (`earliest`, `latest`, a time, `-1h`, `+1000`; the same words as
//! `start`), committed for the group by a client that is not a member. A group with active
//! members is refused: their next commit would undo the move, and Kafka refuses a commit from
//! outside a live group anyway. Where the broker can list members (DescribeGroups) the refusal
//! names them; otherwise the broker's own refusal of the commit (`UNKNOWN_MEMBER_ID`) is the
//! answer.

use std::time::{Duration, SystemTime};

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};

use super::fatal::{classify, ClientFailure, FailureKind};
use super::preflight::Capture;
use crate::config::{is_pattern, KafkaSource, StartFrom};

fn failure(kind: FailureKind, message: String) -> ClientFailure {
    ClientFailure {
        client: "reset".to_owned(),
        kind,
        message,
    }
}

fn kafka_failure(what: &str) -> impl Fn(KafkaError) -> ClientFailure + '_ {
    move |e| {
        let kind = e
            .rdkafka_error_code()
            .and_then(|c| classify(c, ""))
            .unwrap_or(FailureKind::Runtime);
        failure(kind, format!("{what}: {e}"))
    }
}

/// One partition moved: `(topic, partition, committed before, committed now)`.
pub type Moved = (String, i32, Option<i64>, i64);

/// Commits `to` for every partition of `k`'s topics under `k.group`.
pub fn reset(
    k: &KafkaSource,
    to: StartFrom,
    timeout: Duration,
) -> Result<Vec<Moved>, ClientFailure> {
    let mut config = super::client::consumer_config(k);
    config.set("log_level", "3");
    super::queued::disable(&mut config);
    let consumer = BaseConsumer::from_config_and_context(&config, Capture::default())
        .map_err(kafka_failure("the client settings"))?;
    if let Ok(groups) = consumer.fetch_group_list(Some(&k.group), timeout) {
        if let Some(g) = groups.groups().iter().find(|g| g.name() == k.group) {
            if !g.members().is_empty() {
                let ids: Vec<String> = g
                    .members()
                    .iter()
                    .map(|m| format!("{} ({})", m.client_id(), m.client_host()))
                    .collect();
                return Err(failure(
                    FailureKind::Configuration,
                    format!(
                        "group `{}` has {} active member(s): {}; stop them before moving its offsets",
                        k.group,
                        ids.len(),
                        ids.join(", ")
                    ),
                ));
            }
        }
    }
    let meta = consumer
        .fetch_metadata(None, timeout)
        .map_err(kafka_failure("reading the topics"))?;
    let mut tpl = TopicPartitionList::new();
    for t in &k.topics {
        let re = is_pattern(t)
            .then(|| regex_lite::Regex::new(t).ok())
            .flatten();
        for m in meta.topics() {
            let hit = match &re {
                Some(re) => !m.name().starts_with("__") && re.is_match(m.name()),
                None => m.name() == t,
            };
            if hit {
                for p in m.partitions() {
                    tpl.add_partition(m.name(), p.id());
                }
            }
        }
        if re.is_none() && !meta.topics().iter().any(|m| m.name() == t) {
            return Err(failure(
                FailureKind::Configuration,
                format!("topic `{t}` does not exist on {}", k.brokers),
            ));
        }
    }
    let before = consumer
        .committed_offsets(tpl.clone(), timeout)
        .map_err(kafka_failure(&format!("reading group `{}`", k.group)))?;
    let mut target = TopicPartitionList::new();
    let mut moved = Vec::new();
    for e in tpl.elements() {
        let (lo, hi) = consumer
            .fetch_watermarks(e.topic(), e.partition(), timeout)
            .map_err(kafka_failure(&format!(
                "reading {}/{}",
                e.topic(),
                e.partition()
            )))?;
        let at = match to {
            StartFrom::Earliest => lo,
            StartFrom::Latest => hi,
            StartFrom::Offset(n) => n.clamp(lo, hi),
            other => {
                let ts = other.timestamp_ms(SystemTime::now()).unwrap_or_default();
                let mut q = TopicPartitionList::new();
                q.add_partition_offset(e.topic(), e.partition(), Offset::Offset(ts))
                    .map_err(kafka_failure("a time look-up"))?;
                let found = consumer
                    .offsets_for_times(q, timeout)
                    .map_err(kafka_failure("a time look-up"))?;
                match found
                    .find_partition(e.topic(), e.partition())
                    .map(|f| f.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => hi,
                }
            }
        };
        let old = before
            .find_partition(e.topic(), e.partition())
            .and_then(|f| match f.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        target
            .add_partition_offset(e.topic(), e.partition(), Offset::Offset(at))
            .map_err(kafka_failure("building the commit"))?;
        moved.push((e.topic().to_owned(), e.partition(), old, at));
    }
    if moved.is_empty() {
        return Err(failure(
            FailureKind::Configuration,
            format!("no partition of {} to move", k.topics.join(", ")),
        ));
    }
    match consumer.commit(&target, CommitMode::Sync) {
        Ok(()) => Ok(moved),
        Err(e)
            if matches!(
                e.rdkafka_error_code(),
                Some(RDKafkaErrorCode::UnknownMemberId | RDKafkaErrorCode::IllegalGeneration | RDKafkaErrorCode::RebalanceInProgress)
            ) =>
        {
            Err(failure(
                FailureKind::Configuration,
                format!(
                    "the broker refused to move group `{}` ({e}): it has active members, or it refuses commits from outside the group",
                    k.group
                ),
            ))
        }
        Err(e) => Err(kafka_failure(&format!("committing for group `{}`", k.group))(e)),
    }
}
