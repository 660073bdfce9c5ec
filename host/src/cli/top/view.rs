//! What `weir top` draws: rates from two snapshots, laid out with ratatui.

use std::collections::BTreeMap;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Gauge, Paragraph, Row, Table};
use ratatui::Frame;

use super::scrape::{Snapshot, StageSample};

/// How the partitions table is ordered (`s` cycles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// Highest lag first.
    Lag,
    /// By topic and partition.
    Partition,
    /// Lowest committed offset first.
    Committed,
}

impl Sort {
    pub fn next(self) -> Sort {
        match self {
            Sort::Lag => Sort::Partition,
            Sort::Partition => Sort::Committed,
            Sort::Committed => Sort::Lag,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Sort::Lag => "lag",
            Sort::Partition => "partition",
            Sort::Committed => "committed",
        }
    }
}

/// The screen's state between frames.
pub struct View {
    pub addr: String,
    pub sort: Sort,
    /// First partition row shown.
    pub scroll: usize,
    /// The newest snapshot and the one before it (for rates).
    pub now: Option<Snapshot>,
    pub before: Option<Snapshot>,
    /// The last scrape's error, while the pipeline does not answer.
    pub error: Option<String>,
    /// Unix time of the newest snapshot (for the uptime).
    pub wall: f64,
}

impl View {
    pub fn new(addr: String) -> View {
        View {
            addr,
            sort: Sort::Lag,
            scroll: 0,
            now: None,
            before: None,
            error: None,
            wall: 0.0,
        }
    }

    /// Takes a new snapshot (the previous one becomes the base of the rates).
    pub fn push(&mut self, snap: Snapshot, wall: f64) {
        self.before = self.now.take();
        self.now = Some(snap);
        self.error = None;
        self.wall = wall;
    }

    /// Per-second rate of `f` between the two snapshots (`None` before there are two).
    fn rate(&self, f: impl Fn(&Snapshot) -> f64) -> Option<f64> {
        let (now, before) = (self.now.as_ref()?, self.before.as_ref()?);
        let secs = now.at.duration_since(before.at).as_secs_f64();
        (secs > 0.0).then(|| ((f(now) - f(before)) / secs).max(0.0))
    }

    /// Draws one frame.
    pub fn draw(&self, frame: &mut Frame<'_>) {
        let [head, process, stages, parts, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(5),
            Constraint::Length(self.stage_rows() as u16 + 3),
            Constraint::Min(4),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        frame.render_widget(self.head(), head);
        self.draw_process(frame, process);
        frame.render_widget(self.stages(), stages);
        frame.render_widget(self.partitions(parts.height), parts);
        frame.render_widget(self.foot(), foot);
    }

    fn stage_rows(&self) -> usize {
        self.now.as_ref().map_or(0, |s| s.stages.len()).max(1)
    }

    fn head(&self) -> Paragraph<'static> {
        let mut spans = vec![
            Span::styled("weir top", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("  {}", self.addr)),
        ];
        if let Some(s) = &self.now {
            let up = (self.wall - s.start_time).max(0.0) as u64;
            spans.push(Span::raw(format!(
                "  up {}",
                humantime::format_duration(std::time::Duration::from_secs(up))
            )));
            spans.push(if s.ready {
                Span::styled("  ready", Style::new().green())
            } else {
                Span::styled("  not ready", Style::new().yellow())
            });
            if s.rss > 0.0 {
                spans.push(Span::raw(format!("  resident {}", bytes(s.rss))));
            }
            if s.kafka_queued > 0.0 {
                spans.push(Span::raw(format!(
                    "  librdkafka queues {}",
                    bytes(s.kafka_queued)
                )));
            }
            if s.restoring > 0.0 {
                spans.push(Span::styled(
                    format!("  restoring state of {} partition(s)", int(s.restoring)),
                    Style::new().yellow(),
                ));
            }
        }
        Paragraph::new(Line::from(spans))
    }

