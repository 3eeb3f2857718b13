//! A tool function: `ToolCall` in (from the `mcp` function's invoke), `ToolReply` out.

use std::sync::Arc;

use domain::clock::{SharedClock, SystemClock};
use lambda_runtime::{LambdaEvent, service_fn};
use store_dynamo::DynamoStore;
use tools::blobs::BlobStore;
use tools::{Handler, ToolCall, ToolDeps, ToolFault, ToolReply, run_tool};

use crate::config::ToolConfig;
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Runs the function of tool `T` until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run<T: Handler<DynamoStore>>() -> Result<(), Error> {
    init_tracing();
    let config = ToolConfig::from_env(T::SPEC, env)?;
    let aws = aws_config().await;
    let blobs = blobs(&aws, &config)?;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = dynamo_store(&aws, &config.table, config.policy);
    let deps = Arc::new(ToolDeps {
        store: Arc::new(store),
        clock,
        policy: config.policy,
        blobs,
        panel_url: config.panel_url.clone(),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<ToolCall>| {
        let deps = Arc::clone(&deps);
        async move {
            // The `mcp` function's request id: this call's lines carry the same one.
            let id = event.payload.request_id.clone().unwrap_or_default();
            let span = tracing::info_span!("request", request_id = %id);
            let call = async {
                tracing::info!(tool = T::SPEC.name.as_str(), "tool call");
                handle::<T, _>(&deps, &event.payload).await
            };
            // Its writes record the id, so the events of its changes carry it to `notify`.
            let traced = store_dynamo::with_request_id(Some(&id), tracing::Instrument::instrument(call, span));
            traced.await.map_err(Error::from)
        }
    }))
    .await
}

/// One invocation: the tool's reply, or a logged fault (the invoke then reports a function
/// error, which the `mcp` function answers as a retryable error).
///
/// # Errors
/// [`ToolFault`] when the store or blob store fails, or the call was meant for another tool.
pub async fn handle<T: Handler<S>, S: ?Sized>(deps: &ToolDeps<S>, call: &ToolCall) -> Result<ToolReply, ToolFault> {
    let reply = run_tool::<T, S>(deps, call).await;
    if let Err(e) = &reply {
        tracing::error!(tool = T::SPEC.name.as_str(), error = %domain::errors::ErrorChain(e), "tool failed");
    }
    reply
}

#[cfg(feature = "s3")]
fn blobs(aws: &aws_config::SdkConfig, config: &ToolConfig) -> Result<Option<Arc<dyn BlobStore>>, Error> {
    Ok(config.bucket.as_ref().map(|bucket| Arc::new(crate::s3::S3Blobs::new(aws, bucket)) as Arc<dyn BlobStore>))
}

#[cfg(not(feature = "s3"))]
fn blobs(_aws: &aws_config::SdkConfig, config: &ToolConfig) -> Result<Option<Arc<dyn BlobStore>>, Error> {
    match &config.bucket {
        None => Ok(None),
        Some(_) => {
            Err("this tool stores artifacts: build its function with the `s3` feature of the lambda crate".into())
        }
    }
}
