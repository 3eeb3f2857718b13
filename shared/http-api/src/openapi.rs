//! The published contract of the owner API and the relay API: an OpenAPI 3.1 document built
//! from the same route tables the two APIs dispatch through and from the JSON Schemas of their
//! Rust request and response types (`schemars`), so it cannot drift from the code.
//!
//! - A [`Route`] (`http_util::routes`) names its method, path template, auth scheme, parameters, body type and every
//!   answer it can give. [`owner_api::ROUTES`](crate::owner_api::ROUTES) and
//!   [`relay_api::ROUTES`](crate::relay_api::ROUTES) are the only way into their handlers:
//!   [`find`] matches a request against a table (and answers 405 with `Allow` from it), and
//!   each API's `match` over its `Op` enum is exhaustive.
//! - [`document`] turns both tables into the document served at [`PATH`] by the local server
//!   and the deployed stack; `docs/openapi.json` pins it (a test compares them), an OpenAPI
//!   validator checks it, and Schemathesis fuzzes both APIs from it (tests/tests/api_fuzz.rs).
//! - Limits are schema constraints (`maxLength`, `maxItems`, `minimum`/`maximum`, patterns).
//!   Rules a schema cannot say (a name that is only spaces, the byte budget of a completion)
//!   are in the descriptions, and the server's 400 names them.

use http::Method;
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The route types both tables are made of (they live below both APIs and this document, so
/// neither imports the other).
pub use http_util::routes::*;

/// Where the document is served (no token needed: it describes the API, it holds no data).
pub const PATH: &str = "/openapi.json";

/// The `429` of every route with a token (`domain::budget`).
const BUDGET_SPENT: &str = "The owner's requests a minute on this API are spent (the deployment's `OwnerRequestsPerMinute`): `Retry-After` gives the seconds until the next minute. Nothing was read or changed.";

/// The answers every route with `auth` (and a body, when `body`) can give.
fn common_answers(auth: Auth, body: bool) -> Vec<(u16, &'static str)> {
    let mut v = Vec::new();
    match auth {
        Auth::Owner => {
            v.push((401, "No owner token, or not a valid one."));
            v.push((403, "The token lacks the osfoundry:owner scope."));
        }
        Auth::Device => v.push((401, "No device token, or an unknown or revoked one.")),
        Auth::Public => {}
    }
    if body {
        v.push((413, "The body is larger than 1 MiB."));
    }
    if auth != Auth::Public {
        v.push((429, BUDGET_SPENT));
    }
    v.push((503, "The store or the token keys are unavailable for a moment; retry. Nothing was changed."));
    v
}

/// The OpenAPI 3.1 document of the owner API and the relay API.
pub fn document() -> Value {
    let mut responses = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .for_serialize()
        .into_generator();
    // Request bodies are inlined: their deserialize-contract schemas never collide with the
    // serialize-contract components of the responses.
    let mut requests = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .for_deserialize()
        .into_generator();
    let mut paths = Map::new();
    add(&mut paths, crate::owner_api::ROUTES, "owner", &mut requests, &mut responses);
    add(&mut paths, crate::relay_api::ROUTES, "relay", &mut requests, &mut responses);
    let schemas = responses.take_definitions(true);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "foundry-connect owner and relay APIs",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The owner API is what the web panel does (projects, desktops, chat links, tasks, runs, pairings); the relay API is what the desktop relay calls. Every refusal is a JSON body {\"error\": \"<field>: <rule>\"} (a pairing poll's are RFC 8628's codes) and changes nothing. Another owner's ids answer exactly like ids that do not exist. The MCP endpoint (/mcp) is described by MCP itself, not here.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "/", "description": "the stack that serves this document"}],
        "tags": [
            {"name": "owner", "description": "The owner's web panel: bearer JWT with the osfoundry:owner scope."},
            {"name": "relay", "description": "The desktop relay: its device token; pairing needs none."},
        ],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "ownerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "An access token from the stack's sign-in whose scope includes osfoundry:owner; the owner is its subject.",
                },
                "deviceToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A device token (fcd_…), made in the panel or by `relay pair`; the server keeps only its sha256.",
                },
            },
        },
    })
}

