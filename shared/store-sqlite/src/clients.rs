//! OAuth clients that MCP clients registered with the local authorization server
//! ([`RegisterClients`]; Cognito keeps them in the cloud), whether each was used
//! (first and last, [`ClientUse`]), refresh-token families ([`RefreshTokens`]) and the last good copy of each
//! client metadata document ([`DocumentCopies`]).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, named_params, params};

use domain::clients::{
    ChatConnection, ClientInfo, ClientSummary, ClientUseRecord, HostSeen, MAX_LISTED_CHAT_CONNECTIONS,
    MAX_LISTED_HOSTS, RegisteredClient, Rotation,
};
use domain::clock::Timestamp;
use domain::ids::OwnerId;
use domain::store::StoreResult;
use domain::store::{ClientUse, DocumentCopies, RefreshTokens, RegisterClients};

use crate::SqliteStore;
use crate::codec::{col, json, ts};

#[async_trait]
impl RegisterClients for SqliteStore {
    async fn list_clients(&self) -> StoreResult<Vec<ClientSummary>> {
        self.read(|tx, _| {
            let mut st =
                tx.prepare_cached("SELECT client_id, name FROM oauth_clients ORDER BY created_at, client_id")?;
            st.query_map([], |r| Ok(ClientSummary { client_id: r.get(0)?, name: r.get(1)? }))?.collect()
        })
        .await
    }

    async fn get_client(&self, client_id: &str) -> StoreResult<Option<RegisteredClient>> {
        let id = client_id.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached("SELECT client_id, name, redirect_uris, scopes FROM oauth_clients WHERE client_id = ?1")?
                .query_row([id], |r| {
                    Ok(RegisteredClient {
                        client_id: r.get(0)?,
                        name: r.get(1)?,
                        redirect_uris: col(r, 2, "redirect_uris", |s| serde_json::from_str(s).ok())?,
                        scopes: col(r, 3, "scopes", |s| serde_json::from_str(s).ok())?,
                    })
                })
                .optional()
        })
        .await
    }

    async fn create_client(
        &self,
        name: &str,
        redirect_uris: &[String],
        scopes: &[String],
    ) -> StoreResult<RegisteredClient> {
        let client = RegisteredClient {
            client_id: format!("local-{}", uuid::Uuid::new_v4().simple()),
            name: name.to_owned(),
            redirect_uris: redirect_uris.to_vec(),
            scopes: scopes.to_vec(),
        };
        let row = client.clone();
        self.write(move |tx, now| {
            tx.prepare_cached("INSERT INTO oauth_clients (client_id, name, redirect_uris, scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")?.execute(params![row.client_id, row.name, json(&row.redirect_uris), json(&row.scopes), now.as_millis()],
            )
        })
        .await?;
        Ok(client)
    }

    async fn delete_client(&self, client_id: &str) -> StoreResult<()> {
        let id = client_id.to_owned();
        self.write(move |tx, _| {
            tx.prepare_cached("DELETE FROM oauth_clients WHERE client_id = ?1")?.execute([id]).map(drop)
        })
        .await
    }
}

#[async_trait]
impl ClientUse for SqliteStore {
    async fn mark_client_used(&self, client_id: &str) -> StoreResult<()> {
        let id = client_id.to_owned();
        self.write(move |tx, now| {
            tx.prepare_cached(
                "INSERT INTO client_use (client_id, first_used_at, last_used_at) VALUES (?1, ?2, ?2) \
                 ON CONFLICT (client_id) DO UPDATE SET last_used_at = excluded.last_used_at",
            )?
            .execute(params![id, now.as_millis()])
            .map(drop)
        })
        .await
    }

