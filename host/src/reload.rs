//! Hot swap: a plugin file that changes (watched), SIGHUP, or `weir reload` makes the reloader
//! compile the new version in the background, instantiate it and call `init` once as a check,
//! then publish it; drivers pick it up at their next batch boundary. A version that fails any
//! step is refused with a log line and the old one keeps running.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use notify::{RecursiveMode, Watcher};

use crate::engine::{StageInstance, StageSlot, WeirEngine};
use crate::metrics::Metrics;

/// What to reload.
#[derive(Debug, Clone)]
pub enum ReloadRequest {
    /// Every stage (SIGHUP).
    All,
    /// Stages whose plugin is this file (file watcher).
    Path(PathBuf),
}

/// Reload results, for the run report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadStats {
    /// Versions published.
    pub published: u64,
    /// Versions refused (did not compile, instantiate or init).
    pub refused: u64,
    /// Requests where the file was unchanged.
    pub unchanged: u64,
}

/// The running reloader: its request channel, the file watcher and the thread.
pub struct Reloader {
    tx: Sender<ReloadRequest>,
    watcher: Option<notify::RecommendedWatcher>,
    handle: std::thread::JoinHandle<ReloadStats>,
}

impl Reloader {
    /// Starts the reloader thread (and the file watcher when `watch`), serving requests sent
    /// on `tx` (which may have queued up before the start).
    pub fn start(
        engine: WeirEngine,
        slots: Vec<Arc<StageSlot>>,
        watch: bool,
        (tx, rx): (Sender<ReloadRequest>, Receiver<ReloadRequest>),
        metrics: Arc<Metrics>,
    ) -> Self {
        let watcher = if watch {
            start_watcher(&slots, tx.clone())
        } else {
            None
        };
        if watcher.is_some() {
            // A file replaced between loading and watching would otherwise go unnoticed;
            // an unchanged file costs one read and hash.
            let _ = tx.send(ReloadRequest::All);
        }
        let handle = std::thread::Builder::new()
            .name("weir-reload".into())
            .spawn(move || reload_loop(&engine, &slots, &rx, &metrics))
            .expect("spawning the reloader");
        Reloader {
            tx,
            watcher,
            handle,
        }
    }

    /// Stops watching, lets a reload in progress finish, and returns the stats. Every other
    /// sender must be dropped first.
    pub fn finish(self) -> ReloadStats {
        drop(self.watcher);
        drop(self.tx);
        self.handle.join().unwrap_or_default()
    }
}

fn start_watcher(
    slots: &[Arc<StageSlot>],
    tx: Sender<ReloadRequest>,
) -> Option<notify::RecommendedWatcher> {
    let files: Vec<PathBuf> = slots.iter().map(|s| canonical(&s.path)).collect();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if !(ev.kind.is_create() || ev.kind.is_modify()) {
            return;
        }
        for p in ev.paths {
            let p = canonical(&p);
            if files.contains(&p) {
                let _ = tx.send(ReloadRequest::Path(p));
            }
        }
    })
    .map_err(|e| tracing::warn!("plugin file watching unavailable: {e}"))
    .ok()?;
    // Watch folders, not files: replacing a file by rename must be seen too.
    let mut dirs: Vec<PathBuf> = slots
        .iter()
        .filter_map(|s| canonical(&s.path).parent().map(PathBuf::from))
        .collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        if let Err(e) = watcher.watch(&d, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %d.display(), "cannot watch plugin folder: {e}");
        }
    }
    Some(watcher)
}

fn canonical(p: &std::path::Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(if dir.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            dir
        })
        .map(|d| d.join(name))
        .unwrap_or_else(|_| p.to_owned()),
        _ => p.to_owned(),
    }
}

/// Writers replace files in several events: wait until they go quiet.
const SETTLE: Duration = Duration::from_millis(100);

fn reload_loop(
    engine: &WeirEngine,
    slots: &[Arc<StageSlot>],
    rx: &Receiver<ReloadRequest>,
    metrics: &Metrics,
) -> ReloadStats {
    let mut stats = ReloadStats::default();
    while let Ok(first) = rx.recv() {
        let mut requests = vec![first];
        while let Ok(more) = rx.recv_timeout(SETTLE) {
            requests.push(more);
        }
        for slot in slots {
            let wanted = requests.iter().any(|r| match r {
                ReloadRequest::All => true,
                ReloadRequest::Path(p) => *p == canonical(&slot.path),
            });
            if wanted {
                let result = reload_one(engine, slot, &mut stats);
                metrics
                    .reloads
                    .with_label_values(&[&slot.spec.name, result])
                    .inc();
                if result == "published" {
                    crate::engine::publish_plugin_info(slots, metrics);
                }
            }
        }
    }
    stats
}

/// One reload attempt; returns `published`, `refused` or `unchanged`.
fn reload_one(engine: &WeirEngine, slot: &StageSlot, stats: &mut ReloadStats) -> &'static str {
    let stage = &*slot.spec.name;
    let (_, old) = slot.current();
    let plugin = match engine.load_plugin(stage, &slot.path) {
        Ok(p) => p,
        Err(e) => {
            stats.refused += 1;
            tracing::error!(stage, keeping = old.short_hash(), "reload refused: {e}");
            return "refused";
        }
    };
    if plugin.hash == old.hash {
        stats.unchanged += 1;
        tracing::debug!(
            stage,
            version = old.short_hash(),
            "reload: plugin unchanged"
        );
        return "unchanged";
    }
    let plugin = Arc::new(plugin);
    // Prove it instantiates and accepts its config before any driver sees it.
    if let Err(e) = StageInstance::new(engine, slot.spec.clone(), plugin.clone()) {
        stats.refused += 1;
        tracing::error!(stage, keeping = old.short_hash(), "reload refused: {e}");
        return "refused";
    }
    stats.published += 1;
    tracing::info!(
        stage,
        from = old.short_hash(),
        to = plugin.short_hash(),
        load_ms = plugin.load_time.as_millis() as u64,
        cache = ?plugin.cache,
        "new plugin version published"
    );
    slot.publish(plugin);
    "published"
}
