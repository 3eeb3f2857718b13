//! The direct path: a plain `tools/call` or `tools/list` answered without rmcp's per-request
//! machinery, when it is unmistakably one rmcp would serve the same way (see the module above
//! for the rules).

use bytes::Bytes;
use http::{StatusCode, header};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonRpcError, JsonRpcMessage, JsonRpcRequest,
    JsonRpcResponse, JsonRpcVersion2_0, RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};

use auth::Identity;
use tools::ToolName;

use super::{Dispatch, McpEndpoint, respond};

/// Protocol versions whose `tools/call` rmcp serves on its legacy stateless path (no
/// per-request metadata, no SEP-2243 headers): the only ones the direct path answers.
const DIRECT_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// rmcp's `Host` normalization: brackets trimmed, lower case, port kept apart.
pub(super) fn normalized_authority(s: &str) -> Option<(String, Option<u16>)> {
    let a = http::uri::Authority::try_from(s.trim()).ok()?;
    Some((a.host().trim_matches('[').trim_matches(']').to_ascii_lowercase(), a.port_u16()))
}

impl<D: Dispatch + ?Sized> McpEndpoint<D> {
    /// Sends every request through rmcp, even plain `tools/call`s (the direct path off): for
    /// the tests that compare both paths, and for diagnosis.
    pub fn without_direct_calls(mut self) -> Self {
        self.direct = false;
        self
    }

    /// Whether [`Self::handle`] would answer `req` on the direct path (once its token checks
    /// out): for the tests that compare both paths, and for diagnosis.
    pub fn answers_directly(&self, req: &http::Request<Bytes>) -> bool {
        self.direct
            && self.plain_headers(req.headers())
            && serde_json::from_slice::<ClientJsonRpcMessage>(req.body()).is_ok_and(|m| plain(m).is_some())
    }

    /// Whether the headers are those of a plain request rmcp would serve on its legacy
    /// stateless path exactly as the direct path does. Every check is as strict as rmcp's or
    /// stricter (anything unusual goes to rmcp).
    pub(super) fn plain_headers(&self, headers: &http::HeaderMap) -> bool {
        self.check_headers(headers).is_some()
    }

    fn check_headers(&self, headers: &http::HeaderMap) -> Option<()> {
        let version = headers.get("mcp-protocol-version")?.to_str().ok()?;
        if !DIRECT_VERSIONS.contains(&version)
            || headers.contains_key("mcp-session-id")
            || headers.contains_key(header::ORIGIN)
        {
            return None;
        }
        if let Some(allowed) = &self.hosts {
            let host = normalized_authority(headers.get(header::HOST)?.to_str().ok()?)?;
            if !allowed.iter().any(|(h, p)| *h == host.0 && p.is_none_or(|p| host.1 == Some(p))) {
                return None;
            }
        }
        let (mut json, mut sse) = (false, false);
        for value in headers.get_all(header::ACCEPT) {
            for entry in value.to_str().ok()?.split(',') {
                let entry = entry.trim();
                if entry.contains([';', '"']) {
                    return None;
                }
                json |= entry.eq_ignore_ascii_case("application/json");
                sse |= entry.eq_ignore_ascii_case("text/event-stream");
            }
        }
        let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let essence = content_type.split_once(';').map_or(content_type, |(e, _)| e);
        (json && sse && essence.trim().eq_ignore_ascii_case("application/json")).then_some(())
    }

    /// Answers a plain `tools/list` as rmcp's JSON mode does for a peer before `2026-07-28`,
    /// from the catalogue built once with its `securitySchemes` in place.
    pub(super) fn list_directly(&self, id: &RequestId) -> http::Response<Bytes> {
        #[derive(serde::Serialize)]
        struct Listed<'a> {
            jsonrpc: JsonRpcVersion2_0,
            id: &'a RequestId,
            result: Tools<'a>,
        }
        #[derive(serde::Serialize)]
        struct Tools<'a> {
            tools: &'a serde_json::Value,
        }
        let listed = Listed { jsonrpc: JsonRpcVersion2_0, id, result: Tools { tools: self.handler.listed() } };
        json_ok(serde_json::to_vec(&listed))
    }

    /// Runs a plain call and answers it as rmcp's JSON mode does: `200`, `application/json`,
    /// the result shaped for a peer before `2026-07-28`. `tool` is the one the endpoint parsed.
    pub(super) async fn answer_directly(
        &self,
        identity: Identity,
        id: RequestId,
        tool: Option<ToolName>,
        params: CallToolRequestParams,
        request_id: Option<String>,
    ) -> http::Response<Bytes> {
        let message = match self.handler.call(Some(identity), tool, params, false, request_id).await {
            Ok(response) => {
                let mut result = ServerResult::from(response);
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                ServerJsonRpcMessage::Response(JsonRpcResponse { jsonrpc: JsonRpcVersion2_0, id, result })
            }
            Err(error) => ServerJsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
        };
        json_ok(serde_json::to_vec(&message))
    }
}

/// A plain request the direct path answers: a `tools/call` or a `tools/list`.
pub(super) enum Plain {
    /// `tools/call`: its id and params.
    Call(RequestId, CallToolRequestParams),
    /// `tools/list` of the whole catalogue: its id.
    List(RequestId),
}

/// The plain request `message` is, if it is one: a request (not a notification) with no
/// `_meta` anywhere and none of the fields of `2026-07-28`'s input requests; a `tools/list`
/// without a cursor. Fields the message type does not know rmcp ignores as well.
pub(super) fn plain(message: ClientJsonRpcMessage) -> Option<Plain> {
    let JsonRpcMessage::Request(JsonRpcRequest { id, request, .. }) = message else { return None };
    match request {
        ClientRequest::CallToolRequest(c) => {
            let p = &c.params;
            let plain = c.extensions.get::<RequestMetaObject>().is_none()
                && p.meta.is_none()
                && p.input_responses.is_none()
                && p.request_state.is_none();
            plain.then_some(Plain::Call(id, c.params))
        }
        ClientRequest::ListToolsRequest(l) => {
            let plain = l.extensions.get::<RequestMetaObject>().is_none()
                && l.params.as_ref().is_none_or(|p| p.meta.is_none() && p.cursor.is_none());
            plain.then_some(Plain::List(id))
        }
        _ => None,
    }
}

/// `200`, `application/json` and the body, or a `500` when it could not be serialized.
fn json_ok(body: serde_json::Result<Vec<u8>>) -> http::Response<Bytes> {
    match body {
        Ok(body) => {
            let length = body.len().to_string();
            respond(
                StatusCode::OK,
                &[(header::CONTENT_TYPE, "application/json"), (header::CONTENT_LENGTH, &length)],
                Bytes::from(body),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize an answer");
            respond(StatusCode::INTERNAL_SERVER_ERROR, &[], Bytes::from_static(b"Internal Server Error"))
        }
    }
}
