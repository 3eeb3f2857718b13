//! A running Graph's progress and a desktop's slots (SPEC §5).
//!
//! **The channel.** A Graph reports progress by writing a JSON line on **stderr**:
//!
//! ```text
//! {"progress": "Reading page 3 of 10", "fraction": 0.3}
//! ```
//!
//! `progress` (a string) makes the line a progress line; `fraction` (0 to 1) is optional. Every
//! other stderr line is the Graph's log, whose last lines ([`MAX_TAIL_LINES`]) travel with the
//! newest progress as its `tail`. Why stderr: stdout is the result, and a result may be plain text
//! — a progress line there could not be told from a result's line; stderr is already the log
//! (its end is a failed run's error), so a Graph that runs outside the relay simply logs the line;
//! and unlike an extra file descriptor it survives shell wrappers and needs nothing from the
//! Graph but a `print(..., file=sys.stderr, flush=True)`.
//!
//! **Forwarding.** The relay keeps only the newest state and forwards it at most every
//! [`FORWARD_EVERY`], on the control check it makes anyway (`POST /commands/{id}/control`): one
//! write on the server per forward, the heartbeat write it replaces. Everything is bounded here
//! ([`Progress::bounded`] on the relay, [`Progress::validate`] on the server).
//!
//! **Slots.** A relay runs at most `max_parallel` commands at once (default 1: the seed's serial
//! desktop; at most [`MAX_PARALLEL`]); each sync says how many slots are free and the server hands
//! out at most that many commands.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::errors::InputError;
use crate::limits::{char_len, cut_chars};

/// Most characters of a progress message.
pub const MAX_MESSAGE_CHARS: usize = 200;
/// Most log lines a progress carries.
pub const MAX_TAIL_LINES: usize = 10;
/// Most characters of one log line in the tail (longer lines are cut).
pub const MAX_TAIL_LINE_CHARS: usize = 300;
/// Most characters of the whole tail.
pub const MAX_TAIL_CHARS: usize = 2_000;
/// The relay forwards a run's newest progress at most this often.
pub const FORWARD_EVERY: Duration = Duration::from_secs(10);
/// Most slots a relay may have (`max_parallel`), and most free slots a sync may claim.
pub const MAX_PARALLEL: u32 = 16;

/// What a running Graph last said of itself.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Progress {
    /// The Graph's own words (its last `progress` line); empty when it only logged.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_MESSAGE_CHARS)))]
    pub message: String,
    /// How far along, 0 to 1, when the Graph says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0, max = 1.0)))]
    pub fraction: Option<f64>,
    /// The last lines of its log (stderr without the progress lines), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_TAIL_LINES)))]
    pub tail: Vec<String>,
}

impl Progress {
    /// Checks every bound.
    ///
    /// # Errors
    /// [`InputError`] naming `progress.message`, `progress.fraction` or `progress.tail`.
    pub fn validate(&self) -> Result<(), InputError> {
        let n = char_len(&self.message);
        if n > MAX_MESSAGE_CHARS {
            return Err(InputError::new(
                "progress.message",
                format!("must be at most {MAX_MESSAGE_CHARS} characters (got {n})"),
            ));
        }
        if let Some(f) = self.fraction
            && !(0.0..=1.0).contains(&f)
        {
            return Err(InputError::new("progress.fraction", format!("must be between 0 and 1 (got {f})")));
        }
        if self.tail.len() > MAX_TAIL_LINES {
            return Err(InputError::new(
                "progress.tail",
                format!("at most {MAX_TAIL_LINES} lines (got {})", self.tail.len()),
            ));
        }
        let total: usize = self.tail.iter().map(|l| char_len(l)).sum();
        if total > MAX_TAIL_CHARS {
            return Err(InputError::new(
                "progress.tail",
                format!("at most {MAX_TAIL_CHARS} characters in all (got {total})"),
            ));
        }
        if let Some(l) = self.tail.iter().find(|l| char_len(l) > MAX_TAIL_LINE_CHARS || l.contains(['\n', '\r'])) {
            return Err(InputError::new(
                "progress.tail",
                format!(
                    "each line at most {MAX_TAIL_LINE_CHARS} characters, without line breaks (got {})",
                    char_len(l)
                ),
            ));
        }
        Ok(())
    }

