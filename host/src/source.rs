//! Local sources: a JSONL file or standard input, read on their own thread into a bounded
//! queue (a full queue blocks the reader: backpressure, not memory growth).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::config::SourceConfig;
use crate::jsonl;
use crate::message::{Envelope, Lane, Message};

/// One item from a source.
#[derive(Debug)]
pub enum SourceItem {
    /// A message, with its offset (the line number from 0).
    Message(Envelope),
    /// A line that is not a message: it goes to the reject path, never silently lost.
    Malformed {
        /// Its offset.
        offset: i64,
        /// Why.
        reason: String,
        /// The raw line.
        line: String,
    },
    /// The source could not be read further.
    Error(String),
}

/// A source that cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("source {path}: {source}")]
pub struct SourceError {
    path: String,
    source: std::io::Error,
}

/// The lane a source's messages belong to.
pub fn lane(cfg: &SourceConfig) -> Lane {
    let topic = match cfg {
        SourceConfig::Jsonl(j) => j.topic.clone().unwrap_or_else(|| {
            j.path
                .file_stem()
                .map_or_else(|| "jsonl".into(), |s| s.to_string_lossy().into_owned())
        }),
        SourceConfig::Stdin(s) => s.topic.clone().unwrap_or_else(|| "stdin".into()),
        SourceConfig::Kafka(k) => k.topics.join(","),
    };
    Lane {
        topic: topic.into(),
        partition: 0,
    }
}

/// Opens the source and starts its reader thread. The thread ends at end of input, when
/// `stop` is set, or when the receiver is gone.
pub fn start(
    cfg: &SourceConfig,
    tx: Sender<SourceItem>,
    stop: Arc<AtomicBool>,
) -> Result<(), SourceError> {
    let reader: Box<dyn BufRead + Send> = match cfg {
        SourceConfig::Jsonl(j) => {
            let f = std::fs::File::open(&j.path).map_err(|source| SourceError {
                path: j.path.display().to_string(),
                source,
            })?;
            Box::new(std::io::BufReader::with_capacity(1 << 20, f))
        }
        SourceConfig::Stdin(_) => Box::new(std::io::BufReader::new(std::io::stdin())),
        SourceConfig::Kafka(k) => {
            return Err(SourceError {
                path: format!("kafka {}", k.topics.join(",")),
                source: std::io::Error::other("a Kafka source runs in the Kafka runtime"),
            })
        }
    };
    std::thread::Builder::new()
        .name("weir-source".into())
        .spawn(move || read_lines(reader, &tx, &stop))
        .expect("spawning the source reader");
    Ok(())
}

fn read_lines(mut reader: Box<dyn BufRead + Send>, tx: &Sender<SourceItem>, stop: &AtomicBool) {
    let mut offset: i64 = 0;
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(SourceItem::Error(format!(
                    "read error after line {offset}: {e}"
                )));
                return;
            }
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let item = match jsonl::parse_line(text) {
            Ok(msg) => SourceItem::Message(Envelope { offset, msg }),
            Err(e) => SourceItem::Malformed {
                offset,
                reason: format!("malformed input line {}: {e}", offset + 1),
                line: text.to_owned(),
            },
        };
        offset += 1;
        if tx.send(item).is_err() {
            return;
        }
    }
}

/// The message a malformed line becomes on the reject path: the raw line as its value.
pub fn malformed_message(line: String) -> Message {
    Message {
        value: Some(line.into_bytes()),
        ..Message::default()
    }
}
