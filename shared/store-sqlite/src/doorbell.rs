//! Doorbell rings (`domain::doorbell`) of the changes a transaction makes, handed out after it
//! commits: the embedded store's counterpart of the cloud's stream (named like
//! `store_dynamo::doorbell`, which reads the rings off the table's stream).
//!
//! The transaction carries them ([`crate::pool::Tx`]): a change notes its ring there, and
//! [`crate::SqliteStore`] publishes them after the commit, or drops them with a rollback.
//! Receivers that lag lose rings, which is fine: a ring is a hint, the relay's poll is the
//! safety net.

use std::cell::RefCell;

use domain::doorbell::{RingFor, ring_for_run};
use domain::runs::Run;

/// The rings one transaction's changes make, in order.
#[derive(Debug, Default)]
pub(crate) struct Rings(RefCell<Vec<RingFor>>);

impl Rings {
    /// Notes the ring a run's change makes, if any.
    pub(crate) fn note_run(&self, old: Option<&Run>, new: &Run) {
        if let Some(r) = ring_for_run(old, new) {
            self.0.borrow_mut().push(r);
        }
    }

    /// Notes the ring a device's change makes, if any (a pause ended).
    pub(crate) fn note_device(&self, old: Option<&domain::devices::Device>, new: &domain::devices::Device) {
        if let Some(r) = domain::devices::ring_for_device(old, new) {
            self.0.borrow_mut().push(r);
        }
    }

    /// Notes the ring a task's change makes, if any (`domain::dispatch::ring_for_task`).
    pub(crate) fn note_task(&self, old: Option<&domain::tasks::Task>, new: &domain::tasks::Task) {
        if let Some(r) = domain::dispatch::ring_for_task(old, new) {
            self.0.borrow_mut().push(r);
        }
    }

    /// The rings noted.
    pub(crate) fn into_vec(self) -> Vec<RingFor> {
        self.0.into_inner()
    }
}
