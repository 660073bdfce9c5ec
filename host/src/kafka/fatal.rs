//! Client errors that retrying cannot heal: they end the run instead of looping.
//!
//! librdkafka retries everything: a failed authentication, a certificate it does not trust, a
//! topic it may not read, a record batch in a codec it was built without. Left alone, each is a
//! green process that logs the same warning forever and a lag that grows. Here each is
//! classified once ([`classify`]): the Kafka clients' contexts record the first in a
//! [`FatalSlot`] shared by the run's source and sinks, and the controller ends the run with it
//! (exit 2 for configuration and credentials, 1 for run-time failures). A broker that is merely
//! down is not fatal: librdkafka reconnects, as before.

use std::sync::Mutex;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What kind of problem a client failure is: decides the exit code (and is the report's
/// `error_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureKind {
    /// The pipeline names something that is not there (a topic), or asks for a setting the
    /// cluster refuses.
    Configuration,
    /// Authentication, TLS trust or authorization failed.
    Credentials,
    /// The data or the client cannot go on (a corrupt batch, a codec missing from the build,
    /// a fatal producer error).
    Runtime,
}

impl FailureKind {
    /// The exit code of a run that ends with it (2: fix the configuration; 1: a failure).
    pub fn exit_code(self) -> u8 {
        match self {
            FailureKind::Configuration | FailureKind::Credentials => 2,
            FailureKind::Runtime => 1,
        }
    }
}

/// Whether an error says a topic is not there (fatal for a named topic; for a `^pattern`
/// subscription, a matched topic that went away).
pub fn is_topic_gone(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

/// A client failure that ends the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{client}: {message}{}", hint(*.kind))]
pub struct ClientFailure {
    /// Which client (`source`, `sink`, `reject path`, …).
    pub client: String,
    /// What kind of failure.
    pub kind: FailureKind,
    /// librdkafka's words (secrets redacted by the writers).
    pub message: String,
}

fn hint(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Credentials => {
            " (check the `security` block: protocol, CA, certificate, SASL mechanism and credentials, and the cluster's ACLs)"
        }
        FailureKind::Configuration => "",
        FailureKind::Runtime => "",
    }
}

/// Whether an error code means the run cannot go on, and what kind of failure it is.
pub fn classify(code: RDKafkaErrorCode, reason: &str) -> Option<FailureKind> {
    use RDKafkaErrorCode as C;
    match code {
        C::Authentication
        | C::SaslAuthenticationFailed
        | C::SSL
        | C::UnsupportedSASLMechanism
        | C::IllegalSASLState
        | C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::DelegationTokenAuthorizationFailed => Some(FailureKind::Credentials),
        C::UnknownTopicOrPartition | C::UnknownTopic => Some(FailureKind::Configuration),
        C::NotImplemented
        | C::BadCompression
        | C::UnsupportedCompressionType
        | C::BadMessage
        | C::InvalidMessage
        | C::Fatal => Some(FailureKind::Runtime),
        // A plaintext client at a TLS listener sees only a dropped connection; librdkafka's
        // words say so.
        C::BrokerTransportFailure if reason.contains("incorrect security.protocol") => {
            Some(FailureKind::Configuration)
        }
        // The broker's TLS alert (TLS 1.3 reports a refused client certificate after the
        // handshake, as a failed read): "tlsv13 alert certificate required", "sslv3 alert bad
        // certificate", "tlsv1 alert unknown ca". A broker going away mid-connection reads
        // as an EOF, not an alert.
        C::BrokerTransportFailure if reason.contains("SSL") && reason.contains(" alert ") => {
            Some(FailureKind::Credentials)
        }
        _ => None,
    }
}

/// The same judgement from one of librdkafka's log lines (facility `FAIL`, level error),
/// which arrive as soon as a connection fails; its error events can lag them by seconds.
pub fn classify_log(msg: &str) -> Option<FailureKind> {
    let tls = msg.contains("SSL handshake failed")
        || msg.contains("certificate verify failed")
        || (msg.contains("SSL") && msg.contains(" alert "));
    let sasl = msg.contains("SASL authentication error")
        || msg.contains("Authentication failed")
        || (msg.contains("SASL") && msg.contains("mechanism handshake failed"));
    if tls || sasl {
        Some(FailureKind::Credentials)
    } else if msg.contains("incorrect security.protocol") {
        Some(FailureKind::Configuration)
    } else {
        None
    }
}

