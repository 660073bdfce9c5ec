//! The stage's `config` map from the pipeline YAML.

use std::collections::BTreeMap;
use std::str::FromStr;

/// The `config` map of a stage, as given in the YAML (values rendered as strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    /// A config from key/value pairs.
    ///
    /// ```
    /// // For native tests: the map the YAML `config:` would give.
    /// let config = weir_sdk::Config::from_pairs([("field", "status"), ("equals", "paid")]);
    /// assert_eq!(config.get("field"), Some("status"));
    /// ```
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Config {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `key`, if set.
    ///
    /// ```
    /// let config = weir_sdk::Config::from_pairs([("prefix", "eu-")]);
    /// let prefix = config.get("prefix").unwrap_or("");
    /// assert_eq!(prefix, "eu-");
    /// ```
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The value of `key`, or an error naming the missing key.
    ///
    /// ```
    /// use weir_sdk::Config;
    ///
    /// fn setup(config: &Config) -> Result<String, String> {
    ///     Ok(config.require("field")?.to_owned()) // the error stops start-up, naming the stage
    /// }
    /// assert_eq!(setup(&Config::default()), Err("missing config key `field`".to_owned()));
    /// ```
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("missing config key `{key}`"))
    }

    /// The value of `key` when it is set and not empty. `--config word=` and `word: ""` in the
    /// YAML give an empty value; use this where empty means "not given".
    ///
    /// ```
    /// let config = weir_sdk::Config::from_pairs([("prefix", "")]);
    /// assert_eq!(config.non_empty("prefix").unwrap_or("eu-"), "eu-");
    /// ```
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// The value of `key`, or an error naming the key when it is missing or empty.
    ///
    /// ```
    /// let config = weir_sdk::Config::from_pairs([("field", "")]);
    /// assert_eq!(config.require_non_empty("field"), Err("config key `field` is empty".to_owned()));
    /// ```
    pub fn require_non_empty(&self, key: &str) -> Result<&str, String> {
        match self.require(key)? {
            "" => Err(format!("config key `{key}` is empty")),
            v => Ok(v),
        }
    }

    /// `key` parsed as `T`, or `default` when unset; an error names the key and the bad value.
    ///
    /// ```
    /// let config = weir_sdk::Config::from_pairs([("max_bytes", "4096")]);
    /// assert_eq!(config.parse_or("max_bytes", 1024_usize), Ok(4096));
    /// assert_eq!(config.parse_or("min_bytes", 0_usize), Ok(0));
    /// ```
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|e| format!("config key `{key}`: cannot parse {v:?}: {e}")),
        }
    }

    /// All keys and values, sorted by key.
    ///
    /// ```
    /// let config = weir_sdk::Config::from_pairs([("b", "2"), ("a", "1")]);
    /// let keys: Vec<&str> = config.iter().map(|(k, _)| k).collect();
    /// assert_eq!(keys, ["a", "b"]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}