    fn draw_process(&self, frame: &mut Frame<'_>, area: Rect) {
        let block = Block::bordered().title(" process ");
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let Some(s) = &self.now else {
            frame.render_widget(Paragraph::new("waiting for the first scrape…"), inner);
            return;
        };
        let [gauge, lines] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(inner);
        let ratio = if s.budget > 0.0 {
            (s.in_flight / s.budget).clamp(0.0, 1.0)
        } else {
            0.0
        };
        frame.render_widget(
            Gauge::default()
                .ratio(ratio)
                .label(format!(
                    "in flight {} of {} budget",
                    bytes(s.in_flight),
                    bytes(s.budget)
                ))
                .gauge_style(Style::new().cyan()),
            gauge,
        );
        let count = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
        let owned = s.partitions.len();
        let text = vec![
            Line::from(format!(
                "read {}/s ({} total)   produced sink {}/s, dlq {}/s   partitions {} owned, {} held or paused",
                rate(self.rate(|x| x.consumed)),
                int(s.consumed),
                rate(self.rate(|x| count(&x.produced, "sink"))),
                rate(self.rate(|x| count(&x.produced, "dlq"))),
                owned,
                int(s.paused),
            )),
            Line::from(format!(
                "flow control: hold {}  pause {}  resume {}   rebalances: assign {}  revoke {}   commits: ok {}  error {}   reloads {}",
                int(count(&s.flow, "hold")),
                int(count(&s.flow, "pause")),
                int(count(&s.flow, "resume")),
                int(count(&s.rebalances, "assign")),
                int(count(&s.rebalances, "revoke")),
                int(count(&s.commits, "ok")),
                int(count(&s.commits, "error")),
                int(s.reloads),
            )),
        ];
        frame.render_widget(Paragraph::new(text), lines);
    }

    fn stages(&self) -> Table<'static> {
        // A column for the state's memory when a stage keeps state.
        let stateful = self
            .now
            .iter()
            .flat_map(|s| s.stages.values())
            .any(|s| s.state.is_some());
        let mut header = vec![
            "stage", "plugin", "rollout", "in/s", "keep/s", "next/s", "drop/s", "reject/s",
            "fail/s", "p50", "p99", "traps", "timeouts", "memory", "recycled",
        ];
        if stateful {
            header.push("state");
        }
        let header = Row::new(header).style(Style::new().add_modifier(Modifier::BOLD));
        let rows: Vec<Row> = self
            .now
            .iter()
            .flat_map(|s| s.stages.iter())
            .map(|(name, st)| {
                let per = |outcome: &'static str| {
                    rate(self.rate(move |x| {
                        x.stages
                            .get(name)
                            .and_then(|s| s.outcomes.get(outcome))
                            .copied()
                            .unwrap_or(0.0)
                    }))
                };
                let input = rate(self.rate(|x| x.stages.get(name).map_or(0.0, |s| s.input())));
                let recent = self.recent_batches(name, st);
                let mut cells = vec![
                    name.clone(),
                    st.plugin.chars().take(12).collect(),
                    match st.rollout as i64 {
                        1 => "shadow",
                        2 => "canary",
                        _ => "-",
                    }
                    .to_owned(),
                    input,
                    per("keep"),
                    per("next"),
                    per("dropped"),
                    per("reject"),
                    per("fail"),
                    seconds(quantile(&recent, 0.5)),
                    seconds(quantile(&recent, 0.99)),
                    int(st.traps),
                    int(st.timeouts),
                    bytes(st.memory),
                    int(st.recycled),
                ];
                if stateful {
                    cells.push(st.state.map_or_else(|| "-".to_owned(), bytes));
                }
                Row::new(cells)
            })
            .collect();
        let mut widths = vec![
            Constraint::Min(12),
            Constraint::Length(12),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(8),
        ];
        if stateful {
            widths.push(Constraint::Length(9));
        }
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(" stages (rates per second; batch time p50/p99) "))
    }

    /// The batch-time histogram of the last interval (all time until there are two scrapes,
    /// or when the interval had no batch).
    fn recent_batches(&self, name: &str, st: &StageSample) -> Vec<(f64, f64)> {
        let old = self
            .before
            .as_ref()
            .and_then(|b| b.stages.get(name))
            .map(|s| s.batch_seconds.clone())
            .unwrap_or_default();
        let diff: Vec<(f64, f64)> = st
            .batch_seconds
            .iter()
            .map(|&(le, c)| {
                let was = old.iter().find(|(l, _)| *l == le).map_or(0.0, |&(_, c)| c);
                (le, c - was)
            })
            .collect();
        if diff.last().is_some_and(|&(_, c)| c > 0.0) {
            diff
        } else {
            st.batch_seconds.clone()
        }
    }

    fn sorted_partitions(&self) -> Vec<((String, i32), super::scrape::PartitionSample)> {
        let mut parts: Vec<_> = self
            .now
            .iter()
            .flat_map(|s| s.partitions.iter())
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        match self.sort {
            Sort::Lag => parts.sort_by(|a, b| {
                let (la, lb) = (a.1.lag.unwrap_or(0.0), b.1.lag.unwrap_or(0.0));
                lb.total_cmp(&la).then_with(|| a.0.cmp(&b.0))
            }),
            Sort::Partition => {}
            Sort::Committed => parts.sort_by(|a, b| {
                let (ca, cb) = (a.1.committed.unwrap_or(-1.0), b.1.committed.unwrap_or(-1.0));
                ca.total_cmp(&cb).then_with(|| a.0.cmp(&b.0))
            }),
        }
        parts
    }

    /// How many partition rows there are (for scrolling).
    pub fn partition_count(&self) -> usize {
        self.now.as_ref().map_or(0, |s| s.partitions.len())
    }

    fn partitions(&self, height: u16) -> Table<'static> {
        let parts = self.sorted_partitions();
        let visible = usize::from(height.saturating_sub(3));
        let rows: Vec<Row> = parts
            .iter()
            .skip(self.scroll)
            .take(visible)
            .map(|((topic, p), s)| {
                let state = match s.state as i64 {
                    1 => Span::styled("held", Style::new().yellow()),
                    2 => Span::styled("paused", Style::new().red()),
                    _ => Span::raw("reading"),
                };
                Row::new(vec![
                    Line::from(topic.clone()),
                    Line::from(p.to_string()),
                    Line::from(s.committed.map_or("-".into(), int)),
                    Line::from(s.lag.map_or("-".into(), int)),
                    Line::from(state),
                ])
            })
            .collect();
        let widths = [
            Constraint::Min(16),
            Constraint::Length(10),
            Constraint::Length(14),
            Constraint::Length(12),
            Constraint::Length(8),
        ];
        let title = format!(
            " partitions ({}, sorted by {}; {}-{} shown) ",
            parts.len(),
            self.sort.label(),
            (self.scroll + 1).min(parts.len()),
            (self.scroll + visible).min(parts.len())
        );
        Table::new(rows, widths)
            .header(
                Row::new(["topic", "partition", "committed", "lag", "state"])
                    .style(Style::new().add_modifier(Modifier::BOLD)),
            )
            .block(Block::bordered().title(title))
    }

    fn foot(&self) -> Paragraph<'static> {
        let keys = "q quit  ↑↓ scroll  s sort";
        match &self.error {
            Some(e) => Paragraph::new(Line::from(vec![
                Span::styled(format!("{e} — retrying  "), Style::new().red()),
                Span::raw(keys),
            ])),
            None => Paragraph::new(keys),
        }
    }
}

