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

    /// The last lines the guest wrote to stderr (e.g. a panic message), trimmed: the last 2
    /// KiB, or, when a longer crash report ends it (Go prints every goroutine's stack after
    /// `panic: ` or `fatal error: `), its first KiB, ` … ` and its last.
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        crash_report(text.trim())
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

/// At most 2 KiB of `text`'s end, keeping the first line of the last crash report (see
/// [`StageState::stderr_tail`]).
fn crash_report(text: &str) -> String {
    const TAIL: usize = 2048;
    let boundary = |i: usize| {
        (i..=text.len())
            .find(|j| text.is_char_boundary(*j))
            .unwrap_or(0)
    };
    if text.len() <= TAIL {
        return text.to_owned();
    }
    let crash = ["panic: ", "fatal error: "]
        .iter()
        .filter_map(|m| {
            if text.starts_with(m) {
                Some(0)
            } else {
                text.rfind(&format!("\n{m}")).map(|i| i + 1)
            }
        })
        .max();
    match crash {
        Some(at) if at < text.len() - TAIL => {
            let head_end = boundary(at + TAIL / 2);
            let tail_start = boundary(text.len() - TAIL / 2);
            format!("{} … {}", &text[at..head_end], &text[tail_start..])
        }
        _ => text[boundary(text.len() - TAIL)..].to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::crash_report;

    #[test]
    fn a_long_crash_report_keeps_its_first_line_and_its_end() {
        let stacks = "goroutine 2 [idle]:\nruntime.gopark(...)\n".repeat(200);
        let text = format!("log line\nfatal error: out of memory\n\n{stacks}the end");
        let r = crash_report(&text);
        assert!(r.starts_with("fatal error: out of memory"), "{r}");
        assert!(r.ends_with("the end") && r.contains(" … "), "{r}");
        assert!(r.len() <= 2048 + 8, "{}", r.len());
        // Short stderr is kept whole; a long one without a crash report keeps its end.
        assert_eq!(crash_report("panic: short"), "panic: short");
        let plain = "x".repeat(5000) + "tail";
        assert_eq!(crash_report(&plain).len(), 2048);
        assert!(crash_report(&plain).ends_with("tail"));
    }
}
