//! The `owner_api` function: `http_api::owner_api::OwnerApi` on DynamoDB (owner tokens checked
//! against the issuer's JWKS, download links presigned on S3) and the owner's web panel.

use std::sync::Arc;

use auth::{Audience, Authenticator, JwksCache, Keys};
use domain::clock::{SharedClock, SystemClock};
use events::webhook_url::UrlPolicy;
use http_api::owner_api::OwnerApi;
use panel::{PATH, PanelConfig};
use store_dynamo::DynamoStore;
use tools::blobs::BlobStore;

use crate::config::OwnerConfig;
use crate::http_glue::{http_request, lambda_response};
use crate::jwks::HttpJwks;
use crate::s3::S3Blobs;
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Runs the owner API and the panel until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = OwnerConfig::from_env(env)?;
    let aws = aws_config().await;
    let clock: SharedClock = Arc::new(SystemClock);
    let auth = Authenticator {
        issuer: config.issuer.clone(),
        audience: Audience::Only(config.audiences.clone()),
        keys: Keys::Jwks(JwksCache::new(Arc::new(HttpJwks::new(&config.jwks_url)?))),
        clock: clock.clone(),
    };
    let blobs: Arc<dyn BlobStore> = Arc::new(S3Blobs::new(&aws, &config.bucket));
    let builds = Arc::clone(&blobs);
    let api = OwnerApi {
        store: Arc::new(dynamo_store(&aws, &config.table, config.policy)),
        auth: Arc::new(auth),
        clock,
        policy: config.policy,
        blobs: Some(blobs),
        urls: UrlPolicy::Cloud,
        budget: Default::default(),
    };
    let app = Arc::new(App { api, panel: config.panel(), public_url: config.public_url.clone(), builds });
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let app = Arc::clone(&app);
        async move {
            // Failed pairing lookups are also counted per source address (guessing is bounded).
            let source = crate::http_glue::source_ip(&req);
            let mut req = http_request(req);
            req.extensions_mut().insert(http_util::ClientSource(source));
            let answer = crate::http_glue::traced(req, |req| async move { app.handle(req).await }).await;
            Ok::<_, Error>(lambda_response(answer))
        }
    }))
    .await
}

/// The function's routes: `/panel…`, `/relay/…` (the installer and builds), `/openapi.json` and `/owner/…`.
pub struct App {
    /// The owner API.
    pub api: OwnerApi<DynamoStore>,
    /// The panel's configuration.
    pub panel: PanelConfig,
    /// The stack's base URL.
    pub public_url: String,
    /// Where the relay builds are (`relay/` in the artifact bucket).
    pub builds: Arc<dyn BlobStore>,
}

impl App {
    /// Answers one request.
    pub async fn handle(&self, req: http::Request<bytes::Bytes>) -> http::Response<bytes::Bytes> {
        if req.uri().path().starts_with(PATH)
            && let Some(r) = self.panel.handle(req.method(), req.uri().path(), &self.public_url)
        {
            return r;
        }
        if let Some(r) = self.relay_builds(&req).await {
            return r;
        }
        if req.uri().path() == http_api::openapi::PATH {
            return http_api::openapi::response(req.method());
        }
        self.api.handle(req).await
    }

    /// `GET /relay/install.sh`, and `GET /relay/download/<file>` as a redirect to a presigned
    /// URL of `relay/<file>` in the artifact bucket (S3 refuses it, 403, when the operator has not
    /// uploaded the builds; the installer then says so).
    async fn relay_builds(&self, req: &http::Request<bytes::Bytes>) -> Option<http::Response<bytes::Bytes>> {
        use relay_dist::{DOWNLOAD_PREFIX, INSTALL_PATH, install_response, servable};
        let path = req.uri().path();
        if path == INSTALL_PATH && req.method() == http::Method::GET {
            return Some(install_response(&self.public_url));
        }
        let name = path.strip_prefix(DOWNLOAD_PREFIX).filter(|n| servable(n))?;
        let key = format!("relay/{name}");
        let kind = if name == relay_dist::SUMS { "text/plain" } else { "application/gzip" };
        let download = tools::blobs::Download { key: &key, name, content_type: kind };
        Some(match self.builds.download_url(&download).await {
            Ok(url) => {
                let mut r = http::Response::new(bytes::Bytes::new());
                *r.status_mut() = http::StatusCode::FOUND;
                if let Ok(v) = http::HeaderValue::from_str(&url) {
                    r.headers_mut().insert(http::header::LOCATION, v);
                }
                r
            }
            Err(e) => http_util::http_json::unavailable("relay download link", &e),
        })
    }
}
