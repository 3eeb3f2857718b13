//! The `owner_api` function: `service::owner_api::OwnerApi` on DynamoDB, owner tokens checked
//! against the issuer's JWKS.

use std::sync::Arc;

use domain::clock::{SharedClock, SystemClock};
use service::auth::{Authenticator, JwksCache, Keys};
use service::owner_api::OwnerApi;

use crate::config::OwnerConfig;
use crate::http_glue::{http_request, lambda_response};
use crate::jwks::HttpJwks;
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Runs the owner API until the runtime stops it.
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
        audiences: config.audiences.clone(),
        keys: Keys::Jwks(JwksCache::new(Arc::new(HttpJwks::new(&config.jwks_url)?))),
        clock,
    };
    let store = dynamo_store(&aws, &config.table, config.policy);
    let api = Arc::new(OwnerApi { store: Arc::new(store), auth: Arc::new(auth) });
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let api = Arc::clone(&api);
        async move { Ok::<_, Error>(lambda_response(api.handle(http_request(req)).await)) }
    }))
    .await
}
