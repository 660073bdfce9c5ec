//! librdkafka plumbing shared by the Kafka source ([`crate::source::kafka`]) and sink
//! ([`crate::sink::kafka`]): client settings and the log bridge, record conversion, and the
//! embedded broker (librdkafka's mock cluster) for the quickstart, `weir broker` and tests.

pub mod client;
pub mod embedded;
pub mod group;
pub mod record;
