//! # dynamo-item — DynamoDB items and the conditional writes made of them
//!
//! What every module of `store-dynamo` builds and sends its requests with, kept apart so that
//! the store holds only its rules (its keys, its items and the domain's traits):
//!
//! | piece | what |
//! |---|---|
//! | this module | attribute values ([`s`], [`n`], [`b`], [`values`]) and typed reads ([`Read`]) |
//! | [`expiring`] | sort keys that begin with an expiry, the query of such an index (`Table::query_unexpired`), the range up to one item, TTL values |
//! | [`expr`] | updates and conditions that render to expressions with a placeholder for every name and value |
//! | [`transact`] | transaction items made of them, and what a cancelled transaction says of each |
//! | [`table`] | the requests on one table: consistent reads, paged queries, batch reads, conditional updates, transactions retried on conflict, the serving request's id on every write |
//! | [`idempotency`] | idempotency records and the one idempotent-create transaction (parent check, key record, new item) |
//! | [`error`] | SDK failures as store errors, retryable or not, and the request layer's own |

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use domain::clock::Timestamp;
use domain::store::{StoreError, StoreResult};

pub mod error;
pub mod expiring;
pub mod expr;
pub mod idempotency;
pub mod table;
pub mod transact;

/// The attribute every write records the serving request's id in (the stream's publisher passes
/// it on, so an event's delivery joins the request's log lines).
pub const REQUEST_ID_ATTR: &str = "request_id";

/// An item as the SDK holds it: attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

/// A string attribute.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute.
pub fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A boolean attribute.
pub fn b(v: bool) -> AttributeValue {
    AttributeValue::Bool(v)
}

/// An item (or part of one) from name–value pairs.
pub fn values<const N: usize>(pairs: [(&str, AttributeValue); N]) -> Item {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

// ---- item decoding -----------------------------------------------------------------------

/// Typed reads of an item's attributes; a missing or malformed required one is
/// [`StoreError::Corrupt`] naming the attribute ([`bad`]).
pub struct Read<'a>(pub &'a Item);

impl Read<'_> {
    /// A string attribute, if present.
    pub fn opt_s(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(AttributeValue::S(v)) => Some(v),
            _ => None,
        }
    }
    /// A required string attribute.
    pub fn s(&self, name: &str) -> StoreResult<&str> {
        self.opt_s(name).ok_or_else(|| bad(name))
    }
    /// A number attribute, if present (a null counts as absent).
    pub fn opt_n(&self, name: &str) -> StoreResult<Option<i64>> {
        match self.0.get(name) {
            Some(AttributeValue::N(v)) => v.parse().map(Some).map_err(|_| bad(name)),
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(_) => Err(bad(name)),
        }
    }
    /// A required number attribute.
    pub fn n(&self, name: &str) -> StoreResult<i64> {
        self.opt_n(name)?.ok_or_else(|| bad(name))
    }
    /// A required time (milliseconds since the epoch).
    pub fn ts(&self, name: &str) -> StoreResult<Timestamp> {
        self.n(name).map(Timestamp::from_millis)
    }
    /// A time, if present.
    pub fn opt_ts(&self, name: &str) -> StoreResult<Option<Timestamp>> {
        Ok(self.opt_n(name)?.map(Timestamp::from_millis))
    }
    /// A boolean attribute (absent: false).
    pub fn bool(&self, name: &str) -> bool {
        matches!(self.0.get(name), Some(AttributeValue::Bool(true)))
    }
    /// A required string attribute, parsed by `f` (`None`: malformed).
    pub fn parse<T>(&self, name: &str, f: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
        f(self.s(name)?).ok_or_else(|| bad(name))
    }
    /// A string attribute, if present, parsed by `f` (`None`: malformed).
    pub fn opt_parse<T>(&self, name: &str, f: impl FnOnce(&str) -> Option<T>) -> StoreResult<Option<T>> {
        self.opt_s(name).map(|v| f(v).ok_or_else(|| bad(name))).transpose()
    }
}

/// The error for attribute `name` missing or malformed.
pub fn bad(name: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name} missing or malformed"))
}

/// A DynamoDB-JSON image (as the table's stream delivers it, `{"pk":{"S":"…"},…}`) as an item.
///
/// # Errors
/// [`StoreError::Corrupt`] when the JSON is not an image.
pub fn item_from_stream_json(image: &serde_json::Value) -> StoreResult<Item> {
    fn value(v: &serde_json::Value) -> Option<AttributeValue> {
        let (kind, inner) = v.as_object()?.iter().next()?;
        Some(match kind.as_str() {
            "S" => AttributeValue::S(inner.as_str()?.to_owned()),
            "N" => AttributeValue::N(inner.as_str()?.to_owned()),
            "BOOL" => AttributeValue::Bool(inner.as_bool()?),
            "NULL" => AttributeValue::Null(true),
            "SS" => {
                AttributeValue::Ss(inner.as_array()?.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            }
            "NS" => {
                AttributeValue::Ns(inner.as_array()?.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            }
            "L" => AttributeValue::L(inner.as_array()?.iter().map(value).collect::<Option<_>>()?),
            "M" => AttributeValue::M(
                inner.as_object()?.iter().map(|(k, v)| Some((k.clone(), value(v)?))).collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    }
    let map = image.as_object().ok_or_else(|| StoreError::Corrupt("stream image is not an object".into()))?;
    map.iter().map(|(k, v)| value(v).map(|v| (k.clone(), v)).ok_or_else(|| bad(k))).collect()
}
