//! What the cloud keeps about OAuth clients beside Cognito's app clients, all under `CLIENT#`
//! (the `register_client` function may write nowhere else):
//!
//! - [`ClientUse`]: when a registered client was first and last issued a token, `CLIENT#<client_id>` /
//!   `USED` — the one fact about them Cognito does not keep; and for whom: the chats issued a
//!   token for an owner, `CLIENT#CHATS#<owner>` / `CHAT#<sha256(client_id)>`, first and last; beside
//!   them the hosts that connected, `HOST#<sha256(client_id, name)>` (their handshakes, written by
//!   the MCP endpoint);
//! - [`MetadataClients`]: the app client of each client metadata document, `CLIENT#DOC#<sha256(url)>`
//!   / `DOC`, written once (first writer wins);
//! - [`DocumentCopies`]: the last good copy of each document, `CLIENT#DOC#<sha256(url)>` / `COPY`,
//!   replaced only by a copy fetched later;
//! - [`ClientRedirects`]: a registered client's redirect URIs, `CLIENT#<client_id>` / `REDIRECTS`
//!   (Cognito holds only the facade's callback);
//! - [`AuthorizationFlows`]: the facade's one-time records, `CLIENT#FLOW#<key>` / `FLOW`, with a TTL
//!   and taken by one conditional delete.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::ReturnValue;

use domain::clients::{
    ChatConnection, ClientInfo, ClientUseRecord, HostSeen, MAX_LISTED_CHAT_CONNECTIONS, MAX_LISTED_HOSTS,
};
use domain::clock::Timestamp;
use domain::ids::OwnerId;
use domain::store::{
    AuthorizationFlows, ClientRedirects, ClientUse, DocumentCopies, MetadataClients, StoreError, StoreResult,
};

use crate::codec::{Item, Read, n, opt_from, s};
use crate::error::sdk;
use crate::keys::{
    chat_connection_key, chat_connections_partition, client_redirects_key, client_use_key, document_copy_key, flow_key,
    host_seen_key, metadata_client_key, ttl_at,
};
use crate::request::Updated;
use crate::write::{Update, lt, missing};
use crate::{DynamoStore, TTL_ATTRIBUTE};

#[async_trait]
impl ClientUse for DynamoStore {
    /// One unconditional `UpdateItem`: the first time kept (`if_not_exists`), the last set.
    async fn mark_client_used(&self, client_id: &str) -> StoreResult<()> {
        let now = n(self.clock.now().as_millis());
        self.db
            .update(
                Update::of(client_use_key(client_id))
                    .set_if_absent("first_used_at", now.clone())
                    .set("last_used_at", now),
            )
            .send(false)
            .await
            .map(drop)
    }

    async fn client_use(&self, client_id: &str) -> StoreResult<Option<ClientUseRecord>> {
        let item = self.db.get(client_use_key(client_id)).await?;
        opt_from(item.as_ref(), |i| {
            let r = Read(i);
            Ok(ClientUseRecord { first_used_at: r.ts("first_used_at")?, last_used_at: r.opt_ts("last_used_at")? })
        })
    }

    /// One unconditional `UpdateItem`: the first time kept (`if_not_exists`), the last set.
    async fn mark_chat_connected(
        &self,
        owner: &OwnerId,
        client_id: &str,
        token_client: Option<&str>,
    ) -> StoreResult<()> {
        let now = n(self.clock.now().as_millis());
        let mut update = Update::of(chat_connection_key(owner, client_id))
            .set("client_id", s(client_id))
            .set_if_absent("first_at", now.clone())
            .set("last_at", now);
        if let Some(t) = token_client {
            update = update.set("token_client", s(t));
        }
        self.db.update(update).send(false).await.map(drop)
    }

    /// One `Query` of the owner's partition (a few small items: one per chat app), sorted here.
    async fn chat_connections(&self, owner: &OwnerId) -> StoreResult<Vec<ChatConnection>> {
        chats_of(&self.db.query_all(chat_connections_partition(owner), "CHAT#").await?)
    }