fn add<Op: std::fmt::Debug>(
    paths: &mut Map<String, Value>,
    routes: &[Route<Op>],
    tag: &str,
    requests: &mut SchemaGenerator,
    responses: &mut SchemaGenerator,
) {
    for r in routes {
        let mut answers = Map::new();
        for a in r.answers {
            let content = match a.body {
                [] => None,
                [one] => Some(one(responses).to_value()),
                many => Some(json!({"anyOf": many.iter().map(|f| f(responses).to_value()).collect::<Vec<_>>()})),
            };
            let mut v = json!({"description": a.description});
            if let Some(s) = content {
                v["content"] = json!({"application/json": {"schema": s}});
            }
            answers.insert(a.status.to_string(), v);
        }
        for (status, description) in common_answers(r.auth, r.body.is_some()) {
            match answers.get_mut(&status.to_string()) {
                // A route's own 429 (guessing, dispatch bounds): the budget's is one more reason.
                Some(own) if status == 429 => {
                    let said = own["description"].as_str().unwrap_or_default();
                    own["description"] = json!(format!("{said} Or: {description}"));
                }
                Some(_) => {}
                None => {
                    let schema = error_body(responses).to_value();
                    answers.insert(
                        status.to_string(),
                        json!({"description": description, "content": {"application/json": {"schema": schema}}}),
                    );
                }
            }
        }
        let params: Vec<Value> = r
            .params
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "in": match p.location { In::Path => "path", In::Query => "query" },
                    "required": p.location == In::Path,
                    "description": p.description,
                    "schema": (p.schema)(requests).to_value(),
                })
            })
            .collect();
        let mut op = json!({
            "operationId": operation_id(&format!("{:?}", r.op)),
            "summary": r.summary,
            "tags": [tag],
            "security": match r.auth {
                Auth::Owner => json!([{"ownerToken": []}]),
                Auth::Device => json!([{"deviceToken": []}]),
                Auth::Public => json!([]),
            },
            "responses": answers,
        });
        if !params.is_empty() {
            op["parameters"] = json!(params);
        }
        if let Some(b) = &r.body {
            op["requestBody"] = json!({
                "required": b.required,
                "content": {"application/json": {"schema": (b.schema)(requests).to_value()}},
            });
        }
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        entry[r.method.as_str().to_ascii_lowercase()] = op;
    }
}

/// `ListProjects` → `listProjects`.
fn operation_id(variant: &str) -> String {
    let mut chars = variant.chars();
    chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// The answer to a request for [`PATH`]: the document (built once per process), or 405.
pub fn response(method: &Method) -> http::Response<bytes::Bytes> {
    static DOCUMENT: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    if method != Method::GET && method != Method::HEAD {
        return http_util::http_json::method_not_allowed("GET, HEAD");
    }
    let body = DOCUMENT.get_or_init(|| bytes::Bytes::from(serde_json::to_vec(&document()).unwrap_or_default()));
    let mut r = http::Response::new(if method == Method::HEAD { bytes::Bytes::new() } else { body.clone() });
    let headers = r.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    headers.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("public, max-age=300"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each API's handlers read path parameters by position: every template's `{names}` are its
    /// documented path parameters, in order, and every (method, path) is routed once.
    #[test]
    fn templates_and_documented_parameters_agree_in_both_tables() {
        fn check<Op: std::fmt::Debug>(routes: &[Route<Op>]) {
            let mut seen = std::collections::HashSet::new();
            for r in routes {
                let placeholders: Vec<&str> =
                    r.path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
                let documented: Vec<&str> =
                    r.params.iter().filter(|p| p.location == In::Path).map(|p| p.name).collect();
                assert_eq!(placeholders, documented, "{:?} {}", r.op, r.path);
                assert!(seen.insert((r.method.clone(), r.path)), "{} {} is routed twice", r.method, r.path);
            }
        }
        check(crate::owner_api::ROUTES);
        check(crate::relay_api::ROUTES);
    }

    #[test]
    fn operation_ids_are_lower_camel_case() {
        assert_eq!(operation_id("ListProjects"), "listProjects");
    }
}
