//! Byte sizes in human form: `64MiB`, `1 MB`, `4096`.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

/// A number of bytes, written `64MiB`, `512KiB`, `1MB` or a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size as `usize`.
    pub fn bytes(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        bytesize::ByteSize::from_str(s.trim())
            .map(|b| ByteSize(b.as_u64()))
            .map_err(|_| {
                format!(
                    "invalid size {s:?}: expected e.g. `64MiB`, `512KiB`, `1MB` or a byte count"
                )
            })
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Exact sizes print the way they are written in YAML (`64MiB`), others approximately.
        for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return write!(f, "{}{name}", self.0 / unit);
            }
        }
        if self.0 < 1024 {
            return write!(f, "{}B", self.0);
        }
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> String {
        "ByteSize".into()
    }

    fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        let mut s = <String as JsonSchema>::json_schema(gen).into_object();
        s.metadata().description = Some("A size: `64MiB`, `512KiB`, `1MB` or a byte count.".into());
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_human_sizes() {
        assert_eq!("64MiB".parse::<ByteSize>().unwrap(), ByteSize(64 << 20));
        assert_eq!("1 KiB".parse::<ByteSize>().unwrap(), ByteSize(1024));
        assert_eq!("1MB".parse::<ByteSize>().unwrap(), ByteSize(1_000_000));
        assert!("lots".parse::<ByteSize>().is_err());
    }
}
