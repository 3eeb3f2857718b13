//! The run card: an MCP Apps view (SEP-1865, extension `io.modelcontextprotocol/ui`) of one
//! Graph run, offered **only to a client that declares the extension** in the request's
//! capabilities (see `docs/mcp.md`, "The run card").
//!
//! For such a client, `run_graph_session` and `get_graph_run` carry `_meta.ui.resourceUri` in
//! `tools/list`, and `resources/list` / `resources/read` serve the card: one self-contained HTML
//! document (`run-card.html`, its script and style inline) whose `_meta.ui.csp` names no outside
//! origin — the view fetches nothing and holds no token; it talks only to its host (MCP's
//! JSON-RPC over `postMessage`), calling `get_graph_run` and `cancel_graph_run` through it.
//! Every other client gets the catalogue and the results it always got, byte for byte, and an
//! empty resource list. In the 2025-11-25 era, where capabilities are declared once in
//! `initialize`, the declaration travels in the session id ([`APPS_SESSION_PREFIX`]).

use rmcp::model::{ClientCapabilities, ListResourcesResult, ReadResourceResult};
use serde_json::{Value, json};

use tools::ToolName;

/// The MCP Apps extension's id (SEP-1865).
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The MIME type of an MCP App's HTML.
pub const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The run card's resource URI.
pub const RUN_CARD_URI: &str = "ui://foundry-connect/run-card.html";

/// The flat `_meta` key older hosts read the resource URI from.
pub const LEGACY_RESOURCE_URI_KEY: &str = "ui/resourceUri";

/// The tools whose results the card shows.
pub const CARD_TOOLS: [ToolName; 2] = [ToolName::RunGraphSession, ToolName::GetGraphRun];

/// The card's HTML (script and style inline: the host's CSP, built from the resource's
/// `_meta.ui.csp`, allows nothing from outside).
pub const RUN_CARD_HTML: &str = include_str!("apps/run-card.html");

/// Whether `capabilities` declare MCP Apps for this card's type: the extension with a
/// `mimeTypes` setting that lists `text/html;profile=mcp-app` (the setting is required: "Array
/// of supported content types (REQUIRED)", SEP-1865's client capability).
pub fn wants_apps(capabilities: Option<&ClientCapabilities>) -> bool {
    let Some(ui) = capabilities.and_then(|c| c.extensions.as_ref()).and_then(|e| e.get(UI_EXTENSION)) else {
        return false;
    };
    ui.get("mimeTypes")
        .and_then(Value::as_array)
        .is_some_and(|types| types.iter().any(|t| t.as_str() == Some(APP_MIME_TYPE)))
}

/// The 2025-11-25 era declares capabilities once, in `initialize`, and this server keeps no
/// session. So an `initialize` that declares MCP Apps is answered with an `Mcp-Session-Id`
/// starting with this, which the client sends on every later request (the 2025-11-25
/// transport's rule): the id itself says "this client declared MCP Apps", and nothing is stored.
/// (Forging one gains nothing: declaring the extension gets the same card.) rmcp, outside its
/// legacy session mode, ignores the header; an `initialize` without the extension gets no id,
/// exactly as before.
pub const APPS_SESSION_PREFIX: &str = "fc-apps-";

