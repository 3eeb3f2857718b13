//! Requests on one table: consistent reads, paged queries, conditional updates and
//! transactions, with DynamoDB's failure shapes turned into outcomes ([`Updated`],
//! cancellation reasons), and the serving request's id recorded on every write.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    CancellationReason, KeysAndAttributes, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use domain::store::{StoreError, StoreResult};

use crate::error::{DynamoError, build, codes, is_transaction_conflict, sdk};
use crate::expr::Update;
use crate::transact::names;
use crate::{Item, REQUEST_ID_ATTR, s};

tokio::task_local! {
    /// The id of the request being served (API Gateway's), set by the function's adapter.
    static REQUEST_ID: String;
}

/// Longest request id recorded (API Gateway's are 16–36 characters).
const MAX_REQUEST_ID_CHARS: usize = 128;

/// Runs `f` with every write it makes recording `id` (API Gateway's request id) on the items
/// it writes. Without an id, writes remove the attribute: an item never names a request that
/// did not make its current state.
pub async fn with_request_id<F: std::future::Future>(id: Option<&str>, f: F) -> F::Output {
    match id.filter(|i| !i.is_empty() && i.len() <= MAX_REQUEST_ID_CHARS) {
        Some(id) => REQUEST_ID.scope(id.to_owned(), f).await,
        None => f.await,
    }
}

/// The request recorded on an item (a stream image): the one that made its current state.
pub fn request_id_of(item: &Item) -> Option<&str> {
    item.get(REQUEST_ID_ATTR).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// The request id [`with_request_id`] set for the running task, if any.
pub(crate) fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// How often a transaction that lost to a concurrent one is tried again.
pub(crate) const TRANSACTION_ATTEMPTS: u32 = 6;

/// Most keys one `BatchGetItem` takes.
const BATCH_GET_KEYS: usize = 100;
/// How often [`Table::batch_get`] asks for keys DynamoDB left unprocessed.
const BATCH_GET_ATTEMPTS: u32 = 6;

/// How much larger each further page of a filtered query asks to read ([`Table::query_until`]).
pub const PAGE_GROWTH: usize = 8;
/// The largest page a filtered query asks for (DynamoDB also ends a page at 1 MB read).
pub const MAX_PAGE: usize = 1_000;

/// One table and the client that reaches it.
#[derive(Clone, Debug)]
pub struct Table {
    /// The SDK client.
    pub client: Client,
    /// The table's name.
    pub table: String,
}

impl Table {
    /// `update` as one `UpdateItem` (with `ALL_OLD` when its condition fails).
    pub fn update(&self, update: Update) -> UpdateRequest<'_> {
        UpdateRequest { table: self, update }
    }

    /// The item at `key`, read consistently (`None`: there is none).
    pub async fn get(&self, key: Item) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk)?;
        Ok(out.item)
    }

    /// Every item of partition `pk` whose sort key starts with `sk_prefix` (all of them when
    /// the prefix is empty: DynamoDB refuses an empty key value).
    pub async fn query_all(&self, pk: String, sk_prefix: &str) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut q = self.client.query().table_name(&self.table).expression_attribute_values(":pk", s(pk.clone()));
            q = if sk_prefix.is_empty() {
                q.key_condition_expression("#pk = :pk").set_expression_attribute_names(Some(names("#pk")))
            } else {
                q.key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                    .set_expression_attribute_names(Some(names("#pk #sk")))
                    .expression_attribute_values(":prefix", s(sk_prefix))
            };
            let out = q.consistent_read(true).set_exclusive_start_key(start).send().await.map_err(sdk)?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(items),
            }
        }
    }

    /// Runs `query` page after page — DynamoDB ends a page at 1 MB of items read (and `Limit`
    /// counts items before any filter), so a short page is not the end — keeping what `keep`
    /// returns, until `want` are kept or the query has no more pages. The first page asks for
    /// the items still wanted plus `skipped`, the items the caller knows `keep` will refuse (the
    /// cursor's own item), so the common case stays one request; each page that ends short of
    /// that asks for [`PAGE_GROWTH`] times more, up to [`MAX_PAGE`] (issue 59: a desktop's run
    /// behind 5,000 queued runs of a session another desktop runs was one request per skipped
    /// item, past the function's timeout; now ~10).
    pub async fn query_until<T>(
        &self,
        query: impl Fn() -> QueryFluentBuilder,
        want: usize,
        skipped: usize,
        mut keep: impl FnMut(&Item) -> StoreResult<Option<T>>,
    ) -> StoreResult<Vec<T>> {
        let mut kept = Vec::new();
        let mut start = None;
        let mut page = 0usize;
        while kept.len() < want {
            page = (want - kept.len() + skipped).max(page.saturating_mul(PAGE_GROWTH).min(MAX_PAGE));
            let out = query()
                .limit(i32::try_from(page).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk)?;
            for item in out.items() {
                if let Some(t) = keep(item)? {
                    kept.push(t);
                }
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        kept.truncate(want);
        Ok(kept)
    }

    /// The items at `keys` (each a `pk` and `sk`), in the order asked, those no longer there
    /// left out: `BatchGetItem`, 100 keys a request, eventually consistent (for listings), the
    /// keys DynamoDB leaves unprocessed when throttled asked for again after a short backoff.
    pub async fn batch_get(&self, keys: &[Item]) -> StoreResult<Vec<Item>> {
        let text = |item: &Item, k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let key_of = |item: &Item| (text(item, "pk"), text(item, "sk"));
        let mut found = Vec::new();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut pending = chunk.to_vec();
            let mut delay = Duration::from_millis(10);
            for attempt in 1..=BATCH_GET_ATTEMPTS {
                let wanted = KeysAndAttributes::builder().set_keys(Some(pending)).build().map_err(build)?;
                let out = self.client.batch_get_item().request_items(&self.table, wanted).send().await.map_err(sdk)?;
                found.extend(out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default());
                pending =
                    out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).map(|k| k.keys).unwrap_or_default();
                if pending.is_empty() {
                    break;
                }
                if attempt == BATCH_GET_ATTEMPTS {
                    return Err(StoreError::unavailable(DynamoError::Unprocessed {
                        attempts: BATCH_GET_ATTEMPTS,
                        left: pending.len(),
                    }));
                }
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
        let mut by_key: std::collections::HashMap<_, Item> = found.into_iter().map(|i| (key_of(&i), i)).collect();
        Ok(keys.iter().filter_map(|k| by_key.remove(&key_of(k))).collect())
    }

    /// Runs a transaction, retrying on `TransactionConflict`. `Ok(None)` = committed;
    /// `Ok(Some(reasons))` = a condition failed (one reason per item, in order).
    pub async fn transact(&self, items: Vec<TransactWriteItem>) -> StoreResult<Option<Vec<CancellationReason>>> {
        let mut delay = Duration::from_millis(10);
        for attempt in 1..=TRANSACTION_ATTEMPTS {
            let result = self.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let err = match result {
                Ok(_) => return Ok(None),
                Err(e) => e,
            };
            if let SdkError::ServiceError(se) = &err
                && let TransactWriteItemsError::TransactionCanceledException(tc) = se.err()
            {
                let reasons = tc.cancellation_reasons().to_vec();
                if reasons.iter().any(|r| r.code() == Some("ConditionalCheckFailed")) {
                    return Ok(Some(reasons));
                }
                // Lost a race with another transaction, or throttled: both retryable.
                let transient = reasons.iter().all(|r| {
                    matches!(
                        r.code(),
                        None | Some(
                            "None" | "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
                        )
                    )
                });
                if !transient {
                    return Err(StoreError::refused(DynamoError::Cancelled {
                        what: "transaction",
                        reasons: codes(&reasons),
                    }));
                }
                if attempt < TRANSACTION_ATTEMPTS {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    continue;
                }
                return Err(StoreError::unavailable(DynamoError::Contended {
                    attempts: TRANSACTION_ATTEMPTS,
                    reasons: codes(&reasons),
                }));
            }
            if is_transaction_conflict(&err) && attempt < TRANSACTION_ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay *= 2;
                continue;
            }
            return Err(sdk(err));
        }
        Err(StoreError::unavailable(DynamoError::Contended { attempts: TRANSACTION_ATTEMPTS, reasons: String::new() }))
    }
}

