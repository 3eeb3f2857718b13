//! The doorbell: a push channel the relay keeps open outbound, so a queued run or a cancel
//! reaches the desktop at once instead of at its next poll.
//!
//! A ring carries no run data — `{"ring":"sync"}` or `{"ring":"control","command_id":…}` — and
//! the relay still fetches work through the relay API, so every check there (consent, device
//! shares, the conditional start) stays the one path. A lost ring costs only latency: the
//! relay keeps polling as a safety net, relaxed to [`DOORBELL_POLL_INTERVAL`] while its
//! doorbell is connected and back to the normal interval the moment it drops.
//!
//! Which change rings is decided once, here ([`ring_for_run`]), over a run's old and new
//! images: the cloud reads them from the table's stream, the embedded store from its own
//! transaction.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::{CommandId, GraphSessionId, OwnerId, ProjectId};
use crate::runs::{Run, RunStatus};

/// Path of the doorbell under the relay API's prefix (the local server's WebSocket route).
pub const PATH: &str = "/doorbell";

/// The header a relay sends on its syncs while its doorbell has been proven alive recently:
/// `alive; age=<seconds since the socket last answered>` ([`alive_header`]). The server answers
/// [`DOORBELL_POLL_INTERVAL`] as `poll_interval_s` only when that age is within
/// [`PROVEN_WITHIN`] ([`proven_alive`]): an open socket is not enough, since after a sleep or a
/// network change one can look open for minutes while nothing reaches it. (The relay's own
/// word is still all there is: a relay that lies only polls less, and it returns to the normal
/// interval itself when its socket fails a ping.) The earlier value `connected`, which said
/// only that a socket was open, no longer relaxes the poll.
pub const DOORBELL_HEADER: &str = "x-foundry-doorbell";

/// How long the relay waits for the pong to each ping before it calls the socket dead and
/// reconnects (a socket cut silently, with no close frame, by a sleep or a network change).
pub const PONG_DEADLINE: Duration = Duration::from_secs(20);

/// Longest time since a doorbell last answered for which the server still relaxes the poll:
/// one ping interval plus the pong deadline (a live socket answers within it).
pub const PROVEN_WITHIN: Duration = Duration::from_secs(PING_EVERY.as_secs() + PONG_DEADLINE.as_secs());

/// The [`DOORBELL_HEADER`] value for a socket that last answered `age` ago.
pub fn alive_header(age: Duration) -> String {
    format!("alive; age={}", age.as_secs())
}

/// Whether a [`DOORBELL_HEADER`] value proves a socket that answered within [`PROVEN_WITHIN`].
pub fn proven_alive(value: &str) -> bool {
    value
        .strip_prefix("alive; age=")
        .and_then(|a| a.trim().parse::<u64>().ok())
        .is_some_and(|age| age <= PROVEN_WITHIN.as_secs())
}

/// The safety poll while the doorbell is connected: 300 s (a tenth of the requests at most).
pub const DOORBELL_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// API Gateway closes a WebSocket after 2 hours; the relay reconnects a little before.
pub const MAX_CONNECTION: Duration = Duration::from_secs(2 * 3600);
/// How long before [`MAX_CONNECTION`] the relay reconnects on its own.
pub const RECONNECT_BEFORE_LIMIT: Duration = Duration::from_secs(10 * 60);
/// API Gateway closes a WebSocket idle for 10 minutes; the relay pings more often.
pub const PING_EVERY: Duration = Duration::from_secs(4 * 60);

/// The relay's keep-alive, every [`PING_EVERY`]: a data message, not a WebSocket ping frame.
/// API Gateway documents no answer to ping frames (and is reported not to answer them), so a
/// ping frame could neither prove the socket alive nor keep the relay from calling a live one
/// dead; this message goes to the WebSocket API's `ping` route, a mock integration that answers
/// [`KEEPALIVE_ANSWER`] without running a function (template.yaml, `DoorbellPingRoute`). The
/// local server's doorbell answers it the same.
pub const KEEPALIVE: &str = r#"{"action":"ping"}"#;
/// The answer to [`KEEPALIVE`].
pub const KEEPALIVE_ANSWER: &str = r#"{"pong":true}"#;

