//! OAuth clients that MCP clients registered with the local authorization server
//! ([`RegisterClients`]; Cognito keeps them in the cloud).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use domain::clients::{ClientSummary, RegisterClients, RegisteredClient};
use domain::store::StoreResult;

use crate::SqliteStore;
use crate::codec::{col, json};

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
}
