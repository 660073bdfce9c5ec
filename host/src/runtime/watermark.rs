//! The commit watermark of one partition: the highest offset below which every message was
//! fully handled (written and acknowledged, rejected to the reject path, or filtered out).
//!
//! Offsets are tracked in the order they are read (strictly increasing, gaps allowed: Kafka
//! compaction and transaction markers leave holes). Completions may arrive in any order. The
//! watermark only moves forward, never past an offset that is still in flight or failed, and a
//! completion from another assignment generation is refused, so a late signal from a revoked
//! assignment can never move a new one.

use std::collections::VecDeque;

/// A completion that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatermarkError {
    /// The completion belongs to another assignment of the partition.
    #[error("stale completion: generation {got}, partition is at generation {current}")]
    Stale {
        /// The completion's generation.
        got: u64,
        /// The tracker's generation.
        current: u64,
    },
    /// The offset was never tracked (or is already below the watermark).
    #[error("offset {0} is not in flight")]
    NotInFlight(i64),
    /// Offsets must be tracked in increasing order.
    #[error("offset {offset} tracked after {last}")]
    OutOfOrder {
        /// The offending offset.
        offset: i64,
        /// The last tracked offset.
        last: i64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    InFlight,
    Done,
    Failed,
}

/// The watermark of one partition for one assignment generation.
#[derive(Debug, Clone)]
pub struct Watermark {
    generation: u64,
    /// Tracked offsets not yet below the watermark, in read order.
    window: VecDeque<(i64, State)>,
    /// The next offset to commit (Kafka semantics: everything below it is done).
    next: i64,
    last_tracked: Option<i64>,
}

impl Watermark {
    /// A tracker for an assignment starting at `start` (the first offset that will be read).
    pub fn new(generation: u64, start: i64) -> Self {
        Watermark {
            generation,
            window: VecDeque::new(),
            next: start,
            last_tracked: None,
        }
    }

    /// The assignment generation this tracker belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Registers a read offset as in flight.
    pub fn track(&mut self, offset: i64) -> Result<(), WatermarkError> {
        if let Some(last) = self.last_tracked {
            if offset <= last {
                return Err(WatermarkError::OutOfOrder { offset, last });
            }
        }
        self.last_tracked = Some(offset);
        self.window.push_back((offset, State::InFlight));
        Ok(())
    }

    fn set(&mut self, generation: u64, offset: i64, state: State) -> Result<(), WatermarkError> {
        if generation != self.generation {
            return Err(WatermarkError::Stale {
                got: generation,
                current: self.generation,
            });
        }
        let i = self
            .window
            .binary_search_by_key(&offset, |(o, _)| *o)
            .map_err(|_| WatermarkError::NotInFlight(offset))?;
        if self.window[i].1 != State::InFlight {
            return Err(WatermarkError::NotInFlight(offset));
        }
        self.window[i].1 = state;
        while let Some(&(o, State::Done)) = self.window.front() {
            self.window.pop_front();
            self.next = o + 1;
        }
        Ok(())
    }

    /// Marks `offset` fully handled.
    pub fn complete(&mut self, generation: u64, offset: i64) -> Result<(), WatermarkError> {
        self.set(generation, offset, State::Done)
    }

    /// Marks `offset` failed: the watermark never passes it.
    pub fn fail(&mut self, generation: u64, offset: i64) -> Result<(), WatermarkError> {
        self.set(generation, offset, State::Failed)
    }

    /// The offset to commit: one past the last offset of the fully handled prefix (the start
    /// while nothing is done). Every tracked offset below it is done; it only ever grows.
    pub fn committable(&self) -> i64 {
        self.next
    }

    /// Whether every tracked offset at or below `offset` is done or failed.
    pub fn settled_through(&self, offset: i64) -> bool {
        self.window
            .iter()
            .take_while(|(o, _)| *o <= offset)
            .all(|(_, s)| *s != State::InFlight)
    }

