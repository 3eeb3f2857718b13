//! # settings — settings from the environment, for every binary (the Lambda functions' typed configs in
//! `lambda::config`, the local server's in `local::config`): read through a small [`Reader`]
//! over a lookup function (the environment in `main`, a map in tests), every key a named
//! constant at its user, every bad value collected, and all of them reported together in one
//! [`ConfigError`] before the process does any work.

use std::ops::RangeInclusive;
use std::time::Duration;

use domain::limits::Policy;

/// Every bad setting, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad configuration:\n{}", .problems.join("\n"))]
pub struct ConfigError {
    /// `KEY: what is wrong`, in the order the keys are read.
    pub problems: Vec<String>,
}

/// The keys of the time policy's configurable parts (each binary spells them its own way).
#[derive(Debug, Clone, Copy)]
pub struct PolicyKeys {
    /// The claim lease in seconds, if this binary lets it be set.
    pub lease: Option<&'static str>,
    /// Seconds without a control poll before a run reads `desktop stopped reporting`.
    pub heartbeat_timeout: &'static str,
    /// Seconds between relay polls the server asks for.
    pub poll_interval: &'static str,
    /// Pairings one source address may start per hour.
    pub pairings_per_source: &'static str,
    /// Requests one owner may make a minute on each surface (`domain::budget`).
    pub owner_requests_per_minute: &'static str,
}

/// Reads settings through `get`, collecting every problem.
pub struct Reader<F> {
    get: F,
    errors: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Reader<F> {
    /// A reader over `get` (`None` = unset).
    pub fn new(get: F) -> Self {
        Self { get, errors: Vec::new() }
    }

    /// The value of `key`, if set.
    pub fn optional(&self, key: &str) -> Option<String> {
        (self.get)(key)
    }

    /// Records a problem with `key`.
    pub fn problem(&mut self, key: &str, what: impl std::fmt::Display) {
        self.errors.push(format!("{key}: {what}"));
    }

    /// The value of `key`, or a "required" problem.
    pub fn get_required(&mut self, key: &str) -> Option<String> {
        let v = (self.get)(key);
        if v.is_none() {
            self.problem(key, "required");
        }
        v
    }

    /// The value of `key`, or a "required" problem and an empty string.
    pub fn required(&mut self, key: &str) -> String {
        self.get_required(key).unwrap_or_default()
    }

    /// An `http(s)` base URL without its trailing slash, if set: parsed as a URL with a host
    /// and nothing but a path after it (no user, query or fragment), and refused with any
    /// whitespace or control character — the value flows into tokens' issuer, printed banners,
    /// redirects and the installer script, where a newline would start a new line of them.
    pub fn optional_url(&mut self, key: &str) -> Option<String> {
        let raw = (self.get)(key)?;
        let v = raw.trim_end_matches('/').to_owned();
        let problem = base_url_problem(&v);
        match problem {
            None => Some(v),
            Some(p) => {
                self.problem(key, format!("{p} (got {raw:?})"));
                None
            }
        }
    }

    /// A required `http(s)` URL, without its trailing slash.
    pub fn url(&mut self, key: &str) -> Option<String> {
        self.get_required(key)?;
        self.optional_url(key)
    }

    /// A whole number > 0, or `default` when unset.
    pub fn count(&mut self, key: &str, default: usize) -> usize {
        match (self.get)(key) {
            None => default,
            Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).unwrap_or_else(|| {
                self.problem(key, format!("must be a whole number > 0 (got {v:?})"));
                default
            }),
        }
    }