    /// One unconditional `UpdateItem`, kept 90 days after the handshake (DynamoDB's
    /// TTL removes hosts not seen since: a client that names itself anew each time cannot grow
    /// the owner's partition for ever).
    async fn mark_host_seen(&self, owner: &OwnerId, host: &HostSeen) -> StoreResult<()> {
        let update = Update::of(host_seen_key(owner, &host.client_id, &host.info.name))
            .set("client_id", s(&host.client_id))
            .set("name", s(&host.info.name))
            .set("version", s(&host.info.version))
            .set("protocol", s(&host.protocol))
            .set("seen_at", n(host.seen_at.as_millis()))
            .set(TTL_ATTRIBUTE, ttl_at(host.seen_at.plus(HOST_SEEN_KEPT_FOR)));
        self.db.update(update).send(false).await.map(drop)
    }

    /// One `Query` of the owner's partition, sorted here.
    async fn hosts_seen(&self, owner: &OwnerId) -> StoreResult<Vec<HostSeen>> {
        hosts_of(&self.db.query_all(chat_connections_partition(owner), "HOST#").await?)
    }

    /// One `Query` of the whole partition: the chats and the hosts beside them.
    async fn chats_and_hosts(&self, owner: &OwnerId) -> StoreResult<(Vec<ChatConnection>, Vec<HostSeen>)> {
        let items = self.db.query_all(chat_connections_partition(owner), "").await?;
        let sk =
            |i: &Item, prefix: &str| i.get("sk").and_then(|v| v.as_s().ok()).is_some_and(|k| k.starts_with(prefix));
        let (chats, hosts): (Vec<Item>, Vec<Item>) =
            items.into_iter().filter(|i| sk(i, "CHAT#") || sk(i, "HOST#")).partition(|i| sk(i, "CHAT#"));
        Ok((chats_of(&chats)?, hosts_of(&hosts)?))
    }
}

