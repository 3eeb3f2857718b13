//! Updates and conditions ([`dynamo_item::write`]), under the name the modules use.

pub(crate) use dynamo_item::write::*;