/// The first fatal client error of a run, shared by its Kafka clients.
#[derive(Debug, Default)]
pub struct FatalSlot(Mutex<Option<ClientFailure>>);

impl FatalSlot {
    /// Records `error` if it is fatal (the first one wins); returns whether it was.
    pub fn record(&self, client: &str, error: &KafkaError, reason: &str) -> bool {
        let Some(code) = error.rdkafka_error_code() else {
            return false;
        };
        let Some(kind) = classify(code, reason) else {
            return false;
        };
        let message = if reason.is_empty() || error.to_string().contains(reason) {
            error.to_string()
        } else {
            format!("{error}: {reason}")
        };
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(ClientFailure {
            client: client.to_owned(),
            kind,
            message,
        });
        true
    }

    /// The failure recorded, if any.
    pub fn get(&self) -> Option<ClientFailure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_heal_is_fatal_and_a_down_broker_is_not() {
        use RDKafkaErrorCode as C;
        let cases = [
            (C::Authentication, "", Some(FailureKind::Credentials)),
            (C::SSL, "certificate verify failed", Some(FailureKind::Credentials)),
            (C::TopicAuthorizationFailed, "", Some(FailureKind::Credentials)),
            (C::GroupAuthorizationFailed, "", Some(FailureKind::Credentials)),
            (C::UnknownTopicOrPartition, "", Some(FailureKind::Configuration)),
            (C::NotImplemented, "Decompression (codec 0x4)", Some(FailureKind::Runtime)),
            (C::BadMessage, "", Some(FailureKind::Runtime)),
            (C::AllBrokersDown, "", None),
            (C::BrokerTransportFailure, "Connection refused", None),
            (
                C::BrokerTransportFailure,
                "Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration",
                Some(FailureKind::Configuration),
            ),
            (C::OperationTimedOut, "", None),
            (
                C::BrokerTransportFailure,
                "Receive failed: error:0A00045C:SSL routines::tlsv13 alert certificate required: SSL alert number 116",
                Some(FailureKind::Credentials),
            ),
            (
                C::BrokerTransportFailure,
                "Receive failed: error:0A000126:SSL routines::unexpected eof while reading",
                None,
            ),
        ];
        for (code, reason, want) in cases {
            assert_eq!(classify(code, reason), want, "{code:?} {reason}");
        }
        assert_eq!(FailureKind::Credentials.exit_code(), 2);
        assert_eq!(FailureKind::Configuration.exit_code(), 2);
        assert_eq!(FailureKind::Runtime.exit_code(), 1);
    }

    #[test]
    fn log_lines_that_say_tls_or_sasl_failed_are_fatal_and_a_refused_connection_is_not() {
        let cases = [
            ("ssl://localhost:1/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", Some(FailureKind::Credentials)),
            ("Receive failed: error:0A00045C:SSL routines::tlsv13 alert certificate required", Some(FailureKind::Credentials)),
            ("SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256", Some(FailureKind::Credentials)),
            ("Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?)", Some(FailureKind::Configuration)),
            ("Connect to ipv4#127.0.0.1:9092 failed: Connection refused", None),
            ("Receive failed: error:0A000126:SSL routines::unexpected eof while reading", None),
        ];
        for (msg, want) in cases {
            assert_eq!(classify_log(msg), want, "{msg}");
        }
    }

    #[test]
    fn the_first_fatal_error_is_kept() {
        let slot = FatalSlot::default();
        let down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        assert!(!slot.record("source", &down, "1/1 brokers are down"));
        assert_eq!(slot.get(), None);
        let auth = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert!(slot.record(
            "source",
            &auth,
            "SASL SCRAM-SHA-256 mechanism handshake failed"
        ));
        let other = KafkaError::Global(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert!(slot.record("sink", &other, ""));
        let f = slot.get().expect("recorded");
        assert_eq!(f.client, "source");
        assert_eq!(f.kind, FailureKind::Credentials);
        assert!(
            f.to_string()
                .contains("SCRAM-SHA-256 mechanism handshake failed"),
            "{f}"
        );
    }
}
