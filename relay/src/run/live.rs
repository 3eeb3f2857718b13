//! A running Graph's progress as the relay keeps it (`domain::progress`): only the newest
//! message and fraction and the last log lines, never a backlog. The Graph's stderr reader
//! ([`crate::run::executor`]) writes here; the run's supervisor ([`crate::run::agent::command`]) forwards a
//! snapshot at most every [`FORWARD_EVERY`](domain::progress::FORWARD_EVERY), so a Graph that
//! prints a thousand lines a second costs the server one write per forward.

use std::collections::VecDeque;
use std::sync::Mutex;

use domain::progress::{MAX_TAIL_LINE_CHARS, MAX_TAIL_LINES, Progress};
use tokio::sync::Notify;

/// One run's newest progress.
#[derive(Debug, Default)]
pub struct Live {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    message: String,
    fraction: Option<f64>,
    tail: VecDeque<String>,
    /// Counts changes: a forward remembers the version it sent.
    version: u64,
}

impl Live {
    fn change(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut s);
        s.version += 1;
        drop(s);
        self.changed.notify_one();
    }

    /// The Graph's progress line: its message and fraction (a line without a fraction keeps
    /// none: the Graph says what it knows now).
    pub fn progress(&self, message: &str, fraction: Option<f64>) {
        let message = domain::limits::cut_chars(message, domain::progress::MAX_MESSAGE_CHARS).to_owned();
        self.change(|s| {
            s.message = message;
            s.fraction = fraction;
        });
    }

    /// One line of the Graph's log (kept among the last [`MAX_TAIL_LINES`], each cut).
    pub fn log(&self, line: &str) {
        let line = domain::limits::cut_chars(line.trim_end(), MAX_TAIL_LINE_CHARS).to_owned();
        self.change(|s| {
            if s.tail.len() == MAX_TAIL_LINES {
                s.tail.pop_front();
            }
            s.tail.push_back(line);
        });
    }

    /// The number of changes so far (0: the Graph said nothing yet).
    pub fn version(&self) -> u64 {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).version
    }

    /// The newest state, bounded, with its version.
    pub fn snapshot(&self) -> (u64, Progress) {
        let s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let p = Progress { message: s.message.clone(), fraction: s.fraction, tail: s.tail.iter().cloned().collect() };
        (s.version, p.bounded())
    }

    /// Resolves after the next change (or at once if one happened since the last wait).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_state_is_kept_and_it_is_bounded() {
        let live = Live::default();
        assert_eq!(live.version(), 0);
        for i in 0..1_000 {
            live.log(&format!("line {i} {}", "x".repeat(1_000)));
        }
        live.progress("halfway", Some(0.5));
        let (v, p) = live.snapshot();
        assert_eq!(v, 1_001);
        assert_eq!((p.message.as_str(), p.fraction), ("halfway", Some(0.5)));
        assert!(p.tail.len() <= MAX_TAIL_LINES && p.tail.last().unwrap().starts_with("line 999 "));
        p.validate().unwrap();
    }
}
