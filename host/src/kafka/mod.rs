//! librdkafka plumbing shared by the Kafka source ([`crate::source::kafka`]) and sink
//! ([`crate::sink::kafka`]): client settings and the log bridge, record conversion, and the
//! embedded broker (librdkafka's mock cluster) for the quickstart, `weir broker` and tests;
//! offsets as the broker answers them ([`offsets`]); asking again while the cluster is not ready ([`retry`]); the errors that end a run ([`fatal`]), the start-up checks ([`preflight`]) and moving a
//! group's offsets ([`reset`]).

pub mod client;
pub mod embedded;
pub mod fatal;
pub mod group;
pub mod offsets;
pub mod preflight;
pub mod queued;
pub mod record;
pub mod reset;
pub mod retry;
