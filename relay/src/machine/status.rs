//! What `relay status` shows, written by the running relay to `status.json` in its state folder
//! after every change (and read back by the `status` subcommand).

use serde::{Deserialize, Serialize};

/// What `relay status` shows (written to `status.json` after every change).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    /// When the last sync succeeded (RFC 3339).
    pub last_sync_at: Option<String>,
    /// The last failure, if the last pass failed.
    pub last_error: Option<String>,
    /// Completions waiting to be delivered.
    pub outbox: usize,
    /// The commands running now, one per busy slot.
    #[serde(default)]
    pub running: Vec<String>,
    /// How many commands may run at once (`max_parallel`).
    #[serde(default)]
    pub slots: usize,
    /// The poll interval in use.
    pub poll_interval_s: u64,
    /// Projects the owner has disabled (as of the last sync).
    pub disabled_projects: Vec<String>,
    /// Per project: the last sync and its outcome.
    #[serde(default)]
    pub projects: std::collections::BTreeMap<String, ProjectStatus>,
    /// Unreadable state files moved to `quarantine/` (names), to look at and delete.
    #[serde(default)]
    pub quarantined: Vec<String>,
    /// Completions the outbox could not hold (a full disk): kept in memory and posted directly;
    /// lost only if the relay stops before they are delivered (then the run reads failed).
    #[serde(default)]
    pub unsaved: usize,
    /// The doorbell's state (`relay::doorbell`).
    #[serde(default)]
    pub doorbell: String,
    /// The owner's pause of this desktop, as of the last sync (until when, and the note).
    #[serde(default)]
    pub paused: Option<String>,
    /// Sessions not offered because their folder is missing or refused (slug → why, with the
    /// fix), as of the last pass ([`crate::machine::folders`]).
    #[serde(default)]
    pub unavailable: std::collections::BTreeMap<String, String>,
}

/// What `relay status` shows for one project.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectStatus {
    /// When it was last synced (RFC 3339), whatever the outcome.
    pub last_sync_at: Option<String>,
    /// `ok`, `disabled by the owner`, or the server's refusal.
    pub outcome: String,
    /// The sessions offered (slugs).
    pub sessions: Vec<String>,
    /// Queued commands seen at the last sync.
    pub queued: usize,
}
