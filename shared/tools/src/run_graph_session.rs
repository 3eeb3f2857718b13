//! `run_graph_session`: queue a run on the owner's desktop and hand back a ticket.

use std::time::Duration;

use domain::clock::Timestamp;
use domain::devices::{Hold, held_by_pause};
use domain::ids::{GraphSessionId, IdempotencyKey, ProjectId};
use domain::limits::{MAX_ARGUMENTS_BYTES, Policy};
use domain::projects::{Project, SYNC_STAMP_EVERY};
use domain::runs::{QueueOutcome, QueueRun, Run, RunStatus};
use domain::store::{ManageDevices, ManageProjects, QueueRuns, ReadRuns};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::field;
use super::{
    Annotations, Caller, Handled, Handler, Rejected, SCOPE_RUN, Tool, ToolDeps, ToolInput, ToolName, ToolSpec,
};

/// Seconds added to the relay's next expected sync in `check_after_s`.
pub const CHECK_MARGIN: Duration = Duration::from_secs(2);
/// `check_after_s` while a run is running and its session has no completed runs yet.
pub const RUNNING_CHECK_AFTER: Duration = Duration::from_secs(15);
/// Shortest `check_after_s` once a run is past its expected end.
pub const OVERRUN_CHECK_MIN: Duration = Duration::from_secs(2);

/// The tool.
pub struct RunGraphSession;

impl Tool for RunGraphSession {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::RunGraphSession,
        title: "Run a Graph session on the desktop",
        scope: SCOPE_RUN,
        description: "Queue a Graph run on the owner's desktop. This returns a ticket (command_id, status \"queued\") BEFORE the Graph starts: the desktop picks work up by polling, runs one Graph at a time unless its owner gave it more slots (a queued run waits for a free one), and may be offline. Read progress and the result with get_graph_run, first after check_after_s seconds (when the desktop can have picked it up, or when it is expected to have finished if this session ran before, counting your own runs queued ahead of it on the desktop's slots; checking earlier only costs a call). idempotency_key is required: if a response is lost, call again with the SAME key and arguments to get the same run back instead of starting a second one; the same key with different arguments is rejected. project_id is needed only when the session is shared in more than one connected project.",
        // Starts side effects on the desktop (destructive, open world); idempotent only
        // through its key, so not declared idempotent.
        annotations: Annotations { read_only: false, destructive: true, idempotent: false, open_world: true },
        // Reads the project (or lists the owner's projects); replays read the original run.
        dynamodb_actions: &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = RunGraphSessionInput;
    type Output = RunQueuedOutput;
}

/// Input of `run_graph_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunGraphSessionInput {
    /// The graph session to run: gs_ followed by 32 lowercase hex characters.
    #[schemars(extend("pattern" = "^gs_[0-9a-f]{32}$"))]
    pub graph_session_id: String,
    /// Arguments passed to the Graph as JSON (an object, at most 32 KiB).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// Your key for this run, 8 to 128 characters; reuse it when retrying after a lost response.
    #[schemars(length(min = 8, max = 128))]
    pub idempotency_key: String,
    /// The project (UUID); required only if the session is shared in more than one connected project.
    #[schemars(extend("format" = "uuid"))]
    #[serde(default)]
    pub project_id: Option<String>,
}

/// The validated arguments of `run_graph_session`.
pub struct RunArgs {
    graph_session_id: GraphSessionId,
    arguments: serde_json::Value,
    key: IdempotencyKey,
    project_id: Option<ProjectId>,
}

impl ToolInput for RunGraphSessionInput {
    type Args = RunArgs;
    fn check(self) -> Result<RunArgs, String> {
        let args = RunArgs {
            graph_session_id: field(GraphSessionId::parse("graph_session_id", &self.graph_session_id))?,
            arguments: serde_json::Value::Object(self.arguments.unwrap_or_default()),
            key: field(IdempotencyKey::parse(&self.idempotency_key))?,
            project_id: self.project_id.map(|p| field(ProjectId::parse("project_id", &p))).transpose()?,
        };
        let n = args.arguments.to_string().len();
        if n > MAX_ARGUMENTS_BYTES {
            return Err(format!("arguments: must be at most {MAX_ARGUMENTS_BYTES} bytes of JSON (got {n})"));
        }
        Ok(args)
    }
}