/// Most open doorbell sockets of one device. A relay keeps one (two for a moment while it
/// reconnects before the server noticed the old one is gone): a newer socket replaces the
/// oldest, so one leaked token cannot hold more ([`CLOSE_REPLACED`]).
pub const MAX_SOCKETS_PER_DEVICE: usize = 4;
/// Largest message or frame a relay may send: it sends only [`KEEPALIVE`], pings and a close,
/// each at most 125 bytes (RFC 6455 §5.5). Anything larger is refused before it is buffered.
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 4096;
/// How young a recorded socket may be and still not be established. The doorbell function
/// records a socket during its `$connect`, and API Gateway establishes it only once that
/// integration has answered (within its 29 s timeout); a post in between is answered `410`
/// ("A message was posted to the WebSocket API before the connection was established",
/// AWS Knowledge Center, *410 GoneException*). A `410` for a socket younger than this says
/// nothing about it, so it is kept ([`forget_on_gone`]).
pub const CONNECT_WINDOW: Duration = Duration::from_secs(30);

/// Whether a socket whose post was answered `410 Gone` at `now` is gone for good: only once it
/// is older than [`CONNECT_WINDOW`]. A young one that was refused for good is forgotten by
/// its `$disconnect`, or by the table's TTL.
pub fn forget_on_gone(c: &Connection, now: crate::clock::Timestamp) -> bool {
    now.since(c.connected_at) >= CONNECT_WINDOW
}

/// Close code of a socket replaced by a newer one of the same device.
pub const CLOSE_REPLACED: u16 = 4409;
/// Close code of a revoked device's socket.
pub const CLOSE_REVOKED: u16 = 4401;

/// Which of a device's sockets to close when a new one opens: all but the newest
/// [`MAX_SOCKETS_PER_DEVICE`], oldest first (`sockets` in any order; ties broken by id).
pub fn sockets_to_replace(sockets: &[Connection]) -> Vec<Connection> {
    let mut by_age: Vec<&Connection> = sockets.iter().collect();
    by_age.sort_by(|a, b| (a.connected_at, &a.connection_id).cmp(&(b.connected_at, &b.connection_id)));
    let excess = by_age.len().saturating_sub(MAX_SOCKETS_PER_DEVICE);
    by_age.into_iter().take(excess).cloned().collect()
}

/// What a ring asks of the relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ring", rename_all = "snake_case")]
pub enum Ring {
    /// Sync now: something was queued.
    Sync,
    /// Check this run's control now: its agent asked to cancel it.
    Control {
        /// The run.
        command_id: CommandId,
    },
    /// A task this desktop's run handed to a chat ended (`crate::dispatch`): read it now.
    /// Relays older than it ignore it (they never hand tasks to chats).
    Task {
        /// The task.
        task_id: crate::ids::TaskId,
        /// The run that handed it over.
        command_id: CommandId,
    },
}

/// A ring and whom it is for: some of one owner's desktops ([`Recipients`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingFor {
    /// Whose desktops.
    pub owner: OwnerId,
    /// Which of them.
    pub to: Recipients,
    /// The ring.
    pub ring: Ring,
}

/// Which of an owner's desktops a ring is for: only those that can act on it, so an owner
/// with hundreds of desktops makes one sync per ring where it matters, not one per desktop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipients {
    /// The desktops that share `session` in `project`: only they can run a run queued for it.
    Sharing {
        /// The run's project.
        project: ProjectId,
        /// The run's Graph session.
        session: GraphSessionId,
    },
    /// One desktop: the one running the run asked to cancel, the one whose run handed the
    /// ended task over, or the one that was resumed.
    Device(uuid::Uuid),
    /// Every desktop of the owner (a running run whose record names no desktop).
    All,
}

/// An open doorbell socket in the cloud (API Gateway's WebSocket API keeps the socket; the
/// table keeps whose it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// API Gateway's connection id.
    pub connection_id: String,
    /// The device whose token opened it.
    pub device_id: uuid::Uuid,
    /// When it was opened.
    pub connected_at: crate::clock::Timestamp,
}