    /// Offsets tracked and not yet below the watermark.
    pub fn in_flight(&self) -> usize {
        self.window.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn out_of_order_completions_wait_for_the_lowest() {
        let mut w = Watermark::new(1, 10);
        for o in [10, 11, 13] {
            w.track(o).unwrap();
        }
        assert_eq!(w.committable(), 10);
        w.complete(1, 13).unwrap();
        w.complete(1, 11).unwrap();
        assert_eq!(w.committable(), 10, "10 still in flight");
        w.complete(1, 10).unwrap();
        assert_eq!(w.committable(), 14, "everything read is done");
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn failed_offsets_block_and_stale_generations_are_refused() {
        let mut w = Watermark::new(2, 0);
        for o in 0..4 {
            w.track(o).unwrap();
        }
        w.complete(2, 0).unwrap();
        w.fail(2, 1).unwrap();
        w.complete(2, 2).unwrap();
        w.complete(2, 3).unwrap();
        assert_eq!(w.committable(), 1, "never past a failed message");
        assert_eq!(
            w.complete(1, 1),
            Err(WatermarkError::Stale { got: 1, current: 2 })
        );
        assert_eq!(
            w.complete(2, 1),
            Err(WatermarkError::NotInFlight(1)),
            "a failed offset stays failed"
        );
        assert_eq!(
            w.complete(2, 0),
            Err(WatermarkError::NotInFlight(0)),
            "no double completion"
        );
        assert!(matches!(w.track(3), Err(WatermarkError::OutOfOrder { .. })));
    }

    /// A tiny deterministic PRNG (xorshift64*), so the model test needs no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random reads (with gaps), completions in random order, failures, stale signals from an
    /// old generation and revocations (a new tracker, a new generation), checked against a
    /// plain model after every step.
    #[test]
    fn model_check_against_a_naive_set() {
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut generation = 1;
            let start = rng.below(100) as i64;
            let mut w = Watermark::new(generation, start);
            let mut assigned_at = start;
            let mut model: BTreeMap<i64, State> = BTreeMap::new();
            let mut next_read = start;
            let mut last_commit = w.committable();
            for _ in 0..400 {
                match rng.below(10) {
                    0..=3 => {
                        next_read += 1 + rng.below(3) as i64 * rng.below(2) as i64;
                        w.track(next_read).unwrap();
                        model.insert(next_read, State::InFlight);
                        next_read += 1;
                    }
                    4..=7 => {
                        let open: Vec<i64> = model
                            .iter()
                            .filter(|(_, s)| **s == State::InFlight)
                            .map(|(o, _)| *o)
                            .collect();
                        if let Some(&o) = open.get(rng.below(open.len().max(1) as u64) as usize) {
                            let fail = rng.below(25) == 0;
                            if fail {
                                w.fail(generation, o).unwrap();
                            } else {
                                w.complete(generation, o).unwrap();
                            }
                            model.insert(o, if fail { State::Failed } else { State::Done });
                        }
                    }
                    8 => {
                        // A late completion from the previous assignment never applies.
                        if let Some((&o, _)) = model.iter().find(|(_, s)| **s == State::InFlight) {
                            assert!(matches!(
                                w.complete(generation - 1, o),
                                Err(WatermarkError::Stale { .. })
                            ));
                        }
                    }
                    _ => {
                        if rng.below(8) == 0 {
                            // Revocation: what was committed stays; the new assignment resumes there.
                            generation += 1;
                            let resume = w.committable();
                            w = Watermark::new(generation, resume);
                            model.clear();
                            next_read = resume;
                            last_commit = resume;
                            assigned_at = resume;
                        }
                    }
                }
                let c = w.committable();
                assert!(
                    c >= last_commit,
                    "seed {seed}: rewound from {last_commit} to {c}"
                );
                last_commit = c;
                // Everything tracked below the watermark is done; the first not-done offset is not below it.
                for (&o, &s) in &model {
                    if o < c {
                        assert_eq!(
                            s,
                            State::Done,
                            "seed {seed}: {o} below watermark {c} but {s:?}"
                        );
                    }
                }
                // And it goes as far as the done prefix allows: one past its last offset.
                let prefix_end = model
                    .iter()
                    .take_while(|(_, s)| **s == State::Done)
                    .map(|(o, _)| o + 1)
                    .last();
                assert_eq!(
                    c,
                    prefix_end.unwrap_or(assigned_at),
                    "seed {seed}: watermark not at the end of the done prefix"
                );
            }
        }
    }
}