/// Output of `run_graph_session`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunQueuedOutput {
    /// The ticket: pass it to get_graph_run.
    pub command_id: String,
    /// queued (or the current status when a key is reused).
    pub status: RunStatus,
    /// When it was queued (RFC 3339).
    pub queued_at: String,
    /// Seconds until a status check can first show a change.
    pub check_after_s: u64,
    /// Seconds since the desktop last synced; null if it never did. Large values mean the desktop looks offline.
    pub desktop_last_seen_s: Option<u64>,
    /// Its page in the owner's panel (the owner signs in to open it); absent when the server
    /// does not know its panel's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl<S: QueueRuns + ReadRuns + ManageProjects + ManageDevices + ?Sized> Handler<S> for RunGraphSession {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, a: RunArgs) -> Handled<RunQueuedOutput> {
        let req = QueueRun {
            owner: caller.owner.clone(),
            agent: caller.agent.clone(),
            project_id: a.project_id,
            graph_session_id: a.graph_session_id,
            arguments: a.arguments,
            idempotency_key: a.key,
        };
        let run = match deps.store.queue_run(&req).await? {
            QueueOutcome::Queued(r) | QueueOutcome::Replayed(r) => r,
            QueueOutcome::Rejected(why) => return Ok(Err(Rejected::new(why.to_string()))),
        };
        let project = deps.store.get_project(caller.owner, run.project_id).await?;
        let now = caller.now;
        let status = run.view(now, &deps.policy).status;
        // The ticket's hint counts the agent's own runs ahead as `get_graph_run`'s does (an
        // agent that fans out checks each run once it can be done); a pause is for
        // `get_graph_run` to say.
        let backlog = match status {
            RunStatus::Queued => waiting(deps.store.as_ref(), project.as_ref(), &run, now).await?.1,
            _ => Backlog::NONE,
        };
        Ok(Ok(RunQueuedOutput {
            command_id: run.command_id.to_string(),
            status,
            queued_at: run.queued_at.rfc3339(),
            check_after_s: check_after(status, project.as_ref(), &run, now, &deps.policy, backlog).unwrap_or(0),
            desktop_last_seen_s: last_seen(project.as_ref(), now),
            url: deps.run_page(run.command_id),
        }))
    }
}

/// At most this many desktops' records are read to decide a hold (an owner with more desktops
/// sharing one session is told nothing about pauses, never something wrong).
const MAX_SHARERS_READ: usize = 10;

/// What a queued run waits for, from the records of the desktops that share its session (one
/// read each) and its agent's own runs ahead of it (one query): the pause holding it, if every
/// one of them is paused, else the backlog its `check_after_s` counts (the runs ahead over the
/// unpaused desktops' slots).
pub(crate) async fn waiting<S: ReadRuns + ManageDevices + ?Sized>(
    store: &S,
    project: Option<&domain::projects::Project>,
    run: &domain::runs::Run,
    now: Timestamp,
) -> Result<(Option<Hold>, Backlog), domain::store::StoreError> {
    let Some(project) = project else { return Ok((None, Backlog::NONE)) };
    let ids: Vec<uuid::Uuid> = project.devices_sharing(&run.graph_session_id).collect();
    if ids.is_empty() || ids.len() > MAX_SHARERS_READ {
        return Ok((None, Backlog::NONE));
    }
    let mut sharers = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(d) = store.get_device(&run.owner, id).await?.filter(|d| d.revoked_at.is_none()) {
            sharers.push(d);
        }
    }
    if let Some(hold) = held_by_pause(&sharers, now) {
        return Ok((Some(hold), Backlog::NONE));
    }
    let slots = sharers
        .iter()
        .filter(|d| d.pause_at(now).is_none())
        .map(|d| d.relay.as_ref().and_then(|r| r.slots).unwrap_or(1))
        .sum::<u32>();
    let ahead = store.own_runs_ahead(run).await?;
    Ok((None, Backlog { ahead, slots: slots.max(1) }))
}

/// Seconds since the desktop last synced the run's project.
pub(super) fn last_seen(project: Option<&Project>, now: Timestamp) -> Option<u64> {
    project.and_then(|p| p.last_sync_at).map(|t| now.since(t).as_secs())
}