/// The `q` quantile of a cumulative histogram (upper bound, count), interpolated within its
/// bucket as Prometheus's `histogram_quantile` does.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let in_bucket = count - lower.1;
            let frac = if in_bucket > 0.0 {
                (rank - lower.1) / in_bucket
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * frac);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

fn rate(r: Option<f64>) -> String {
    r.map_or("-".into(), |v| {
        if v >= 10.0 || v == 0.0 {
            int(v)
        } else {
            format!("{v:.1}")
        }
    })
}

/// An integer with thousands separators.
fn int(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn bytes(v: f64) -> String {
    bytesize::ByteSize::b(v.max(0.0) as u64).to_string()
}

fn seconds(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(s) if s < 1e-3 => format!("{:.0}µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.1}ms", s * 1e3),
        Some(s) => format!("{s:.2}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let b = [(1.0, 0.0), (2.0, 10.0), (4.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(&b, 0.5), Some(2.0));
        assert_eq!(quantile(&b, 0.25), Some(1.5));
        assert_eq!(quantile(&b, 0.75), Some(3.0));
        assert_eq!(quantile(&[(1.0, 0.0)], 0.5), None);
    }

    #[test]
    fn counts_get_thousands_separators() {
        assert_eq!(int(1234567.0), "1,234,567");
        assert_eq!(int(12.0), "12");
        assert_eq!(int(-1000.0), "-1,000");
    }
}
