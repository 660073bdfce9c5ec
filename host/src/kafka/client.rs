//! librdkafka client settings and its log bridge.

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};

use crate::config::{
    property_text, Assignor, GroupProtocol, KafkaSink, KafkaSource, Security, StartFrom,
};

/// The `security` block's settings (TLS, SASL), if the client has one.
fn secure(c: &mut ClientConfig, security: Option<&Security>) {
    for (k, v) in security.map(Security::properties).unwrap_or_default() {
        c.set(k, v);
    }
}

/// The consumer settings: Weir's defaults, the `security` block, then the user's properties,
/// then the ones Weir owns.
pub fn consumer_config(src: &KafkaSource) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &src.brokers)
        .set(
            "auto.offset.reset",
            match src.start {
                StartFrom::Earliest | StartFrom::Offset(_) => "earliest",
                StartFrom::Latest | StartFrom::Time(_) | StartFrom::Ago(_) => "latest",
            },
        )
        // librdkafka's own prefetch is bounded too (the byte budget covers what Weir holds).
        .set("queued.max.messages.kbytes", "16384")
        // While flow control holds, Weir stops taking messages and this prefetch fills up;
        // librdkafka then waits this long before fetching again (default 1 s), which would
        // leave the pipeline idle for up to a second after every hold.
        .set("fetch.queue.backoff.ms", "10")
        .set("log_level", "4");
    match src.group_protocol {
        GroupProtocol::Classic => {
            c.set(
                "partition.assignment.strategy",
                match src.assignor {
                    Assignor::Cooperative => "cooperative-sticky",
                    Assignor::Eager => "range",
                },
            );
        }
        // The broker assigns; librdkafka refuses the classic protocol's settings with it.
        GroupProtocol::Consumer => {
            c.set("group.protocol", "consumer");
        }
    }
    secure(&mut c, src.security.as_deref());
    for (k, v) in &src.properties {
        c.set(k, property_text(v));
    }
    c.set("group.id", &src.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    c
}

/// The producer settings: acknowledged by all in-sync replicas, idempotent, so a
/// delivery report means the broker has the record exactly once per send.
pub fn producer_config(sink: &KafkaSink) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &sink.brokers)
        .set("linger.ms", "5")
        .set("log_level", "4");
    secure(&mut c, sink.security.as_deref());
    for (k, v) in &sink.properties {
        c.set(k, property_text(v));
    }
    c.set("acks", "all").set("enable.idempotence", "true");
    c
}

/// librdkafka's log lines, through tracing.
pub fn log(level: RDKafkaLogLevel, fac: &str, msg: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", "{fac}: {msg}"),
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", "{fac}: {msg}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "{fac}: {msg}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac}: {msg}"),
    }
}
