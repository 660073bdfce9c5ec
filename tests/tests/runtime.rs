//! The one runtime in-process: a scripted fake source and a fake sink drive the real
//! controller and drivers with real wasm stages, in milliseconds, no broker.
//!
//! The fake source behaves like a consumer-group member on a log: each partition is a list
//! of messages; an assignment reads from the last commit (so what was not committed is read
//! again, as on Kafka); a revocation goes through the handler's drain barrier; the end of a
//! closed partition is reported once it is read. Every commit is checked at the moment it is
//! made: nothing below it may be unfinished (delivered and acknowledged, or rejected and
//! acknowledged). The stage is `misbehave`: a message's value `reject`, `fail` or `dup` does
//! that, anything else passes; the key names the message.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use weir::chain::Chain;
use weir::config::BatchConfig;
use weir::engine::WeirEngine;
use weir::message::{Envelope, Lane, Message};
use weir::metrics::Metrics;
use weir::rollout::StageSlot;
use weir::runtime::{run_parts, ControllerOptions, Parts, RunOutcome, TxnSetup};
use weir::sink::{
    ChangeRecord, Changelog, Record, Sink, SinkError, Ticket, Transactions, TxnError,
};
use weir::source::{Handler, Item, PartitionKey, Source, SourceError};
use weir::state::StageBuckets;
use weir_tests::plugins;

// ---------------------------------------------------------------------------------------
// The shared world: partitions' logs, what the sinks hold, commits, violations.

/// A changelog record: key and value (none: a tombstone).
type KeyValue = (String, Option<Vec<u8>>);
/// A changelog record on its way: topic, partition, key, value.
/// A changelog record: topic, partition, key, value and tag (the source offset it belongs to).
type Change = (String, i32, String, Option<Vec<u8>>, i64);

#[derive(Default)]
struct World {
    /// Per partition: (key, value) of each offset.
    logs: BTreeMap<PartitionKey, Vec<(String, String)>>,
    /// Partitions that get no more messages (their end is reported once read).
    closed: BTreeSet<PartitionKey>,
    /// Keys of messages the sink acknowledged (with repeats: at-least-once).
    delivered: Vec<String>,
    /// Keys of messages the reject path acknowledged.
    rejected: Vec<String>,
    /// Records written but held unacknowledged (the sink stalls).
    held: Vec<(String, bool, Arc<Ticket>)>,
    /// Commits in order: partition, offset, synchronous (a revocation or the last one).
    commits: Vec<(PartitionKey, i64, bool)>,
    /// Commits that went past an unfinished offset, and failed checks.
    violations: Vec<String>,
    /// Messages the source handed over (re-reads included).
    read: usize,
    /// Partitions the runtime asked the source to read again from an offset.
    rewinds: usize,
    /// Partitions the source holds paused now (the runtime's backpressure).
    paused: BTreeSet<PartitionKey>,
    /// Rewinds of a partition the source held paused.
    rewound_paused: usize,
    /// Exactly-once: the broker's side of the transactions.
    txn: TxnWorld,
    /// Stateful stages' changelog partitions: (topic, partition) → acknowledged (or, under
    /// exactly-once, committed) records.
    changelog: BTreeMap<(String, i32), Vec<KeyValue>>,
    /// Changelog records written, not yet acknowledged: (topic, partition, key, value, ticket).
    held_changes: Vec<(Change, Arc<Ticket>)>,
}

/// What a transactional broker holds: per partition the open transaction's records, what
/// committed transactions made visible to a `read_committed` consumer, the group's offsets.
#[derive(Default)]
struct TxnWorld {
    /// Partitions whose producer this process holds.
    opened: BTreeSet<PartitionKey>,
    /// Open transactions: the records in each (key, to the reject path).
    open: BTreeMap<PartitionKey, Vec<(String, bool)>>,
    /// Keys of outputs of committed transactions.
    visible: Vec<String>,
    /// Keys of dead-letter records of committed transactions.
    visible_rejects: Vec<String>,
    /// The same two as sets, for the check at each commit (a scan of the lists made each
    /// commit cost their length times the partition's offsets: under a loaded machine the
    /// fake alone took 30 s).
    visible_set: HashSet<String>,
    visible_rejects_set: HashSet<String>,
    /// Offsets committed with transactions.
    committed: BTreeMap<PartitionKey, i64>,
    /// Every transactional commit in order.
    commits: Vec<(PartitionKey, i64)>,
    /// Transactions aborted (by the process, or by the broker when a new owner opened).
    aborts: usize,
    /// Partitions another member has taken over: commits fail as fenced.
    fenced: BTreeSet<PartitionKey>,
    /// Partitions whose commit is refused while they are being revoked (the group moved on
    /// mid-rebalance: Apache Kafka's `ILLEGAL_GENERATION`), and how many were refused.
    refused_at_revoke: BTreeSet<PartitionKey>,
    refused: usize,
    /// A partition's next commit at or past this offset is refused (once).
    refuse_at: BTreeMap<PartitionKey, i64>,
    /// The next commit of the partition at or past this offset hangs in the client (its
    /// producer is abandoned; the transaction stays open until the next open).
    hang_at: BTreeMap<PartitionKey, i64>,
    /// Commits that hung.
    hung: usize,
    /// The next commit of the partition at or past this offset commits, but the client
    /// answers that it timed out (the coordinator went away after deciding).
    lose_answer_at: BTreeMap<PartitionKey, i64>,
    /// Commits that committed and answered a failure.
    lost_answers: usize,
    /// Partitions whose producer hung with its transaction open: closing it leaves the
    /// transaction to the next open, which aborts it.
    abandoned: BTreeSet<PartitionKey>,
    /// Partitions being revoked now.
    revoking: BTreeSet<PartitionKey>,
    /// Producers being opened now, and the most ever opened at the same time.
    opening: usize,
    most_opening: usize,
    /// Changelog records in each open transaction: (topic, partition, key, value).
    open_changes: BTreeMap<PartitionKey, Vec<Change>>,
}

struct Shared {
    world: Mutex<World>,
    /// The sink holds acknowledgements.
    stall: AtomicBool,
    /// The changelog holds acknowledgements (the sink's go on).
    changelog_stall: AtomicBool,
    /// The changelog's acknowledgements report failure (the sink's go on).
    fail_changelog: AtomicBool,
    /// The sink's acknowledgements report failure.
    fail_acks: AtomicBool,
    /// Transactional commits wait in the client (the driver's thread blocks in them).
    hold_commits: AtomicBool,
    /// Every transactional commit is refused (the group moved on).
    refuse_commits: AtomicBool,
    /// The sink panics on its next write (a bug in a driver's thread).
    panic: AtomicBool,
    /// Exactly-once: records go into their partition's open transaction.
    eos: AtomicBool,
    /// The stage and engine of the run (default: the stateless `misbehave`).
    stage: Mutex<Option<(WeirEngine, Vec<Arc<StageSlot>>)>>,
    /// A stateful stage's buckets: commits are checked against its store.
    state: Mutex<Option<Arc<StageBuckets>>>,
    /// The run has a changelog (the fake one on this world).
    changelog: AtomicBool,
    /// Where the fake changelog's records landed (reported as a producer's delivery would).
    acks: Arc<weir::sink::ChangelogAcks>,
    /// Changelog records handed to restores.
    restored: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            world: Mutex::new(World::default()),
            stall: AtomicBool::new(false),
            changelog_stall: AtomicBool::new(false),
            fail_changelog: AtomicBool::new(false),
            fail_acks: AtomicBool::new(false),
            hold_commits: AtomicBool::new(false),
            refuse_commits: AtomicBool::new(false),
            panic: AtomicBool::new(false),
            eos: AtomicBool::new(false),
            stage: Mutex::new(None),
            state: Mutex::new(None),
            changelog: AtomicBool::new(false),
            acks: Default::default(),
            restored: Default::default(),
        })
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Acknowledges (or fails) every held record.
    fn release(&self) {
        self.release_first(usize::MAX);
    }

    /// Acknowledges (or fails) the first `n` held records (and every held changelog record).
    fn release_first(&self, n: usize) {
        let held: Vec<_> = {
            let mut w = self.world();
            let n = n.min(w.held.len());
            w.held.drain(..n).collect()
        };
        let changes = if self.changelog_stall.load(Ordering::SeqCst) {
            Vec::new()
        } else {
            std::mem::take(&mut self.world().held_changes)
        };
        let fail = self.fail_acks.load(Ordering::SeqCst);
        let fail_changes = fail || self.fail_changelog.load(Ordering::SeqCst);
        let eos = self.eos.load(Ordering::SeqCst);
        for ((topic, partition, key, value, tag), t) in changes {
            if !fail_changes && !eos {
                let mut w = self.world();
                let log = w.changelog.entry((topic.clone(), partition)).or_default();
                log.push((key, value));
                let offset = log.len() as i64 - 1;
                drop(w);
                self.acks.acked(&topic, partition, tag, offset);
            }
            t.settle(fail_changes.then(|| "the fake broker refused it".to_owned()));
        }
        for (key, reject, t) in held {
            if !fail {
                let mut w = self.world();
                if reject {
                    w.rejected.push(key);
                } else {
                    w.delivered.push(key);
                }
            }
            t.settle(fail.then(|| "the fake broker refused it".to_owned()));
        }
    }

    /// Checks a commit against what was acknowledged: every message below `offset` must have
    /// reached the sink or the reject path (as many times as its outcome emits, at least once).
    fn check_commit(&self, key: &PartitionKey, offset: i64, sync: bool) {
        let mut w = self.world();
        w.commits.push((key.clone(), offset, sync));
        let log = w.logs.get(key).cloned().unwrap_or_default();
        let delivered: BTreeSet<&String> = w.delivered.iter().collect();
        let rejected: BTreeSet<&String> = w.rejected.iter().collect();
        let mut bad = Vec::new();
        for (o, (k, v)) in log.iter().enumerate().take(offset.max(0) as usize) {
            let ok = match v.as_str() {
                // A trap or a timeout goes to the reject path (`on_trap: reject`).
                "reject" | "trap" | "loop" => rejected.contains(k),
                "fail" => false,
                _ => delivered.contains(k),
            };
            if !ok {
                bad.push(format!(
                    "{key} committed at {offset} but offset {o} ({k}, {v}) is not done"
                ));
            }
        }
        w.violations.extend(bad);
        drop(w);
        // (An at-least-once changelog may hold writes of messages above a commit: a new
        // owner restores them and runs the messages again.)
        self.check_state(key, self.changelog.load(Ordering::SeqCst));
        self.check_changelog(key, offset);
    }

    /// At-least-once with a changelog, at a commit of `next` for partition `key`: the
    /// changelog (its acknowledged records, each key's last) holds at least the writes of the
    /// delivered messages below `next`, so that a new owner restoring it counts none of them
    /// short.
    fn check_changelog(&self, key: &PartitionKey, next: i64) {
        if !self.changelog.load(Ordering::SeqCst) || self.eos.load(Ordering::SeqCst) {
            return;
        }
        let mut w = self.world();
        let log = w.logs.get(key).cloned().unwrap_or_default();
        let expected = fold(&log[..(next.max(0) as usize).min(log.len())]);
        let mut latest = BTreeMap::new();
        let topic = ("t.m.counts.changelog".to_owned(), key.partition);
        for (k, v) in w.changelog.get(&topic).into_iter().flatten() {
            match v {
                Some(v) => {
                    let (_, n) = weir::state::decode(v);
                    latest.insert(
                        k.clone(),
                        i64::from_le_bytes(n.try_into().expect("a counter")),
                    );
                }
                None => {
                    latest.remove(k);
                }
            }
        }
        if !expected
            .iter()
            .all(|(k, n)| latest.get(k).is_some_and(|l| l >= n))
        {
            w.violations.push(format!(
                "{key} committed at {next} while the changelog holds {latest:?}, short of the delivered messages' {expected:?}"
            ));
        }
    }

    /// Checks a stateful stage's store for partition `key`: its data must be the writes of
    /// exactly the messages below the offset its checkpoint names (`at_least`: or more, when
    /// an at-least-once changelog may bring back writes of messages that were not committed).
    /// `misbehave` with `count_in` adds 1 to `seen` and to the message's value, except for
    /// messages that fail or trap.
    fn check_state(&self, key: &PartitionKey, at_least: bool) {
        let Some(b) = self.state.lock().unwrap().clone() else {
            return;
        };
        let store = b.store();
        let cp = store.checkpoint(key).expect("checkpoint");
        let Some(next) = cp.source_next else { return };
        let log = self.world().logs.get(key).cloned().unwrap_or_default();
        let expected = fold(&log[..(next.max(0) as usize).min(log.len())]);
        let stored = stored_counts(&b, key);
        let ok = if at_least {
            expected
                .iter()
                .all(|(k, n)| stored.get(k).copied().unwrap_or(0) >= *n)
        } else {
            stored == expected
        };
        if !ok {
            self.world().violations.push(format!(
                "{key}: the store at checkpoint {next} holds {stored:?}, the delivered messages below it make {expected:?}"
            ));
        }
    }
}

