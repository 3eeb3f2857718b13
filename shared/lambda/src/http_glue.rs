//! HTTP API (payload v2) events ↔ plain `http` types with `Bytes` bodies.

use bytes::Bytes;

/// The request as the `service` handlers take it.
pub(crate) fn http_request(req: lambda_http::Request) -> http::Request<Bytes> {
    let (parts, body) = req.into_parts();
    http::Request::from_parts(parts, Bytes::copy_from_slice(body.as_ref()))
}

/// The response as `lambda_http` sends it.
pub(crate) fn lambda_response(res: http::Response<Bytes>) -> http::Response<lambda_http::Body> {
    res.map(|b| lambda_http::Body::from(b.to_vec()))
}
