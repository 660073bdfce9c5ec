//! A stage's rollout policy: how a new version of its plugin goes live.
//!
//! ```yaml
//! rollout:
//!   mode: shadow                 # immediate (default) | shadow | canary
//!   share: 10%                   # canary: share of lanes (by: lane) or of keys (by: key)
//!   by: lane
//!   observe: 100000 messages     # or a duration: 10m
//!   rollback_when: { trap: 1, fail: 1, reject_rate: +2%, diff_rate: 0.5%, slower: 2x }
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

/// How a new version of a stage goes live. See `docs/rollouts.md`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutConfig {
    /// `immediate`: a new version replaces the live one at the next batch boundary.
    /// `shadow`: it runs on the same messages after the live version, its answers are compared
    /// and never delivered. `canary`: it processes a share of the traffic and its answers are
    /// delivered. Shadow and canary end in promotion or rollback.
    #[serde(default)]
    pub mode: RolloutMode,
    /// Canary: the share of lanes (`by: lane`) or of keys (`by: key`) the candidate processes.
    #[serde(default = "default_share")]
    pub share: Percent,
    /// Canary: `lane` sends whole partitions to the candidate; `key` sends messages by a hash
    /// of their key (messages without a key stay on the live version).
    #[serde(default)]
    pub by: CanaryBy,
    /// How long the candidate is observed before it is promoted: a number of messages it
    /// answered (`100000 messages`) or a time (`10m`).
    #[serde(default = "default_observe")]
    pub observe: Observe,
    /// Any one of these rolls the candidate back at once.
    #[serde(default)]
    pub rollback_when: RollbackWhen,
    /// A candidate to start the pipeline with (relative to the YAML file): the stage's
    /// `plugin` is the live version, this one is tried under the policy from the start.
    #[serde(default)]
    pub candidate: Option<PathBuf>,
    /// Shadow: a JSONL file for the first differences found (both answers and the input's
    /// source offset), relative to the YAML file. Truncated when a rollout starts.
    #[serde(default)]
    pub differences: Option<PathBuf>,
    /// How many differences are kept for the status verb and the file.
    #[serde(default = "default_max_differences")]
    pub max_differences: usize,
}

fn default_share() -> Percent {
    Percent(0.1)
}
fn default_observe() -> Observe {
    Observe::Messages(10_000)
}
fn default_max_differences() -> usize {
    20
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            mode: RolloutMode::default(),
            share: default_share(),
            by: CanaryBy::default(),
            observe: default_observe(),
            rollback_when: RollbackWhen::default(),
            candidate: None,
            differences: None,
            max_differences: default_max_differences(),
        }
    }
}

/// How a new version goes live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutMode {
    /// Replace the live version at the next batch boundary (no observation).
    #[default]
    Immediate,
    /// Run beside the live version on the same messages; compare; never deliver.
    Shadow,
    /// Process a share of the traffic; deliver.
    Canary,
}

impl RolloutMode {
    /// The YAML name.
    pub fn name(self) -> &'static str {
        match self {
            RolloutMode::Immediate => "immediate",
            RolloutMode::Shadow => "shadow",
            RolloutMode::Canary => "canary",
        }
    }
}

impl FromStr for RolloutMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "immediate" => Ok(RolloutMode::Immediate),
            "shadow" => Ok(RolloutMode::Shadow),
            "canary" => Ok(RolloutMode::Canary),
            _ => Err(format!(
                "unknown rollout mode {s:?}: expected `shadow`, `canary` or `immediate`"
            )),
        }
    }
}

/// What a canary's share is a share of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CanaryBy {
    /// Whole lanes (partitions).
    #[default]
    Lane,
    /// Message keys, hashed.
    Key,
}

impl FromStr for CanaryBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lane" => Ok(CanaryBy::Lane),
            "key" => Ok(CanaryBy::Key),
            _ => Err(format!(
                "unknown canary split {s:?}: expected `lane` or `key`"
            )),
        }
    }
}

/// The rollback conditions, each measured on the candidate against the live version.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackWhen {
    /// Roll back at this many traps (including timeouts, memory and output caps); 0: never.
    #[serde(default = "one")]
    pub trap: u64,
    /// Roll back at this many `fail` answers; 0: never.
    #[serde(default = "one")]
    pub fail: u64,
    /// Roll back when the candidate's reject share is higher than the live version's by more
    /// than this many points (`+2%`). `off` disables it.
    #[serde(default = "default_reject_rate", deserialize_with = "optional_text")]
    #[schemars(with = "Option<String>")]
    pub reject_rate: Option<Percent>,
    /// Shadow: roll back when more than this share of messages got a different answer
    /// (`0.5%`). `off` disables it.
    #[serde(default = "default_diff_rate", deserialize_with = "optional_text")]
    #[schemars(with = "Option<String>")]
    pub diff_rate: Option<Percent>,
    /// Roll back when the candidate takes this many times the live version's time per
    /// message (`2x`). Default `off`: time is noisy on a shared machine.
    #[serde(default, deserialize_with = "optional_text")]
    #[schemars(with = "Option<String>")]
    pub slower: Option<Factor>,
}

