//! `weir broker`: a throw-away Kafka-protocol broker (librdkafka's mock cluster) for
//! development and tests. Prints its bootstrap address on the first line of stdout, then
//! reads commands from stdin until end of input: `down ID`, `up ID`, `create TOPIC[:N]`, and
//! the refusals a secured cluster gives, for trying Weir's answers to them: `refuse-topic
//! TOPIC ERROR` (the topic's metadata carries ERROR; `NONE` clears it) and `refuse API ERROR
//! COUNT` (the next COUNT requests of API are answered with ERROR).
//!
//! With `--schema-registry`, a development schema registry runs beside it (its address is
//! the second line of stdout), and `registry-down` / `registry-up` make it answer 503 / serve
//! again.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::kafka::embedded::EmbeddedBroker;

/// Arguments of `weir broker`.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// Topics to create, as NAME or NAME:PARTITIONS (repeatable).
    #[arg(long = "topic", value_name = "NAME[:PARTITIONS]")]
    topics: Vec<String>,
    /// Produce a JSONL file to a topic, as TOPIC=FILE (repeatable).
    #[arg(long, value_name = "TOPIC=FILE")]
    seed: Vec<String>,
    /// Number of brokers in the cluster.
    #[arg(long, default_value_t = 1)]
    brokers: i32,
    /// Also run a development schema registry (Confluent's REST API, in memory; not for
    /// production) on ADDR; its `http://` address is printed on the second line.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    schema_registry: Option<String>,
}

/// Parses `TOPIC=FILE`.
pub(super) fn parse_seed(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((t, f)) if !t.is_empty() && !f.is_empty() => Ok((t.to_owned(), PathBuf::from(f))),
        _ => Err(format!("--seed `{s}`: expected TOPIC=FILE")),
    }
}

/// Parses `NAME` or `NAME:PARTITIONS`.
fn parse_topic(t: &str) -> Result<(&str, i32), String> {
    match t.split_once(':') {
        Some((n, p)) => match p.parse::<i32>() {
            Ok(p) if p > 0 && !n.is_empty() => Ok((n, p)),
            _ => Err(format!("topic `{t}`: expected NAME or NAME:PARTITIONS")),
        },
        None => Ok((t, 1)),
    }
}

pub fn broker(args: &BrokerArgs) -> ExitCode {
    let broker = match EmbeddedBroker::start(args.brokers) {
        Ok(b) => b,
        Err(e) => return super::bad_input(e),
    };
    for t in &args.topics {
        let created = parse_topic(t)
            .and_then(|(name, parts)| broker.create_topic(name, parts).map_err(|e| e.to_string()));
        if let Err(e) = created {
            return super::bad_input(e);
        }
    }
    for s in &args.seed {
        let seeded = parse_seed(s).and_then(|(t, f)| {
            broker
                .seed_jsonl(&t, &f)
                .map(|n| (t, n))
                .map_err(|e| e.to_string())
        });
        match seeded {
            Ok((t, n)) => eprintln!("weir broker: seeded {n} messages into `{t}`"),
            Err(e) => return super::bad_input(e),
        }
    }
    let registry = match args
        .schema_registry
        .as_deref()
        .map(crate::schema::devserver::DevRegistry::start)
    {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => return super::bad_input(e),
        None => None,
    };
    println!("{}", broker.bootstrap());
    if let Some(r) = &registry {
        println!("{}", r.url());
        eprintln!(
            "weir broker: schema registry (development only) at {}",
            r.url()
        );
    }
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let result = match words[..] {
            ["down", id] | ["up", id] => match id.parse::<i32>() {
                Ok(id) => broker.set_broker_up(id, words[0] == "up"),
                Err(_) => {
                    eprintln!("weir broker: `{line}`: ID is a broker number");
                    continue;
                }
            },
            ["create", topic] => match parse_topic(topic) {
                Ok((name, parts)) => broker.create_topic(name, parts),
                Err(e) => {
                    eprintln!("weir broker: {e}");
                    continue;
                }
            },
            ["refuse-topic", topic, error] => broker.refuse_topic(topic, error),
            ["registry-down"] | ["registry-up"] => {
                match &registry {
                    Some(r) => {
                        r.set_down(words[0] == "registry-down");
                        Ok(())
                    }
                    None => {
                        eprintln!("weir broker: `{line}`: no schema registry (start with --schema-registry)");
                        continue;
                    }
                }
            }
            ["refuse", api, error, count] => match count.parse::<usize>() {
                Ok(n) => broker.refuse_requests(api, error, n),
                Err(_) => {
                    eprintln!("weir broker: `{line}`: COUNT is a number");
                    continue;
                }
            },
            [] => continue,
            _ => {
                eprintln!(
                    "weir broker: commands are `down ID`, `up ID`, `create TOPIC[:PARTITIONS]`, `refuse-topic TOPIC ERROR`, `refuse API ERROR COUNT`, `registry-down` and `registry-up`"
                );
                continue;
            }
        };
        match result {
            Ok(()) => eprintln!("weir broker: {line}: ok"),
            Err(e) => eprintln!("weir broker: {line}: {e}"),
        }
    }
    ExitCode::SUCCESS
}