/// What `misbehave` with `count_in` writes for these messages: 1 per message to `seen` and to
/// its value, none for a message that fails or traps.
fn fold(log: &[(String, String)]) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for (_, v) in log {
        if matches!(v.as_str(), "fail" | "trap" | "loop") {
            continue;
        }
        *m.entry("seen".to_owned()).or_default() += 1;
        *m.entry(v.clone()).or_default() += 1;
    }
    m
}

/// The counts a stateful `misbehave` stored for partition `key`.
fn stored_counts(b: &StageBuckets, key: &PartitionKey) -> BTreeMap<String, i64> {
    b.store()
        .scan(key, "counts", None, 100_000)
        .expect("scan")
        .into_iter()
        .map(|(k, v)| {
            let (_, n) = weir::state::decode(&v);
            (k, i64::from_le_bytes(n.try_into().expect("a counter")))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The fake source.

enum Step {
    /// Appends messages (values) to a partition's log.
    Append(PartitionKey, Vec<&'static str>),
    /// Assigns partitions (reading from their last commit).
    Assign(Vec<PartitionKey>),
    /// Revokes partitions (the drain barrier; its commit is checked).
    Revoke(Vec<PartitionKey>),
    /// The sink holds (true) or acknowledges (false) from now on; releasing acknowledges
    /// what it held.
    Stall(bool),
    /// Transactional commits block in the client while set (the lanes back up behind them).
    HoldCommits(bool),
    /// Every transactional commit from now on is refused (the group moved on).
    RefuseCommits,
    /// The sink acknowledges the first this many records it holds (and goes on holding).
    AckFirst(usize),
    /// The changelog holds (true) or acknowledges (false) from now on; releasing
    /// acknowledges what it held.
    StallChangelog(bool),
    /// The changelog's acknowledgements fail from now on.
    FailChangelog,
    /// The sink's acknowledgements fail from now on.
    FailAcks,
    /// The sink's next write panics (in the driver thread that calls it).
    PanicInSink,
    /// Waits (polling on) until the condition holds, at most 10 s.
    Until(fn(&World) -> bool),
    /// Lets this many polls pass (messages are read meanwhile).
    Polls(u32),
    /// Lets this much time pass (polling on).
    Sleep(Duration),
    /// Records a violation unless the condition holds now.
    Check(fn(&World) -> bool, &'static str),
    /// No more messages for these partitions.
    Close(Vec<PartitionKey>),
    /// Sets the stop flag (SIGTERM).
    Stop,
    /// Another member takes these partitions over: their transactions can no longer commit.
    Fence(Vec<PartitionKey>),
    /// From now on these partitions' commits are refused while they are being revoked.
    RefuseAtRevoke(Vec<PartitionKey>),
    /// The next commit of this partition that has at least this many messages below it is
    /// refused (the group moved on mid-rebalance), wherever it comes from.
    RefuseCommitAt(PartitionKey, i64),
    /// The same, but the client hangs instead of answering (librdkafka 5456/5511).
    HangCommitAt(PartitionKey, i64),
    /// The same, but the commit goes through and the client answers that it timed out.
    LoseCommitAnswerAt(PartitionKey, i64),
}

struct FakeSource {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    script: VecDeque<Step>,
    /// Owned partitions and their read position.
    owned: BTreeMap<PartitionKey, i64>,
    paused: BTreeSet<PartitionKey>,
    ended: BTreeSet<PartitionKey>,
    committed: BTreeMap<PartitionKey, i64>,
    waiting_since: Option<Instant>,
    /// When the script ran out (the run must end soon after: see [`FakeSource::poll`]).
    script_done: Option<Instant>,
}

impl FakeSource {
    fn new(shared: Arc<Shared>, stop: Arc<AtomicBool>, script: Vec<Step>) -> Self {
        FakeSource {
            shared,
            stop,
            script: script.into(),
            owned: BTreeMap::new(),
            paused: BTreeSet::new(),
            ended: BTreeSet::new(),
            committed: BTreeMap::new(),
            waiting_since: None,
            script_done: None,
        }
    }

    /// Fails the run when it is still polled long after its script ended: a run that never
    /// ends would hang the test binary (and the suite) instead of failing with what it saw.
    fn watchdog(&mut self) {
        if !self.script.is_empty() {
            self.script_done = None;
            return;
        }
        let since = *self.script_done.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_secs(30) {
            return;
        }
        let w = self.shared.world();
        let logs: BTreeMap<String, usize> = w
            .logs
            .iter()
            .map(|(k, l)| (k.to_string(), l.len()))
            .collect();
        panic!(
            "the run did not end 30 s after its script did: read positions {:?}, paused {:?}, \
             ended {:?}, closed {:?}, logs {logs:?}, group commits {:?}, transactional commits \
             {:?}, open transactions {:?}, rewinds {}",
            self.owned,
            self.paused,
            self.ended,
            w.closed,
            self.committed,
            w.txn.committed,
            w.txn.open.keys().collect::<Vec<_>>(),
            w.rewinds,
        );
    }

    fn commit_checked(&mut self, offsets: &[(PartitionKey, i64)], sync: bool) {
        for (k, o) in offsets {
            assert!(self.owned.contains_key(k), "commit for {k}, not owned");
            self.shared.check_commit(k, *o, sync);
            let c = self.committed.entry(k.clone()).or_insert(*o);
            *c = (*c).max(*o);
        }
    }

    fn revoke(&mut self, keys: &[PartitionKey], to: &mut dyn Handler) {
        let keys: Vec<PartitionKey> = keys
            .iter()
            .filter(|k| self.owned.contains_key(*k))
            .cloned()
            .collect();
        if keys.is_empty() {
            return;
        }
        self.shared
            .world()
            .txn
            .revoking
            .extend(keys.iter().cloned());
        let offsets = to.revoked(&keys);
        self.shared.world().txn.revoking.clear();
        self.commit_checked(&offsets, true);
        let mut w = self.shared.world();
        for k in &keys {
            if w.txn.open.contains_key(k) {
                w.violations
                    .push(format!("{k} released with its transaction still open"));
            }
        }
        drop(w);
        for k in &keys {
            self.owned.remove(k);
            self.paused.remove(k);
            self.ended.remove(k);
        }
    }

    /// Runs script steps until one has to wait.
    fn step(&mut self, to: &mut dyn Handler) {
        while let Some(step) = self.script.pop_front() {
            match step {
                Step::Append(k, values) => {
                    let mut w = self.shared.world();
                    let log = w.logs.entry(k.clone()).or_default();
                    for v in values {
                        let key = format!("{k}@{}", log.len());
                        log.push((key, v.to_owned()));
                    }
                }
                Step::Assign(keys) => {
                    for k in &keys {
                        // This run's commits, else the group's from an earlier run (at least
                        // once), else the last transaction's (exactly once).
                        let w = self.shared.world();
                        let group = w.commits.iter().filter(|c| &c.0 == k).map(|c| c.1).max();
                        let txn = w.txn.committed.get(k).copied();
                        drop(w);
                        let from = self
                            .committed
                            .get(k)
                            .copied()
                            .or(group)
                            .or(txn)
                            .unwrap_or(0);
                        self.owned.insert(k.clone(), from);
                    }
                    to.assigned(&keys);
                }
                Step::Revoke(keys) => self.revoke(&keys, to),
                Step::HoldCommits(on) => self.shared.hold_commits.store(on, Ordering::SeqCst),
                Step::RefuseCommits => self.shared.refuse_commits.store(true, Ordering::SeqCst),
                Step::Stall(on) => {
                    self.shared.stall.store(on, Ordering::SeqCst);
                    if !on {
                        self.shared.release();
                    }
                }
                Step::AckFirst(n) => self.shared.release_first(n),
                Step::StallChangelog(on) => {
                    self.shared.changelog_stall.store(on, Ordering::SeqCst);
                    if !on {
                        self.shared.release();
                    }
                }
                Step::FailAcks => self.shared.fail_acks.store(true, Ordering::SeqCst),
                Step::FailChangelog => self.shared.fail_changelog.store(true, Ordering::SeqCst),
                Step::PanicInSink => self.shared.panic.store(true, Ordering::SeqCst),
                Step::Until(cond) => {
                    let since = *self.waiting_since.get_or_insert_with(Instant::now);
                    if !cond(&self.shared.world()) {
                        assert!(
                            since.elapsed() < Duration::from_secs(10),
                            "a scripted wait timed out ({} steps after it)",
                            self.script.len()
                        );
                        self.script.push_front(step);
                        return;
                    }
                    self.waiting_since = None;
                }
                Step::Polls(n) => {
                    if n > 0 {
                        self.script.push_front(Step::Polls(n - 1));
                        return;
                    }
                }
                Step::Sleep(d) => {
                    let since = *self.waiting_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < d {
                        self.script.push_front(step);
                        return;
                    }
                    self.waiting_since = None;
                }
                Step::Check(cond, what) => {
                    let mut w = self.shared.world();
                    if !cond(&w) {
                        w.violations.push(format!("check failed: {what}"));
                    }
                }
                Step::Close(keys) => self.shared.world().closed.extend(keys),
                Step::Stop => self.stop.store(true, Ordering::SeqCst),
                Step::Fence(keys) => self.shared.world().txn.fenced.extend(keys),
                Step::RefuseAtRevoke(keys) => {
                    self.shared.world().txn.refused_at_revoke.extend(keys)
                }
                Step::RefuseCommitAt(key, at) => {
                    self.shared.world().txn.refuse_at.insert(key, at);
                }
                Step::HangCommitAt(key, at) => {
                    self.shared.world().txn.hang_at.insert(key, at);
                }
                Step::LoseCommitAnswerAt(key, at) => {
                    self.shared.world().txn.lose_answer_at.insert(key, at);
                }
            }
        }
    }
}

impl Source for FakeSource {
    fn poll(&mut self, to: &mut dyn Handler, timeout: Duration) -> Result<(), SourceError> {
        self.step(to);
        self.watchdog();
        let mut any = false;
        let keys: Vec<PartitionKey> = self.owned.keys().cloned().collect();
        for k in keys {
            if self.paused.contains(&k) {
                continue;
            }
            let (log, closed) = {
                let w = self.shared.world();
                (
                    w.logs.get(&k).cloned().unwrap_or_default(),
                    w.closed.contains(&k),
                )
            };
            let mut pos = self.owned[&k];
            while (pos as usize) < log.len() {
                let (key, value) = &log[pos as usize];
                let msg = Message {
                    key: Some(key.as_bytes().to_vec()),
                    value: Some(value.as_bytes().to_vec()),
                    ..Message::default()
                };
                pos += 1;
                any = true;
                self.shared.world().read += 1;
                if !to.item(
                    &k.topic,
                    k.partition,
                    Item::Message(Envelope {
                        offset: pos - 1,
                        msg,
                    }),
                ) {
                    break;
                }
            }
            self.owned.insert(k.clone(), pos);
            if closed && pos as usize == log.len() && self.ended.insert(k.clone()) {
                to.end(&k, pos);
            }
        }
        if !any {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
        Ok(())
    }

    fn commit(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        self.commit_checked(offsets, false);
        Ok(())
    }

    fn commit_sync(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        self.commit_checked(offsets, true);
        Ok(())
    }

    fn committed(&self, key: &PartitionKey) -> Option<i64> {
        self.committed.get(key).copied()
    }

    fn settled(&mut self, key: &PartitionKey, at: i64) -> i64 {
        let w = self.shared.world();
        w.txn.committed.get(key).map_or(at, |&c| c.max(at))
    }

    fn rewind(&mut self, key: &PartitionKey, at: i64, _: Option<i64>) -> Result<(), SourceError> {
        // The end is reported again when the partition is read up to it (it is closed).
        let pos = self
            .owned
            .get_mut(key)
            .expect("rewind of a partition not owned");
        *pos = at;
        self.ended.remove(key);
        let mut w = self.shared.world();
        w.rewinds += 1;
        if self.paused.contains(key) {
            w.rewound_paused += 1;
        }
        Ok(())
    }

    fn committed_all(&self) -> BTreeMap<String, i64> {
        self.committed
            .iter()
            .map(|(k, o)| (k.to_string(), *o))
            .collect()
    }

    fn pause(&mut self, keys: &[PartitionKey]) {
        self.paused.extend(keys.iter().cloned());
        self.shared.world().paused = self.paused.clone();
    }

    fn resume(&mut self, keys: &[PartitionKey]) {
        for k in keys {
            self.paused.remove(k);
        }
        self.shared.world().paused = self.paused.clone();
    }

    fn high_watermark(&self, key: &PartitionKey) -> Option<i64> {
        self.shared.world().logs.get(key).map(|l| l.len() as i64)
    }

    fn close(&mut self, to: &mut dyn Handler) {
        let keys: Vec<PartitionKey> = self.owned.keys().cloned().collect();
        self.revoke(&keys, to);
    }
}

// ---------------------------------------------------------------------------------------
// The fake sink: acknowledges later (like Kafka), at once unless stalled.

struct FakeSink {
    shared: Arc<Shared>,
    rejects: bool,
}

impl Sink for FakeSink {
    fn write(&self, lane: &Lane, records: Vec<Record<'_>>) -> Result<(), SinkError> {
        if self.shared.panic.swap(false, Ordering::SeqCst) {
            panic!("the fake sink panicked");
        }
        for r in records {
            let (msg, ticket) = match r {
                Record::Output { msg, ticket } => (msg, ticket),
                Record::Reject {
                    original, ticket, ..
                } => (original, ticket),
            };
            let key = String::from_utf8_lossy(msg.key.as_deref().unwrap_or_default()).into_owned();
            let ticket = ticket.expect("a sink that acknowledges later gets tickets");
            let mut w = self.shared.world();
            if self.shared.eos.load(Ordering::SeqCst) {
                let part = PartitionKey {
                    topic: lane.topic.clone(),
                    partition: lane.partition,
                };
                match w.txn.open.get_mut(&part) {
                    Some(records) => records.push((key.clone(), self.rejects)),
                    None => w
                        .violations
                        .push(format!("{key} written outside a transaction")),
                }
            }
            w.held.push((key, self.rejects, ticket));
        }
        if !self.shared.stall.load(Ordering::SeqCst) {
            self.shared.release();
        }
        Ok(())
    }

    fn acknowledges_later(&self) -> bool {
        true
    }

    fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        let deadline = Instant::now() + timeout;
        while !self.shared.world().held.is_empty() {
            if Instant::now() >= deadline {
                return Err(SinkError::Io {
                    what: "fake".into(),
                    source: std::io::Error::other("records held"),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn delivered(&self) -> u64 {
        let w = self.shared.world();
        (if self.rejects {
            &w.rejected
        } else {
            &w.delivered
        })
        .len() as u64
    }
}

// ---------------------------------------------------------------------------------------
// The fake transactional broker (exactly-once).

struct FakeTxns {
    shared: Arc<Shared>,
}

impl Transactions for FakeTxns {
    fn open(&self, key: &PartitionKey) -> Result<(), TxnError> {
        // An open takes a few broker round trips.
        {
            let mut w = self.shared.world();
            w.txn.opening += 1;
            w.txn.most_opening = w.txn.most_opening.max(w.txn.opening);
        }
        std::thread::sleep(Duration::from_millis(2));
        let mut w = self.shared.world();
        w.txn.opening -= 1;
        // A new owner fences the old one and aborts what it left open.
        if w.txn.open.remove(key).is_some() {
            w.txn.aborts += 1;
        }
        w.txn.open_changes.remove(key);
        w.txn.fenced.remove(key);
        w.txn.abandoned.remove(key);
        w.txn.opened.insert(key.clone());
        Ok(())
    }

    fn begin(&self, key: &PartitionKey) -> Result<(), TxnError> {
        let mut w = self.shared.world();
        if !w.txn.opened.contains(key) {
            w.violations.push(format!("{key}: begin without open"));
        }
        if w.txn.open.insert(key.clone(), Vec::new()).is_some() {
            w.violations
                .push(format!("{key}: begin inside a transaction"));
        }
        w.txn.open_changes.insert(key.clone(), Vec::new());
        Ok(())
    }

    fn commit(&self, key: &PartitionKey, next: i64) -> Result<(), TxnError> {
        while self.shared.hold_commits.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut w = self.shared.world();
        if w.txn.hang_at.get(key).is_some_and(|&at| next >= at) {
            w.txn.hang_at.remove(key);
            w.txn.hung += 1;
            w.txn.abandoned.insert(key.clone());
            return Err(TxnError::Abandoned {
                key: key.clone(),
                why: "the fake client never answered".into(),
            });
        }
        let lose_answer = w.txn.lose_answer_at.get(key).is_some_and(|&at| next >= at);
        if lose_answer {
            w.txn.lose_answer_at.remove(key);
        }
        let refuse_now = w.txn.refuse_at.get(key).is_some_and(|&at| next >= at)
            || self.shared.refuse_commits.load(Ordering::SeqCst);
        if refuse_now {
            w.txn.refuse_at.remove(key);
        }
        if refuse_now || (w.txn.refused_at_revoke.contains(key) && w.txn.revoking.contains(key)) {
            // The broker refuses the offsets; the producer's transaction is then abortable.
            w.txn.refused += 1;
            return Err(TxnError::GroupMoved {
                key: key.clone(),
                why: "the fake broker: ILLEGAL_GENERATION (the group moved on)".into(),
            });
        }
        if w.txn.fenced.contains(key) {
            // The new owner's producer took the id over: the broker aborted this one.
            if w.txn.open.remove(key).is_some() {
                w.txn.aborts += 1;
            }
            return Err(TxnError::Fenced {
                key: key.clone(),
                why: "the fake broker: producer fenced".into(),
            });
        }
        drop(w);
        // Committing flushes: every record is acknowledged first.
        self.shared.release();
        if self.shared.fail_acks.load(Ordering::SeqCst) {
            return Err(TxnError::Failed {
                key: key.clone(),
                what: "commit",
                why: "the fake broker refused a record".into(),
            });
        }
        let mut w = self.shared.world();
        let Some(records) = w.txn.open.remove(key) else {
            w.violations
                .push(format!("{key}: commit without a transaction"));
            return Ok(());
        };
        for (topic, partition, k, v, tag) in w.txn.open_changes.remove(key).unwrap_or_default() {
            let log = w.changelog.entry((topic.clone(), partition)).or_default();
            log.push((k, v));
            // (A real producer reports the offset before the commit; the driver applies the
            // state after it, so reporting it here is the same to the store.)
            self.shared
                .acks
                .acked(&topic, partition, tag, log.len() as i64 - 1);
        }
        for (k, reject) in records {
            if reject {
                w.txn.visible_rejects_set.insert(k.clone());
                w.txn.visible_rejects.push(k);
            } else {
                w.txn.visible_set.insert(k.clone());
                w.txn.visible.push(k);
            }
        }
        // Everything below the committed offset must be visible now.
        let log = w.logs.get(key).cloned().unwrap_or_default();
        let mut bad = Vec::new();
        for (o, (k, v)) in log.iter().enumerate().take(next.max(0) as usize) {
            let ok = match v.as_str() {
                "reject" | "trap" | "loop" => w.txn.visible_rejects_set.contains(k),
                "fail" => false,
                _ => w.txn.visible_set.contains(k),
            };
            if !ok {
                bad.push(format!(
                    "{key} committed at {next} but offset {o} ({k}, {v}) is not visible"
                ));
            }
        }
        w.violations.extend(bad);
        if w.txn.committed.get(key).is_some_and(|&c| c > next) {
            w.violations
                .push(format!("{key}: committed offset went back to {next}"));
        }
        w.txn.committed.insert(key.clone(), next);
        w.txn.commits.push((key.clone(), next));
        if lose_answer {
            w.txn.lost_answers += 1;
        }
        drop(w);
        self.shared.check_state(key, false);
        if lose_answer {
            return Err(TxnError::Interrupted {
                key: key.clone(),
                why: "the fake client: commit timed out (the coordinator went away)".into(),
            });
        }
        Ok(())
    }

    fn abort(&self, key: &PartitionKey) -> Result<(), TxnError> {
        let mut w = self.shared.world();
        if w.txn.open.remove(key).is_some() {
            w.txn.aborts += 1;
        }
        w.txn.open_changes.remove(key);
        Ok(())
    }

    fn close(&self, key: &PartitionKey) {
        let mut w = self.shared.world();
        if w.txn.open.contains_key(key) && !w.txn.abandoned.contains(key) {
            w.violations
                .push(format!("{key}: producer closed with a transaction open"));
        }
        w.txn.opened.remove(key);
    }
}

// ---------------------------------------------------------------------------------------
// The fake changelog: acknowledged with the sink's records (held while the sink or the
// changelog stalls); under exactly-once its records join the partition's open transaction.

struct FakeChangelog {
    shared: Arc<Shared>,
}

impl Changelog for FakeChangelog {
    fn write(&self, lane: &Lane, records: &[ChangeRecord], ticket: &Arc<Ticket>) {
        let eos = self.shared.eos.load(Ordering::SeqCst);
        let mut w = self.shared.world();
        let part = PartitionKey::new(&lane.topic, lane.partition);
        if eos {
            // Exactly-once, each key's last write per transaction goes in at its commit.
            w.violations.push(format!(
                "{part}: a run's changelog records sent with its outcomes under exactly-once"
            ));
        }
        for r in records {
            w.held_changes.push((
                (
                    r.topic.to_string(),
                    lane.partition,
                    r.key.to_string(),
                    r.value.as_deref().map(<[u8]>::to_vec),
                    r.tag,
                ),
                ticket.clone(),
            ));
        }
        drop(w);
        if !self.shared.stall.load(Ordering::SeqCst) {
            self.shared.release();
        }
    }

    fn write_to_transaction(&self, lane: &Lane, records: &[ChangeRecord]) -> Result<(), String> {
        let mut w = self.shared.world();
        if !self.shared.eos.load(Ordering::SeqCst) {
            w.violations
                .push("changelog records into a transaction at-least-once".into());
        }
        let part = PartitionKey::new(&lane.topic, lane.partition);
        let Some(open) = w.txn.open_changes.get_mut(&part) else {
            return Err(format!("{part}: no transaction is open"));
        };
        open.extend(records.iter().map(|r| {
            (
                r.topic.to_string(),
                lane.partition,
                r.key.to_string(),
                r.value.as_deref().map(<[u8]>::to_vec),
                r.tag,
            )
        }));
        Ok(())
    }

    fn restore(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        apply: &mut weir::sink::ApplyRecord<'_>,
    ) -> Result<i64, String> {
        let records = self
            .shared
            .world()
            .changelog
            .get(&(topic.to_owned(), partition))
            .cloned()
            .unwrap_or_default();
        for (o, (k, v)) in records.iter().enumerate().skip(from.max(0) as usize) {
            self.shared.restored.fetch_add(1, Ordering::SeqCst);
            apply(o as i64, k, v.as_deref());
        }
        Ok(records.len() as i64)
    }

    fn acks(&self) -> &Arc<weir::sink::ChangelogAcks> {
        &self.shared.acks
    }
}

// ---------------------------------------------------------------------------------------
// Running a script.

/// One engine and the misbehave stage for every run of this file.
fn stage() -> &'static (WeirEngine, Vec<Arc<StageSlot>>) {
    static STAGE: OnceLock<(WeirEngine, Vec<Arc<StageSlot>>)> = OnceLock::new();
    STAGE.get_or_init(|| {
        let cache = std::env::temp_dir().join("weir-runtime-tests-cache");
        let yaml = format!(
            "source:\n  stdin: {{}}\nsink:\n  discard: {{}}\nruntime:\n  cache_dir: {}\nstages:\n  - name: m\n    plugin: {}\n",
            cache.display(),
            plugins::MISBEHAVE
        );
        let cfg = weir::config::load_str(std::path::Path::new("t.yaml"), &yaml, &|_| None).unwrap();
        let p = weir::runtime::prepare(&cfg).expect("the stage loads");
        (p.engine, p.slots)
    })
}

struct Run {
    outcome: RunOutcome,
    world: World,
    took: Duration,
}

fn options() -> ControllerOptions {
    ControllerOptions {
        lane_capacity: 64,
        max_in_flight: 1 << 20,
        hold: Duration::from_millis(50),
        revoke_timeout: Duration::from_millis(300),
        commit_interval: Duration::from_millis(5),
        stop_at_end: true,
        drain_timeout: Duration::from_secs(2),
        transactional: false,
        fenced_hold: Duration::from_secs(3),
    }
}

fn run_script(drivers: usize, batch: usize, opts: ControllerOptions, script: Vec<Step>) -> Run {
    let shared = Shared::new();
    let started = Instant::now();
    let outcome = run_on(&shared, drivers, batch, opts, script, None);
    let took = started.elapsed();
    let world = std::mem::take(&mut *shared.world());
    assert!(world.violations.is_empty(), "{:#?}", world.violations);
    Run {
        outcome,
        world,
        took,
    }
}

/// One exactly-once run on `shared` (which outlives it: a later run is a restart).
fn run_eos(shared: &Arc<Shared>, drivers: usize, script: Vec<Step>) -> RunOutcome {
    shared.eos.store(true, Ordering::SeqCst);
    let txns = TxnSetup {
        api: Arc::new(FakeTxns {
            shared: shared.clone(),
        }),
        interval: Duration::from_millis(5),
        max_bytes: 1 << 20,
    };
    let opts = ControllerOptions {
        transactional: true,
        // A small budget: a stop comes while part of the input is still unread.
        max_in_flight: 64 << 10,
        ..options()
    };
    let outcome = run_on(shared, drivers, 16, opts, script, Some(txns));
    let w = shared.world();
    assert!(w.violations.is_empty(), "{:#?}", w.violations);
    assert!(
        w.commits.is_empty(),
        "exactly-once never commits through the source: {:?}",
        w.commits
    );
    outcome
}

fn run_on(
    shared: &Arc<Shared>,
    drivers: usize,
    batch: usize,
    opts: ControllerOptions,
    script: Vec<Step>,
    transactions: Option<TxnSetup>,
) -> RunOutcome {
    let custom = shared.stage.lock().unwrap().clone();
    let (engine, slots) = match &custom {
        Some((e, s)) => (e, s),
        None => {
            let (e, s) = stage();
            (e, s)
        }
    };
    let shared = shared.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let chains = (0..drivers)
        .map(|_| Chain::new(engine, slots).expect("instantiates"))
        .collect();
    let changelog: Option<Arc<dyn Changelog>> =
        shared.changelog.load(Ordering::SeqCst).then(|| {
            Arc::new(FakeChangelog {
                shared: shared.clone(),
            }) as Arc<dyn Changelog>
        });
    run_parts(Parts {
        source: Box::new(FakeSource::new(shared.clone(), stop.clone(), script)),
        sink: Arc::new(FakeSink {
            shared: shared.clone(),
            rejects: false,
        }),
        rejects: Arc::new(FakeSink {
            shared: shared.clone(),
            rejects: true,
        }),
        chains,
        cores: Vec::new(),
        batch: BatchConfig {
            max_messages: batch,
            linger: Duration::from_millis(1),
            ..BatchConfig::default()
        },
        options: opts,
        metrics: Metrics::new(),
        stop,
        transactions,
        changelog,
    })
}

fn p(n: i32) -> PartitionKey {
    PartitionKey::new("in", n)
}

fn last_commit(w: &World, k: &PartitionKey) -> Option<i64> {
    w.commits
        .iter()
        .filter(|(c, _, _)| c == k)
        .map(|(_, o, _)| *o)
        .max()
}

fn oks(n: usize) -> Vec<&'static str> {
    vec!["ok"; n]
}

fn count(v: &[String], key: &str) -> usize {
    v.iter().filter(|k| *k == key).count()
}

// ---------------------------------------------------------------------------------------
// Behaviours.

#[test]
fn end_of_input_on_many_partitions_is_detected_without_per_partition_cost() {
    let keys: Vec<PartitionKey> = (0..512).map(p).collect();
    let mut script = vec![Step::Assign(keys.clone())];
    for k in &keys {
        script.push(Step::Append(k.clone(), oks(20)));
    }
    script.push(Step::Close(keys.clone()));
    let r = run_script(2, 64, options(), script);
    let c = &r.outcome.controller;
    assert!(c.reached_end, "{c:?}");
    assert_eq!(c.read, 512 * 20);
    assert_eq!(r.world.delivered.len(), 512 * 20);
    for k in &keys {
        assert_eq!(last_commit(&r.world, k), Some(20), "{k}");
    }
    // The old controller asked the broker about each partition in turn (about 0.5 s each):
    // 512 partitions took minutes. Here nothing waits per partition.
    assert!(r.took < Duration::from_secs(20), "took {:?}", r.took);
}

#[test]
fn a_partition_with_nothing_to_read_ends_at_once() {
    let r = run_script(
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(1), oks(3)),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(r.outcome.controller.reached_end);
    assert_eq!(r.world.delivered.len(), 3);
    assert_eq!(
        last_commit(&r.world, &p(0)),
        None,
        "nothing read, nothing to commit"
    );
    assert_eq!(last_commit(&r.world, &p(1)), Some(3));
}

#[test]
fn a_revoke_in_the_middle_of_a_batch_commits_what_was_handled_and_the_new_owner_reads_the_rest() {
    let r = run_script(
        1,
        1000,
        ControllerOptions { ..options() },
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(300)),
            // Revoked while the driver still lingers over or runs its batch.
            Step::Polls(1),
            Step::Revoke(vec![p(0)]),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0)]),
        ],
    );
    assert!(r.outcome.controller.reached_end);
    assert_eq!(last_commit(&r.world, &p(0)), Some(300));
    for i in 0..300 {
        assert!(
            count(&r.world.delivered, &format!("in/0@{i}")) >= 1,
            "in/0@{i} lost"
        );
    }
    assert!(r.outcome.controller.rebalances >= 3);
}

#[test]
fn a_revoke_while_outputs_are_unacknowledged_commits_only_what_was_acknowledged() {
    let r = run_script(
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(10)),
            Step::Until(|w| w.delivered.len() == 10),
            Step::Stall(true),
            Step::Append(p(0), oks(10)),
            Step::Until(|w| w.held.len() == 10),
            // The barrier waits revoke_timeout for the held acks, then commits what is done.
            Step::Revoke(vec![p(0)]),
            Step::Stall(false),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0)]),
        ],
    );
    let revoke_commit = r
        .world
        .commits
        .iter()
        .find(|(_, _, sync)| *sync)
        .map(|(_, o, _)| *o);
    assert_eq!(revoke_commit, Some(10), "{:?}", r.world.commits);
    // The unacknowledged ten were read again by the next assignment: nothing lost.
    for i in 0..20 {
        assert!(
            count(&r.world.delivered, &format!("in/0@{i}")) >= 1,
            "in/0@{i} lost"
        );
    }
    assert_eq!(last_commit(&r.world, &p(0)), Some(20));
}

