//! Who may cancel a run, and what a cancel does (re-exported from [`crate::runs`]): the rule the
//! chat's `cancel_graph_run` and the owner's cancel share, which each store writes once for both.

use crate::clock::Timestamp;
use crate::ids::{AgentId, OwnerId};
use crate::limits::Policy;

use super::{Run, RunStatus};

/// Outcome of a cancel (an agent's or the owner's: [`Canceller`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelRunOutcome {
    /// Was queued; now `cancelled`. The desktop never sees it.
    Cancelled,
    /// Is running; the flag is set and the relay stops it within one control poll.
    CancelRequested,
    /// Already terminal (or expired): the status, unchanged.
    Unchanged(RunStatus),
    /// Unknown, or not the canceller's.
    NotFound,
}

/// What a cancel does next, decided from the run as it was when the first
/// conditional write (queued → cancelled) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelStep {
    /// Final answer; nothing (more) to write.
    Done(CancelRunOutcome),
    /// The run is running: set the cancel flag (a second conditional write).
    FlagRunning,
}

/// Who cancels a run, which decides the runs they may cancel: the agent that queued it (the
/// chat's `cancel_graph_run`) or the owner whose run it is (the owner API, SPEC §7: "the same
/// path as `cancel_graph_run`"). The rule is the same for both — queued → cancelled in one
/// conditional write, running → the cancel flag, ended → unchanged ([`classify_cancel`]) — and
/// each store writes it once, for either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canceller<'a> {
    /// The agent that queued the run (any other agent's run reads as missing).
    Agent(&'a AgentId),
    /// The owner of the run's project, whoever queued it.
    Owner(&'a OwnerId),
}

impl<'a> Canceller<'a> {
    /// Whether `run` is one this canceller may cancel.
    pub fn may_cancel(self, run: &Run) -> bool {
        match self {
            Self::Agent(agent) => &run.agent == agent,
            Self::Owner(owner) => &run.owner == owner,
        }
    }

    /// The run's attribute (the same name in both stores) that names this canceller, and the
    /// value it must hold: what the stores' conditional writes check.
    pub fn attribute(self) -> (&'static str, &'a str) {
        match self {
            Self::Agent(agent) => ("agent", agent.as_str()),
            Self::Owner(owner) => ("owner", owner.as_str()),
        }
    }
}

/// Classifies a failed cancel from the run's old image (`None`: no such item).
pub fn classify_cancel(old: Option<&Run>, by: Canceller<'_>, now: Timestamp, policy: &Policy) -> CancelStep {
    let Some(run) = old.filter(|r| by.may_cancel(r)) else {
        return CancelStep::Done(CancelRunOutcome::NotFound);
    };
    match run.view(now, policy).status {
        RunStatus::Running if run.cancel_requested => CancelStep::Done(CancelRunOutcome::CancelRequested),
        RunStatus::Running => CancelStep::FlagRunning,
        status => CancelStep::Done(CancelRunOutcome::Unchanged(status)),
    }
}
