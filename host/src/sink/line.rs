//! Line sinks: JSONL to a file or stdout, and discard. A record is durable when `write`
//! returns: the batch's lines are written and flushed.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Record, Sink, SinkError};
use crate::config::SinkConfig;
use crate::jsonl;
use crate::message::Rejected;
use crate::message::{Lane, Message};

/// A JSONL file, stdout, or discard.
pub struct LineSink {
    what: String,
    out: Option<Mutex<Box<dyn Write + Send>>>,
    written: AtomicU64,
}

impl LineSink {
    /// Opens the sink (a file is created or truncated).
    pub fn open(cfg: &SinkConfig) -> Result<Self, SinkError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| SinkError::Io { what, source }
        };
        let (what, out): (String, Option<Box<dyn Write + Send>>) = match cfg {
            SinkConfig::Jsonl(j) => {
                let what = j.path.display().to_string();
                if let Some(dir) = j.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(io(&what))?;
                }
                let f = std::fs::File::create(&j.path).map_err(io(&what))?;
                (
                    what,
                    Some(Box::new(std::io::BufWriter::with_capacity(1 << 20, f))),
                )
            }
            SinkConfig::Stdout(_) => (
                "stdout".into(),
                Some(Box::new(std::io::BufWriter::new(std::io::stdout()))),
            ),
            SinkConfig::Discard(_) => ("discard".into(), None),
            SinkConfig::Kafka(_) => unreachable!("a Kafka sink is built by KafkaSink"),
        };
        Ok(LineSink {
            what,
            out: out.map(Mutex::new),
            written: AtomicU64::new(0),
        })
    }

    /// A sink that counts and drops.
    pub fn discard() -> Self {
        LineSink {
            what: "discard".into(),
            out: None,
            written: AtomicU64::new(0),
        }
    }
}

/// The JSONL line of a message.
pub fn output_line(msg: &Message) -> Value {
    Value::Object(jsonl::message_json(msg))
}

/// The JSONL line of a rejected message: the message plus why, where and by which plugin.
pub fn reject_line(original: &Message, r: &Rejected, lane: &Lane) -> Value {
    let mut m = jsonl::message_json(original);
    m.insert(
        "reject".into(),
        json!({
            "reason": r.reason,
            "stage": &*r.stage,
            "plugin": r.plugin,
            "source": { "topic": &*lane.topic, "partition": lane.partition, "offset": r.env.offset },
        }),
    );
    Value::Object(m)
}

impl Sink for LineSink {
    fn write(&self, lane: &Lane, records: Vec<Record<'_>>) -> Result<(), SinkError> {
        if records.is_empty() {
            return Ok(());
        }
        let n = records.len() as u64;
        if let Some(out) = &self.out {
            let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
            let mut write = |v: Value| {
                serde_json::to_writer(&mut *out, &v)
                    .map_err(std::io::Error::other)
                    .and_then(|()| out.write_all(b"\n"))
            };
            for r in &records {
                match r {
                    Record::Output { msg, .. } => write(output_line(msg)),
                    Record::Reject {
                        original, rejected, ..
                    } => write(reject_line(original, rejected, lane)),
                }
                .map_err(|source| SinkError::Io {
                    what: self.what.clone(),
                    source,
                })?;
            }
            out.flush().map_err(|source| SinkError::Io {
                what: self.what.clone(),
                source,
            })?;
        }
        self.written.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    fn acknowledges_later(&self) -> bool {
        false
    }

    fn flush(&self, _timeout: Duration) -> Result<(), SinkError> {
        match &self.out {
            Some(o) => o
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .flush()
                .map_err(|source| SinkError::Io {
                    what: self.what.clone(),
                    source,
                }),
            None => Ok(()),
        }
    }

    fn delivered(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}
