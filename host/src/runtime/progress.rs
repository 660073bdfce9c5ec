//! A progress line on a terminal (stderr): messages read, rate, written, rejected. Off when
//! stderr is not a terminal (logs and CI stay clean).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::sink::Sink;

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_secs(1);

/// The running progress line; dropping it stops and clears it.
pub(super) struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts the line when stderr is a terminal.
    pub(super) fn start(
        metrics: Arc<Metrics>,
        sink: Arc<dyn Sink>,
        rejects: Arc<dyn Sink>,
    ) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-progress".into())
            .spawn(move || {
                let started = Instant::now();
                let mut last = (started, 0u64);
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EVERY);
                    let read = metrics.consumed.get();
                    let now = Instant::now();
                    let rate = (read - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                    last = (now, read);
                    let line = format!(
                        "\r\x1b[2Kweir: {read} read ({rate:.0} msg/s), {} written, {} rejected, {} s",
                        sink.delivered(),
                        rejects.delivered(),
                        started.elapsed().as_secs()
                    );
                    let _ = std::io::stderr().write_all(line.as_bytes());
                }
                let _ = std::io::stderr().write_all(b"\r\x1b[2K");
            })
            .expect("spawning the progress line");
        Some(Progress {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