#[test]
fn acknowledgements_from_an_old_assignment_are_stale_and_never_move_the_new_one() {
    let r = run_script(
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::Stall(true),
            Step::Append(p(0), oks(5)),
            Step::Until(|w| w.held.len() == 5),
            Step::Revoke(vec![p(0)]),
            Step::Assign(vec![p(0)]),
            Step::Until(|w| w.held.len() == 10),
            // Both generations' acknowledgements arrive now; the first five are stale.
            Step::Stall(false),
            Step::Close(vec![p(0)]),
        ],
    );
    let c = &r.outcome.controller;
    assert_eq!(c.stale, 5, "{c:?}");
    assert_eq!(last_commit(&r.world, &p(0)), Some(5));
}

#[test]
fn a_sink_that_stalls_holds_then_pauses_reading_and_recovers_without_loss() {
    let mut opts = options();
    opts.max_in_flight = 8 << 10;
    let r = run_script(
        1,
        16,
        opts,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Stall(true),
            Step::Append(p(0), oks(2000)),
            Step::Until(|w| w.held.len() >= 16),
            Step::Sleep(Duration::from_millis(300)),
            // Far fewer than 2000 are read while nothing is acknowledged: the budget holds.
            Step::Check(|w| w.read < 500, "reading stopped at the byte budget"),
            Step::Check(
                |w| w.commits.iter().all(|(_, o, _)| *o == 0),
                "nothing unacknowledged is committed",
            ),
            Step::Stall(false),
            Step::Close(vec![p(0)]),
        ],
    );
    let c = &r.outcome.controller;
    assert!(c.reached_end);
    assert_eq!(last_commit(&r.world, &p(0)), Some(2000));
    assert_eq!(r.world.delivered.len(), 2000);
}

