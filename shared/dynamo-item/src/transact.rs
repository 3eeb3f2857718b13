//! Transaction items and what a cancelled transaction says about each: the writes a
//! `TransactWriteItems` is made of (every condition's names through placeholders, the old item
//! asked for on failure, the serving request recorded) and the reading of its cancellation
//! reasons.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::BuildError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use crate::expr::Update;
use crate::{Item, REQUEST_ID_ATTR, s};

/// Expression attribute names for every `#name` token in `expr` (each maps to `name`).
/// Every attribute goes through a placeholder: DynamoDB reserves words such as `status`,
/// `name`, `owner`, `result`, `size` and `ttl`, and rejects unused placeholders.
pub fn names(expr: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'#' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            if end > start {
                out.insert(format!("#{}", &expr[start..end]), expr[start..end].to_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// `item` put where `condition` holds (its values `condition_values`), as a transaction item,
/// recording `request_id` ([`REQUEST_ID_ATTR`]); a failed condition returns the old item.
pub fn put(
    table: &str,
    mut item: Item,
    condition: &str,
    condition_values: Item,
    request_id: Option<&str>,
) -> Result<TransactWriteItem, BuildError> {
    if let Some(id) = request_id {
        item.insert(REQUEST_ID_ATTR.to_owned(), s(id));
    }
    let mut p = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names(condition)))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if !condition_values.is_empty() {
        p = p.set_expression_attribute_values(Some(condition_values));
    }
    Ok(TransactWriteItem::builder().put(p.build()?).build())
}

/// A check that `condition` holds on the item at `key`, as a transaction item (the old item on
/// failure).
pub fn check(table: &str, key: Item, condition: &str, condition_values: Item) -> Result<TransactWriteItem, BuildError> {
    let mut c = ConditionCheck::builder()
        .table_name(table)
        .set_key(Some(key))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names(condition)))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if !condition_values.is_empty() {
        c = c.set_expression_attribute_values(Some(condition_values));
    }
    Ok(TransactWriteItem::builder().condition_check(c.build()?).build())
}

/// `update` as a transaction item recording `request_id` (with `ALL_OLD` on a failed condition).
pub fn update_item(table: &str, update: Update, request_id: Option<&str>) -> Result<TransactWriteItem, BuildError> {
    let r = update.render(request_id);
    let u = aws_sdk_dynamodb::types::Update::builder()
        .table_name(table)
        .set_key(Some(update.key))
        .update_expression(r.update)
        .set_condition_expression(r.condition)
        .set_expression_attribute_names(Some(r.names))
        .set_expression_attribute_values(r.values)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()?;
    Ok(TransactWriteItem::builder().update(u).build())
}

/// Whether transaction item `i` failed its condition.
pub fn failed(reasons: &[CancellationReason], i: usize) -> bool {
    reasons.get(i).and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
}

/// Whether the item a create found in its way is the one it was writing: the answer to an
/// earlier attempt of the same request was lost (a timeout, a 500 after the commit) and the
/// SDK sent it again. The ids are fresh, so nothing else can have written them.
pub fn our_write_landed(old: Option<&Item>, written: &Item) -> bool {
    old.is_some_and(|old| written.iter().all(|(k, v)| old.get(k) == Some(v)))
}

/// The item transaction item `i` found when its condition failed (none if it was missing).
pub fn old_image(reasons: &[CancellationReason], i: usize) -> Option<&Item> {
    reasons.get(i).and_then(|r| r.item.as_ref()).filter(|i| !i.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_every_placeholder_once() {
        // Names as the stores spell them: letters, digits and underscores (`#deleted_at`).
        let m = names("SET #status = :s, #ttl = :t, #deleted_at = :d REMOVE #gsi1pk, #gsi1sk #status");
        assert_eq!(m.len(), 5);
        assert_eq!(m.get("#status").map(String::as_str), Some("status"));
        assert_eq!(m.get("#gsi1sk").map(String::as_str), Some("gsi1sk"));
        assert_eq!(m.get("#deleted_at").map(String::as_str), Some("deleted_at"));
    }
}
