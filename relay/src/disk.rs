//! What the relay keeps on disk so that a crash or a lost response never loses a result.
//!
//! - **Outbox** (`outbox/<command_id>.json`): a completion is written and fsynced *before* it
//!   is posted, and removed only after the server answered (2xx, or a 409 that says the run is
//!   already over).
//! - **Start journal** (`journal/<command_id>.json`): written before `start` is posted and
//!   removed once the completion is in the outbox. An entry found at start-up means the relay
//!   died mid-run: it becomes a `failed` completion with `relay restarted during run`.
//!
//! Writes go to a temporary file, are fsynced, renamed into place, and the directory is fsynced.

use std::path::{Path, PathBuf};

use domain::ids::CommandId;
use domain::runs::Completion;
use serde::{Deserialize, Serialize};

/// A JSON file per command in one directory, written durably.
#[derive(Debug, Clone)]
pub struct Dir {
    path: PathBuf,
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

impl Dir {
    /// Opens (creating) `path`.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(path: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&path)?;
        Ok(Self { path })
    }

    fn file(&self, id: CommandId) -> PathBuf {
        self.path.join(format!("{id}.json"))
    }

    /// Writes `value` for `id`, durably.
    ///
    /// # Errors
    /// I/O errors.
    pub fn put<T: Serialize>(&self, id: CommandId, value: &T) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self.path.join(format!(".{id}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.file(id))?;
        sync_dir(&self.path)
    }

    /// Removes the entry for `id` (fine if absent).
    ///
    /// # Errors
    /// I/O errors other than "not found".
    pub fn remove(&self, id: CommandId) -> std::io::Result<()> {
        match std::fs::remove_file(self.file(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => sync_dir(&self.path),
        }
    }

    /// Whether there is an entry for `id`.
    pub fn contains(&self, id: CommandId) -> bool {
        self.file(id).exists()
    }

    /// Every entry, oldest file first; unreadable files are skipped with a warning.
    pub fn list<T: for<'de> Deserialize<'de>>(&self) -> Vec<(CommandId, T)> {
        let mut entries: Vec<(std::time::SystemTime, CommandId, T)> = Vec::new();
        for e in std::fs::read_dir(&self.path).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json").and_then(|s| CommandId::parse("command_id", s).ok()) else {
                continue;
            };
            match std::fs::read(e.path()).map(|b| serde_json::from_slice::<T>(&b)) {
                Ok(Ok(v)) => {
                    let at = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                    entries.push((at, id, v));
                }
                _ => tracing::warn!(file = %e.path().display(), "skipping an unreadable state file"),
            }
        }
        entries.sort_by_key(|(at, id, _)| (*at, *id));
        entries.into_iter().map(|(_, id, v)| (id, v)).collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        std::fs::read_dir(&self.path)
            .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json")).count())
            .unwrap_or(0)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A start-journal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The execution id sent with `start`.
    pub execution_id: String,
}

/// The outbox and the journal under one state directory.
#[derive(Debug, Clone)]
pub struct State {
    /// Completions not yet acknowledged.
    pub outbox: Dir,
    /// Runs started and not yet in the outbox.
    pub journal: Dir,
    /// `status.json` lives here.
    pub root: PathBuf,
}

impl State {
    /// Opens (creating) the state directory.
    ///
    /// # Errors
    /// When it cannot be created.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        Ok(Self {
            outbox: Dir::open(root.join("outbox"))?,
            journal: Dir::open(root.join("journal"))?,
            root: root.to_path_buf(),
        })
    }

    /// Turns journal entries left by a relay that died mid-run into `failed` completions
    /// (`relay restarted during run`) in the outbox. Returns how many.
    ///
    /// # Errors
    /// I/O errors.
    pub fn recover(&self) -> std::io::Result<usize> {
        let mut n = 0;
        for (id, started) in self.journal.list::<Started>() {
            if !self.outbox.contains(id) {
                let c = Completion {
                    execution_id: started.execution_id,
                    status: domain::runs::FinalStatus::Failed,
                    result: None,
                    result_truncated: false,
                    error: Some(domain::errors::RELAY_RESTARTED.to_owned()),
                    total_tokens: None,
                    reported_cost: None,
                };
                self.outbox.put(id, &c)?;
                n += 1;
            }
            self.journal.remove(id)?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_entries_become_failed_completions_on_recovery() {
        let root = std::env::temp_dir().join(format!("relay-state-{}", uuid::Uuid::new_v4()));
        let state = State::open(&root).unwrap();
        let (a, b) = (CommandId::generate(), CommandId::generate());
        state.journal.put(a, &Started { execution_id: "e-a".into() }).unwrap();
        state.journal.put(b, &Started { execution_id: "e-b".into() }).unwrap();
        // b finished and reached the outbox before the crash; its real result must survive.
        let done = Completion {
            execution_id: "e-b".into(),
            status: domain::runs::FinalStatus::Completed,
            result: Some("r".into()),
            result_truncated: false,
            error: None,
            total_tokens: None,
            reported_cost: None,
        };
        state.outbox.put(b, &done).unwrap();
        assert_eq!(state.recover().unwrap(), 1);
        assert!(state.journal.is_empty());
        let out: Vec<(CommandId, Completion)> = state.outbox.list();
        let failed = out.iter().find(|(id, _)| *id == a).unwrap();
        assert_eq!(failed.1.error.as_deref(), Some("relay restarted during run"));
        assert_eq!(out.iter().find(|(id, _)| *id == b).unwrap().1, done);
        let _ = std::fs::remove_dir_all(root);
    }
}