#[test]
fn a_sink_that_fails_stops_the_run_without_committing_past_the_failure() {
    let r = run_script(
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(5)),
            Step::Until(|w| w.delivered.len() == 5),
            Step::FailAcks,
            Step::Append(p(0), oks(5)),
        ],
    );
    let c = &r.outcome.controller;
    let e = c.error.as_ref().expect("the run failed").to_string();
    assert!(e.contains("the fake broker refused it"), "{e}");
    assert_eq!(last_commit(&r.world, &p(0)), Some(5));
}

#[test]
fn a_driver_that_panics_stops_the_run_with_an_error_instead_of_hanging() {
    let r = run_script(
        2,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), oks(5)),
            Step::Append(p(1), oks(5)),
            Step::Until(|w| w.delivered.len() == 10),
            Step::PanicInSink,
            Step::Append(p(0), oks(5)),
            Step::Append(p(1), oks(5)),
            // Without the panic being reported, the run would wait here for ever.
            Step::Sleep(Duration::from_secs(30)),
        ],
    );
    assert!(r.took < Duration::from_secs(20), "took {:?}", r.took);
    let c = &r.outcome.controller;
    let e = c.error.as_ref().expect("the run failed").to_string();
    assert!(e.contains("panicked: the fake sink panicked"), "{e}");
    // The panicked batch is not acknowledged: its partition stays at 5; nothing is lost.
    let commits = [last_commit(&r.world, &p(0)), last_commit(&r.world, &p(1))];
    assert!(commits.contains(&Some(5)), "{commits:?}");
    assert!(
        commits.iter().all(|c| matches!(c, Some(5..=10))),
        "{commits:?}"
    );
}

