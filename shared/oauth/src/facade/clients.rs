//! Which app client an authorization request is for, and where its client may be sent back.
//!
//! - A registered client (`client_id` an app client of the pool): its callbacks, less the
//!   facade's own; an app client without the facade's callback was made before the facade
//!   owned it, and keeps going to Cognito as it did.
//! - A metadata document (`client_id` an `https` URL): the document's `redirect_uris`, and one
//!   app client per document URL — found in the table, else created once with the facade's
//!   callback as its only one and recorded by a conditional write; an instance that loses the
//!   race deletes the app client it made. The document's redirect URIs never reach Cognito, so a
//!   changed document needs no app-client update: it applies when the cached copy expires.

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::{DOCUMENT_CLIENT_PREFIX, Facade};
use crate::cimd::{ClientDocument, DocumentError, is_document_url};
use crate::{lock, oauth_error};
use tools::{SCOPE_READ, SCOPE_RUN};

/// Where the client of a request may be sent back.
pub(super) enum Listed {
    /// A registered client's redirect URIs; the facade owns its callback.
    Owned(Vec<String>),
    /// A metadata document's.
    Document(Arc<ClientDocument>),
    /// An app client from before the facade owned the callback.
    Legacy,
}

/// The app client name for a document: the prefix and the host, in Cognito's name alphabet.
pub(super) fn document_client_name(host: &str) -> String {
    let mut name: String = format!("{DOCUMENT_CLIENT_PREFIX}{host}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || " +=,.@-_".contains(c) { c } else { '-' })
        .collect();
    name.truncate(128);
    name
}

impl Facade {
    /// The redirect URIs `client_id` may use; `Err` is the answer to give (nothing redirected).
    pub(super) async fn listed_redirects(&self, client_id: &str) -> Result<Listed, http::Response<Bytes>> {
        if is_document_url(client_id) {
            let Some(documents) = &self.parts.documents else {
                return Err(oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_client",
                    "client_id: client metadata documents are not accepted here",
                ));
            };
            return match documents.get(client_id).await {
                Ok(d) => Ok(Listed::Document(d)),
                Err(e @ DocumentError::Invalid { .. }) => {
                    Err(oauth_error(StatusCode::BAD_REQUEST, "invalid_client", &format!("client_id: {e}")))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fetching a client metadata document");
                    Err(oauth_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "temporarily_unavailable",
                        &format!("client_id: {e}"),
                    ))
                }
            };
        }
        match self.parts.clients.get_client(client_id).await {
            Ok(Some(c)) if c.redirect_uris.iter().any(|u| u == &self.callback) => {
                Ok(Listed::Owned(c.redirect_uris.into_iter().filter(|u| u != &self.callback).collect()))
            }
            Ok(Some(_)) => Ok(Listed::Legacy),
            Ok(None) => {
                Err(oauth_error(StatusCode::BAD_REQUEST, "invalid_client", "client_id: not a client of this server"))
            }
            Err(e) => {
                tracing::error!(error = %domain::errors::ErrorChain(&e), "reading an app client");
                Err(oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later"))
            }
        }
    }

    /// The app client recorded for the document at `url`, if any (remembered once read).
    pub(super) async fn known_app_client(&self, url: &str) -> Result<Option<String>, http::Response<Bytes>> {
        if let Some(id) = lock(&self.known).get(url) {
            return Ok(Some(id.clone()));
        }
        let found = self.parts.document_clients.metadata_client(url).await.map_err(|e| {
            tracing::error!(error = %domain::errors::ErrorChain(&e), "reading a document's app client");
            oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later")
        })?;
        if let Some(id) = &found {
            lock(&self.known).insert(url.to_owned(), id.clone());
        }
        Ok(found)
    }

    /// The document's app client, created the first time (see the module documentation).
    /// `Err`: why not, for the client's redirect.
    pub(super) async fn app_client_for(&self, doc: &ClientDocument) -> Result<String, String> {
        if let Ok(Some(id)) = self.known_app_client(&doc.client_id).await {
            return Ok(id);
        }
        let store = |e: domain::store::StoreError| {
            tracing::error!(error = %domain::errors::ErrorChain(&e), "making a document's app client");
            "retry later".to_owned()
        };
        let made = self.parts.clients.list_clients().await.map_err(store)?;
        if made.iter().filter(|c| c.name.starts_with(DOCUMENT_CLIENT_PREFIX)).count() >= self.parts.document_client_cap
        {
            return Err(format!(
                "this server has {} clients from metadata documents, its limit; its owner can remove unused ones",
                self.parts.document_client_cap
            ));
        }
        let scopes = [self.parts.scopes.spell(SCOPE_READ), self.parts.scopes.spell(SCOPE_RUN)];
        let created = self
            .parts
            .clients
            .create_client(&document_client_name(&doc.host), std::slice::from_ref(&self.callback), &scopes)
            .await
            .map_err(store)?;
        let winner = self
            .parts
            .document_clients
            .keep_metadata_client(&doc.client_id, &created.client_id)
            .await
            .map_err(store)?;
        if winner != created.client_id {
            // Another instance recorded its app client first: this one is surplus.
            if let Err(e) = self.parts.clients.delete_client(&created.client_id).await {
                tracing::error!(error = %domain::errors::ErrorChain(&e), client_id = %created.client_id, "deleting a surplus app client");
            }
        } else {
            tracing::info!(client_id = %winner, document = %doc.client_id, "made the app client of a metadata document");
        }
        lock(&self.known).insert(doc.client_id.clone(), winner.clone());
        Ok(winner)
    }
}
