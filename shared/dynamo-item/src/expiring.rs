//! Sort keys that begin with an expiry (an index reads only what has not expired, with no
//! filter), the query of such an index, and the TTL attribute's value.

use aws_sdk_dynamodb::types::AttributeValue;
use domain::clock::Timestamp;
use domain::store::StoreResult;

use crate::table::Table;
use crate::transact::names;
use crate::{Item, n, s};

/// An index sort key that begins with the expiry, so `> unexpired_after(now)` leaves expired
/// items out (the store's `gsi1sk`, `gsi2sk`).
pub fn expiring_sort_key(expires_at: Timestamp, id: impl std::fmt::Display) -> String {
    format!("{}#{id}", expires_at.sortable())
}

/// Sort-key bound that excludes items expiring at or before `now`.
pub fn unexpired_after(now: Timestamp) -> String {
    format!("{}#~", now.sortable())
}

/// The sort-key range `BETWEEN lo AND hi` of the items up to the one with `expires_at`
/// and `id` that are still unexpired at `now`; none once that one has expired.
/// DynamoDB refuses a `BETWEEN` whose lower bound is above its upper with a ValidationException
/// ("The BETWEEN operator requires upper bound to be greater than or equal to lower bound"),
/// where moto just finds nothing: an item that expired since it was read must not query.
pub fn queued_up_to(now: Timestamp, expires_at: Timestamp, id: impl std::fmt::Display) -> Option<(String, String)> {
    let (lo, hi) = (unexpired_after(now), expiring_sort_key(expires_at, id));
    (lo <= hi).then_some((lo, hi))
}

/// A query's filter: an expression over `#`-named attributes and its `:values`.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The expression, e.g. `#owner = :o AND (#graph_session_id IN (:m0))`.
    pub expression: String,
    /// Its values.
    pub values: Vec<(String, AttributeValue)>,
}

impl Table {
    /// A `Query` on the sparse index `index` (key attributes `pk` and `sk`) whose sort keys begin
    /// with the expiry ([`expiring_sort_key`]): the first `limit` items under `partition` still
    /// unexpired at `now` that `filter` and then `keep` keep, in sort-key order, paged as
    /// [`Table::query_until`] pages. The filter runs in DynamoDB, so what it drops never
    /// crosses the network (DynamoDB still reads, and charges for, each one).
    ///
    /// # Errors
    /// The query's, or `keep`'s.
    #[allow(clippy::too_many_arguments)]
    pub async fn query_unexpired<T>(
        &self,
        index: &str,
        (pk, sk): (&str, &str),
        partition: String,
        now: Timestamp,
        filter: &Filter,
        limit: usize,
        keep: impl FnMut(&Item) -> StoreResult<Option<T>>,
    ) -> StoreResult<Vec<T>> {
        let now = s(unexpired_after(now));
        let query = || {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression(format!("#{pk} = :p AND #{sk} > :now"))
                .filter_expression(filter.expression.clone())
                .set_expression_attribute_names(Some(names(&format!("#{pk} #{sk} {}", filter.expression))))
                .expression_attribute_values(":p", s(partition.clone()))
                .expression_attribute_values(":now", now.clone());
            for (k, v) in &filter.values {
                q = q.expression_attribute_values(k.clone(), v.clone());
            }
            q
        };
        self.query_until(query, limit, 0, keep).await
    }
}

/// The TTL attribute (epoch seconds) DynamoDB deletes expired items by.
pub const TTL_ATTRIBUTE: &str = "ttl";

/// The TTL attribute's value for `t` (epoch seconds, as DynamoDB's TTL reads it).
pub fn ttl_at(t: Timestamp) -> AttributeValue {
    n(t.as_epoch_seconds())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use domain::ids::CommandId;

    use super::*;

    #[test]
    fn unexpired_bound_excludes_items_expiring_now() {
        let now = Timestamp::from_millis(1_000);
        let expiring_now = format!("{}#{}", now.sortable(), CommandId::generate());
        let later = format!("{}#{}", now.plus(Duration::from_millis(1)).sortable(), CommandId::generate());
        assert!(expiring_now.as_str() < unexpired_after(now).as_str());
        assert!(later.as_str() > unexpired_after(now).as_str());
    }

    #[test]
    fn the_range_up_to_a_run_is_never_reversed() {
        let (now, id) = (Timestamp::from_millis(1_000), CommandId::generate());
        let (lo, hi) = queued_up_to(now, now.plus(Duration::from_millis(1)), id).unwrap();
        assert!(lo <= hi);
        assert_eq!(queued_up_to(now, now, id), None, "a run expiring now is expired");
        assert_eq!(queued_up_to(now, now.minus(Duration::from_secs(1)), id), None);
    }
}