/// A new session id for a client that declared MCP Apps in `initialize`.
pub fn new_apps_session() -> String {
    format!("{APPS_SESSION_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// Whether an `Mcp-Session-Id` value is one [`new_apps_session`] made.
pub fn is_apps_session(value: &str) -> bool {
    value
        .strip_prefix(APPS_SESSION_PREFIX)
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Put beside the request's identity when it carried an apps session id: the handler then
/// treats the client as one that declared MCP Apps.
#[derive(Debug, Clone, Copy)]
pub struct AppsSession;

/// The `_meta.ui` a card tool carries in `tools/list`.
pub fn tool_ui_meta() -> Value {
    json!({ "resourceUri": RUN_CARD_URI })
}

/// `listed` (the catalogue's JSON) with the card linked from [`CARD_TOOLS`].
pub fn with_card(listed: &[Value]) -> Vec<Value> {
    listed
        .iter()
        .map(|t| {
            let mut t = t.clone();
            let linked = t
                .get("name")
                .and_then(Value::as_str)
                .and_then(ToolName::parse)
                .is_some_and(|n| CARD_TOOLS.contains(&n));
            if linked && let Some(o) = t.as_object_mut() {
                let meta = o.entry("_meta").or_insert_with(|| json!({}));
                if let Some(m) = meta.as_object_mut() {
                    m.insert("ui".into(), tool_ui_meta());
                    // The flat key hosts read before `_meta.ui` (deprecated in SEP-1865; the
                    // ext-apps SDK's `registerAppTool` still writes both for older hosts).
                    m.insert(LEGACY_RESOURCE_URI_KEY.into(), json!(RUN_CARD_URI));
                }
            }
            t
        })
        .collect()
}

/// The resource's own `_meta.ui`: no outside origin for anything (no connections, no images,
/// scripts or styles from elsewhere, no frames), drawn with the host's border.
fn resource_ui_meta() -> Value {
    json!({
        "csp": { "connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": [] },
        "prefersBorder": true
    })
}

/// `resources/list`: the card for a client that declared the extension, nothing otherwise.
pub fn list(apps: bool) -> ListResourcesResult {
    let card = json!({
        "uri": RUN_CARD_URI,
        "name": "run-card",
        "title": "Graph run",
        "description": "A Graph run as it changes: its state, progress, result or error, and Cancel.",
        "mimeType": APP_MIME_TYPE,
        "_meta": { "ui": resource_ui_meta() }
    });
    let resources = if apps { serde_json::from_value(card).map(|r| vec![r]).unwrap_or_default() } else { Vec::new() };
    ListResourcesResult::with_all_items(resources)
}

/// `resources/read`: the card, for a client that declared the extension and names its URI;
/// `None` (resource not found) otherwise.
pub fn read(apps: bool, uri: &str) -> Option<ReadResourceResult> {
    if !apps || uri != RUN_CARD_URI {
        return None;
    }
    let contents = serde_json::from_value(json!({
        "uri": RUN_CARD_URI,
        "mimeType": APP_MIME_TYPE,
        "text": RUN_CARD_HTML,
        "_meta": { "ui": resource_ui_meta() }
    }))
    .ok()?;
    Some(ReadResourceResult::new(vec![contents]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: Value) -> ClientCapabilities {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_a_declared_extension_for_this_mime_type_gets_the_card() {
        assert!(!wants_apps(None));
        assert!(!wants_apps(Some(&caps(json!({})))));
        assert!(!wants_apps(Some(&caps(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})))));
        assert!(!wants_apps(Some(&caps(json!({"extensions": {UI_EXTENSION: {}}})))), "mimeTypes is required");
        assert!(wants_apps(Some(&caps(json!({"extensions": {UI_EXTENSION: {"mimeTypes": [APP_MIME_TYPE]}}})))));
        assert!(!wants_apps(Some(&caps(json!({"extensions": {UI_EXTENSION: {"mimeTypes": ["text/uri-list"]}}})))));
        assert!(!wants_apps(Some(&caps(json!({"extensions": {UI_EXTENSION: {"mimeTypes": APP_MIME_TYPE}}})))));
    }

    #[test]
    fn only_the_ids_this_server_makes_are_apps_sessions() {
        let id = new_apps_session();
        assert!(is_apps_session(&id), "{id}");
        assert!(!is_apps_session("fc-apps-"));
        assert!(!is_apps_session("fc-apps-not-hex-not-hex-not-hex-not-hex"));
        assert!(!is_apps_session(&id.replace(APPS_SESSION_PREFIX, "other-")));
        assert!(!is_apps_session(&format!("{id}0")));
    }

    #[test]
    fn the_card_is_read_only_by_its_uri_and_only_by_a_declaring_client() {
        assert!(read(false, RUN_CARD_URI).is_none());
        assert!(read(true, "ui://foundry-connect/other.html").is_none());
        let card = serde_json::to_value(read(true, RUN_CARD_URI).unwrap()).unwrap();
        assert_eq!(card["contents"][0]["mimeType"], APP_MIME_TYPE);
        assert_eq!(card["contents"][0]["text"], RUN_CARD_HTML);
        assert_eq!(card["contents"][0]["_meta"]["ui"]["csp"]["connectDomains"], json!([]));
        let listed = serde_json::to_value(list(true)).unwrap();
        assert_eq!(listed["resources"][0]["uri"], RUN_CARD_URI);
        assert_eq!(serde_json::to_value(list(false)).unwrap()["resources"], json!([]));
    }
}