/// Whether a run's change rings: a new queued run (`sync`), or a cancel asked of a running
/// run (`control`). Everything else the relay learns from its own calls.
pub fn ring_for_run(old: Option<&Run>, new: &Run) -> Option<RingFor> {
    let (ring, to) = match (old, new.status) {
        (None, RunStatus::Queued) => {
            (Ring::Sync, Recipients::Sharing { project: new.project_id, session: new.graph_session_id.clone() })
        }
        (old, RunStatus::Running) if new.cancel_requested && !old.is_some_and(|o| o.cancel_requested) => {
            (Ring::Control { command_id: new.command_id }, new.device_id.map_or(Recipients::All, Recipients::Device))
        }
        _ => return None,
    };
    Some(RingFor { owner: new.owner.clone(), to, ring })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued() -> Run {
        crate::runs::sample_run()
    }

    /// Only a fresh proof of life relaxes the poll: not the old bare `connected`, not an age
    /// past one ping and its deadline, not garbage.
    #[test]
    fn only_a_recent_answer_proves_the_doorbell_alive() {
        assert!(proven_alive(&alive_header(Duration::ZERO)));
        assert!(proven_alive(&alive_header(PROVEN_WITHIN)));
        assert!(!proven_alive(&alive_header(PROVEN_WITHIN + Duration::from_secs(1))));
        for v in ["connected", "alive", "alive; age=-1", "alive; age=x", ""] {
            assert!(!proven_alive(v), "{v:?}");
        }
    }

    #[test]
    fn a_new_queued_run_and_a_cancel_of_a_running_one_ring() {
        let q = queued();
        let sync = ring_for_run(None, &q).unwrap();
        let sharing = Recipients::Sharing { project: q.project_id, session: q.graph_session_id.clone() };
        assert_eq!((sync.ring, sync.to, sync.owner.as_str()), (Ring::Sync, sharing, "o"));
        let desktop = uuid::Uuid::new_v4();
        let running = Run { status: RunStatus::Running, device_id: Some(desktop), ..q.clone() };
        assert_eq!(ring_for_run(Some(&q), &running), None, "a start rings nobody");
        let cancel = Run { cancel_requested: true, ..running.clone() };
        let control = ring_for_run(Some(&running), &cancel).unwrap();
        assert_eq!(
            (control.ring, control.to),
            (Ring::Control { command_id: q.command_id }, Recipients::Device(desktop))
        );
        let unnamed = Run { device_id: None, ..cancel.clone() };
        assert_eq!(ring_for_run(Some(&running), &unnamed).unwrap().to, Recipients::All);
        assert_eq!(ring_for_run(Some(&cancel), &cancel), None, "a heartbeat of a cancelled run rings nobody again");
        let cancelled_queued = Run { status: RunStatus::Cancelled, ..q.clone() };
        assert_eq!(ring_for_run(Some(&q), &cancelled_queued), None, "a queued run cancelled never reaches a desktop");
    }

    #[test]
    fn a_410_forgets_a_socket_only_once_it_is_past_the_connect_window() {
        let opened = crate::clock::Timestamp::from_millis(1_000_000);
        let c = Connection { connection_id: "c=".into(), device_id: uuid::Uuid::nil(), connected_at: opened };
        assert!(!forget_on_gone(&c, opened), "the post raced its own $connect");
        assert!(!forget_on_gone(&c, opened.plus(CONNECT_WINDOW - Duration::from_millis(1))));
        assert!(forget_on_gone(&c, opened.plus(CONNECT_WINDOW)));
        assert!(forget_on_gone(&c, opened.plus(Duration::from_secs(3600))));
    }

    #[test]
    fn rings_are_tiny_json() {
        assert_eq!(serde_json::to_string(&Ring::Sync).unwrap(), r#"{"ring":"sync"}"#);
        let id = CommandId::generate();
        let control = serde_json::to_string(&Ring::Control { command_id: id }).unwrap();
        assert_eq!(control, format!(r#"{{"ring":"control","command_id":"{id}"}}"#));
        assert_eq!(serde_json::from_str::<Ring>(&control).unwrap(), Ring::Control { command_id: id });
        assert!(serde_json::from_str::<Ring>(r#"{"ring":"other"}"#).is_err());
    }

    #[test]
    fn a_new_socket_replaces_the_oldest_beyond_the_cap() {
        let socket = |id: &str, at: i64| Connection {
            connection_id: id.into(),
            device_id: uuid::Uuid::nil(),
            connected_at: crate::clock::Timestamp::from_millis(at),
        };
        let few: Vec<Connection> = (0..MAX_SOCKETS_PER_DEVICE as i64).map(|i| socket(&format!("c{i}"), i)).collect();
        assert!(sockets_to_replace(&few).is_empty(), "up to the cap nothing is closed");
        let mut many = few.clone();
        many.push(socket("new", 100));
        many.push(socket("b-tie", 0));
        many.reverse();
        let closed: Vec<String> = sockets_to_replace(&many).into_iter().map(|c| c.connection_id).collect();
        assert_eq!(closed, ["b-tie", "c0"], "the two oldest go, ties by id; the newest stays");
    }
}
