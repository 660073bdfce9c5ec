//! A JSONL file or standard input as a source: one partition, read on its own thread into a
//! bounded queue (a full queue blocks the reader: backpressure, not memory growth). The offset
//! of a message is its position among the non-blank lines, from 0. A line that
//! is not a message becomes an already rejected item with the raw line as its value.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{Handler, Item, PartitionKey, Source, SourceError};
use crate::config::SourceConfig;
use crate::jsonl;
use crate::message::Rejected;
use crate::message::{Envelope, Message};

/// Items per chunk from the reader thread (one channel operation, one wake-up per chunk).
const CHUNK: usize = 256;
/// Chunks read ahead of the controller.
const READ_AHEAD: usize = 16;
/// Most items handed over per poll.
const BURST: usize = 1024;

enum Line {
    Items(Vec<Item>),
    Error(std::io::Error),
}

/// The JSONL source.
pub struct JsonlSource {
    key: PartitionKey,
    what: String,
    rx: Option<Receiver<Line>>,
    /// The rest of a chunk not yet handed over (the handler's budget was spent).
    left: std::collections::VecDeque<Item>,
    stop: Arc<AtomicBool>,
    assigned: bool,
    ended: bool,
    paused: bool,
    /// One past the last offset handed over.
    next: i64,
    committed: Option<i64>,
}

/// The partition a local source's messages belong to (what stages see as the source topic).
pub fn key(cfg: &SourceConfig) -> PartitionKey {
    let topic = match cfg {
        SourceConfig::Jsonl(j) => j.topic.clone().unwrap_or_else(|| {
            j.path
                .file_stem()
                .map_or_else(|| "jsonl".into(), |s| s.to_string_lossy().into_owned())
        }),
        SourceConfig::Stdin(s) => s.topic.clone().unwrap_or_else(|| "stdin".into()),
        SourceConfig::Kafka(k) => k.topics.join(","),
    };
    PartitionKey::new(&topic, 0)
}

impl JsonlSource {
    /// Opens the file (or standard input) and starts the reader thread.
    pub fn open(cfg: &SourceConfig) -> Result<Self, SourceError> {
        let (reader, what): (Box<dyn Read + Send>, String) = match cfg {
            SourceConfig::Jsonl(j) => {
                let what = j.path.display().to_string();
                let f = std::fs::File::open(&j.path).map_err(|source| SourceError::Io {
                    what: what.clone(),
                    source,
                })?;
                (
                    Box::new(std::io::BufReader::with_capacity(1 << 20, f)),
                    what,
                )
            }
            SourceConfig::Stdin(_) => (Box::new(std::io::stdin()), "stdin".into()),
            SourceConfig::Kafka(_) => unreachable!("a Kafka source is built by KafkaSource"),
        };
        Ok(Self::from_reader(key(cfg), what, reader))
    }

    /// A source over any reader of JSONL.
    pub fn from_reader(key: PartitionKey, what: String, reader: Box<dyn Read + Send>) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(READ_AHEAD);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        std::thread::Builder::new()
            .name("weir-source".into())
            .spawn(move || {
                let reader = BufReader::with_capacity(1 << 20, reader);
                read_lines(reader, &tx, &thread_stop)
            })
            .expect("spawning the source reader");
        JsonlSource {
            key,
            what,
            rx: Some(rx),
            left: std::collections::VecDeque::new(),
            stop,
            assigned: false,
            ended: false,
            paused: false,
            next: 0,
            committed: None,
        }
    }

    /// Hands over what is left of the last chunk; false when the handler wants no more.
    fn hand_over(&mut self, to: &mut dyn Handler, handed: &mut usize) -> bool {
        while let Some(item) = self.left.pop_front() {
            self.next = item.offset() + 1;
            *handed += 1;
            if !to.item(&self.key.topic, 0, item) {
                return false;
            }
        }
        true
    }

    fn take(&mut self, line: Line) -> Result<(), SourceError> {
        match line {
            Line::Items(items) => {
                self.left.extend(items);
                Ok(())
            }
            Line::Error(source) => Err(SourceError::Io {
                what: self.what.clone(),
                source,
            }),
        }
    }
}

