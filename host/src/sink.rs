//! Local sinks (JSONL file, stdout, discard) and the reject path.

use std::io::Write;

use serde_json::{json, Value};

use crate::chain::Rejected;
use crate::config::SinkConfig;
use crate::jsonl;
use crate::message::{Envelope, Lane};

/// A sink that cannot be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("sink {what}: {source}")]
pub struct SinkError {
    what: String,
    source: std::io::Error,
}

/// A line-oriented sink.
pub struct LineSink {
    what: String,
    out: Option<Box<dyn Write + Send>>,
    /// Messages written.
    pub written: u64,
}

impl LineSink {
    /// Opens the sink (a file is created or truncated).
    pub fn open(cfg: &SinkConfig) -> Result<Self, SinkError> {
        let (what, out): (String, Option<Box<dyn Write + Send>>) = match cfg {
            SinkConfig::Jsonl(j) => {
                let what = j.path.display().to_string();
                if let Some(dir) = j.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| SinkError {
                        what: what.clone(),
                        source,
                    })?;
                }
                let f = std::fs::File::create(&j.path).map_err(|source| SinkError {
                    what: what.clone(),
                    source,
                })?;
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
            SinkConfig::Kafka(k) => {
                return Err(SinkError {
                    what: format!("kafka topic {}", k.topic),
                    source: std::io::Error::other("a Kafka sink is not a line sink"),
                })
            }
        };
        Ok(LineSink {
            what,
            out,
            written: 0,
        })
    }

    /// A sink that counts and drops.
    pub fn discard() -> Self {
        LineSink {
            what: "discard".into(),
            out: None,
            written: 0,
        }
    }

    fn line(&mut self, v: &Value) -> Result<(), SinkError> {
        self.written += 1;
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        serde_json::to_writer(&mut *out, v)
            .map_err(std::io::Error::other)
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|source| SinkError {
                what: self.what.clone(),
                source,
            })
    }

    /// Writes messages that passed the chain.
    pub fn write(&mut self, msgs: &[Envelope]) -> Result<(), SinkError> {
        for e in msgs {
            self.line(&Value::Object(jsonl::message_json(&e.msg)))?;
        }
        Ok(())
    }

    /// Writes rejected messages with why, where and by which plugin version.
    pub fn write_rejects(&mut self, lane: &Lane, rejects: &[Rejected]) -> Result<(), SinkError> {
        for r in rejects {
            let mut m = jsonl::message_json(&r.env.msg);
            m.insert(
                "reject".into(),
                json!({
                    "reason": r.reason,
                    "stage": &*r.stage,
                    "plugin": r.plugin,
                    "source": { "topic": &*lane.topic, "partition": lane.partition, "offset": r.env.offset },
                }),
            );
            self.line(&Value::Object(m))?;
        }
        Ok(())
    }

    /// Pushes buffered lines out.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        match self.out.as_mut() {
            Some(o) => o.flush().map_err(|source| SinkError {
                what: self.what.clone(),
                source,
            }),
            None => Ok(()),
        }
    }
}