#[test]
fn a_stage_fail_stops_before_the_message_and_nothing_at_or_after_it_is_committed() {
    let mut values = oks(7);
    values.push("fail");
    values.extend(oks(5));
    let r = run_script(
        1,
        4,
        options(),
        vec![Step::Assign(vec![p(0)]), Step::Append(p(0), values)],
    );
    let c = &r.outcome.controller;
    let f = c.failure.as_ref().expect("failed");
    assert_eq!(f.offset, 7);
    assert_eq!(last_commit(&r.world, &p(0)), Some(7));
    assert!(!r
        .world
        .delivered
        .iter()
        .any(|k| k.ends_with("@7") || k.ends_with("@8")));
}

#[test]
fn rejects_and_duplicates_are_acknowledged_before_their_offsets_count() {
    let r = run_script(
        2,
        8,
        options(),
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), vec!["ok", "reject", "dup", "ok", "reject"]),
            Step::Append(p(1), vec!["dup", "dup", "ok"]),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(r.outcome.controller.reached_end);
    assert_eq!(r.world.rejected, ["in/0@1", "in/0@4"]);
    assert_eq!(count(&r.world.delivered, "in/0@2"), 2);
    assert_eq!(count(&r.world.delivered, "in/1@1"), 2);
    assert_eq!(last_commit(&r.world, &p(0)), Some(5));
    assert_eq!(last_commit(&r.world, &p(1)), Some(3));
    assert_eq!(r.outcome.stages[0].counts.rejected, 2);
}

#[test]
fn shutdown_during_a_rebalance_commits_what_is_done_and_ends() {
    let r = run_script(
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), oks(50)),
            Step::Append(p(1), oks(50)),
            Step::Until(|w| w.delivered.len() == 100),
            Step::Stall(true),
            Step::Append(p(1), oks(5)),
            Step::Until(|w| w.held.len() == 5),
            Step::Stop,
            Step::Revoke(vec![p(1)]),
            Step::Stall(false),
        ],
    );
    let c = &r.outcome.controller;
    assert!(!c.reached_end && c.failure.is_none(), "{c:?}");
    assert_eq!(last_commit(&r.world, &p(0)), Some(50));
    // Revoked with five unacknowledged: committed at what was done, never past it.
    let p1 = last_commit(&r.world, &p(1)).unwrap();
    assert!((50..=55).contains(&p1), "{p1}");
}

// ---------------------------------------------------------------------------------------
// Model-based: random scripts against what may be committed and what must be delivered.

/// A tiny deterministic PRNG (xorshift64*).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn random_script(seed: u64) -> (Vec<Step>, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let parts = 1 + rng.below(4) as i32;
    let keys: Vec<PartitionKey> = (0..parts).map(p).collect();
    let mut owned: BTreeSet<i32> = BTreeSet::new();
    let mut stalled = false;
    let mut script = Vec::new();
    for _ in 0..(5 + rng.below(20)) {
        let k = rng.below(parts as u64) as i32;
        match rng.below(10) {
            0..=3 => {
                let words = ["ok", "ok", "ok", "reject", "dup"];
                let n = 1 + rng.below(40) as usize;
                let values = (0..n).map(|_| words[rng.below(5) as usize]).collect();
                script.push(Step::Append(p(k), values));
            }
            4 | 5 if !owned.contains(&k) => {
                owned.insert(k);
                script.push(Step::Assign(vec![p(k)]));
            }
            4..=6 if owned.contains(&k) => {
                owned.remove(&k);
                script.push(Step::Revoke(vec![p(k)]));
            }
            7 => {
                stalled = !stalled;
                script.push(Step::Stall(stalled));
            }
            _ => script.push(Step::Polls(rng.below(5) as u32)),
        }
    }
    // Finally: acknowledge, own everything, no more messages; the run ends at the end.
    script.push(Step::Stall(false));
    let rest: Vec<PartitionKey> = keys
        .iter()
        .filter(|k| !owned.contains(&k.partition))
        .cloned()
        .collect();
    if !rest.is_empty() {
        script.push(Step::Assign(rest));
    }
    script.push(Step::Close(keys));
    (script, 1 + rng.below(2) as usize)
}

#[test]
fn model_random_rebalances_stalls_and_outcomes_never_commit_past_unfinished_work() {
    // WEIR_MODEL_SEED=N replays one seed; WEIR_MODEL_SEEDS=N runs seeds 1..=N (default 200).
    let seeds: Vec<u64> = match std::env::var("WEIR_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_MODEL_SEED is a number")],
        Err(_) => {
            let n = std::env::var("WEIR_MODEL_SEEDS")
                .map_or(200, |n| n.parse().expect("WEIR_MODEL_SEEDS is a number"));
            (1..=n).collect()
        }
    };
    for seed in seeds {
        let (script, drivers) = random_script(seed);
        let mut opts = options();
        opts.revoke_timeout = Duration::from_millis(20);
        let r = std::panic::catch_unwind(|| run_script(drivers, 8, opts, script));
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!("model test failed for seed {seed}: replay with WEIR_MODEL_SEED={seed}");
                std::panic::resume_unwind(e);
            }
        };
        let c = &r.outcome.controller;
        assert!(c.reached_end && c.error.is_none(), "seed {seed}: {c:?}");
        // At least once: every message reached the sink or the reject path, and every
        // partition is committed to its end.
        for (k, log) in &r.world.logs {
            assert_eq!(
                last_commit(&r.world, k),
                Some(log.len() as i64),
                "seed {seed}: {k}"
            );
            for (key, value) in log {
                let seen = if value == "reject" {
                    count(&r.world.rejected, key)
                } else {
                    count(&r.world.delivered, key)
                };
                assert!(seen >= 1, "seed {seed}: {key} ({value}) lost");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Exactly-once: the drivers' per-partition transactions against the fake transactional
// broker. Nothing is committed through the source; a `read_committed` consumer sees only
// what committed transactions made visible (`w.txn.visible`, `w.txn.visible_rejects`).

/// Every offset below `upto` of partition `k` is visible exactly once (an output, or a
/// dead-letter record for `reject`), and nothing at or above it.
fn assert_visible_once(w: &World, k: &PartitionKey, upto: usize) {
    let log = &w.logs[k];
    for (o, (key, v)) in log.iter().enumerate() {
        let seen = (
            count(&w.txn.visible, key),
            count(&w.txn.visible_rejects, key),
        );
        let want = match (o < upto, v.as_str()) {
            (false, _) => (0, 0),
            (true, "reject") => (0, 1),
            (true, _) => (1, 0),
        };
        assert_eq!(seen, want, "{key} ({v}): (outputs, rejects) visible");
    }
}

fn with_rejects(n: usize, at: &[usize]) -> Vec<&'static str> {
    let mut v = oks(n);
    for &i in at {
        v[i] = "reject";
    }
    v
}

#[test]
fn exactly_once_commits_outputs_rejects_and_offsets_in_one_transaction_per_partition() {
    let shared = Shared::new();
    let keys: Vec<PartitionKey> = (0..8).map(p).collect();
    let mut script = vec![Step::Assign(keys.clone())];
    for k in &keys {
        script.push(Step::Append(k.clone(), with_rejects(150, &[17, 99])));
    }
    script.push(Step::Close(keys.clone()));
    let out = run_eos(&shared, 2, script);
    let c = &out.controller;
    assert!(c.reached_end && c.error.is_none(), "{c:?}");
    let w = shared.world();
    for k in &keys {
        assert_visible_once(&w, k, 150);
        assert_eq!(w.txn.committed.get(k), Some(&150), "{k}");
        assert_eq!(
            c.committed.get(&k.to_string()),
            Some(&150),
            "{k} in the report"
        );
    }
    assert_eq!(w.txn.aborts, 0);
    assert!(w.txn.open.is_empty() && w.txn.opened.is_empty());
    assert_eq!(out.written, 8 * 148);
    assert_eq!(out.rejected, 8 * 2);
}

#[test]
fn exactly_once_an_assignment_of_many_partitions_opens_their_producers_a_few_at_a_time() {
    // Every open connects to the cluster; a broker's listen backlog is small and shared
    // (librdkafka's mock cluster: 5), so a big assignment must not open them all at once.
    let shared = Shared::new();
    let keys: Vec<PartitionKey> = (0..64).map(p).collect();
    let mut script = vec![Step::Assign(keys.clone())];
    for k in &keys {
        script.push(Step::Append(k.clone(), with_rejects(3, &[])));
    }
    script.push(Step::Close(keys.clone()));
    let out = run_eos(&shared, 1, script);
    assert!(out.controller.reached_end && out.controller.error.is_none());
    let w = shared.world();
    for k in &keys {
        assert_visible_once(&w, k, 3);
    }
    assert!(
        (2..=weir::runtime::OPENS_AT_ONCE).contains(&w.txn.most_opening),
        "opened {} at once: concurrent, but at most {}",
        w.txn.most_opening,
        weir::runtime::OPENS_AT_ONCE
    );
}

#[test]
fn exactly_once_a_stage_fail_aborts_the_open_transaction_and_a_restart_meets_the_message_again() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        1,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(100)),
            Step::Until(|w| w.txn.committed.get(&p(0)) == Some(&100)),
            Step::Append(p(0), vec!["ok", "reject", "fail", "ok"]),
        ],
    );
    assert_eq!(out.controller.failure.as_ref().map(|f| f.offset), Some(102));
    {
        let w = shared.world();
        // 100 and 101 were produced in the aborted transaction: not visible.
        assert_visible_once(&w, &p(0), 100);
        assert_eq!(w.txn.committed.get(&p(0)), Some(&100));
        assert!(w.txn.aborts >= 1);
    }
    // The restart resumes from the last committed transaction and meets the message again.
    let again = run_eos(
        &shared,
        1,
        vec![Step::Assign(vec![p(0)]), Step::Close(vec![p(0)])],
    );
    assert_eq!(
        again.controller.failure.as_ref().map(|f| f.offset),
        Some(102)
    );
    assert!(
        again.controller.read <= 4,
        "read from 100: {}",
        again.controller.read
    );
    let w = shared.world();
    assert_visible_once(&w, &p(0), 100);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&100));
}

