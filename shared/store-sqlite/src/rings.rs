//! Doorbell rings (`domain::doorbell`) of the changes a transaction makes, handed out after it
//! commits: the embedded store's counterpart of the cloud's stream.
//!
//! A transaction runs start to end on one thread, so the rings it notes wait in a thread-local
//! list; [`crate::SqliteStore`] clears the list before each transaction and publishes it (on
//! success) or drops it (on rollback) after. Receivers that lag lose rings, which is fine:
//! a ring is a hint, the relay's poll is the safety net.

use std::cell::RefCell;

use domain::doorbell::{RingFor, ring_for_run};
use domain::runs::Run;

thread_local! {
    static PENDING: RefCell<Vec<RingFor>> = const { RefCell::new(Vec::new()) };
}

/// Notes the ring a run's change makes, if any.
pub(crate) fn note_run(old: Option<&Run>, new: &Run) {
    if let Some(r) = ring_for_run(old, new) {
        PENDING.with(|p| p.borrow_mut().push(r));
    }
}

/// The rings noted on this thread since the last call.
pub(crate) fn take() -> Vec<RingFor> {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()))
}
