//! What a stage's `Store` holds: WASI (granting only what the YAML's `allow` lists), limits, captured stderr, the log import.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
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
    pub(crate) limits: StoreLimits,
    stderr: MemoryOutputPipe,
    stage: Arc<str>,
}

impl StageState {
    /// State for one instance of stage `stage`, with a memory cap of `memory` bytes and the
    /// capabilities in `grants`. The error names a granted folder that cannot be opened.
    pub fn new(stage: Arc<str>, memory: usize, grants: &Grants) -> Result<Self, String> {
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
            limits: StoreLimitsBuilder::new()
                .memory_size(memory)
                .instances(64)
                .tables(64)
                .memories(64)
                .trap_on_grow_failure(true)
                .build(),
            stderr,
            stage,
        })
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