/// The longest `check_after_s` an estimate from progress gives (it is an estimate: a Graph's
/// fraction is rarely linear in time).
pub const PROGRESS_CHECK_MAX: Duration = Duration::from_secs(600);
/// The longest wait the runs ahead add to a queued run's `check_after_s` (a long backlog is an
/// estimate too: it is re-checked at least this often, and each check counts it again).
pub const BACKLOG_CHECK_MAX: Duration = Duration::from_secs(3600);
/// A fraction below this says too little to estimate an end from.
const MIN_FRACTION: f64 = 0.02;

/// When the run should end, extrapolated from the Graph's last reported fraction: at `f` done
/// after `t` running, the whole takes `t / f`.
fn progress_end(run: &Run) -> Option<Timestamp> {
    let p = run.progress.as_ref()?;
    let f = p.progress.fraction.filter(|f| *f >= MIN_FRACTION && *f < 1.0)?;
    let started = run.started_at?;
    let ran = p.updated_at.since(started);
    Some(started.plus(ran.div_f64(f)))
}

/// What a queued run waits for besides its desktop's next pickup: its agent's own runs queued
/// ahead of it, shared among the slots of the desktops that can run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// The agent's runs queued just ahead of it (`ReadRuns::own_runs_ahead`).
    pub ahead: usize,
    /// The slots of the desktops that can run it (each relay's report; 1 for a relay too old
    /// to say); at least 1.
    pub slots: u32,
}

impl Backlog {
    /// Nothing known ahead (the ticket's hint, a run queued first).
    pub const NONE: Self = Self { ahead: 0, slots: 1 };

    /// How many rounds of the session's expected duration pass before a slot is free for
    /// this run: the runs ahead fill the slots that many times over.
    fn rounds(self) -> u32 {
        u32::try_from(self.ahead).unwrap_or(u32::MAX) / self.slots.max(1)
    }
}

/// When a check is worth it. The session's expected duration is the median of its recent
/// completed runs, kept on the project (no extra read). While queued: the relay's next expected
/// sync (from its last sync and the poll interval) plus a margin — plus the expected duration
/// when there is one, so the first check usually finds the result, and once more for each full
/// round of the agent's own runs ahead (`backlog`) on the slots that can take it (at most
/// [`BACKLOG_CHECK_MAX`] more; nothing without history). The runs of other agents, which a run
/// may also wait behind, are not counted: one agent is never told about another's queue. While
/// running: the end the Graph's reported fraction points to (at most [`PROGRESS_CHECK_MAX`]
/// away), else the expected end plus the margin, then a tenth of the expected duration (2–15 s)
/// once it overruns, or 15 s without history; nothing once finished.
pub fn check_after(
    status: RunStatus,
    project: Option<&Project>,
    run: &Run,
    now: Timestamp,
    policy: &Policy,
    backlog: Backlog,
) -> Option<u64> {
    let secs = |d: Duration| d.as_secs().max(1);
    match status {
        RunStatus::Queued => {
            let next_sync = project.and_then(|p| p.last_sync_at).and_then(|t| next_sync_after(t, now, policy));
            let expected = project.and_then(|p| p.expected_duration(&run.graph_session_id)).unwrap_or_default();
            let expected = expected + (expected.saturating_mul(backlog.rounds())).min(BACKLOG_CHECK_MAX);
            Some(match next_sync {
                Some(t) if t > now => secs(t.since(now) + expected + CHECK_MARGIN),
                // Never synced or overdue: the desktop may be offline; one interval is the
                // earliest anything can change.
                _ => secs(policy.poll_interval + expected + CHECK_MARGIN),
            })
        }
        RunStatus::Running => {
            // The Graph's own fraction says more about this run than the session's history.
            if let Some(end) = progress_end(run)
                && end > now
            {
                return Some(secs(end.since(now) + CHECK_MARGIN).min(PROGRESS_CHECK_MAX.as_secs()));
            }
            let expected = project.and_then(|p| p.expected_duration(&run.graph_session_id));
            Some(match (expected, run.started_at) {
                (Some(d), Some(start)) if start.plus(d) > now => secs(start.plus(d).since(now) + CHECK_MARGIN),
                (Some(d), Some(_)) => secs((d / 10).clamp(OVERRUN_CHECK_MIN, RUNNING_CHECK_AFTER)),
                _ => secs(RUNNING_CHECK_AFTER),
            })
        }
        _ => None,
    }
}

