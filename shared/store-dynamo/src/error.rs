//! SDK failures as [`StoreError`](domain::store::StoreError)s ([`dynamo_item::error`]), under the name the modules use.

pub use dynamo_item::error::DynamoError;
pub(crate) use dynamo_item::error::{build, sdk, unexpected};
