//! Canary routing: which version processes a message. Deterministic, so every driver and
//! every process of a consumer group routes the same lane or key the same way.

use crate::config::CanaryBy;
use crate::message::{Envelope, Lane};

/// Whether the canary candidate processes `env` of `lane` at this `share` (0..=1).
pub fn to_candidate(by: CanaryBy, share: f64, lane: &Lane, env: &Envelope) -> bool {
    match by {
        CanaryBy::Lane => lane_to_candidate(share, lane.partition),
        CanaryBy::Key => env
            .msg
            .key
            .as_deref()
            .is_some_and(|k| unit(fnv1a(k)) < share),
    }
}

/// Partition `p` sits at the fractional part of `p × φ`: consecutive partitions spread evenly
/// over [0, 1), so a 50% share of 4 partitions is 2 of them (0 and 2), and partition 0 is in
/// every share above 0.
pub fn lane_to_candidate(share: f64, partition: i32) -> bool {
    const PHI: f64 = 0.618_033_988_749_894_9;
    let x = (f64::from(partition) * PHI).fract();
    x < share
}

/// FNV-1a, 64 bits, then MurmurHash3's finaliser (FNV alone leaves keys that differ in their
/// last characters close together in the high bits): stable across processes and versions.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A hash as a number in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[test]
    fn half_of_four_lanes_and_about_half_of_the_keys() {
        let chosen: Vec<i32> = (0..4).filter(|p| lane_to_candidate(0.5, *p)).collect();
        assert_eq!(chosen, vec![0, 2]);
        assert!(lane_to_candidate(0.01, 0));
        let lane = Lane {
            topic: "t".into(),
            partition: 0,
            generation: 0,
        };
        let n = (0..10_000)
            .filter(|i| {
                let env = Envelope {
                    offset: 0,
                    msg: Message {
                        key: Some(format!("key-{i}").into_bytes()),
                        ..Message::default()
                    },
                };
                to_candidate(CanaryBy::Key, 0.5, &lane, &env)
            })
            .count();
        assert!((4_700..5_300).contains(&n), "{n}");
        let keyless = Envelope {
            offset: 0,
            msg: Message::default(),
        };
        assert!(!to_candidate(CanaryBy::Key, 1.0, &lane, &keyless));
    }
}
