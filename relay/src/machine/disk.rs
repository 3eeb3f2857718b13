//! What the relay keeps on disk so that a crash or a lost response never loses a result.
//!
//! - **Outbox** (`outbox/<command_id>.json`): a completion is written and fsynced *before* it
//!   is posted, and removed only after the server answered (2xx, or a 409 that says the run is
//!   already over).
//! - **Start journal** (`journal/<command_id>.json`): written before `start` is posted (with
//!   the command, so the start can be retried), marked `running` once the server said so and
//!   *before* the graph is spawned, and removed once the completion is in the outbox. An entry
//!   not yet `running` is retried with the same execution id (the server replays it) until a
//!   definite answer: a lost `start` response never orphans a run. A `running` entry found at
//!   start-up means the relay died mid-run: it becomes a `failed` completion with `relay
//!   restarted during run` — a graph is never executed twice.
//! - **Synced projects** (`synced-projects.json`): the projects this relay last sent sessions
//!   for, so a project that dropped out of the config gets one last, empty sync.
//! - **Lock** (`lock`): held for the life of the process; a second relay on the same state
//!   folder refuses to start.
//!
//! Writes go to a temporary file, are fsynced, renamed into place, and the directory is fsynced.

use std::path::{Path, PathBuf};

use domain::ids::{CommandId, ProjectId};
use domain::relay::QueuedCommand;
use domain::runs::Completion;
use serde::{Deserialize, Serialize};

/// A JSON file per command in one directory, written durably.
#[derive(Debug, Clone)]
pub struct Dir {
    path: PathBuf,
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    sync_file(&std::fs::File::open(path)?)
}

/// Flushes `file` to stable storage. On macOS `File::sync_all` is `fcntl(F_FULLFSYNC)` (the
/// drive's own cache too), which SMB and FUSE home folders refuse (`ENOTSUP`, `EINVAL`): there
/// the relay falls back to `fsync(2)`, the most those file systems offer, instead of failing
/// every write of the outbox.
///
/// # Errors
/// Any other failure of the flush.
pub fn sync_file(file: &std::fs::File) -> std::io::Result<()> {
    with_fallback(file.sync_all(), || nix::unistd::fsync(file).map_err(std::io::Error::from))
}

/// `first`, or `fallback()` when `first` is "not supported here".
fn with_fallback(first: std::io::Result<()>, fallback: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
    match first {
        Err(e) if matches!(e.raw_os_error(), Some(errno) if unsupported(errno)) => {
            tracing::debug!(error = %e, "full fsync not supported on this file system; plain fsync");
            fallback()
        }
        other => other,
    }
}

/// ENOTSUP / EOPNOTSUPP / EINVAL, as this platform numbers them.
fn unsupported(errno: i32) -> bool {
    use nix::errno::Errno;
    [Errno::ENOTSUP, Errno::EOPNOTSUPP, Errno::EINVAL].iter().any(|e| *e as i32 == errno)
}

impl Dir {
    /// Opens (creating) `path`.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(path: PathBuf) -> std::io::Result<Self> {
        private_files::create_dir_all(&path)?;
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
        let mut f = private_files::options().open(&tmp)?;
        f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
        sync_file(&f)?;
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

    /// Every entry, oldest file first. A file that cannot be read as an entry (cut short by a
    /// crash, written by something else) is moved to the state folder's `quarantine/`, where
    /// `relay status` shows it, so it never blocks a pass again.
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
                _ => self.quarantine(&e.path(), &name),
            }
        }
        entries.sort_by_key(|(at, id, _)| (*at, *id));
        entries.into_iter().map(|(_, id, v)| (id, v)).collect()
    }

    /// Moves the unreadable `path` to `<state>/quarantine/<folder>-<name>`.
    fn quarantine(&self, path: &Path, name: &str) {
        let folder = self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let Some(quarantine) = self.path.parent().map(|root| root.join(QUARANTINE)) else { return };
        let target = quarantine.join(format!("{folder}-{name}"));
        match private_files::create_dir_all(&quarantine).and_then(|()| std::fs::rename(path, &target)) {
            Ok(()) => {
                tracing::error!(file = %path.display(), moved_to = %target.display(), "an unreadable state file was moved aside")
            }
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "an unreadable state file could not be moved aside")
            }
        }
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

/// The state folder's subfolder for unreadable files moved aside.
pub const QUARANTINE: &str = "quarantine";

/// A start-journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// The execution id sent with `start`.
    pub execution_id: String,
    /// The server answered `running` and the graph may have been spawned: never run it again.
    /// (Entries written by older relays have no field: treated as running.)
    #[serde(default = "yes")]
    pub running: bool,
    /// The project and command, to retry an unanswered `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<(ProjectId, QueuedCommand)>,
}

fn yes() -> bool {
    true
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
    /// The exclusive lock on the folder, held while this value lives.
    _lock: Option<std::sync::Arc<std::fs::File>>,
}

