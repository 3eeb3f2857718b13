//! Whether registered OAuth clients were ever issued a token ([`ClientUse`]): one item per
//! client that was, `pk = CLIENT#<client_id>`, `sk = USED`. The clients themselves are Cognito
//! app clients; this is the one fact about them Cognito does not keep.

use async_trait::async_trait;

use domain::store::ClientUse;
use domain::store::StoreResult;

use crate::DynamoStore;
use crate::codec::n;
use crate::keys::client_use_key;
use crate::write::{Update, missing};

#[async_trait]
impl ClientUse for DynamoStore {
    /// One conditional `UpdateItem` that keeps the first time (failing harmlessly after it).
    async fn mark_client_used(&self, client_id: &str) -> StoreResult<()> {
        self.update(
            Update::of(client_use_key(client_id))
                .set("first_used_at", n(self.clock.now().as_millis()))
                .when(missing("first_used_at")),
        )
        .send(false)
        .await
        .map(drop)
    }

    async fn client_used(&self, client_id: &str) -> StoreResult<bool> {
        Ok(self.get(client_use_key(client_id)).await?.is_some())
    }
}
