//! What a stage's `Store` holds: WASI (granting only what the YAML's `allow` lists), limits, captured stderr, the log import.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::config::Grants;

use super::bindings::weir::stage::log::{Host as LogHost, Level};

/// Most guest stderr kept per instance (panic messages end up here).
const STDERR_CAPACITY: usize = 64 << 10;
/// Longest log line a guest may send; longer ones are cut.
const MAX_LOG_LINE: usize = 4 << 10;

/// Per-instance host state.
pub struct StageState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: MemoryCap,
    stderr: MemoryOutputPipe,
    stage: Arc<str>,
    /// The stage's buckets and the writes of the call in progress.
    pub(crate) kv: crate::state::kv::Kv,
}

impl StageState {
    /// State for one instance of stage `stage`, with a memory cap of `memory` bytes and the
    /// capabilities in `grants`. The error names a granted folder that cannot be opened.
    pub fn new(
        stage: Arc<str>,
        memory: usize,
        grants: &Grants,
        kv: crate::state::kv::Kv,
    ) -> Result<Self, String> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        // Without grants: no preopened directories, no environment, no arguments, no network.
        // WASI links so that components load, and grants nothing.
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone())
            .allow_tcp(grants.network)
            .allow_udp(grants.network)
            .allow_ip_name_lookup(grants.network);
        if grants.network {
            wasi.inherit_network();
        }
        for name in &grants.env {
            if let Ok(value) = std::env::var(name) {
                wasi.env(name, value);
            }
        }
        for d in &grants.dirs {
            let perms = if d.write {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&d.host, &d.guest, perms)
                .map_err(|e| format!("granted folder {}: {e:#}", d.host.display()))?;
        }
        let wasi = wasi.build();
        Ok(StageState {
            wasi,
            table: ResourceTable::new(),
            limits: MemoryCap {
                cap: memory,
                peak: 0,
            },
            stderr,
            stage,
            kv,
        })
    }

    /// The table of the guest's resources.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The last lines the guest wrote to stderr (e.g. a panic message), trimmed.
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let start = text.len().saturating_sub(2048);
        let start = (start..=text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text[start..].to_owned()
    }
}

impl WasiView for StageState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl LogHost for StageState {
    fn log(&mut self, level: Level, mut message: String) {
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let stage = &*self.stage;
        match level {
            Level::Trace => tracing::trace!(target: "weir::guest", stage, "{message}"),
            Level::Debug => tracing::debug!(target: "weir::guest", stage, "{message}"),
            Level::Info => tracing::info!(target: "weir::guest", stage, "{message}"),
            Level::Warn => tracing::warn!(target: "weir::guest", stage, "{message}"),
            Level::Error => tracing::error!(target: "weir::guest", stage, "{message}"),
        }
    }
}

impl super::bindings::weir::stage::types::Host for StageState {}

/// A stage's linear memory grew past its cap: the typed error inside the trap, so the host
/// recognises a memory trap by its type, not by the text of wasmtime's message.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {cap} bytes exceeded (asked for {desired})")]
pub struct MemoryLimitExceeded {
    /// The cap.
    pub cap: usize,
    /// What the guest asked for in all.
    pub desired: usize,
}

/// The store's resource limiter: linear memory up to `cap` bytes; growing past it traps with
/// [`MemoryLimitExceeded`] (a guest allocator would otherwise see a failed grow and abort in a
/// way that looks like a panic).
pub struct MemoryCap {
    cap: usize,
    /// The largest size the linear memory was allowed to grow to, bytes.
    pub(crate) peak: usize,
}

/// Tables, memories and instances one stage's store may create.
const MAX_STORE_OBJECTS: usize = 64;

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                cap: self.cap,
                desired,
            }));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        tracing::debug!("memory growth failed below the cap: {error:#}");
        Err(wasmtime::Error::new(MemoryLimitExceeded {
            cap: self.cap,
            desired: self.cap,
        }))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_STORE_OBJECTS
    }
    fn tables(&self) -> usize {
        MAX_STORE_OBJECTS
    }
    fn memories(&self) -> usize {
        MAX_STORE_OBJECTS
    }
}