    /// A whole number of seconds > 0, or `default` when unset.
    pub fn seconds(&mut self, key: &str, default: Duration) -> Duration {
        match (self.get)(key) {
            None => default,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n > 0 => Duration::from_secs(n),
                _ => {
                    self.problem(key, format!("must be a whole number of seconds > 0 (got {v:?})"));
                    default
                }
            },
        }
    }

    /// Whole seconds within `range`, or `default` when unset.
    pub fn seconds_within(&mut self, key: &str, default: u32, range: RangeInclusive<u32>) -> u32 {
        match (self.get)(key) {
            None => default,
            Some(v) => v.parse().ok().filter(|n| range.contains(n)).unwrap_or_else(|| {
                self.problem(key, format!("must be {} to {} seconds (got {v:?})", range.start(), range.end()));
                default
            }),
        }
    }

    /// A port number, or `default` when unset.
    pub fn port(&mut self, key: &str, default: u16) -> u16 {
        match (self.get)(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                self.problem(key, format!("must be a port number 0-65535 (got {v:?})"));
                default
            }),
        }
    }

    /// `true` or `false`, or `default` when unset.
    pub fn flag(&mut self, key: &str, default: bool) -> bool {
        match (self.get)(key).as_deref() {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                self.problem(key, format!("must be true or false (got {other:?})"));
                default
            }
        }
    }

    /// The time policy: the defaults, with the parts `keys` name as set.
    pub fn policy(&mut self, keys: PolicyKeys) -> Policy {
        let d = Policy::default();
        Policy {
            lease: keys.lease.map_or(d.lease, |k| self.seconds(k, d.lease)),
            heartbeat_timeout: self.seconds(keys.heartbeat_timeout, d.heartbeat_timeout),
            poll_interval: self.seconds(keys.poll_interval, d.poll_interval),
            pairings_per_source_per_hour: u32::try_from(
                self.count(keys.pairings_per_source, d.pairings_per_source_per_hour as usize),
            )
            .unwrap_or(u32::MAX),
            owner_requests_per_minute: u32::try_from(
                self.count(keys.owner_requests_per_minute, d.owner_requests_per_minute as usize),
            )
            .unwrap_or(u32::MAX),
            ..d
        }
    }

    /// `value`, or every problem found.
    ///
    /// # Errors
    /// [`ConfigError`] when any setting was bad.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.errors.is_empty() { Ok(value) } else { Err(ConfigError { problems: self.errors }) }
    }
}

/// Why `v` is not a base URL the stack can announce, or `None` when it is one.
pub fn base_url_problem(v: &str) -> Option<&'static str> {
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("must be an http(s) URL without spaces or control characters");
    }
    if !(v.starts_with("https://") || v.starts_with("http://")) {
        return Some("must be an http(s) URL");
    }
    match url::Url::parse(v) {
        Err(_) => Some("must be an http(s) URL"),
        Ok(u) if u.host_str().is_none_or(str::is_empty) => Some("must be an http(s) URL with a host"),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            Some("must be an http(s) URL without a user or password")
        }
        Ok(u) if u.query().is_some() || u.fragment().is_some() => {
            Some("must be an http(s) URL without a query or fragment")
        }
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn every_problem_is_reported_together_naming_its_key() {
        let m: HashMap<&str, &str> = [("A", "x"), ("B", "0"), ("C", "ftp://h"), ("D", "maybe")].into();
        let mut r = Reader::new(|k: &str| m.get(k).map(|v| (*v).to_owned()));
        r.count("A", 1);
        r.seconds("B", Duration::from_secs(1));
        r.optional_url("C");
        r.flag("D", false);
        r.required("E");
        let e = r.finish(()).unwrap_err();
        let keys: Vec<&str> = e.problems.iter().filter_map(|p| p.split(':').next()).collect();
        assert_eq!(keys, ["A", "B", "C", "D", "E"], "{e}");
    }

    #[test]
    fn base_urls_are_parsed_not_prefix_checked() {
        for ok in ["https://x.example", "http://127.0.0.1:8787", "https://t.example/base", "http://[::1]:9"] {
            assert_eq!(base_url_problem(ok), None, "{ok}");
        }
        for bad in [
            "https://x.example\nEvil: 1",
            "https://x.example\r",
            "https://x .example",
            "https://x.example\t",
            "https://",
            "http://user:pw@x.example",
            "https://x.example?a=1",
            "https://x.example#f",
            "ftp://x.example",
            "https://x.exa\u{0}mple",
        ] {
            assert!(base_url_problem(bad).is_some(), "{bad:?} must be refused");
        }
        let m: HashMap<&str, &str> = [("U", "https://x.example\n")].into();
        let mut r = Reader::new(|k: &str| m.get(k).map(|v| (*v).to_owned()));
        assert_eq!(r.optional_url("U"), None);
        let e = r.finish(()).unwrap_err();
        assert!(e.problems[0].starts_with("U: must be an http(s) URL without spaces"), "{e}");
    }
}
