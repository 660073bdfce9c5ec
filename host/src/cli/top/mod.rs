//! `weir top`: a live terminal view of a running pipeline, read from its metrics listener.

mod scrape;
mod view;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::Terminal;

use view::View;

/// The pipeline file `weir top` reads the address from when given neither.
const DEFAULT_PIPELINE: &str = "pipeline.yaml";

/// Arguments of `weir top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// The pipeline's metrics address (`host:port`, its `runtime.metrics`).
    addr: Option<String>,
    /// Read the address from this pipeline's `runtime.metrics` (default: ./pipeline.yaml
    /// when no ADDR is given).
    #[arg(long, conflicts_with = "addr")]
    pipeline: Option<PathBuf>,
    /// Time between refreshes.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Print one frame as text (after two scrapes, so rates show) and exit, instead of the
    /// live view; the frame is WIDTHxHEIGHT characters.
    #[arg(long)]
    once: bool,
    /// Size of the `--once` frame.
    #[arg(long, default_value = "120x32", value_parser = parse_size)]
    size: (u16, u16),
}

fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let (w, h) = s
        .split_once('x')
        .ok_or_else(|| format!("{s:?}: expected WIDTHxHEIGHT, e.g. 120x32"))?;
    let n = |v: &str| {
        v.parse::<u16>()
            .ok()
            .filter(|&n| n >= 20)
            .ok_or_else(|| format!("{v:?}: expected a number of characters, at least 20"))
    };
    Ok((n(w)?, n(h)?))
}

/// Why `weir top` could not start.
#[derive(Debug, thiserror::Error)]
enum TopError {
    #[error("{0}")]
    Config(String),
    #[error("{0} (is the pipeline running, with `runtime.metrics` set to this address?)")]
    Scrape(#[from] scrape::ScrapeError),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// Runs `weir top`.
pub fn top(args: &TopArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ TopError::Terminal(_)) => {
            eprintln!("weir top: {e}");
            ExitCode::from(super::EXIT_FAILED)
        }
        Err(e) => super::bad_input(format!("weir top: {e}")),
    }
}

fn run(args: &TopArgs) -> Result<(), TopError> {
    let addr = scrape::host_port(&address(args)?);
    // A dead address or one that is not Weir is told before the screen is taken over.
    let first = scrape::scrape(&addr)?;
    let mut view = View::new(addr.clone());
    view.push(first, wall_now());
    if args.once {
        std::thread::sleep(args.interval);
        view.push(scrape::scrape(&addr)?, wall_now());
        print!("{}", render_text(&view, args.size)?);
        return Ok(());
    }
    live(&mut view, &addr, args.interval)
}

/// The address from the arguments, or from a pipeline's `runtime.metrics`.
fn address(args: &TopArgs) -> Result<String, TopError> {
    if let Some(a) = &args.addr {
        return Ok(a.clone());
    }
    let file = match &args.pipeline {
        Some(f) => f.clone(),
        None if Path::new(DEFAULT_PIPELINE).exists() => PathBuf::from(DEFAULT_PIPELINE),
        None => {
            return Err(TopError::Config(format!(
                "no address: give ADDR (the pipeline's runtime.metrics) or --pipeline FILE \
                 (no {DEFAULT_PIPELINE} here)"
            )))
        }
    };
    let cfg = crate::config::load(&file).map_err(|e| TopError::Config(e.to_string()))?;
    cfg.runtime.metrics.ok_or_else(|| {
        TopError::Config(format!(
            "{} sets no runtime.metrics address, so the pipeline serves no metrics to watch",
            file.display()
        ))
    })
}

fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One frame drawn off-screen, as lines of text.
fn render_text(view: &View, (width, height): (u16, u16)) -> Result<String, TopError> {
    let mut terminal = Terminal::new(TestBackend::new(width, height))?;
    terminal.draw(|f| view.draw(f))?;
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let line: String = (0..buffer.area.width)
            .map(|x| buffer[(x, y)].symbol())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// The live view until `q` (or Esc, or Ctrl-C).
fn live(view: &mut View, addr: &str, interval: Duration) -> Result<(), TopError> {
    let mut terminal = ratatui::init();
    let result = (|| -> Result<(), TopError> {
        let mut next = Instant::now() + interval;
        loop {
            terminal.draw(|f| view.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(key) = event::read()? {
                    if key.kind != KeyEventKind::Press {
                        continue;
                    }
                    let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL)
                        && key.code == KeyCode::Char('c');
                    match key.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        _ if ctrl_c => return Ok(()),
                        KeyCode::Up => view.scroll = view.scroll.saturating_sub(1),
                        KeyCode::Down => {
                            view.scroll =
                                (view.scroll + 1).min(view.partition_count().saturating_sub(1))
                        }
                        KeyCode::PageUp => view.scroll = view.scroll.saturating_sub(10),
                        KeyCode::PageDown => {
                            view.scroll =
                                (view.scroll + 10).min(view.partition_count().saturating_sub(1))
                        }
                        KeyCode::Char('s') => {
                            view.sort = view.sort.next();
                            view.scroll = 0;
                        }
                        _ => {}
                    }
                }
                continue;
            }
            next = Instant::now() + interval;
            match scrape::scrape(addr) {
                Ok(s) => view.push(s, wall_now()),
                Err(e) => view.error = Some(e.to_string()),
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::view::Sort;
    use super::*;

    #[test]
    fn sizes_parse_and_small_ones_are_refused() {
        assert_eq!(parse_size("100x30"), Ok((100, 30)));
        assert!(parse_size("10x30").is_err());
        assert!(parse_size("100").is_err());
    }

    #[test]
    fn sort_cycles_through_every_order() {
        assert_eq!(Sort::Lag.next().next().next(), Sort::Lag);
    }
}
