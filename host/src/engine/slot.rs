//! The published plugin version of a stage: what every driver's chain swaps to at its next
//! batch boundary, and what the reloader publishes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Plugin, StageSpec};

/// The published plugin version of one stage, shared by every driver.
pub struct StageSlot {
    /// The stage's settings.
    pub spec: Arc<StageSpec>,
    /// The plugin file.
    pub path: PathBuf,
    current: Mutex<Arc<Plugin>>,
    generation: AtomicU64,
}

impl StageSlot {
    /// A slot holding `plugin`.
    pub fn new(spec: Arc<StageSpec>, path: PathBuf, plugin: Arc<Plugin>) -> Self {
        StageSlot {
            spec,
            path,
            current: Mutex::new(plugin),
            generation: AtomicU64::new(0),
        }
    }

    /// Bumped on every publish; drivers compare it at batch boundaries (one atomic load).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current version and its generation.
    pub fn current(&self) -> (u64, Arc<Plugin>) {
        let p = self.current.lock().expect("slot lock").clone();
        (self.generation(), p)
    }

    pub(crate) fn publish(&self, plugin: Arc<Plugin>) {
        *self.current.lock().expect("slot lock") = plugin;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Sets `weir_plugin_info` to what every slot runs now.
pub fn publish_plugin_info(slots: &[Arc<StageSlot>], metrics: &crate::metrics::Metrics) {
    let current: Vec<(Arc<str>, Arc<Plugin>)> = slots
        .iter()
        .map(|s| (s.spec.name.clone(), s.current().1))
        .collect();
    metrics.set_plugins(current.iter().map(|(n, p)| (&**n, p.short_hash())));
}