/// When the desktop that synced at `last_sync` syncs next after `now`, on its polling rhythm.
/// The recorded time is up to [`SYNC_STAMP_EVERY`] old by design (a sync that changes nothing
/// moves it only that often, issue 59), so the next sync is the first poll interval after
/// `now` counted from it — not `last_sync` plus one interval, which lies in the past once the
/// stamp is more than an interval old and sent the agent a whole interval late. `None` when a
/// sync should have moved the stamp by now (overdue: the desktop may be offline).
fn next_sync_after(last_sync: Timestamp, now: Timestamp, policy: &Policy) -> Option<Timestamp> {
    let poll = policy.poll_interval.as_millis().max(1);
    // A stamp ahead of `now` (clocks apart) counts as `since` zero: one interval on.
    let since = now.since(last_sync);
    if since >= SYNC_STAMP_EVERY + policy.poll_interval {
        return None;
    }
    let rounds = u32::try_from(since.as_millis() / poll + 1).unwrap_or(u32::MAX);
    Some(last_sync.plus(policy.poll_interval.saturating_mul(rounds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint with nothing known ahead.
    fn hint(status: RunStatus, project: Option<&Project>, run: &Run, now: Timestamp, policy: &Policy) -> Option<u64> {
        check_after(status, project, run, now, policy, Backlog::NONE)
    }
    use domain::ids::OwnerId;

    fn project(last_sync: Option<Timestamp>) -> Project {
        let mut p = Project::new(&OwnerId::new("o").unwrap(), "p", Timestamp::from_millis(0));
        p.enabled = true;
        p.last_sync_at = last_sync;
        p
    }

    fn run(p: &Project, started: Option<Timestamp>) -> Run {
        let req = QueueRun {
            owner: p.owner.clone(),
            agent: domain::ids::AgentId::new("c", "o").unwrap(),
            project_id: Some(p.project_id),
            graph_session_id: GraphSessionId::parse("g", &format!("gs_{}", "a".repeat(32))).unwrap(),
            arguments: serde_json::json!({}),
            idempotency_key: IdempotencyKey::parse("check-after-key").unwrap(),
        };
        let target = domain::runs::QueueTarget { project_id: p.project_id, slug: "s".into() };
        let mut r = Run::queued(&req, target, Timestamp::from_millis(0), &Policy::default());
        r.started_at = started;
        r
    }

    #[test]
    fn check_after_follows_the_relays_next_sync() {
        let policy = Policy::default();
        let now = Timestamp::from_millis(1_000_000);
        // Synced 5 s ago with a 20 s interval: next sync in 15 s, plus the 2 s margin.
        let p = project(Some(now.minus(Duration::from_secs(5))));
        let r = run(&p, None);
        assert_eq!(hint(RunStatus::Queued, Some(&p), &r, now, &policy), Some(17));
        // Never synced, or overdue: one interval plus the margin.
        assert_eq!(hint(RunStatus::Queued, Some(&project(None)), &r, now, &policy), Some(22));
        let overdue = project(Some(now.minus(Duration::from_secs(600))));
        assert_eq!(hint(RunStatus::Queued, Some(&overdue), &r, now, &policy), Some(22));
        assert_eq!(last_seen(Some(&overdue), now), Some(600));
        // The stamp moves only once a minute when nothing changes: 45 s old means syncs at
        // -45, -25, -5 s, so the next in 15 s (not "overdue, an interval": 22); 79 s old is
        // still on the rhythm (-79, …, -19 s: next in 1 s); 80 s old, a sync should have
        // moved it: overdue.
        for (old, next) in [(45, 17), (79, 3), (80, 22)] {
            let stale = project(Some(now.minus(Duration::from_secs(old))));
            assert_eq!(hint(RunStatus::Queued, Some(&stale), &r, now, &policy), Some(next), "stamp {old} s old");
        }
        assert_eq!(hint(RunStatus::Completed, Some(&p), &r, now, &policy), None);
    }

    #[test]
    fn a_queued_run_behind_its_agents_own_runs_waits_a_round_per_full_set_of_slots() {
        let policy = Policy::default();
        let now = Timestamp::from_millis(1_000_000);
        let mut p = project(Some(now.minus(Duration::from_secs(5))));
        let r = run(&p, None);
        let behind = |p: &Project, ahead: usize, slots: u32| {
            check_after(RunStatus::Queued, Some(p), &r, now, &policy, Backlog { ahead, slots })
        };
        // Without history there is no duration to wait: the next pickup, whatever is ahead.
        assert_eq!(behind(&p, 4, 1), Some(17));
        // A session of 60 s: next sync in 15 s, its own 60 s, the margin — and 60 s per full
        // round of the runs ahead: four ahead on one slot are four rounds, on five slots none.
        for (slot, ms) in [(0, 60_000), (1, 60_000), (2, 60_000)] {
            p.recent_durations.insert(format!("{}#{slot}", r.graph_session_id), ms);
        }
        assert_eq!(behind(&p, 0, 1), Some(77));
        assert_eq!(behind(&p, 4, 1), Some(317));
        assert_eq!(behind(&p, 4, 2), Some(197));
        assert_eq!(behind(&p, 4, 5), Some(77));
        assert_eq!(behind(&p, 4, 0), Some(317), "no slot known counts as one");
        // A long backlog adds at most an hour: 100 ahead on one slot, 15 + 60 + 3600 + 2.
        assert_eq!(behind(&p, 100, 1), Some(3677));
        // A running run is not queued behind anything.
        let running = run(&p, Some(now));
        let ran = check_after(RunStatus::Running, Some(&p), &running, now, &policy, Backlog { ahead: 4, slots: 1 });
        assert_eq!(ran, hint(RunStatus::Running, Some(&p), &running, now, &policy));
    }

    #[test]
    fn a_running_run_is_checked_at_its_expected_end() {
        let policy = Policy::default();
        let now = Timestamp::from_millis(1_000_000);
        let mut p = project(Some(now));
        let started = now.minus(Duration::from_secs(10));
        let r = run(&p, Some(started));
        // No history: a fixed interval.
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(15));
        // History 50, 60, 130 s: median 60 (the mean, 80, would say 72, 21 and 97 below) →
        // expected end in 50 s, plus the margin.
        for (slot, ms) in [(0, 50_000), (1, 60_000), (2, 130_000)] {
            p.recent_durations.insert(format!("{}#{slot}", r.graph_session_id), ms);
        }
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(52));
        // Past the expected end: a tenth of it.
        let late = started.plus(Duration::from_secs(61));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, late, &policy), Some(6));
        // Queued with history: the first check is worth it at the expected end.
        let fresh = project(Some(now.minus(Duration::from_secs(5))));
        let mut with_history = fresh.clone();
        with_history.recent_durations = p.recent_durations.clone();
        assert_eq!(hint(RunStatus::Queued, Some(&with_history), &run(&fresh, None), now, &policy), Some(77));
        // Another session's history does not count.
        let mut other = project(Some(now));
        other.recent_durations.insert(format!("gs_{}#0", "b".repeat(32)), 1_000);
        assert_eq!(hint(RunStatus::Running, Some(&other), &r, now, &policy), Some(15));
    }

    #[test]
    fn a_reported_fraction_points_the_check_at_the_runs_own_end() {
        let policy = Policy::default();
        let now = Timestamp::from_millis(1_000_000);
        let p = project(Some(now));
        let started = now.minus(Duration::from_secs(100));
        let mut r = run(&p, Some(started));
        let at = |f: Option<f64>, reported: Timestamp| {
            Some(domain::progress::RunProgress {
                progress: domain::progress::Progress { message: String::new(), fraction: f, tail: Vec::new() },
                updated_at: reported,
            })
        };
        // A quarter done after 80 s: the whole takes 320 s, so 220 s from now (+ the margin).
        r.progress = at(Some(0.25), started.plus(Duration::from_secs(80)));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(222));
        // 1 % says too little, a message alone nothing: the fixed interval.
        r.progress = at(Some(0.01), started.plus(Duration::from_secs(80)));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(15));
        r.progress = at(None, started.plus(Duration::from_secs(80)));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(15));
        // A far end is capped; one already passed falls back to the overrun rule.
        r.progress = at(Some(0.03), started.plus(Duration::from_secs(90)));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(600));
        r.progress = at(Some(0.9), started.plus(Duration::from_secs(10)));
        assert_eq!(hint(RunStatus::Running, Some(&p), &r, now, &policy), Some(15));
    }
}