impl Source for JsonlSource {
    fn poll(&mut self, to: &mut dyn Handler, timeout: Duration) -> Result<(), SourceError> {
        if !self.assigned {
            self.assigned = true;
            to.assigned(std::slice::from_ref(&self.key));
            return Ok(());
        }
        if self.paused || self.ended {
            std::thread::sleep(timeout);
            return Ok(());
        }
        let mut handed = 0;
        if !self.hand_over(to, &mut handed) {
            return Ok(());
        }
        let Some(rx) = self.rx.clone() else {
            std::thread::sleep(timeout);
            return Ok(());
        };
        let mut wait = Some(timeout);
        while handed < BURST {
            let got = match wait.take() {
                Some(t) => rx.recv_timeout(t).map_err(|e| e.is_disconnected()),
                None => rx.try_recv().map_err(|e| e.is_disconnected()),
            };
            match got {
                Ok(line) => self.take(line)?,
                Err(false) => break,
                Err(true) => {
                    self.ended = true;
                    to.end(&self.key, self.next);
                    break;
                }
            }
            if !self.hand_over(to, &mut handed) {
                break;
            }
        }
        Ok(())
    }

    fn commit(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        self.commit_sync(offsets)
    }

    fn commit_sync(&mut self, offsets: &[(PartitionKey, i64)]) -> Result<(), SourceError> {
        for (k, o) in offsets {
            if *k == self.key {
                self.committed = Some(self.committed.map_or(*o, |c| c.max(*o)));
            }
        }
        Ok(())
    }

    fn committed(&self, key: &PartitionKey) -> Option<i64> {
        self.committed.filter(|_| *key == self.key)
    }

    fn committed_all(&self) -> BTreeMap<String, i64> {
        self.committed
            .map(|c| (self.key.to_string(), c))
            .into_iter()
            .collect()
    }

    fn pause(&mut self, _keys: &[PartitionKey]) {
        self.paused = true;
    }

    fn resume(&mut self, _keys: &[PartitionKey]) {
        self.paused = false;
    }

    fn high_watermark(&self, _key: &PartitionKey) -> Option<i64> {
        self.ended.then_some(self.next)
    }

    fn close(&mut self, to: &mut dyn Handler) {
        self.stop.store(true, Ordering::Relaxed);
        // A reader blocked on a full queue sees it gone; one blocked on stdin ends with the process.
        self.rx = None;
        if self.assigned {
            let offsets = to.revoked(std::slice::from_ref(&self.key));
            let _ = self.commit_sync(&offsets);
        }
    }
}

fn read_lines(mut reader: BufReader<Box<dyn Read + Send>>, tx: &Sender<Line>, stop: &AtomicBool) {
    let mut offset: i64 = 0;
    let mut line = String::new();
    let mut chunk = Vec::with_capacity(CHUNK);
    while !stop.load(Ordering::Relaxed) {
        // Hand over what is read before a read that may wait (stdin), and full chunks.
        let would_wait = reader.buffer().is_empty();
        if !chunk.is_empty() && (chunk.len() >= CHUNK || would_wait) {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
            if tx.send(Line::Items(full)).is_err() {
                return;
            }
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(Line::Items(chunk));
                let _ = tx.send(Line::Error(std::io::Error::new(
                    e.kind(),
                    format!("read error after line {offset}: {e}"),
                )));
                return;
            }
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        chunk.push(match jsonl::parse_line(text) {
            Ok(msg) => Item::Message(Envelope { offset, msg }),
            Err(e) => Item::Rejected(Rejected {
                env: Envelope {
                    offset,
                    msg: Message {
                        value: Some(text.as_bytes().to_vec()),
                        ..Message::default()
                    },
                },
                stage: "source".into(),
                plugin: String::new(),
                reason: format!("malformed input line {}: {e}", offset + 1),
            }),
        });
        offset += 1;
    }
    if !chunk.is_empty() {
        let _ = tx.send(Line::Items(chunk));
    }
}
