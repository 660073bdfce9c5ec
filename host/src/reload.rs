//! Hot swap: a plugin file that changes (watched) or SIGHUP makes the reloader compile the new
//! version in the background, instantiate it and call `init` once as a check, then offer it
//! to the stage under its rollout policy: published at once (`immediate`), or tried as a
//! shadow or canary. Drivers pick it up at their next batch boundary. A version that fails any
//! step is refused with a log line and the old one keeps running. The admin API's rollout
//! requests go through the same checks here; time-based rollout windows are ticked here too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use notify::{RecursiveMode, Watcher};

use crate::config::RolloutConfig;
use crate::engine::{Plugin, StageInstance, WeirEngine};
use crate::metrics::Metrics;
use crate::rollout::{Offered, RolloutError, RolloutRecord, StageSlot};

/// What to reload.
#[derive(Debug, Clone)]
pub enum ReloadRequest {
    /// Every stage (SIGHUP).
    All,
    /// Every stage whose file was replaced between loading and watching (sent once, when
    /// the watcher starts): a change found so is the file's, and says so (`file`).
    Unwatched,
    /// Stages whose plugin is this file (file watcher).
    Path(PathBuf),
    /// Start a rollout of `plugin` on `stage` under `policy` (the admin API).
    Rollout {
        /// The stage.
        stage: String,
        /// The candidate's file.
        plugin: PathBuf,
        /// Its policy.
        policy: RolloutConfig,
        /// Where the answer goes.
        reply: Sender<Result<RolloutRecord, Refusal>>,
    },
    /// Stop serving (sent by [`Reloader::finish`]; the admin API keeps a sender to the end).
    Shutdown,
}

/// A rollout request that was refused: an HTTP status and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// 404 unknown stage, 409 a rollout in progress, 422 a candidate that does not load,
    /// instantiate or `init`.
    pub status: u16,
    /// Why.
    pub message: String,
}

