//! Updates and conditions ([`dynamo_item::expr`]), under the name the modules use.

pub(crate) use dynamo_item::expr::*;