/// One conditional `UpdateItem` with `ALL_OLD` on failure.
pub struct UpdateRequest<'a> {
    table: &'a Table,
    update: Update,
}

/// Result of a conditional update.
pub enum Updated {
    /// The condition held; the item as asked for in `ReturnValues`.
    Applied(Option<Item>),
    /// The condition failed; the item as it was (`None`: no such item).
    Rejected(Option<Item>),
}

impl UpdateRequest<'_> {
    /// Sends it; `return_new`: the item as written comes back in [`Updated::Applied`].
    pub async fn send(self, return_new: bool) -> StoreResult<Updated> {
        let r = self.update.render(current_request_id().as_deref());
        let result = self
            .table
            .client
            .update_item()
            .table_name(&self.table.table)
            .set_key(Some(self.update.key))
            .update_expression(r.update)
            .set_condition_expression(r.condition)
            .set_expression_attribute_names(Some(r.names))
            .set_expression_attribute_values(r.values)
            .return_values(if return_new { ReturnValue::AllNew } else { ReturnValue::None })
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(UpdateItemOutput { attributes, .. }) => Ok(Updated::Applied(attributes)),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                match se.into_err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => Ok(Updated::Rejected(c.item)),
                    other => Err(StoreError::refused(other)),
                }
            }
            Err(e) => Err(sdk(e)),
        }
    }
}

/// `item` put where `condition` holds, as a transaction item recording the serving request
/// ([`crate::transact::put`]).
pub fn put(table: &str, item: Item, condition: &str, condition_values: Item) -> StoreResult<TransactWriteItem> {
    crate::transact::put(table, item, condition, condition_values, current_request_id().as_deref()).map_err(build)
}

/// A condition check as a transaction item ([`crate::transact::check`]).
pub fn check(table: &str, key: Item, condition: &str, condition_values: Item) -> StoreResult<TransactWriteItem> {
    crate::transact::check(table, key, condition, condition_values).map_err(build)
}

/// `update` as a transaction item recording the serving request ([`crate::transact::update_item`]).
pub fn update_item(table: &str, update: Update) -> StoreResult<TransactWriteItem> {
    crate::transact::update_item(table, update, current_request_id().as_deref()).map_err(build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_record_the_serving_request_or_remove_it() {
        let key = Item::from([("pk".to_owned(), s("P")), ("sk".to_owned(), s("S"))]);
        let u = Update::of(key).set("a", s("x"));
        assert_eq!(u.render(current_request_id().as_deref()).update, "SET #a = :v0 REMOVE #request_id");
        let traced = with_request_id(Some("req-1"), async { u.render(current_request_id().as_deref()) }).await;
        assert_eq!(traced.update, "SET #request_id = :v0, #a = :v1");
        assert_eq!(traced.values.unwrap()[":v0"], s("req-1"));
    }
}