#[test]
fn exactly_once_a_revoke_commits_the_partitions_transaction_before_it_is_released() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), with_rejects(300, &[5, 250])),
            Step::Append(p(1), oks(300)),
            Step::Polls(2),
            // The fake source records a violation if the transaction is still open here.
            Step::Revoke(vec![p(0)]),
            Step::Check(
                |w| !w.txn.opened.contains(&p(0)),
                "the revoked partition's producer is closed",
            ),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert_visible_once(&w, &p(0), 300);
    assert_visible_once(&w, &p(1), 300);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&300));
}

/// A revoked partition whose commit the broker refuses (the group moved on mid-rebalance,
/// as Apache Kafka answers under cooperative-sticky) is let go with its transaction aborted:
/// the run goes on, and the partition's next owner (here this member again) starts at its
/// last commit, so every message is visible once. (It used to stop the run, exit 1.)
#[test]
fn exactly_once_a_revoke_whose_commit_is_refused_lets_the_partition_go_and_the_run_goes_on() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::RefuseAtRevoke(vec![p(0)]),
            Step::Append(p(0), with_rejects(3000, &[5, 250, 2500])),
            Step::Append(p(1), oks(300)),
            // Mid-stream, with a transaction of p0 open.
            Step::Until(|w| w.txn.open.contains_key(&p(0))),
            Step::Revoke(vec![p(0)]),
            Step::Check(|w| w.txn.refused >= 1, "the revoke's commit was refused"),
            Step::Check(
                |w| !w.txn.opened.contains(&p(0)),
                "the revoked partition's producer is closed",
            ),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(out.controller.error.is_none(), "{:?}", out.controller);
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert!(w.txn.aborts >= 1, "the refused transaction was aborted");
    assert_visible_once(&w, &p(0), 3000);
    assert_visible_once(&w, &p(1), 300);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&3000));
}

/// A transaction whose offsets the broker refuses mid-stream because the group moved on
/// (Apache Kafka's `ILLEGAL_GENERATION` when a commit crosses a cooperative rebalance that
/// left the partition here) is aborted and the partition read again from its last commit:
/// the run goes on, and every message is visible once. (It used to stop the run, exit 1.)
#[test]
fn exactly_once_a_commit_refused_mid_stream_reads_the_partition_again_and_the_run_goes_on() {
    read_again_after(Step::RefuseCommitAt(p(0), 100), |w| w.txn.refused >= 1);
}

/// A commit whose client call never returns (librdkafka 5456/5511, the group coordinator's
/// broker gone): the producer is abandoned, the partition read again from its last commit
/// with a new producer (whose opening aborts the hung transaction), and the run goes on.
#[test]
fn exactly_once_a_commit_that_hangs_abandons_the_producer_and_reads_the_partition_again() {
    read_again_after(Step::HangCommitAt(p(0), 100), |w| w.txn.hung >= 1);
}

/// A commit that went through although the client answered that it timed out (the
/// transaction coordinator killed after deciding; the next one finishes the commit): the
/// partition is read again from the group's committed offset, not from that transaction's
/// start, so nothing of it is delivered twice. (Reading from its start doubled one
/// transaction's records in the three-broker fault test, about one run in three.)
#[test]
fn exactly_once_a_commit_that_went_through_but_answered_a_timeout_is_not_delivered_twice() {
    let shared = read_again(Step::LoseCommitAnswerAt(p(0), 100), |w| {
        w.txn.lost_answers >= 1
    });
    assert_eq!(
        shared.world().txn.lost_answers,
        1,
        "the answer was lost once"
    );
}

/// A partition paused by backpressure when its transaction fails and it is read again: the
/// new lane starts unpaused, so the source must read it again too (it stayed paused: the run
/// hung, once in a full suite run, with a refused commit under load).
#[test]
fn exactly_once_a_partition_paused_when_it_is_read_again_is_resumed() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        1,
        vec![
            Step::Assign(vec![p(0)]),
            // The driver blocks in its first commit: its lane backs up, and is paused.
            Step::HoldCommits(true),
            Step::Append(p(0), oks(5000)),
            Step::Until(|w| w.paused.contains(&p(0))),
            // That commit is refused (the group moved on): the partition is read again.
            Step::RefuseCommitAt(p(0), 0),
            Step::HoldCommits(false),
            Step::Until(|w| w.rewinds >= 1),
            Step::Close(vec![p(0)]),
        ],
    );
    assert!(out.controller.error.is_none(), "{:?}", out.controller);
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert!(w.txn.refused >= 1, "the commit was refused");
    assert_eq!(
        w.rewound_paused, 1,
        "the partition was paused when it was read again"
    );
    assert_visible_once(&w, &p(0), 5000);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&5000));
}

/// A stop whose last commits are refused (the group moved on while the member drained):
/// the run ends cleanly, the refused transactions' messages are not visible, and nothing is
/// read again (it used to start new lanes on stopped drivers: `no driver is running`, once in
/// a suite run of the three-member state test).
#[test]
fn exactly_once_a_stop_whose_commits_are_refused_ends_cleanly_at_the_last_commit() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), oks(50)),
            Step::Append(p(1), oks(50)),
            Step::Until(|w| {
                w.txn.committed.get(&p(0)) == Some(&50) && w.txn.committed.get(&p(1)) == Some(&50)
            }),
            Step::HoldCommits(true),
            Step::Append(p(0), oks(50)),
            Step::Append(p(1), oks(50)),
            Step::Until(|w| w.read >= 200),
            Step::RefuseCommits,
            Step::Stop,
            Step::HoldCommits(false),
        ],
    );
    assert!(out.controller.error.is_none(), "{:?}", out.controller);
    assert!(out.controller.failure.is_none(), "{:?}", out.controller);
    let w = shared.world();
    assert!(w.txn.refused >= 1, "a commit was refused");
    assert_eq!(w.rewinds, 0, "nothing is read again while stopping");
    for k in [p(0), p(1)] {
        assert_visible_once(&w, &k, 50);
        assert_eq!(w.txn.committed.get(&k), Some(&50));
    }
}

/// Two partitions; `fault` strikes partition 0's commit at offset 100 or later (`struck`
/// tells when it has): the run goes on, partition 0 is read again once from its last
/// commit (its transaction aborted), and every message of both is visible once.
fn read_again_after(fault: Step, struck: fn(&World) -> bool) {
    let shared = read_again(fault, struck);
    assert!(
        shared.world().txn.aborts >= 1,
        "the transaction was aborted"
    );
}

/// [`read_again_after`] without the abort: what every such fault must leave.
fn read_again(fault: Step, struck: fn(&World) -> bool) -> Arc<Shared> {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            fault,
            Step::Append(p(0), with_rejects(300, &[5, 150, 250])),
            Step::Append(p(1), oks(300)),
            Step::Until(struck),
            Step::Until(|w| w.rewinds >= 1),
            Step::Append(p(0), oks(20)),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(out.controller.error.is_none(), "{:?}", out.controller);
    assert!(out.controller.reached_end, "{:?}", out.controller);
    {
        let w = shared.world();
        assert_eq!(w.rewinds, 1, "the partition was read again once");
        assert_visible_once(&w, &p(0), 320);
        assert_visible_once(&w, &p(1), 300);
        assert!(struck(&w), "the fault struck");
        assert_eq!(w.txn.committed.get(&p(0)), Some(&320));
    }
    shared
}

#[test]
fn exactly_once_a_stop_commits_what_was_drained_and_a_restart_adds_only_the_rest() {
    let shared = Shared::new();
    let keys = vec![p(0), p(1), p(2)];
    let mut script = vec![Step::Assign(keys.clone())];
    for k in &keys {
        script.push(Step::Append(k.clone(), with_rejects(5000, &[3, 3333])));
    }
    script.extend([Step::Polls(1), Step::Stop]);
    let first = run_eos(&shared, 2, script);
    assert!(first.controller.failure.is_none() && first.controller.error.is_none());
    let stopped_at: Vec<i64> = {
        let w = shared.world();
        keys.iter()
            .map(|k| w.txn.committed.get(k).copied().unwrap_or(0))
            .collect()
    };
    run_eos(
        &shared,
        2,
        vec![Step::Assign(keys.clone()), Step::Close(keys.clone())],
    );
    let w = shared.world();
    for k in &keys {
        assert_visible_once(&w, k, 5000);
    }
    assert!(
        stopped_at.iter().any(|&o| o < 5000),
        "the stop came mid-stream: {stopped_at:?}"
    );
}