    /// The same progress cut to every bound (what the relay sends): the message and each line
    /// cut, a fraction outside 0–1 clamped (not a number: dropped), and the oldest lines dropped
    /// until the tail fits.
    #[must_use]
    pub fn bounded(mut self) -> Self {
        self.message = one_line(cut_chars(&self.message, MAX_MESSAGE_CHARS));
        self.fraction = self.fraction.filter(|f| f.is_finite()).map(|f| f.clamp(0.0, 1.0));
        let mut tail: Vec<String> =
            self.tail.iter().rev().take(MAX_TAIL_LINES).map(|l| one_line(cut_chars(l, MAX_TAIL_LINE_CHARS))).collect();
        let mut total = 0;
        let keep = tail
            .iter()
            .take_while(|l| {
                total += char_len(l);
                total <= MAX_TAIL_CHARS
            })
            .count();
        tail.truncate(keep);
        tail.reverse();
        self.tail = tail;
        self
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// A progress line of a Graph's stderr: its message and fraction, or `None` for a log line.
/// A line is a progress line when it is a JSON object whose `progress` is a string; a
/// `fraction` that is not a number is ignored.
pub fn parse_line(line: &str) -> Option<(String, Option<f64>)> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let message = v.get("progress")?.as_str()?.to_owned();
    Some((message, v.get("fraction").and_then(serde_json::Value::as_f64)))
}

/// A run's progress as the server keeps it: what the relay last forwarded, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunProgress {
    /// The forwarded progress.
    #[serde(flatten)]
    pub progress: Progress,
    /// When the server recorded it.
    pub updated_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_is_a_json_object_with_a_string_progress() {
        assert_eq!(parse_line(r#"{"progress": "step 2", "fraction": 0.5}"#), Some(("step 2".into(), Some(0.5))));
        assert_eq!(parse_line(r#"  {"progress":"x"}  "#), Some(("x".into(), None)));
        assert_eq!(parse_line(r#"{"progress":"x","fraction":"half"}"#), Some(("x".into(), None)));
        assert_eq!(parse_line(r#"{"progress": 3}"#), None, "not a string");
        assert_eq!(parse_line(r#"{"level":"info","msg":"hello"}"#), None, "a JSON log line");
        assert_eq!(parse_line("progress: 50%"), None);
        assert_eq!(parse_line(r#"{"progress": "unterminated"#), None);
    }

    #[test]
    fn bounded_progress_always_validates() {
        let p = Progress {
            message: "é".repeat(500),
            fraction: Some(1.5),
            tail: (0..50).map(|i| format!("line {i} {}\nnext", "x".repeat(400))).collect(),
        }
        .bounded();
        p.validate().unwrap();
        assert_eq!(char_len(&p.message), MAX_MESSAGE_CHARS);
        assert_eq!(p.fraction, Some(1.0));
        assert!(p.tail.last().unwrap().starts_with("line 49 "), "the newest lines are kept");
        assert!(p.tail.len() <= MAX_TAIL_LINES);
        assert_eq!(Progress { fraction: Some(f64::NAN), ..Progress::default() }.bounded().fraction, None);
    }

    #[test]
    fn validation_names_the_field_and_the_rule() {
        let long = Progress { message: "m".repeat(201), ..Progress::default() };
        assert_eq!(long.validate().unwrap_err().field, "progress.message");
        let f = Progress { fraction: Some(-0.1), ..Progress::default() };
        assert!(f.validate().unwrap_err().to_string().contains("between 0 and 1"));
        let lines = Progress { tail: vec!["a".into(); 11], ..Progress::default() };
        assert_eq!(lines.validate().unwrap_err().field, "progress.tail");
        let big = Progress { tail: vec!["a".repeat(300); 7], ..Progress::default() };
        assert!(big.validate().unwrap_err().to_string().contains("2000 characters in all"));
        let broken = Progress { tail: vec!["a\nb".into()], ..Progress::default() };
        assert!(broken.validate().is_err());
        Progress { message: "ok".into(), fraction: Some(0.0), tail: vec!["x".into()] }.validate().unwrap();
    }
}
