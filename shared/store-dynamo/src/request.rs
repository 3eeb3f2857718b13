//! Requests: the table's own ([`dynamo_item::table`], under the names the modules use), and the
//! store's queries of its sparse, expiring indexes.

pub(crate) use dynamo_item::expiring::Filter;
pub(crate) use dynamo_item::table::{Updated, check, put, update_item};
pub use dynamo_item::table::{request_id_of, with_request_id};
pub(crate) use dynamo_item::transact::{failed, names, old_image, our_write_landed};

use domain::ids::OwnerId;
use domain::store::StoreResult;

use crate::codec::{Item, s};
use crate::{DynamoStore, QUEUE_INDEX};

/// The item attribute every write records the request that made it under (or removes, when
/// the write serves none), so the stream's new image names the request behind each change and
/// the events published from it can be traced to it ([`request_id_of`]).
pub use dynamo_item::REQUEST_ID_ATTR;

impl DynamoStore {
    /// A `Query` on a sparse index whose sort keys start with the expiry: the owner's first
    /// `limit` unexpired items under `partition` that `keep` keeps, in sort-key order (paged:
    /// see [`dynamo_item::table::Table::query_until`]).
    pub(crate) async fn query_unexpired<T>(
        &self,
        index: &str,
        partition: String,
        owner: &OwnerId,
        limit: usize,
        keep: impl FnMut(&Item) -> StoreResult<Option<T>>,
    ) -> StoreResult<Vec<T>> {
        self.query_unexpired_where(index, partition, owner, limit, None, keep).await
    }

    /// [`Self::query_unexpired`] with `more` added to the owner in the query's filter, so items
    /// it drops never cross the network (DynamoDB still reads, and charges for, each one).
    pub(crate) async fn query_unexpired_where<T>(
        &self,
        index: &str,
        partition: String,
        owner: &OwnerId,
        limit: usize,
        more: Option<&Filter>,
        keep: impl FnMut(&Item) -> StoreResult<Option<T>>,
    ) -> StoreResult<Vec<T>> {
        let keys = if index == QUEUE_INDEX { ("gsi1pk", "gsi1sk") } else { ("gsi2pk", "gsi2sk") };
        let mut filter =
            Filter { expression: "#owner = :o".to_owned(), values: vec![(":o".into(), s(owner.as_str()))] };
        if let Some(f) = more {
            filter.expression = format!("#owner = :o AND ({})", f.expression);
            filter.values.extend(f.values.iter().cloned());
        }
        self.db.query_unexpired(index, keys, partition, self.clock.now(), &filter, limit, keep).await
    }
}