/// Fenced between revokes (another member's producer took the partition's id; Apache
/// Kafka also answers so when the member is out of the group, `UNKNOWN_MEMBER_ID`): nothing
/// of the open transaction is visible, the partition processes nothing more until the
/// revoke that follows, and the run goes on with its other partitions. (It used to stop
/// the run, exit 1: on three brokers, killing the group coordinator or stopping the whole
/// cluster stopped exactly-once runs so.)
#[test]
fn exactly_once_a_fenced_partition_waits_for_its_revoke_and_the_run_goes_on() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), oks(50)),
            Step::Append(p(1), oks(50)),
            Step::Until(|w| w.txn.committed.get(&p(0)) == Some(&50)),
            // Another member took the partition over (its producer opened the same id).
            Step::Fence(vec![p(0)]),
            Step::Append(p(0), oks(10)),
            Step::Until(|w| w.txn.aborts >= 1),
            Step::Append(p(1), oks(50)),
            Step::Until(|w| w.txn.committed.get(&p(1)) == Some(&100)),
            // The consumer learns it lost the partition.
            Step::Revoke(vec![p(0)]),
            Step::Close(vec![p(1)]),
        ],
    );
    assert!(
        out.controller.error.is_none() && out.controller.reached_end,
        "{:?}",
        out.controller
    );
    let w = shared.world();
    assert_visible_once(&w, &p(0), 50);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&50));
    assert_visible_once(&w, &p(1), 100);
    assert_eq!(w.rewinds, 0, "a revoked partition is not read again");
}

/// Fenced, but the partition is still this member's a session later (the broker timed the
/// transaction out and bumped the producer's epoch; the consumer never lost the
/// partition): it is read again from its last commit with a new producer, and every
/// message is visible once.
#[test]
fn exactly_once_a_fenced_partition_still_owned_a_session_later_is_read_again() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        1,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(50)),
            Step::Until(|w| w.txn.committed.get(&p(0)) == Some(&50)),
            Step::Fence(vec![p(0)]),
            Step::Append(p(0), with_rejects(30, &[7])),
            Step::Until(|w| w.rewinds >= 1),
            Step::Append(p(0), oks(20)),
            Step::Close(vec![p(0)]),
        ],
    );
    assert!(
        out.controller.error.is_none() && out.controller.reached_end,
        "{:?}",
        out.controller
    );
    let w = shared.world();
    assert_eq!(w.rewinds, 1, "the partition was read again once");
    assert!(w.txn.aborts >= 1, "the fenced transaction was aborted");
    assert_visible_once(&w, &p(0), 100);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&100));
}

#[test]
fn exactly_once_an_undeliverable_record_aborts_the_transaction_and_stops() {
    let shared = Shared::new();
    let out = run_eos(
        &shared,
        1,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(40)),
            Step::Until(|w| w.txn.committed.get(&p(0)) == Some(&40)),
            Step::FailAcks,
            Step::Append(p(0), oks(10)),
        ],
    );
    assert!(out.controller.error.is_some(), "{:?}", out.controller);
    let w = shared.world();
    assert_visible_once(&w, &p(0), 40);
    assert_eq!(w.txn.committed.get(&p(0)), Some(&40));
    assert!(w.txn.aborts >= 1 && w.txn.open.is_empty());
}

// ---------------------------------------------------------------------------------------
// Stateful stages: `misbehave` with `count_in: counts` counts every message it sees in its
// state before it misbehaves. Every commit is checked against the stage's store
// (`Shared::check_state`): the store holds exactly the writes of the messages below its
// checkpoint whose outcomes were delivered.

/// A stateful `misbehave` with its store in `dir`, on `shared` (with the fake changelog when
/// `changelog`).
fn with_state(shared: &Arc<Shared>, dir: &std::path::Path, changelog: bool) {
    let cache = std::env::temp_dir().join("weir-runtime-tests-cache");
    let yaml = format!(
        "name: t\nsource:\n  stdin: {{}}\nsink:\n  discard: {{}}\nruntime:\n  cache_dir: {}\n  state_dir: {}\nstages:\n  - name: m\n    plugin: {}\n    config: {{ count_in: counts }}\n    limits: {{ timeout: 100ms }}\n    state: {{ buckets: [counts] }}\n",
        cache.display(),
        dir.display(),
        plugins::MISBEHAVE
    );
    let cfg = weir::config::load_str(std::path::Path::new("t.yaml"), &yaml, &|_| None).unwrap();
    let p = weir::runtime::prepare(&cfg).expect("the stage loads");
    *shared.state.lock().unwrap() = p.slots[0].spec.state.clone();
    *shared.stage.lock().unwrap() = Some((p.engine, p.slots));
    shared.changelog.store(changelog, Ordering::SeqCst);
}

/// Closes the store (a process exit): the next [`with_state`] opens it again.
fn end_state(shared: &Arc<Shared>) {
    *shared.stage.lock().unwrap() = None;
    *shared.state.lock().unwrap() = None;
}

fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

#[test]
fn state_fail_trap_and_timeout_in_the_middle_of_a_batch_leave_no_writes_of_undelivered_messages() {
    for (values, fail_at, expected) in [
        // One packed call answers ok, ok, fail: the two oks' writes are kept, the fail's not.
        (
            vec!["ok", "ok", "fail", "ok"],
            2,
            counts(&[("seen", 2), ("ok", 2)]),
        ),
        // A trap and a timeout are rejected (delivered) but leave no writes; the fail stops.
        (
            vec![
                "ok", "ok", "trap", "ok", "reject", "dup", "loop", "ok", "fail", "ok", "ok",
            ],
            8,
            counts(&[("seen", 6), ("ok", 4), ("reject", 1), ("dup", 1)]),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new();
        with_state(&shared, dir.path(), false);
        let out = run_on(
            &shared,
            1,
            16,
            options(),
            vec![Step::Assign(vec![p(0)]), Step::Append(p(0), values.clone())],
            None,
        );
        let f = out.controller.failure.as_ref().expect("the stage failed");
        assert_eq!(f.offset, fail_at, "{values:?}");
        let w = shared.world();
        assert!(w.violations.is_empty(), "{:#?}", w.violations);
        assert_eq!(last_commit(&w, &p(0)), Some(fail_at));
        drop(w);
        let b = shared.state.lock().unwrap().clone().unwrap();
        assert_eq!(
            b.store().checkpoint(&p(0)).unwrap().source_next,
            Some(fail_at),
            "the store is checkpointed at the commit"
        );
        assert_eq!(stored_counts(&b, &p(0)), expected, "{values:?}");
    }
}

#[test]
fn state_with_a_changelog_a_fail_after_commits_rolls_back_to_the_committed_values_not_yet_in_the_store(
) {
    // With a changelog the store takes the committed writes only now and then (the first
    // commit, then every few seconds): between, each key's committed value waits in memory.
    // A run that writes such a key and fails must give it that value back, not the store's
    // older one, or the messages run again count from the wrong number.
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    with_state(&shared, dir.path(), true);
    let out = run_on(
        &shared,
        1,
        16,
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| last_commit(w, &p(0)) == Some(3)),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| last_commit(w, &p(0)) == Some(6)),
            Step::Append(p(0), vec!["ok", "ok", "fail", "ok"]),
        ],
        None,
    );
    let f = out.controller.failure.as_ref().expect("the stage failed");
    assert_eq!(f.offset, 8);
    let w = shared.world();
    assert!(w.violations.is_empty(), "{:#?}", w.violations);
    assert_eq!(last_commit(&w, &p(0)), Some(8));
    drop(w);
    end_state(&shared);
    let b = {
        with_state(&shared, dir.path(), true);
        shared.state.lock().unwrap().clone().unwrap()
    };
    assert_eq!(
        b.store().checkpoint(&p(0)).unwrap().source_next,
        Some(8),
        "the store took the committed writes when the process ended"
    );
    assert_eq!(stored_counts(&b, &p(0)), counts(&[("seen", 8), ("ok", 8)]));
}

/// A run of the counting `misbehave` with the fake changelog (at-least-once, one driver,
/// batches of 16): the world, the state dir (kept while the caller looks) and the outcome.
fn run_with_changelog(
    opts: ControllerOptions,
    script: Vec<Step>,
) -> (Arc<Shared>, tempfile::TempDir, RunOutcome) {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    with_state(&shared, dir.path(), true);
    let out = run_on(&shared, 1, 16, opts, script, None);
    (shared, dir, out)
}

/// The run reached the end of its input, and no check found a violation.
fn assert_ended_cleanly(shared: &Shared, out: &RunOutcome) {
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert!(w.violations.is_empty(), "{:#?}", w.violations);
}

/// The counts the stateful stage of `shared` stored for partition 0.
fn stored_counts_of(shared: &Shared) -> BTreeMap<String, i64> {
    let b = shared.state.lock().unwrap().clone().unwrap();
    stored_counts(&b, &p(0))
}

#[test]
fn state_at_least_once_sends_each_keys_last_write_per_commit_not_each_runs_writes() {
    // Three runs of three messages, no commit tick between them (the interval is long): the
    // changelog gets `seen` and `ok` once each, at the commit that ends the run, with the
    // totals of all nine messages (each run's writes would be six records).
    let mut opts = options();
    opts.commit_interval = Duration::from_secs(60);
    let (shared, _dir, out) = run_with_changelog(
        opts,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 3),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 6),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 9),
            Step::Close(vec![p(0)]),
        ],
    );
    assert_ended_cleanly(&shared, &out);
    let w = shared.world();
    assert_eq!(last_commit(&w, &p(0)), Some(9), "{:?}", w.commits);
    let mut keys: Vec<&str> = w.changelog[&("t.m.counts.changelog".to_owned(), 0)]
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["ok", "seen"], "one record per key for the commit");
    drop(w);
    assert_eq!(stored_counts_of(&shared), counts(&[("seen", 9), ("ok", 9)]));
}

#[test]
fn state_at_least_once_commits_no_offset_whose_writes_the_changelog_has_not_acknowledged() {
    // The sink acknowledges at once, the changelog holds its records: commit ticks pass and
    // nothing is committed; once the changelog acknowledges, the offsets commit.
    let (shared, _dir, out) = run_with_changelog(
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::StallChangelog(true),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 3 && !w.held_changes.is_empty()),
            Step::Sleep(Duration::from_millis(100)),
            Step::Check(
                |w| last_commit(w, &p(0)).is_none_or(|c| c == 0),
                "no offset committed while the changelog holds the writes below it",
            ),
            Step::StallChangelog(false),
            Step::Until(|w| last_commit(w, &p(0)) == Some(3)),
            Step::Close(vec![p(0)]),
        ],
    );
    assert_ended_cleanly(&shared, &out);
    let w = shared.world();
    assert_eq!(last_commit(&w, &p(0)), Some(3));
    drop(w);
    assert_eq!(stored_counts_of(&shared), counts(&[("seen", 3), ("ok", 3)]));
}

#[test]
fn state_at_least_once_commits_as_soon_as_the_changelog_acknowledges_not_at_the_next_tick() {
    // A commit tick (every second here) sends the records; the changelog holds them, then
    // acknowledges: the offsets commit right then (a poll later), not a second later.
    let mut opts = options();
    opts.commit_interval = Duration::from_secs(1);
    let (shared, _dir, out) = run_with_changelog(
        opts,
        vec![
            Step::Assign(vec![p(0)]),
            Step::StallChangelog(true),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 3 && !w.held_changes.is_empty()),
            Step::StallChangelog(false),
            Step::Polls(1),
            Step::Check(
                |w| last_commit(w, &p(0)) == Some(3),
                "committed as soon as the changelog acknowledged",
            ),
            Step::Close(vec![p(0)]),
        ],
    );
    assert_ended_cleanly(&shared, &out);
}

