//! The owner's Graph runs: a page of them, newest first, and the owner's cancel of one.

use domain::ids::{CommandId, OwnerId};
use http::StatusCode;

use super::run_views::{RunPage, run_view};
use super::{NO_RUN, OwnerApi, OwnerStore, Reply, bad, not_found, ok, page_params};

impl<S: OwnerStore + ?Sized> OwnerApi<S> {
    pub(super) async fn list_runs(&self, owner: &OwnerId, query: Option<&str>) -> Reply {
        let (limit, cursor) = page_params(query)?;
        let before = cursor
            .map(|c| {
                CommandId::parse("cursor", &c).map_err(|_| bad("cursor: must be a next_cursor from a previous page"))
            })
            .transpose()?;
        let runs = self.store.recent_runs(owner, limit, before).await?;
        let now = self.clock.now();
        let next = (runs.len() == limit).then(|| runs.last().map(|r| r.command_id.to_string())).flatten();
        ok(
            StatusCode::OK,
            RunPage { runs: runs.iter().map(|r| run_view(r, now, &self.policy)).collect(), next_cursor: next },
        )
    }

    /// The owner cancels a run through the store's owner-scoped cancel, which shares the
    /// chat's `cancel_graph_run` rule and writes; answers the run's view as `GET /runs` shows it.
    pub(super) async fn cancel_run(&self, owner: &OwnerId, id: &str) -> Reply {
        let command = CommandId::parse("command_id", id)?;
        let (_, run) = self.store.cancel_owned_run(owner, command).await?.ok_or_else(|| not_found(NO_RUN))?;
        ok(StatusCode::OK, run_view(&run, self.clock.now(), &self.policy))
    }
}
