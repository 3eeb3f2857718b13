//! The route tables both HTTP APIs dispatch through and the OpenAPI document is built from:
//! a [`Route`] names its method, path template, auth scheme, parameters, body type and every
//! answer it can give; [`find`] matches a request against a table (405 with `Allow` from it).
//! The types live here, below the APIs and the document, so the document can read the tables
//! without the tables importing the document.

use http::Method;
use schemars::{JsonSchema, Schema, SchemaGenerator};

/// The JSON Schema of a type, as a reference into the document's components where it has one.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// [`SchemaFn`] for `T`.
pub fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// A bearer JWT with the `osfoundry:owner` scope (the panel's sign-in).
    Owner,
    /// A relay's device token (`Authorization: Bearer fcd_…`).
    Device,
    /// No token (a desktop asking to be paired).
    Public,
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum In {
    /// A `{name}` segment of the path.
    Path,
    /// `?name=` (optional).
    Query,
}

/// A path or query parameter.
pub struct Param {
    /// Its name (`{name}` in the path template).
    pub name: &'static str,
    /// Path or query.
    pub location: In,
    /// What it is, for a person.
    pub description: &'static str,
    /// Its schema.
    pub schema: SchemaFn,
}

impl Param {
    /// A `{name}` segment that is a UUID id.
    pub const fn path_id(name: &'static str, description: &'static str) -> Self {
        Self { name, location: In::Path, description, schema: uuid_param }
    }
}

/// A request body.
pub struct Body {
    /// Its schema (read with the deserialize contract: defaults make fields optional).
    pub schema: SchemaFn,
    /// `false`: an empty body means "all defaults".
    pub required: bool,
}

/// One answer a route can give.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// When it is given.
    pub description: &'static str,
    /// The body's schema; more than one means any of them.
    pub body: &'static [SchemaFn],
}

/// One operation of an API.
pub struct Route<Op: 'static> {
    /// What the API's dispatcher runs for it.
    pub op: Op,
    /// The method.
    pub method: Method,
    /// The full path template (`/owner/links/{chat_link_id}`).
    pub path: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Who may call it.
    pub auth: Auth,
    /// Path parameters in template order, then query parameters.
    pub params: &'static [Param],
    /// The body, if it takes one.
    pub body: Option<Body>,
    /// Its own answers; the OpenAPI document (`http_api::openapi::document`) adds the ones
    /// every route of its auth scheme can give.
    pub answers: &'static [Answer],
}

/// What [`find`] made of a request.
pub enum Found<'r, 'p, Op: 'static> {
    /// The route, and its path parameters in template order.
    Route(&'r Route<Op>, Vec<&'p str>),
    /// The path exists with other methods: the `Allow` header's value.
    WrongMethod(String),
    /// No route has this path.
    NoRoute,
}

/// The route of `routes` for `method` and `path` (a trailing `/` is ignored; a `{param}`
/// matches one non-empty segment).
pub fn find<'r, 'p, Op>(routes: &'r [Route<Op>], method: &Method, path: &'p str) -> Found<'r, 'p, Op> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut allow: Vec<&str> = Vec::new();
    for r in routes {
        let Some(params) = match_template(r.path, &segments) else { continue };
        if r.method == *method {
            return Found::Route(r, params);
        }
        allow.push(r.method.as_str());
    }
    if allow.is_empty() { Found::NoRoute } else { Found::WrongMethod(allow.join(", ")) }
}

fn match_template<'p>(template: &str, segments: &[&'p str]) -> Option<Vec<&'p str>> {
    let parts: Vec<&str> = template.split('/').collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut params = Vec::new();
    for (part, seg) in parts.iter().zip(segments) {
        if part.starts_with('{') {
            if seg.is_empty() {
                return None;
            }
            params.push(*seg);
        } else if part != seg {
            return None;
        }
    }
    Some(params)
}

/// The error body every refusal has: `{"error": "<field>: <rule>"}`.
pub fn error_body(g: &mut SchemaGenerator) -> Schema {
    schema::<domain::relay::ErrorResponse>(g)
}

/// The 400 of a route that reads input.
pub const BAD_INPUT: Answer =
    Answer { status: 400, description: "A field breaks its rule: the error names it.", body: &[error_body] };

/// The schema of a path parameter that is a UUID id.
pub fn uuid_param(g: &mut SchemaGenerator) -> Schema {
    schema::<domain::ids::ProjectId>(g)
}

/// The schema of a free-text path or query parameter.
pub fn text_param(g: &mut SchemaGenerator) -> Schema {
    schema::<String>(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum T {
        List,
        One,
        Delete,
    }

    const fn route(op: T, method: Method, path: &'static str) -> Route<T> {
        Route { op, method, path, summary: "", auth: Auth::Public, params: &[], body: None, answers: &[] }
    }

    static ROUTES: &[Route<T>] = &[
        route(T::List, Method::GET, "/x/items"),
        route(T::One, Method::GET, "/x/items/{id}"),
        route(T::Delete, Method::DELETE, "/x/items/{id}"),
    ];

    #[test]
    fn routes_match_by_template_and_method() {
        let Found::Route(r, p) = find(ROUTES, &Method::GET, "/x/items/42/") else { panic!("no match") };
        assert_eq!((r.op, p), (T::One, vec!["42"]));
        let Found::Route(r, p) = find(ROUTES, &Method::GET, "/x/items") else { panic!("no match") };
        assert_eq!((r.op, p.len()), (T::List, 0));
        assert!(matches!(find(ROUTES, &Method::PUT, "/x/items/42"), Found::WrongMethod(a) if a == "GET, DELETE"));
        assert!(matches!(find(ROUTES, &Method::GET, "/x/items//"), Found::Route(r, _) if r.op == T::List));
        assert!(matches!(find(ROUTES, &Method::GET, "/x/items/42/more"), Found::NoRoute));
        assert!(matches!(find(ROUTES, &Method::GET, "/x/other"), Found::NoRoute));
    }
}
