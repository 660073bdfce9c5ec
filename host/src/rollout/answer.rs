//! Answering one stage's batch while a rollout is in progress: the live version and the
//! candidate, each in its own sandbox, and what the batch showed about the candidate.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::compare::{compare, difference_json};
use super::observe::{Decision, Judgement, Observation};
use super::split::to_candidate;
use super::{Rollout, StageSlot};
use crate::config::RolloutMode;
use crate::engine::{InstanceError, SandboxStats, StageInstance, Verdict, WeirEngine};
use crate::message::{Envelope, Lane};

/// A rollout's candidate as one driver runs it.
pub struct Candidate {
    /// The rollout.
    pub rollout: Arc<Rollout>,
    /// Its instance on this driver.
    pub instance: StageInstance,
}

/// Instantiates the candidate of `rollout` on this driver; one that cannot be instantiated
/// is rolled back (the reloader's own check makes that rare).
pub fn instantiate(
    engine: &WeirEngine,
    slot: &StageSlot,
    rollout: Arc<Rollout>,
) -> Option<Candidate> {
    // A shadow candidate reads the live state; its writes are thrown away after each batch.
    let throwaway = rollout.mode() == crate::config::RolloutMode::Shadow;
    match StageInstance::with_state(
        engine,
        slot.spec.clone(),
        rollout.candidate.clone(),
        throwaway,
    ) {
        Ok(instance) => Some(Candidate { rollout, instance }),
        Err(e) => {
            give_up(slot, &rollout, &e);
            None
        }
    }
}

fn give_up(slot: &StageSlot, rollout: &Rollout, e: &InstanceError) {
    slot.decide(
        rollout.id,
        &Judgement {
            decision: Decision::Rollback,
            reason: "error",
            detail: format!("the candidate cannot run: {e}"),
        },
    );
}

/// Sandbox events that decided an answer instead of the stage.
fn incidents(s: &SandboxStats) -> u64 {
    s.traps + s.oversized + s.malformed
}

fn rejects(v: &[Verdict]) -> u64 {
    v.iter().filter(|v| matches!(v, Verdict::Reject(_))).count() as u64
}

/// The candidate's rejects and fails among `answers`, leaving out those a trap decided (at
/// `trapped`): a trap is counted as a trap, not as the stage's own answer.
fn own_rejects_and_fails(answers: &[Verdict], trapped: &[usize]) -> (u64, u64) {
    let own = |i: &usize| !trapped.contains(i);
    let count = |f: fn(&Verdict) -> bool| {
        (0..answers.len())
            .filter(|i| own(i) && f(&answers[*i]))
            .count() as u64
    };
    (
        count(|v| matches!(v, Verdict::Reject(_))),
        count(|v| matches!(v, Verdict::Fail(_))),
    )
}

/// Shadow: the live version answers `batch` into `out`; then the candidate answers the same
/// messages into a buffer of its own, which is compared and dropped. Returns false when the
/// candidate can no longer run on this driver.
pub fn shadow(
    live: &mut StageInstance,
    cand: &mut Candidate,
    slot: &StageSlot,
    lane: &Lane,
    batch: &[Envelope],
    out: &mut Vec<Verdict>,
) -> Result<bool, InstanceError> {
    // The candidate first: it reads the stage's state as the live version is about to,
    // before the live version's writes of this batch.
    let before = incidents(&cand.instance.stats);
    let mut theirs = Vec::with_capacity(batch.len());
    let t = Instant::now();
    let cand_result = cand.instance.process(lane, batch, &mut theirs);
    let candidate_ns = t.elapsed().as_nanos() as u64;
    let t = Instant::now();
    live.process(lane, batch, out)?;
    let live_ns = t.elapsed().as_nanos() as u64;
    if let Err(e) = cand_result {
        give_up(slot, &cand.rollout, &e);
        return Ok(false);
    }
    let (rejected, failed) = own_rejects_and_fails(&theirs, cand.instance.trapped_at());
    let mut o = Observation {
        messages: theirs.len() as u64,
        rejected,
        failed,
        traps: incidents(&cand.instance.stats) - before,
        live_messages: out.len() as u64,
        live_rejected: rejects(out),
        candidate_ns,
        live_ns,
        ..Observation::default()
    };
    let mut found: Vec<Value> = Vec::new();
    let room = cand.rollout.room_for_differences();
    for ((input, mine), other) in batch.iter().zip(out.iter()).zip(&theirs) {
        o.compared += 1;
        match compare(input, mine, other) {
            "agree" => o.agree += 1,
            result => {
                *o.differ.entry(result).or_default() += 1;
                if found.len() < room {
                    found.push(difference_json(lane, input, result, mine, other));
                }
            }
        }
    }
    slot.observe(&cand.rollout, &o, found);
    Ok(true)
}

