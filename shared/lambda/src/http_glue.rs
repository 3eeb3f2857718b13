//! HTTP API (payload v2) events ↔ plain `http` types with `Bytes` bodies.

use bytes::Bytes;

/// The request as the HTTP handlers take it, with API Gateway's request id as a
/// [`http_util::TraceId`] extension (the MCP endpoint hands it on to the tool functions).
pub(crate) fn http_request(req: lambda_http::Request) -> http::Request<Bytes> {
    use lambda_http::RequestExt;
    let id = match req.request_context_ref() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(c)) => c.request_id.clone(),
        _ => None,
    };
    let (parts, body) = req.into_parts();
    let mut req = http::Request::from_parts(parts, Bytes::copy_from_slice(body.as_ref()));
    if let Some(id) = id {
        req.extensions_mut().insert(http_util::TraceId(id));
    }
    req
}

/// The caller's address as API Gateway saw it (`requestContext.http.sourceIp`: the TCP peer,
/// not a header the caller could set), or empty. (`mcp` keeps no per-address limits.)
#[cfg(feature = "dynamo")]
pub(crate) fn source_ip(req: &lambda_http::Request) -> String {
    use lambda_http::RequestExt;
    match req.request_context_ref() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(c)) => c.http.source_ip.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// Answers `req` with `serve` under its request span, every store write it makes recording the
/// request's id (so the events of its changes carry it: `store_dynamo::with_request_id`). (The relay and owner APIs; `mcp` writes only its owners' budget counts, untraced; `register` tags its own span.)
#[cfg(any(feature = "relay-api", feature = "owner-api"))]
pub(crate) async fn traced<F: std::future::Future>(
    req: http::Request<Bytes>,
    serve: impl FnOnce(http::Request<Bytes>) -> F,
) -> F::Output {
    let id = req.extensions().get::<http_util::TraceId>().map(|t| t.0.clone());
    let span = request_span(&req);
    store_dynamo::with_request_id(id.as_deref(), tracing::Instrument::instrument(serve(req), span)).await
}

/// A span carrying the request's id: every log line of the handling is then tagged with it.
pub(crate) fn request_span(req: &http::Request<Bytes>) -> tracing::Span {
    let id = req.extensions().get::<http_util::TraceId>().map(|t| t.0.as_str()).unwrap_or_default();
    tracing::info_span!("request", request_id = %id)
}

/// The response as `lambda_http` sends it.
pub(crate) fn lambda_response(res: http::Response<Bytes>) -> http::Response<lambda_http::Body> {
    res.map(|b| lambda_http::Body::from(b.to_vec()))
}