/// Reload results, for the run report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadStats {
    /// Versions published.
    pub published: u64,
    /// Versions refused (did not compile, instantiate or init).
    pub refused: u64,
    /// Requests where the file was unchanged (or is the candidate rolled back last).
    pub unchanged: u64,
    /// Versions that started a shadow or canary rollout.
    pub rollouts: u64,
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
            let _ = tx.send(ReloadRequest::Unwatched);
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

    /// Stops watching, lets a reload in progress finish (requests queued before are served),
    /// and returns the stats.
    pub fn finish(self) -> ReloadStats {
        drop(self.watcher);
        let _ = self.tx.send(ReloadRequest::Shutdown);
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

/// How often time-based rollout windows are checked.
const TICK: Duration = Duration::from_millis(200);

fn reload_loop(
    engine: &WeirEngine,
    slots: &[Arc<StageSlot>],
    rx: &Receiver<ReloadRequest>,
    metrics: &Metrics,
) -> ReloadStats {
    let mut stats = ReloadStats::default();
    loop {
        let first = match rx.recv_timeout(TICK) {
            Ok(r) => r,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                slots.iter().for_each(|s| s.tick());
                continue;
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        if matches!(first, ReloadRequest::Shutdown) {
            break;
        }
        let mut requests = vec![first];
        if !matches!(requests[0], ReloadRequest::Rollout { .. }) {
            while let Ok(more) = rx.recv_timeout(SETTLE) {
                requests.push(more);
            }
        }
        let mut reloads = Vec::new();
        for r in requests {
            match r {
                ReloadRequest::Rollout {
                    stage,
                    plugin,
                    policy,
                    reply,
                } => {
                    let _ = reply.send(rollout(engine, slots, &stage, &plugin, policy));
                }
                ReloadRequest::Shutdown => return stats,
                other => reloads.push(other),
            }
        }
        for slot in slots {
            if let Some(trigger) = trigger(&reloads, &canonical(&slot.path)) {
                let result = reload_one(engine, slot, trigger, &mut stats);
                metrics
                    .reloads
                    .with_label_values(&[&slot.spec.name, result])
                    .inc();
                if result == "published" {
                    crate::rollout::publish_plugin_info(slots, metrics);
                }
            }
        }
    }
    stats
}

/// What `reloads` (served together) say started a reload of the stage whose plugin is
/// `file`: `file` (its file changed, seen by the watcher or by the check when watching began),
/// `sighup`, or nothing for this stage.
fn trigger(reloads: &[ReloadRequest], file: &Path) -> Option<&'static str> {
    let changed = reloads.iter().any(|r| match r {
        ReloadRequest::Path(p) => p == file,
        ReloadRequest::Unwatched => true,
        _ => false,
    });
    let all = reloads.iter().any(|r| matches!(r, ReloadRequest::All));
    match (changed, all) {
        (true, _) => Some("file"),
        (false, true) => Some("sighup"),
        _ => None,
    }
}

/// Loads a new version and proves it instantiates and accepts its config before any driver
/// sees it.
fn load_checked(engine: &WeirEngine, slot: &StageSlot, path: &Path) -> Result<Arc<Plugin>, String> {
    let plugin = Arc::new(
        engine
            .load_plugin(&slot.spec.name, path)
            .map_err(|e| e.to_string())?,
    );
    StageInstance::new(engine, slot.spec.clone(), plugin.clone()).map_err(|e| e.to_string())?;
    Ok(plugin)
}

/// A rollout the admin API asked for.
fn rollout(
    engine: &WeirEngine,
    slots: &[Arc<StageSlot>],
    stage: &str,
    path: &Path,
    policy: RolloutConfig,
) -> Result<RolloutRecord, Refusal> {
    let refuse = |status, message: String| Refusal { status, message };
    let slot = slots
        .iter()
        .find(|s| &*s.spec.name == stage)
        .ok_or_else(|| refuse(404, format!("no stage named `{stage}`")))?;
    if let Some(r) = slot.rollout() {
        let e = RolloutError::InProgress {
            stage: stage.to_owned(),
            mode: r.mode().name(),
            candidate: r.candidate.short_hash().to_owned(),
        };
        return Err(refuse(409, e.to_string()));
    }
    let plugin = load_checked(engine, slot, path).map_err(|e| {
        tracing::error!(stage, "rollout refused: {e}");
        refuse(422, format!("candidate refused: {e}"))
    })?;
    let r = slot
        .start_rollout(plugin, policy, "api")
        .map_err(|e| match e {
            RolloutError::InProgress { .. } => refuse(409, e.to_string()),
            _ => refuse(422, e.to_string()),
        })?;
    Ok(r.in_progress(stage))
}

/// One reload attempt; returns `published`, `rollout`, `refused` or `unchanged`.
fn reload_one(
    engine: &WeirEngine,
    slot: &StageSlot,
    trigger: &'static str,
    stats: &mut ReloadStats,
) -> &'static str {
    let stage = &*slot.spec.name;
    let (_, old, running) = slot.version();
    let plugin = match engine.load_plugin(stage, &slot.path) {
        Ok(p) => p,
        Err(e) => {
            stats.refused += 1;
            tracing::error!(stage, keeping = old.short_hash(), "reload refused: {e}");
            return "refused";
        }
    };
    let trying = running.as_ref().map(|r| r.candidate.hash.as_str());
    let file = slot.file_hash();
    if plugin.hash == file || plugin.hash == old.hash || trying == Some(plugin.hash.as_str()) {
        slot.set_file_hash(&plugin.hash);
        stats.unchanged += 1;
        tracing::debug!(
            stage,
            version = old.short_hash(),
            "reload: plugin unchanged"
        );
        return "unchanged";
    }
    let plugin = Arc::new(plugin);
    if let Err(e) = StageInstance::new(engine, slot.spec.clone(), plugin.clone()) {
        stats.refused += 1;
        tracing::error!(stage, keeping = old.short_hash(), "reload refused: {e}");
        return "refused";
    }
    slot.set_file_hash(&plugin.hash);
    match slot.offer(plugin.clone(), trigger) {
        Ok(Offered::Published) => {
            stats.published += 1;
            tracing::info!(
                stage,
                from = old.short_hash(),
                to = plugin.short_hash(),
                load_ms = plugin.load_time.as_millis() as u64,
                cache = ?plugin.cache,
                "new plugin version published"
            );
            "published"
        }
        Ok(Offered::RolloutStarted) => {
            stats.rollouts += 1;
            "rollout"
        }
        Ok(Offered::RolledBackBefore) => {
            stats.unchanged += 1;
            tracing::info!(
                stage,
                candidate = plugin.short_hash(),
                "reload: this version was rolled back earlier; not tried again (`weir rollout` tries it by hand)"
            );
            "unchanged"
        }
        Err(e) => {
            stats.refused += 1;
            tracing::error!(stage, keeping = old.short_hash(), "reload refused: {e}");
            "refused"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file replaced before the watcher started, and found by the check made when it
    /// started, is a file change, not a SIGHUP (a loaded machine served that check after the
    /// test had replaced the file, and the rollout said `sighup`).
    #[test]
    fn each_request_names_what_started_the_reload() {
        let (a, b) = (Path::new("/p/a.wasm"), Path::new("/p/b.wasm"));
        let path = |p: &Path| ReloadRequest::Path(p.to_owned());
        assert_eq!(trigger(&[ReloadRequest::Unwatched], a), Some("file"));
        assert_eq!(trigger(&[ReloadRequest::All], a), Some("sighup"));
        assert_eq!(trigger(&[path(a)], a), Some("file"));
        assert_eq!(trigger(&[path(b)], a), None);
        assert_eq!(trigger(&[ReloadRequest::All, path(a)], a), Some("file"));
        assert_eq!(trigger(&[path(b), ReloadRequest::All], a), Some("sighup"));
        assert_eq!(trigger(&[], a), None);
    }
}