/// The chat items, the latest first, at most the listing's bound.
fn chats_of(items: &[Item]) -> StoreResult<Vec<ChatConnection>> {
    let mut all = items
        .iter()
        .map(|i| {
            let r = Read(i);
            Ok(ChatConnection {
                client_id: r.s("client_id")?.to_owned(),
                token_client: r.opt_s("token_client").map(str::to_owned),
                first_at: r.ts("first_at")?,
                last_at: r.ts("last_at")?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    all.sort_by(|a, b| b.last_at.cmp(&a.last_at).then_with(|| a.client_id.cmp(&b.client_id)));
    all.truncate(MAX_LISTED_CHAT_CONNECTIONS);
    Ok(all)
}

/// The host items, the latest first, at most the listing's bound.
fn hosts_of(items: &[Item]) -> StoreResult<Vec<HostSeen>> {
    let mut all = items
        .iter()
        .map(|i| {
            let r = Read(i);
            Ok(HostSeen {
                client_id: r.s("client_id")?.to_owned(),
                info: ClientInfo { name: r.s("name")?.to_owned(), version: r.s("version")?.to_owned() },
                protocol: r.s("protocol")?.to_owned(),
                seen_at: r.ts("seen_at")?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    all.sort_by(|a, b| {
        b.seen_at.cmp(&a.seen_at).then_with(|| (&a.client_id, &a.info.name).cmp(&(&b.client_id, &b.info.name)))
    });
    all.truncate(MAX_LISTED_HOSTS);
    Ok(all)
}

/// How long a host's record outlives its last handshake.
const HOST_SEEN_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(90 * 24 * 3600);

#[async_trait]
impl MetadataClients for DynamoStore {
    async fn metadata_client(&self, url: &str) -> StoreResult<Option<String>> {
        let item = self.db.get(metadata_client_key(url)).await?;
        opt_from(item.as_ref(), |i| Read(i).s("client_id").map(str::to_owned))
    }

    /// One conditional `UpdateItem` that writes only where nothing is; on failure the old image
    /// names the winner (no second read).
    async fn keep_metadata_client(&self, url: &str, client_id: &str) -> StoreResult<String> {
        let outcome = self
            .db
            .update(
                Update::of(metadata_client_key(url))
                    .set("client_id", s(client_id))
                    .set("url", s(url))
                    .set("created_at", n(self.clock.now().as_millis()))
                    .when(missing("client_id")),
            )
            .send(false)
            .await?;
        match outcome {
            Updated::Applied(_) => Ok(client_id.to_owned()),
            Updated::Rejected(Some(old)) => Read(&old).s("client_id").map(str::to_owned),
            Updated::Rejected(None) => {
                Err(StoreError::Corrupt("a metadata client's condition failed on no item".into()))
            }
        }
    }
}

#[async_trait]
impl DocumentCopies for DynamoStore {
    /// One conditional `UpdateItem`: written unless the kept copy was fetched later (two
    /// instances refreshing one document at once keep the newer).
    async fn keep_document_copy(&self, url: &str, body: &str, fetched: Timestamp) -> StoreResult<()> {
        self.db
            .update(
                Update::of(document_copy_key(url))
                    .set("url", s(url))
                    .set("body", s(body))
                    .set("fetched_at", n(fetched.as_millis()))
                    .when(missing("fetched_at").or(lt("fetched_at", n(fetched.as_millis())))),
            )
            .send(false)
            .await
            .map(drop)
    }

    async fn document_copy(&self, url: &str) -> StoreResult<Option<(String, Timestamp)>> {
        let item = self.db.get(document_copy_key(url)).await?;
        opt_from(item.as_ref(), |i| {
            let r = Read(i);
            Ok((r.s("body")?.to_owned(), r.ts("fetched_at")?))
        })
    }
}

#[async_trait]
impl ClientRedirects for DynamoStore {
    async fn keep_client_redirects(&self, client_id: &str, redirect_uris: &[String]) -> StoreResult<()> {
        let uris = serde_json::to_string(redirect_uris).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.db
            .update(Update::of(client_redirects_key(client_id)).set("redirect_uris", s(uris)))
            .send(false)
            .await
            .map(drop)
    }

    async fn client_redirects(&self, client_id: &str) -> StoreResult<Option<Vec<String>>> {
        let item = self.db.get(client_redirects_key(client_id)).await?;
        opt_from(item.as_ref(), |i| Read(i).parse("redirect_uris", |v| serde_json::from_str(v).ok()))
    }

    async fn forget_client_redirects(&self, client_id: &str) -> StoreResult<()> {
        self.db
            .client
            .delete_item()
            .table_name(&self.db.table)
            .set_key(Some(client_redirects_key(client_id)))
            .send()
            .await
            .map_err(sdk)
            .map(drop)
    }
}

#[async_trait]
impl AuthorizationFlows for DynamoStore {
    async fn begin_flow(&self, key: &str, record: &str, expires: Timestamp) -> StoreResult<bool> {
        let outcome = self
            .db
            .update(
                Update::of(flow_key(key))
                    .set("record", s(record))
                    .set("expires_at", n(expires.as_millis()))
                    .set(TTL_ATTRIBUTE, ttl_at(expires))
                    .when(missing("record")),
            )
            .send(false)
            .await?;
        Ok(matches!(outcome, Updated::Applied(_)))
    }

    /// One `DeleteItem` conditional on the item existing, returning it: DynamoDB serializes the
    /// deletes of one item, so one caller gets the old image and the others a failed condition.
    /// An expired record is deleted too, and not returned (TTL deletes late).
    async fn take_flow(&self, key: &str) -> StoreResult<Option<String>> {
        let result = self
            .db
            .client
            .delete_item()
            .table_name(&self.db.table)
            .set_key(Some(flow_key(key)))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(out) => out.attributes,
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), DeleteItemError::ConditionalCheckFailedException(_)) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(sdk(e)),
        };
        let Some(old) = old else { return Ok(None) };
        let r = Read(&old);
        if r.ts("expires_at")? <= self.clock.now() {
            return Ok(None);
        }
        r.s("record").map(|v| Some(v.to_owned()))
    }
}