impl State {
    /// Opens (creating) the state directory and takes its exclusive lock: one relay per state
    /// folder (the login agent and a manual `relay run` would corrupt each other's journal).
    ///
    /// # Errors
    /// When it cannot be created, or another process holds the lock (the message says which).
    pub fn open(root: &Path) -> std::io::Result<Self> {
        private_files::create_dir_all(root)?;
        let path = root.join("lock");
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(private_files::FILE_MODE)
                .open(&path)?
        };
        if let Err(e) = file.try_lock() {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!(
                    "another relay is already running with the state folder {}{} ({e}); stop it first (relay uninstall, or its terminal)",
                    root.display(),
                    if holder.is_empty() { String::new() } else { format!(" (pid {holder})") }
                ),
            ));
        }
        {
            use std::io::{Seek, Write};
            file.set_len(0)?;
            file.seek(std::io::SeekFrom::Start(0))?;
            write!(file, "{}", std::process::id())?;
        }
        Ok(Self {
            outbox: Dir::open(root.join("outbox"))?,
            journal: Dir::open(root.join("journal"))?,
            root: root.to_path_buf(),
            _lock: Some(std::sync::Arc::new(file)),
        })
    }

    /// The files moved to `quarantine/` (their names), for `relay status`.
    pub fn quarantined(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.join(QUARANTINE))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The projects last synced with sessions (see the module docs).
    pub fn synced_projects(&self) -> Vec<ProjectId> {
        std::fs::read(self.root.join("synced-projects.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Records the projects last synced with sessions, durably.
    ///
    /// # Errors
    /// I/O errors.
    pub fn set_synced_projects(&self, projects: &[ProjectId]) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self.root.join(".synced-projects.tmp");
        let mut f = private_files::options().open(&tmp)?;
        f.write_all(&serde_json::to_vec(projects).map_err(std::io::Error::other)?)?;
        sync_file(&f)?;
        std::fs::rename(&tmp, self.root.join("synced-projects.json"))?;
        sync_dir(&self.root)
    }

    /// Turns journal entries of runs that were running when the relay died into `failed`
    /// completions (`relay restarted during run`) in the outbox; entries whose start was never
    /// answered stay, to be retried. Returns how many became failed.
    ///
    /// # Errors
    /// I/O errors.
    pub fn recover(&self) -> std::io::Result<usize> {
        let mut n = 0;
        for (id, started) in self.journal.list::<Started>() {
            if !started.running && started.command.is_some() && !self.outbox.contains(id) {
                continue;
            }
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

    /// A file system that refuses the full flush (SMB, FUSE: ENOTSUP or EINVAL) gets the plain
    /// one; any other failure is reported, and the fallback is not tried.
    #[test]
    fn an_unsupported_full_fsync_falls_back_to_fsync() {
        use nix::errno::Errno;
        for refused in [Errno::ENOTSUP, Errno::EINVAL] {
            let mut fell_back = false;
            let r = with_fallback(Err(std::io::Error::from_raw_os_error(refused as i32)), || {
                fell_back = true;
                Ok(())
            });
            assert!(r.is_ok() && fell_back, "{refused}");
        }
        let mut fell_back = false;
        let r = with_fallback(Err(std::io::Error::from_raw_os_error(Errno::EIO as i32)), || {
            fell_back = true;
            Ok(())
        });
        assert!(r.is_err() && !fell_back, "an I/O error is not 'unsupported'");
        let f = std::fs::File::open(std::env::temp_dir()).unwrap();
        sync_file(&f).unwrap();
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// The journal holds run arguments and the outbox results: only the owner may read them.
    #[test]
    fn the_state_folder_and_its_files_are_the_owners_only() {
        let root = std::env::temp_dir().join(format!("relay-private-{}", uuid::Uuid::new_v4()));
        let state = State::open(&root).unwrap();
        let id = CommandId::generate();
        state.outbox.put(id, &serde_json::json!({"result": "secret"})).unwrap();
        state.journal.put(id, &serde_json::json!({"arguments": "secret"})).unwrap();
        state.set_synced_projects(&[]).unwrap();
        for dir in [root.clone(), root.join("outbox"), root.join("journal")] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        for file in [
            root.join("lock"),
            root.join("synced-projects.json"),
            root.join("outbox").join(format!("{id}.json")),
            root.join("journal").join(format!("{id}.json")),
        ] {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        drop(state);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn journal_entries_become_failed_completions_on_recovery() {
        let root = std::env::temp_dir().join(format!("relay-state-{}", uuid::Uuid::new_v4()));
        let state = State::open(&root).unwrap();
        let (a, b) = (CommandId::generate(), CommandId::generate());
        state.journal.put(a, &Started { execution_id: "e-a".into(), running: true, command: None }).unwrap();
        state.journal.put(b, &Started { execution_id: "e-b".into(), running: true, command: None }).unwrap();
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
        assert_eq!(
            (failed.1.status, failed.1.execution_id.as_str(), &failed.1.result),
            (domain::runs::FinalStatus::Failed, "e-a", &None),
            "a failed completion of the journal's own execution"
        );
        assert_eq!(out.iter().find(|(id, _)| *id == b).unwrap().1, done);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_second_opener_of_a_state_folder_is_refused_until_the_first_lets_go() {
        let root = std::env::temp_dir().join(format!("relay-lock-{}", uuid::Uuid::new_v4()));
        let first = State::open(&root).unwrap();
        let e = State::open(&root).unwrap_err();
        assert!(e.to_string().contains("another relay is already running"), "{e}");
        assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        State::open(&root).expect("the lock is released with the first relay");
        let _ = std::fs::remove_dir_all(root);
    }
}
