//! The `graph_relay` function: `http_api::relay_api::RelayApi` on DynamoDB.

use std::sync::Arc;

use domain::clock::{SharedClock, SystemClock};
use http_api::relay_api::RelayApi;

use crate::config::RelayConfig;
use crate::http_glue::{http_request, lambda_response};
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Runs the relay API until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = RelayConfig::from_env(env)?;
    let aws = aws_config().await;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = dynamo_store(&aws, &config.table, config.policy);
    let api = Arc::new(RelayApi {
        store: Arc::new(store),
        clock,
        policy: config.policy,
        public_url: config.public_url,
        doorbell_url: config.doorbell_url,
        doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
        budget: Default::default(),
    });
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let api = Arc::clone(&api);
        async move {
            // Pairing requests are counted per source address, as registrations are.
            let source = crate::http_glue::source_ip(&req);
            let mut req = http_request(req);
            req.extensions_mut().insert(http_util::ClientSource(source));
            let answer = crate::http_glue::traced(req, |req| async move { api.handle(req).await }).await;
            Ok::<_, Error>(lambda_response(answer))
        }
    }))
    .await
}
