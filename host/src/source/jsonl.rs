//! A JSONL file or standard input as a source: one partition, read on its own thread into a
//! bounded queue (a full queue blocks the reader: backpressure, not memory growth). The offset
//! of a message is its position among the non-blank lines, from 0. A line that
//! is not a message becomes an already rejected item with the raw line as its value.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::{Handler, Item, PartitionKey, Source, SourceError};
use crate::chain::Rejected;
use crate::config::SourceConfig;
use crate::jsonl;
use crate::message::{Envelope, Message};

/// Lines read ahead of the controller.
const READ_AHEAD: usize = 4096;
/// Most items handed over per poll.
const BURST: usize = 1024;

enum Line {
    Item(Item),
    Error(std::io::Error),
}

/// The JSONL source.
pub struct JsonlSource {
    key: PartitionKey,
    what: String,
    rx: Option<Receiver<Line>>,
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
        let (reader, what): (Box<dyn BufRead + Send>, String) = match cfg {
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
            SourceConfig::Stdin(_) => (
                Box::new(std::io::BufReader::new(std::io::stdin())),
                "stdin".into(),
            ),
            SourceConfig::Kafka(_) => unreachable!("a Kafka source is built by KafkaSource"),
        };
        Ok(Self::from_reader(key(cfg), what, reader))
    }

    /// A source over any line reader (tests, replays).
    pub fn from_reader(key: PartitionKey, what: String, reader: Box<dyn BufRead + Send>) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(READ_AHEAD);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        std::thread::Builder::new()
            .name("weir-source".into())
            .spawn(move || read_lines(reader, &tx, &thread_stop))
            .expect("spawning the source reader");
        JsonlSource {
            key,
            what,
            rx: Some(rx),
            stop,
            assigned: false,
            ended: false,
            paused: false,
            next: 0,
            committed: None,
        }
    }

    fn take(&mut self, line: Line, to: &mut dyn Handler) -> Result<bool, SourceError> {
        match line {
            Line::Item(item) => {
                self.next = item.offset() + 1;
                Ok(to.item(&self.key.topic, 0, item))
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
        let Some(rx) = self.rx.clone().filter(|_| !self.paused && !self.ended) else {
            std::thread::sleep(timeout);
            return Ok(());
        };
        let first = match rx.recv_timeout(timeout) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => return Ok(()),
            Err(RecvTimeoutError::Disconnected) => {
                self.ended = true;
                to.end(&self.key, self.next);
                return Ok(());
            }
        };
        if !self.take(first, to)? {
            return Ok(());
        }
        for _ in 1..BURST {
            match rx.try_recv() {
                Ok(l) => {
                    if !self.take(l, to)? {
                        break;
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    to.end(&self.key, self.next);
                    break;
                }
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

fn read_lines(mut reader: Box<dyn BufRead + Send>, tx: &Sender<Line>, stop: &AtomicBool) {
    let mut offset: i64 = 0;
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
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
        let item = match jsonl::parse_line(text) {
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
        };
        offset += 1;
        if tx.send(Line::Item(item)).is_err() {
            return;
        }
    }
}