    async fn client_use(&self, client_id: &str) -> StoreResult<Option<ClientUseRecord>> {
        let id = client_id.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached("SELECT first_used_at, last_used_at FROM client_use WHERE client_id = ?1")?
                .query_row([id], |r| {
                    Ok(ClientUseRecord {
                        first_used_at: Timestamp::from_millis(r.get(0)?),
                        last_used_at: r.get::<_, Option<i64>>(1)?.map(Timestamp::from_millis),
                    })
                })
                .optional()
        })
        .await
    }

    async fn mark_chat_connected(
        &self,
        owner: &OwnerId,
        client_id: &str,
        token_client: Option<&str>,
    ) -> StoreResult<()> {
        let (owner, id, token_client) =
            (owner.as_str().to_owned(), client_id.to_owned(), token_client.map(str::to_owned));
        self.write(move |tx, now| {
            tx.prepare_cached(
                "INSERT INTO chat_connections (owner, client_id, first_at, last_at, token_client) VALUES (?1, ?2, ?3, ?3, ?4) \
                 ON CONFLICT (owner, client_id) DO UPDATE SET last_at = excluded.last_at, \
                 token_client = COALESCE(excluded.token_client, token_client)",
            )?
            .execute(params![owner, id, now.as_millis(), token_client])
            .map(drop)
        })
        .await
    }

    async fn chat_connections(&self, owner: &OwnerId) -> StoreResult<Vec<ChatConnection>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(
                "SELECT client_id, token_client, first_at, last_at FROM chat_connections WHERE owner = ?1 \
                 ORDER BY last_at DESC, client_id LIMIT ?2",
            )?;
            let limit = i64::try_from(MAX_LISTED_CHAT_CONNECTIONS).unwrap_or(i64::MAX);
            let rows = st.query_map(params![owner, limit], |r| {
                Ok(ChatConnection {
                    client_id: r.get(0)?,
                    token_client: r.get(1)?,
                    first_at: ts(r.get(2)?),
                    last_at: ts(r.get(3)?),
                })
            })?;
            rows.collect()
        })
        .await
    }

    async fn mark_host_seen(&self, owner: &OwnerId, host: &HostSeen) -> StoreResult<()> {
        let owner = owner.as_str().to_owned();
        let HostSeen { client_id, info: ClientInfo { name, version }, protocol, seen_at } = host.clone();
        self.write(move |tx, _| {
            tx.prepare_cached(
                "INSERT INTO hosts_seen (owner, client_id, name, version, protocol, seen_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (owner, client_id, name) DO UPDATE SET \
                 version = excluded.version, protocol = excluded.protocol, seen_at = excluded.seen_at",
            )?
            .execute(params![owner, client_id, name, version, protocol, seen_at.as_millis()])
            .map(drop)
        })
        .await
    }

    async fn hosts_seen(&self, owner: &OwnerId) -> StoreResult<Vec<HostSeen>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(
                "SELECT client_id, name, version, protocol, seen_at FROM hosts_seen WHERE owner = ?1 \
                 ORDER BY seen_at DESC, client_id, name LIMIT ?2",
            )?;
            let limit = i64::try_from(MAX_LISTED_HOSTS).unwrap_or(i64::MAX);
            let rows = st.query_map(params![owner, limit], |r| {
                Ok(HostSeen {
                    client_id: r.get(0)?,
                    info: ClientInfo { name: r.get(1)?, version: r.get(2)? },
                    protocol: r.get(3)?,
                    seen_at: ts(r.get(4)?),
                })
            })?;
            rows.collect()
        })
        .await
    }
}

#[async_trait]
impl DocumentCopies for SqliteStore {
    /// Written unless the kept copy was fetched later.
    async fn keep_document_copy(&self, url: &str, body: &str, fetched: Timestamp) -> StoreResult<()> {
        let (url, body) = (url.to_owned(), body.to_owned());
        self.write(move |tx, _| {
            tx.prepare_cached(
                "INSERT INTO document_copies (url, body, fetched_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (url) DO UPDATE SET body = excluded.body, fetched_at = excluded.fetched_at \
                 WHERE excluded.fetched_at > document_copies.fetched_at",
            )?
            .execute(params![url, body, fetched.as_millis()])
            .map(drop)
        })
        .await
    }

    async fn document_copy(&self, url: &str) -> StoreResult<Option<(String, Timestamp)>> {
        let url = url.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached("SELECT body, fetched_at FROM document_copies WHERE url = ?1")?
                .query_row([url], |r| Ok((r.get(0)?, ts(r.get(1)?))))
                .optional()
        })
        .await
    }
}

#[async_trait]
impl RefreshTokens for SqliteStore {
    async fn start_family(&self, family: &str, token: &str, expires: Timestamp) -> StoreResult<()> {
        let (family, token) = (family.to_owned(), token.to_owned());
        self.write(move |tx, now| {
            // Expired families go when a new one starts (a login a month keeps this small).
            tx.prepare_cached("DELETE FROM refresh_families WHERE expires_at <= ?1")?.execute([now.as_millis()])?;
            tx.prepare_cached(
                "INSERT INTO refresh_families (family, current, revoked, expires_at) VALUES (?1, ?2, 0, ?3)",
            )?
            .execute(params![family, token, expires.as_millis()])
            .map(drop)
        })
        .await
    }

    async fn rotate(&self, family: &str, token: &str, next: &str) -> StoreResult<Rotation> {
        let (family, token, next) = (family.to_owned(), token.to_owned(), next.to_owned());
        self.write(move |tx, now| {
            let rotated = tx
                .prepare_cached(
                    "UPDATE refresh_families SET current = :next \
                     WHERE family = :family AND current = :token AND revoked = 0 AND expires_at > :now",
                )?
                .execute(named_params! {":family": family, ":token": token, ":next": next, ":now": now.as_millis()})?;
            if rotated == 1 {
                return Ok(Rotation::Rotated);
            }
            // Not the current token: an older one used again revokes the family.
            let reused = tx
                .prepare_cached("UPDATE refresh_families SET revoked = 1 WHERE family = ?1 AND revoked = 0")?
                .execute([&family])?;
            Ok(if reused == 1 { Rotation::Reused } else { Rotation::Revoked })
        })
        .await
    }

    async fn revoke_family(&self, family: &str) -> StoreResult<()> {
        let family = family.to_owned();
        self.write(move |tx, _| {
            tx.prepare_cached("UPDATE refresh_families SET revoked = 1 WHERE family = ?1")?.execute([family]).map(drop)
        })
        .await
    }
}
