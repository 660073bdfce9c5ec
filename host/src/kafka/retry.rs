//! Asking the cluster again while it answers that it is not ready yet (a leader being
//! elected, a coordinator moving), within a time limit.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Answers that mean the group's coordinator is not ready yet: a cluster just started creates
/// `__consumer_offsets` first; a coordinator that moved, or is loading the group, answers so for
/// a moment.
pub const COORDINATOR_MOVING: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::NotCoordinator,
    RDKafkaErrorCode::CoordinatorNotAvailable,
    RDKafkaErrorCode::CoordinatorLoadInProgress,
];

/// Answers that mean a partition's leader is not elected yet or is moving: a topic just
/// created, a broker just restarted.
pub const LEADER_MOVING: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::NotLeaderForPartition,
    RDKafkaErrorCode::LeaderNotAvailable,
];

/// Answers with one of `codes`.
pub fn any_of(codes: &[RDKafkaErrorCode]) -> impl Fn(&KafkaError) -> bool + '_ {
    move |e| e.rdkafka_error_code().is_some_and(|c| codes.contains(&c))
}

/// `ask` (given the time left) asked again, every 200 ms, while its answer is an error that
/// `passing` takes for a passing state, until `timeout`; then its last answer.
pub fn asked_again<T>(
    timeout: Duration,
    passing: impl Fn(&KafkaError) -> bool,
    mut ask: impl FnMut(Duration) -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ask(left) {
            Err(e) if passing(&e) && left > Duration::from_millis(200) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: RDKafkaErrorCode) -> KafkaError {
        KafkaError::MetadataFetch(code)
    }

    #[test]
    fn a_leader_not_elected_yet_is_asked_again_and_other_answers_are_final() {
        let mut asked = 0;
        let r = asked_again(Duration::from_secs(5), any_of(LEADER_MOVING), |_| {
            asked += 1;
            match asked {
                1 => Err(refused(RDKafkaErrorCode::NotLeaderForPartition)),
                2 => Err(refused(RDKafkaErrorCode::LeaderNotAvailable)),
                _ => Ok(asked),
            }
        });
        assert_eq!(r.ok(), Some(3));
        let mut asked = 0;
        let r: Result<(), _> = asked_again(Duration::from_secs(5), any_of(LEADER_MOVING), |_| {
            asked += 1;
            Err(refused(RDKafkaErrorCode::TopicAuthorizationFailed))
        });
        assert!(r.is_err());
        assert_eq!(asked, 1);
    }

    #[test]
    fn asking_again_stops_at_the_timeout_with_the_last_answer() {
        let start = Instant::now();
        let r: Result<(), _> = asked_again(
            Duration::from_millis(500),
            any_of(COORDINATOR_MOVING),
            |_| Err(refused(RDKafkaErrorCode::CoordinatorLoadInProgress)),
        );
        assert_eq!(
            r.err().and_then(|e| e.rdkafka_error_code()),
            Some(RDKafkaErrorCode::CoordinatorLoadInProgress)
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