fn one() -> u64 {
    1
}
fn default_reject_rate() -> Option<Percent> {
    Some(Percent(0.02))
}
fn default_diff_rate() -> Option<Percent> {
    Some(Percent(0.01))
}

impl Default for RollbackWhen {
    fn default() -> Self {
        RollbackWhen {
            trap: one(),
            fail: one(),
            reject_rate: default_reject_rate(),
            diff_rate: default_diff_rate(),
            slower: None,
        }
    }
}

/// A share written as a percentage (`10%`, `0.5%`, `+2%`), held as a fraction. `off` in YAML
/// where it is optional.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Percent(pub f64);

impl FromStr for Percent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid share {s:?}: expected a percentage such as `10%` or `0.5%`");
        let n = s.trim().trim_start_matches('+');
        let n = n.strip_suffix('%').ok_or_else(bad)?;
        let v: f64 = n.trim().parse().map_err(|_| bad())?;
        if !(0.0..=100.0).contains(&v) {
            return Err(format!("invalid share {s:?}: must be between 0% and 100%"));
        }
        Ok(Percent(v / 100.0))
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", (self.0 * 1e6).round() / 1e4)
    }
}

/// A ratio written `2x` (or a plain number).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Factor(pub f64);

impl FromStr for Factor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let n = s.trim();
        let n = n.strip_suffix(['x', '×']).unwrap_or(n);
        match n.trim().parse::<f64>() {
            Ok(v) if v >= 1.0 => Ok(Factor(v)),
            _ => Err(format!(
                "invalid factor {s:?}: expected a ratio of at least 1 such as `2x`"
            )),
        }
    }
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x", self.0)
    }
}

/// An observation window: messages the candidate answered, or time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    /// This many messages answered by the candidate.
    Messages(u64),
    /// This long since the rollout started.
    Time(Duration),
}

impl FromStr for Observe {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let count = ["messages", "message", "msgs", "msg"]
            .iter()
            .find_map(|unit| t.strip_suffix(unit));
        if let Some(n) = count {
            return n
                .trim()
                .replace('_', "")
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(Observe::Messages)
                .ok_or_else(|| format!("invalid window {s:?}: expected e.g. `100000 messages`"));
        }
        humantime::parse_duration(t)
            .ok()
            .filter(|d| !d.is_zero())
            .map(Observe::Time)
            .ok_or_else(|| {
                format!("invalid window {s:?}: expected a message count (`100000 messages`) or a duration (`10m`)")
            })
    }
}

impl fmt::Display for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observe::Messages(n) => write!(f, "{n} messages"),
            Observe::Time(d) => write!(f, "{}", humantime::format_duration(*d)),
        }
    }
}

/// Deserializes any `FromStr` type from a YAML string (numbers are read as their text).
fn from_text<'de, D: Deserializer<'de>, T: FromStr<Err = String>>(d: D) -> Result<T, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(f64),
        S(String),
    }
    let text = match Raw::deserialize(d)? {
        Raw::N(n) => n.to_string(),
        Raw::S(s) => s,
    };
    text.parse().map_err(serde::de::Error::custom)
}

/// `off` (or `none`) for an optional threshold.
fn optional_text<'de, D: Deserializer<'de>, T: FromStr<Err = String>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(f64),
        S(String),
        B(bool),
    }
    let text = match Option::<Raw>::deserialize(d)? {
        None | Some(Raw::B(false)) => return Ok(None),
        Some(Raw::B(true)) => return Err(serde::de::Error::custom("expected a value or `off`")),
        Some(Raw::N(n)) => n.to_string(),
        Some(Raw::S(s)) => s,
    };
    if matches!(text.trim(), "off" | "none") {
        return Ok(None);
    }
    text.parse().map(Some).map_err(serde::de::Error::custom)
}

macro_rules! text_type {
    ($t:ty, $name:literal, $what:literal) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                from_text(d)
            }
        }
        impl JsonSchema for $t {
            fn schema_name() -> String {
                $name.into()
            }
            fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
                let mut s = <String as JsonSchema>::json_schema(gen).into_object();
                s.metadata().description = Some($what.into());
                s.into()
            }
        }
    };
}

text_type!(Percent, "Percent", "A percentage: `10%`, `0.5%`, `+2%`.");
text_type!(Factor, "Factor", "A ratio: `2x`.");
text_type!(
    Observe,
    "Observe",
    "A window: a message count (`100000 messages`) or a duration (`10m`)."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_units() {
        assert_eq!("10%".parse::<Percent>().unwrap(), Percent(0.1));
        assert_eq!("+2%".parse::<Percent>().unwrap(), Percent(0.02));
        assert!("10".parse::<Percent>().is_err());
        assert!("120%".parse::<Percent>().is_err());
        assert_eq!("2x".parse::<Factor>().unwrap(), Factor(2.0));
        assert!("0.5x".parse::<Factor>().is_err());
        assert_eq!(
            "100_000 messages".parse::<Observe>().unwrap(),
            Observe::Messages(100_000)
        );
        assert_eq!(
            "10m".parse::<Observe>().unwrap(),
            Observe::Time(Duration::from_secs(600))
        );
        assert!("soon".parse::<Observe>().is_err());
        assert!("0 messages".parse::<Observe>().is_err());
    }
}
