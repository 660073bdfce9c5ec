//! Safe rollouts: a new stage version tried on live traffic before it takes over.
//!
//! Each stage has a [`StageSlot`]: the live plugin every driver runs and, during a rollout,
//! a candidate. In **shadow** mode every driver runs the candidate after the live version on
//! the same batch, in its own sandbox, compares the answers message by message
//! ([`compare`]) and delivers only the live version's. In **canary** mode the candidate
//! answers a share of the lanes or keys ([`split`]) and its answers are delivered; a message
//! the candidate traps or fails on is answered by the live version instead. Drivers add what
//! each batch showed to the rollout ([`Observation`]); the first rollback condition met ends
//! it at once, a window without one promotes the candidate ([`judge`]). Either way the slot's
//! generation moves and every driver swaps at its next batch boundary.

pub mod answer;
pub mod compare;
mod observe;
mod slot;
pub mod split;

pub use observe::{judge, Decision, Judgement, Observation, MIN_SAMPLE};
pub use slot::{
    publish_plugin_info, unfinished, Offered, Rollout, RolloutError, RolloutRecord, StageSlot,
};
