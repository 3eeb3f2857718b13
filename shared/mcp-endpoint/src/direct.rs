//! The direct path: a plain `tools/call` answered without rmcp's per-request machinery, when
//! it is unmistakably one rmcp would serve the same way (see the module above for the rules).

use bytes::Bytes;
use http::{StatusCode, header};
use rmcp::model::{
    CallToolRequestParams, JsonRpcError, JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage,
    ServerResult,
};

use auth::Identity;

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
            && serde_json::from_slice::<serde_json::Value>(req.body())
                .is_ok_and(|m| self.direct_call(req.headers(), &m).is_some())
    }

    /// The call, when `message` is a plain `tools/call` that rmcp would serve on its legacy
    /// stateless path exactly as [`Self::answer_directly`] does; `None` sends it to rmcp.
    /// Every check is as strict as rmcp's or stricter (anything unusual goes to rmcp).
    pub(super) fn direct_call(
        &self,
        headers: &http::HeaderMap,
        message: &serde_json::Value,
    ) -> Option<(RequestId, CallToolRequestParams)> {
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
        if !json || !sse || !essence.trim().eq_ignore_ascii_case("application/json") {
            return None;
        }
        let m = message.as_object()?;
        if m.len() != 4 || m.get("jsonrpc")?.as_str()? != "2.0" || m.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let id = match m.get("id")? {
            v @ serde_json::Value::String(_) => v,
            v @ serde_json::Value::Number(n) if n.is_i64() => v,
            _ => return None,
        };
        let params = m.get("params")?.as_object()?;
        if params.keys().any(|k| k != "name" && k != "arguments")
            || !params.get("name")?.is_string()
            || params.get("arguments").is_some_and(|a| !a.is_object())
        {
            return None;
        }
        let id = serde_json::from_value::<RequestId>(id.clone()).ok()?;
        let params = serde_json::from_value::<CallToolRequestParams>(serde_json::Value::Object(params.clone())).ok()?;
        Some((id, params))
    }

    /// Runs a call [`Self::direct_call`] accepted and answers it as rmcp's JSON mode does:
    /// `200`, `application/json`, the result shaped for a peer before `2026-07-28`.
    pub(super) async fn answer_directly(
        &self,
        identity: Identity,
        id: RequestId,
        params: CallToolRequestParams,
        request_id: Option<String>,
    ) -> http::Response<Bytes> {
        let message = match self.handler.call(Some(identity), params, false, request_id).await {
            Ok(response) => {
                let mut result = ServerResult::from(response);
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                ServerJsonRpcMessage::Response(JsonRpcResponse { jsonrpc: JsonRpcVersion2_0, id, result })
            }
            Err(error) => ServerJsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
        };
        match serde_json::to_vec(&message) {
            Ok(body) => {
                let length = body.len().to_string();
                respond(
                    StatusCode::OK,
                    &[(header::CONTENT_TYPE, "application/json"), (header::CONTENT_LENGTH, &length)],
                    Bytes::from(body),
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot serialize a tool result");
                respond(StatusCode::INTERNAL_SERVER_ERROR, &[], Bytes::from_static(b"Internal Server Error"))
            }
        }
    }
}
