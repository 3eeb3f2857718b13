//! Requests: the table's own ([`dynamo_item::table`], under the names the modules use), and the
//! store's queries of its sparse, expiring indexes.

use aws_sdk_dynamodb::types::AttributeValue;
pub(crate) use dynamo_item::table::{Updated, check, put, update_item};
pub use dynamo_item::table::{request_id_of, with_request_id};
pub(crate) use dynamo_item::transact::{failed, names, old_image, our_write_landed};

use domain::ids::OwnerId;
use domain::store::StoreResult;

use crate::codec::{Item, s};
use crate::keys::unexpired_after;
use crate::{DynamoStore, QUEUE_INDEX};

/// The item attribute every write records the request that made it under (or removes, when
/// the write serves none), so the stream's new image names the request behind each change and
/// the events published from it can be traced to it ([`request_id_of`]).
pub use dynamo_item::REQUEST_ID_ATTR;

/// More of a query's filter: an expression over `#`-named attributes and its `:values`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// The expression, e.g. `#graph_session_id IN (:m0)`.
    pub(crate) expression: String,
    /// Its values.
    pub(crate) values: Vec<(String, AttributeValue)>,
}

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
        let (pk, sk) = if index == QUEUE_INDEX { ("#gsi1pk", "#gsi1sk") } else { ("#gsi2pk", "#gsi2sk") };
        let now = s(unexpired_after(self.clock.now()));
        let filter = match more {
            Some(f) => format!("#owner = :o AND ({})", f.expression),
            None => "#owner = :o".to_owned(),
        };
        let query = || {
            let mut q = self
                .db
                .client
                .query()
                .table_name(&self.db.table)
                .index_name(index)
                .key_condition_expression(format!("{pk} = :p AND {sk} > :now"))
                .filter_expression(filter.clone())
                .set_expression_attribute_names(Some(names(&format!("{pk} {sk} {filter}"))))
                .expression_attribute_values(":p", s(partition.clone()))
                .expression_attribute_values(":now", now.clone())
                .expression_attribute_values(":o", s(owner.as_str()));
            for (k, v) in more.map(|f| f.values.as_slice()).unwrap_or_default() {
                q = q.expression_attribute_values(k.clone(), v.clone());
            }
            q
        };
        self.db.query_until(query, limit, 0, keep).await
    }
}
