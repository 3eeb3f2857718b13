//! Fetching the OAuth issuer's key set over HTTPS (rustls; 5 s timeout).

use std::time::Duration;

use auth::{FetchJwks, JwksError};

/// How long one JWKS fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Fetches a JWKS document over HTTPS.
pub struct HttpJwks {
    client: reqwest::Client,
    url: String,
}

impl HttpJwks {
    /// A fetcher for `url`.
    ///
    /// # Errors
    /// When the HTTP client cannot start (TLS roots).
    pub fn new(url: &str) -> Result<Self, reqwest::Error> {
        // rustls' *ring* provider, the workspace's one crypto library (reqwest's own `rustls`
        // feature would bring aws-lc); installing it twice is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder().timeout(FETCH_TIMEOUT).build()?;
        Ok(Self { client, url: url.to_owned() })
    }
}

#[async_trait::async_trait]
impl FetchJwks for HttpJwks {
    async fn fetch(&self) -> Result<auth::JwkSet, JwksError> {
        let url = || self.url.clone();
        let res =
            self.client.get(&self.url).send().await.map_err(|e| JwksError::Fetch { url: url(), source: e.into() })?;
        if !res.status().is_success() {
            return Err(JwksError::Status { url: url(), status: res.status().as_u16() });
        }
        res.json().await.map_err(|e| JwksError::Parse { url: url(), source: e.into() })
    }
}