/// Canary: each message goes to the version its lane or key routes it to; the answers are
/// merged back in input order into `out`, with `by_candidate` set per answer. A message the
/// candidate trapped or failed on, or left unanswered after a fail, is answered by the live
/// version instead: a canary never costs a message. Returns false when the candidate can no
/// longer run on this driver.
pub fn canary(
    live: &mut StageInstance,
    cand: &mut Candidate,
    slot: &StageSlot,
    lane: &Lane,
    batch: &[Envelope],
    out: &mut Vec<Verdict>,
    by_candidate: &mut Vec<bool>,
) -> Result<bool, InstanceError> {
    let policy = &cand.rollout.policy;
    debug_assert_eq!(policy.mode, RolloutMode::Canary);
    let route: Vec<bool> = batch
        .iter()
        .map(|e| to_candidate(policy.by, policy.share.0, lane, e))
        .collect();
    let (mine, theirs): (Vec<usize>, Vec<usize>) = (0..batch.len()).partition(|i| !route[*i]);
    let pick = |idx: &[usize]| -> Vec<Envelope> { idx.iter().map(|i| batch[*i].clone()).collect() };
    // The live version's share.
    let mut live_answers = Vec::with_capacity(mine.len());
    let t = Instant::now();
    if theirs.is_empty() {
        live.process(lane, batch, &mut live_answers)?;
    } else if !mine.is_empty() {
        live.process(lane, &pick(&mine), &mut live_answers)?;
    }
    let live_ns = t.elapsed().as_nanos() as u64;
    // The candidate's share.
    let their_batch = if mine.is_empty() {
        None
    } else {
        Some(pick(&theirs))
    };
    let their_batch = their_batch.as_deref().unwrap_or(batch);
    let mut cand_answers = Vec::with_capacity(theirs.len());
    let mut usable = true;
    let before = incidents(&cand.instance.stats);
    // Where the partition's writes stood before the candidate's (to undo them, below).
    let mark = (!theirs.is_empty())
        .then(|| cand.instance.partition_state(lane))
        .flatten()
        .map(|p| {
            let at = p.mark();
            (p, at)
        });
    let t = Instant::now();
    if !theirs.is_empty() {
        if let Err(e) = cand.instance.process(lane, their_batch, &mut cand_answers) {
            give_up(slot, &cand.rollout, &e);
            cand_answers.clear();
            usable = false;
        }
    }
    let candidate_ns = t.elapsed().as_nanos() as u64;
    let trapped: Vec<usize> = if usable {
        cand.instance.trapped_at().to_vec()
    } else {
        Vec::new()
    };
    let (rejected, failed) = own_rejects_and_fails(&cand_answers, &trapped);
    let o = Observation {
        messages: cand_answers.len() as u64,
        rejected,
        failed,
        traps: incidents(&cand.instance.stats) - before,
        live_messages: live_answers.len() as u64,
        live_rejected: rejects(&live_answers),
        candidate_ns,
        live_ns,
        ..Observation::default()
    };
    // A candidate's call that answered `fail` at j wrote for all the messages it answered, j
    // included, and j gets the live version's answer: its writes are undone, and it answers
    // the messages before j again (their writes are then theirs only). Its traps need nothing:
    // the messages of a call that trapped were answered one per call, and a trap's writes went
    // with its instance.
    let mut trapped = trapped;
    if let Some((state, at)) = mark.filter(|_| usable) {
        while let Some(j) = (0..cand_answers.len())
            .find(|&j| matches!(cand_answers[j], Verdict::Fail(_)) && !trapped.contains(&j))
        {
            state.drop_since(at);
            cand_answers.clear();
            trapped.clear();
            if j == 0 {
                break;
            }
            if let Err(e) = cand
                .instance
                .process(lane, &their_batch[..j], &mut cand_answers)
            {
                give_up(slot, &cand.rollout, &e);
                state.drop_since(at);
                cand_answers.clear();
                usable = false;
                break;
            }
            trapped = cand.instance.trapped_at().to_vec();
        }
    }
    let by_stage = |i: &usize| !trapped.contains(i);
    // What the candidate did not answer for itself goes to the live version, one by one.
    let mut own = vec![true; theirs.len()];
    for (j, own) in own.iter_mut().enumerate() {
        let answered = cand_answers
            .get(j)
            .is_some_and(|v| by_stage(&j) && !matches!(v, Verdict::Fail(_)));
        if answered {
            continue;
        }
        *own = false;
        let mut again = Vec::with_capacity(1);
        live.process(lane, std::slice::from_ref(&their_batch[j]), &mut again)?;
        let Some(v) = again.pop() else { break };
        if j < cand_answers.len() {
            cand_answers[j] = v;
        } else {
            cand_answers.push(v);
        }
    }
    if o.messages > 0 || o.live_messages > 0 {
        slot.observe(&cand.rollout, &o, Vec::new());
    }
    // Merge back in input order, up to the first answer that is missing (after a fail).
    let (mut a, mut b) = (live_answers.into_iter(), cand_answers.into_iter());
    let mut k = 0;
    for to_cand in &route {
        let v = if *to_cand {
            let v = b.next();
            by_candidate.push(v.is_some() && own[k]);
            k += 1;
            v
        } else {
            by_candidate.push(false);
            a.next()
        };
        match v {
            Some(v) => out.push(v),
            None => {
                by_candidate.pop();
                break;
            }
        }
    }
    Ok(usable)
}
