//! The state store's engine: redb (what `weir::state::StageStore` uses) against fjall (an LSM
//! tree, the other pure-Rust engine issue 26 names), on what the state path asks of a store:
//!
//! * `store_apply/*`: one commit of 10,000 writes (110-byte values, keys cycling over 100,000,
//!   so after the first pass every write replaces a value) and the partition's checkpoint, in
//!   one atomic batch. `cache`: not synced (a store backed by a changelog); `durable`: synced to
//!   disk (a local source's store, whose commit is the state).
//! * `store_get/*`: 10,000 point reads of present keys from a store of 100,000, in a scattered
//!   order (what the read cache's misses do).
//!
//! The redb rows go through `StageStore::apply` / `StageStore::get`, Weir's own code; the fjall
//! rows do the same work with fjall's API (a keyspace for the data, one for checkpoints, a
//! write batch across both).
//!
//! Run: `cargo bench -p weir-benches --bench stores` (results: docs/state.md, docs/BENCHMARKS.md).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use weir::sink::ChangelogAcks;
use weir::source::PartitionKey;
use weir::state::{Checkpoint, StageStore};

const KEYS: usize = 100_000;
const WRITES: usize = 10_000;

fn key(n: usize) -> String {
    format!("key-{:06}", n % KEYS)
}

fn value(n: usize) -> Vec<u8> {
    weir::state::encode(1_700_000_000_000, weir_benches::value(n).as_bytes())
}

/// A scattered order over the keys (a stride coprime with their count).
fn scattered(i: usize) -> usize {
    (i * 7_919) % KEYS
}

/// The redb store, as the state path opens it; `cache`: backed by a changelog (no sync).
fn redb_store(dir: &std::path::Path, cache: bool) -> StageStore {
    let s = StageStore::open(dir, "m").expect("store");
    if cache {
        s.set_cache_of_changelog(Arc::new(ChangelogAcks::default()));
    }
    s
}

struct Fjall {
    db: Database,
    data: fjall::Keyspace,
    checkpoints: fjall::Keyspace,
}

fn fjall_store(dir: &std::path::Path) -> Fjall {
    let db = Database::builder(dir).open().expect("fjall");
    let data = db
        .keyspace("kv@in:0", KeyspaceCreateOptions::default)
        .expect("keyspace");
    let checkpoints = db
        .keyspace("checkpoints", KeyspaceCreateOptions::default)
        .expect("keyspace");
    Fjall {
        db,
        data,
        checkpoints,
    }
}

impl Fjall {
    fn apply(&self, writes: &[(String, Vec<u8>)], cp: &Checkpoint, sync: bool) {
        let mut b = self
            .db
            .batch()
            .durability(sync.then_some(PersistMode::SyncAll));
        for (k, v) in writes {
            b.insert(&self.data, k.as_str(), v.as_slice());
        }
        let cp = serde_json::to_vec(cp).expect("checkpoint");
        b.insert(&self.checkpoints, "in:0", cp);
        b.commit().expect("commit");
    }
}

fn writes(round: usize) -> Vec<(String, Vec<u8>)> {
    (0..WRITES)
        .map(|i| {
            let n = round * WRITES + i;
            (key(n), value(n))
        })
        .collect()
}

fn checkpoint(round: usize) -> Checkpoint {
    Checkpoint {
        source_next: Some(((round + 1) * WRITES) as i64),
        ..Checkpoint::default()
    }
}

/// One commit of `writes` to the redb store, with round `round`'s checkpoint.
fn redb_apply(store: &StageStore, part: &PartitionKey, writes: &[(String, Vec<u8>)], round: usize) {
    let changes: Vec<weir::state::store::Change<'_>> = writes
        .iter()
        .map(|(k, v)| ("kv", k.as_str(), Some(v.as_slice())))
        .collect();
    store
        .apply(part, &changes, &checkpoint(round))
        .expect("apply");
}

fn store_apply(c: &mut Criterion) {
    weir::thp::disable();
    let part = PartitionKey::new("in", 0);
    let rounds: Vec<Vec<(String, Vec<u8>)>> = (0..KEYS / WRITES).map(writes).collect();
    let mut g = c.benchmark_group("store_apply");
    g.throughput(Throughput::Elements(WRITES as u64));
    g.sample_size(20);
    for (mode, sync) in [("cache", false), ("durable", true)] {
        let dir = tempfile::tempdir().expect("dir");
        let store = redb_store(dir.path(), !sync);
        let mut round = 0;
        g.bench_function(format!("redb_{mode}"), |b| {
            b.iter(|| {
                redb_apply(&store, &part, &rounds[round % rounds.len()], round);
                round += 1;
            })
        });
        let dir = tempfile::tempdir().expect("dir");
        let store = fjall_store(dir.path());
        let mut round = 0;
        g.bench_function(format!("fjall_{mode}"), |b| {
            b.iter(|| {
                let w = &rounds[round % rounds.len()];
                store.apply(w, &checkpoint(round), sync);
                round += 1;
            })
        });
    }
    g.finish();
}

fn store_get(c: &mut Criterion) {
    weir::thp::disable();
    let part = PartitionKey::new("in", 0);
    let mut g = c.benchmark_group("store_get");
    g.throughput(Throughput::Elements(WRITES as u64));
    g.sample_size(20);

    let dir = tempfile::tempdir().expect("dir");
    let store = redb_store(dir.path(), true);
    let f_dir = tempfile::tempdir().expect("dir");
    let f = fjall_store(f_dir.path());
    for round in 0..KEYS / WRITES {
        let w = writes(round);
        redb_apply(&store, &part, &w, round);
        f.apply(&w, &checkpoint(round), false);
    }
    let keys: Vec<String> = (0..WRITES).map(|i| key(scattered(i))).collect();
    g.bench_function("redb", |b| {
        b.iter(|| {
            for k in &keys {
                let v = store.get(&part, "kv", k).expect("get");
                assert!(v.is_some(), "{k} is in the store");
            }
        })
    });
    g.bench_function("fjall", |b| {
        b.iter(|| {
            for k in &keys {
                let v = f.data.get(k).expect("get");
                assert!(v.is_some(), "{k} is in the store");
            }
        })
    });
    g.finish();
}

criterion_group!(benches, store_apply, store_get);
criterion_main!(benches);