#[test]
fn state_at_least_once_a_lost_changelog_record_stops_the_run_without_committing_past_it() {
    // Five messages commit; then the changelog refuses the records of the next five: the run
    // stops with the changelog's error, and nothing above 5 is committed.
    let (shared, _dir, out) = run_with_changelog(
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(5)),
            Step::Until(|w| last_commit(w, &p(0)) == Some(5)),
            Step::FailChangelog,
            Step::Append(p(0), oks(5)),
            // (Reached only if the run goes on: then it ends here, without the error.)
            Step::Sleep(Duration::from_secs(2)),
            Step::Close(vec![p(0)]),
        ],
    );
    let e = out
        .controller
        .error
        .as_ref()
        .expect("the run failed")
        .to_string();
    assert!(
        e.contains("state changelog") && e.contains("the fake broker refused it"),
        "{e}"
    );
    let w = shared.world();
    assert!(w.delivered.len() > 5, "the sink took the next messages");
    assert_eq!(last_commit(&w, &p(0)), Some(5));
}

#[test]
fn state_at_least_once_a_revocation_commits_only_what_the_changelog_acknowledged() {
    // The changelog holds its records through a revocation: the revocation waits for them
    // (its timeout), then commits nothing above what the changelog holds; the next owner
    // runs the messages again, and once the changelog acknowledges, it commits.
    let (shared, _dir, out) = run_with_changelog(
        options(),
        vec![
            Step::Assign(vec![p(0)]),
            Step::StallChangelog(true),
            Step::Append(p(0), oks(3)),
            Step::Until(|w| w.delivered.len() == 3 && !w.held_changes.is_empty()),
            Step::Revoke(vec![p(0)]),
            Step::Check(
                |w| last_commit(w, &p(0)).is_none_or(|c| c == 0),
                "the revocation committed nothing the changelog does not hold",
            ),
            Step::StallChangelog(false),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0)]),
        ],
    );
    assert_ended_cleanly(&shared, &out);
    let w = shared.world();
    assert_eq!(last_commit(&w, &p(0)), Some(3));
    assert_eq!(w.delivered.len(), 6, "the next owner ran the three again");
    drop(w);
    // At least once: the messages run again count again.
    let stored = stored_counts_of(&shared);
    assert!(stored["seen"] >= 3 && stored["ok"] >= 3, "{stored:?}");
}

#[test]
fn state_a_commit_never_splits_a_batch_call_whose_writes_belong_to_all_its_messages() {
    // One packed call answers ten messages and writes once for all of them; the sink
    // acknowledges five, then the partition is revoked: a commit at 5 would put the call's
    // writes on neither side (the store at checkpoint 5 without them; the next owner
    // counting from 5). The commit stays at the call's first offset, and the next owner
    // runs the ten again.
    let shared = Shared::new();
    let dir = tempfile::tempdir().unwrap();
    with_state(&shared, dir.path(), false);
    let mut opts = options();
    opts.revoke_timeout = Duration::from_millis(50);
    let out = run_on(
        &shared,
        1,
        16,
        opts,
        vec![
            Step::Assign(vec![p(0)]),
            Step::Append(p(0), oks(4)),
            Step::Until(|w| w.delivered.len() == 4),
            Step::Stall(true),
            Step::Append(p(0), oks(10)),
            Step::Until(|w| w.held.len() == 10),
            Step::AckFirst(5),
            Step::Revoke(vec![p(0)]),
            Step::Stall(false),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0)]),
        ],
        None,
    );
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert!(w.violations.is_empty(), "{:#?}", w.violations);
    let revoke_commit = w
        .commits
        .iter()
        .find(|(_, _, sync)| *sync)
        .map(|(_, o, _)| *o);
    assert_eq!(
        revoke_commit,
        Some(4),
        "the revoke commits before the call, not inside it: {:?}",
        w.commits
    );
    let log = w.logs[&p(0)].clone();
    drop(w);
    let b = shared.state.lock().unwrap().clone().unwrap();
    assert_eq!(
        stored_counts(&b, &p(0)),
        fold(&log),
        "every message counted once"
    );
}

#[test]
fn state_model_random_rebalances_and_stalls_commit_exactly_the_writes_of_delivered_messages() {
    // Without a changelog the store commits with the offsets: exactly the delivered
    // messages' writes. With one (at-least-once: each commit's records sent before its
    // offsets, a revocation waiting for them), never fewer: a record acknowledged after its
    // revocation gave up on it brings writes of messages that run again.
    let n = std::env::var("WEIR_STATE_MODEL_SEEDS").map_or(30, |n| n.parse().expect("a number"));
    for (seed, changelog) in (1..=n).flat_map(|s| [(s, false), (s, true)]) {
        let (script, drivers) = random_script(seed);
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new();
        with_state(&shared, dir.path(), changelog);
        let mut opts = options();
        opts.revoke_timeout = Duration::from_millis(20);
        let out = run_on(&shared, drivers, 8, opts, script, None);
        assert!(
            out.controller.reached_end,
            "seed {seed}: {:?}",
            out.controller
        );
        let w = shared.world();
        assert!(w.violations.is_empty(), "seed {seed}: {:#?}", w.violations);
        let logs = w.logs.clone();
        drop(w);
        let b = shared.state.lock().unwrap().clone().unwrap();
        for (k, log) in &logs {
            let (stored, expected) = (stored_counts(&b, k), fold(log));
            if changelog {
                assert!(
                    expected
                        .iter()
                        .all(|(key, n)| stored.get(key).is_some_and(|s| s >= n)),
                    "seed {seed}: {k}: a message not counted at the end (changelog): stored {stored:?}, delivered {expected:?}"
                );
            } else {
                assert_eq!(
                    stored, expected,
                    "seed {seed}: {k}: every message counted exactly once at the end"
                );
            }
        }
    }
}

#[test]
fn state_exactly_once_restores_from_the_changelog_after_a_revoke_and_after_the_state_dir_is_wiped()
{
    let shared = Shared::new();
    let first = tempfile::tempdir().unwrap();
    with_state(&shared, first.path(), true);
    let out = run_eos(
        &shared,
        2,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(0), with_rejects(200, &[5, 150])),
            Step::Append(p(1), oks(100)),
            Step::Polls(2),
            Step::Revoke(vec![p(0)]),
            Step::Append(p(0), vec!["dup"; 20]),
            Step::Assign(vec![p(0)]),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let logs = shared.world().logs.clone();
    let b = shared.state.lock().unwrap().clone().unwrap();
    for (k, log) in &logs {
        assert_eq!(stored_counts(&b, k), fold(log), "{k} after the first run");
    }
    drop(b);
    end_state(&shared);
    // A new machine: an empty state dir. The stores come back from the changelog alone.
    let second = tempfile::tempdir().unwrap();
    with_state(&shared, second.path(), true);
    let out = run_eos(
        &shared,
        1,
        vec![
            Step::Assign(vec![p(0), p(1)]),
            Step::Append(p(1), with_rejects(50, &[10])),
            Step::Close(vec![p(0), p(1)]),
        ],
    );
    assert!(out.controller.reached_end, "{:?}", out.controller);
    let w = shared.world();
    assert!(w.violations.is_empty(), "{:#?}", w.violations);
    let logs = w.logs.clone();
    drop(w);
    let b = shared.state.lock().unwrap().clone().unwrap();
    for (k, log) in &logs {
        assert_eq!(
            stored_counts(&b, k),
            fold(log),
            "{k}: restored from the changelog, then counted on"
        );
    }
}

#[test]
fn state_the_changelog_checkpoint_follows_the_commits_so_a_restart_rereads_only_what_is_new() {
    for eos in [false, true] {
        let shared = Shared::new();
        let dir = tempfile::tempdir().unwrap();
        let run = |shared: &Arc<Shared>, script: Vec<Step>| {
            let out = if eos {
                run_eos(shared, 1, script)
            } else {
                run_on(shared, 1, 16, options(), script, None)
            };
            assert!(
                out.controller.reached_end,
                "eos {eos}: {:?}",
                out.controller
            );
        };
        with_state(&shared, dir.path(), true);
        run(
            &shared,
            vec![
                Step::Assign(vec![p(0)]),
                Step::Append(p(0), with_rejects(300, &[7, 200])),
                Step::Close(vec![p(0)]),
            ],
        );
        let (written, seen_records) = {
            let w = shared.world();
            let log = &w.changelog[&("t.m.counts.changelog".to_owned(), 0)];
            (log.len(), log.iter().filter(|(k, _)| k == "seen").count())
        };
        // `seen` is written by every message; a commit (exactly-once: a transaction) sends
        // each key's last write below it only.
        assert!(
            (1..100).contains(&seen_records),
            "eos {eos}: {seen_records} changelog records of `seen` for 300 messages"
        );
        let commits = if eos {
            shared.world().txn.commits.len()
        } else {
            shared.world().commits.len()
        };
        assert!(
            seen_records <= commits,
            "eos {eos}: {seen_records} changelog records of `seen` in {commits} commits"
        );
        let b = shared.state.lock().unwrap().clone().unwrap();
        let cp = b.store().checkpoint(&p(0)).unwrap();
        assert_eq!(
            cp.changelog_next.get("counts").copied(),
            Some(written as i64),
            "eos {eos}: every record's write is in the store, so the checkpoint is after the last"
        );
        drop(b);
        end_state(&shared);
        // A restart on the same state dir reads only the records written since.
        shared.restored.store(0, Ordering::SeqCst);
        with_state(&shared, dir.path(), true);
        run(
            &shared,
            vec![
                Step::Assign(vec![p(0)]),
                Step::Append(p(0), oks(40)),
                Step::Close(vec![p(0)]),
            ],
        );
        assert_eq!(
            shared.restored.load(Ordering::SeqCst),
            0,
            "eos {eos}: the restart re-read records its store already had"
        );
        let logs = shared.world().logs.clone();
        let b = shared.state.lock().unwrap().clone().unwrap();
        assert_eq!(stored_counts(&b, &p(0)), fold(&logs[&p(0)]), "eos {eos}");
        drop(b);
        end_state(&shared);
        // A wiped state dir reads all of it, and comes to the same counts.
        shared.restored.store(0, Ordering::SeqCst);
        let wiped = tempfile::tempdir().unwrap();
        with_state(&shared, wiped.path(), true);
        run(
            &shared,
            vec![Step::Assign(vec![p(0)]), Step::Close(vec![p(0)])],
        );
        let all = shared.world().changelog[&("t.m.counts.changelog".to_owned(), 0)].len();
        assert_eq!(
            shared.restored.load(Ordering::SeqCst),
            all as u64,
            "eos {eos}"
        );
        let b = shared.state.lock().unwrap().clone().unwrap();
        assert_eq!(
            stored_counts(&b, &p(0)),
            fold(&logs[&p(0)]),
            "eos {eos}: wiped"
        );
    }
}
