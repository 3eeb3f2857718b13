//! JSON helpers shared by the relay and owner HTTP APIs.

use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::json;

/// A JSON response.
pub fn response(status: StatusCode, v: impl serde::Serialize) -> http::Response<Bytes> {
    let mut r = http::Response::new(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

/// `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> http::Response<Bytes> {
    response(status, json!({ "error": message.into() }))
}

/// 405 with the `Allow` header listing the methods the path has.
pub fn method_not_allowed(allow: &str) -> http::Response<Bytes> {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route");
    if let Ok(v) = http::HeaderValue::from_str(allow) {
        r.headers_mut().insert(header::ALLOW, v);
    }
    r
}

/// Parses a JSON object body; the error names the field (`sessions[3].slug: …`) or `body`.
///
/// # Errors
/// The message for a 400.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    // Every body is a JSON object: serde would also read a struct from an array, positionally
    // (`["exec-1"]` as a start), which no published schema allows.
    if body.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|b| *b != b'{') {
        return Err("body: must be a JSON object".to_owned());
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        // A path a peer made up (an unknown key with spaces, colons, any text) is not a field
        // name to lead the error with: the body is, and serde's message quotes the key.
        let plain = !path.is_empty() && path.chars().all(|c| c.is_ascii_alphanumeric() || "_.[]-".contains(c));
        if path == "." || !plain { format!("body: {}", e.inner()) } else { format!("{path}: {}", e.inner()) }
    })
}

/// The answer for an infrastructure failure: logged with its causes, and a retryable 503
/// without details.
pub fn unavailable(what: &str, e: &(dyn std::error::Error + 'static)) -> http::Response<Bytes> {
    tracing::error!(error = %domain::errors::ErrorChain(e), "{what} failed");
    error(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable; retry")
}

/// Why an owner's request is not served ([`budget_check`], which has logged it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// The owner's budget on this surface is spent for the minute.
    Spent {
        /// Seconds to the next minute (`Retry-After`).
        retry_after_s: u64,
        /// The refusal, naming the limit.
        message: String,
    },
    /// The count could not be written: retryable (a `503`).
    Unavailable,
}

/// Counts `owner`'s request against its budget on `budget`'s surface (`domain::budget`): `Ok`
/// to serve it. A budget found spent is logged once per instance and minute, a store failure
/// each time; each surface answers a refusal in its own protocol ([`over_budget`] for the
/// JSON APIs, the MCP endpoint as JSON-RPC).
///
/// # Errors
/// [`BudgetRefusal`] when the request is not to be served.
pub async fn budget_check(
    budget: &domain::budget::OwnerBudget,
    store: &(impl domain::store::LimitAttempts + ?Sized),
    owner: &domain::ids::OwnerId,
    now: domain::clock::Timestamp,
) -> Result<(), BudgetRefusal> {
    use domain::budget::{Admission, refusal_message};
    match budget.admit(store, owner, now).await {
        Ok(Admission::Serve) => Ok(()),
        Ok(Admission::Refuse { retry_after_s, first }) => {
            if first {
                tracing::warn!(owner = owner.as_str(), surface = ?budget.surface(), "an owner spent its budget for this minute");
            }
            Err(BudgetRefusal::Spent { retry_after_s, message: refusal_message(budget.per_minute(), retry_after_s) })
        }
        Err(e) => {
            tracing::error!(error = %domain::errors::ErrorChain(&e), "counting the owner's budget failed");
            Err(BudgetRefusal::Unavailable)
        }
    }
}

/// `None` when `owner`'s request is within its budget ([`budget_check`]); otherwise the JSON
/// answer: `429` with `Retry-After` and the limit named, or `503`.
pub async fn over_budget(
    budget: &domain::budget::OwnerBudget,
    store: &(impl domain::store::LimitAttempts + ?Sized),
    owner: &domain::ids::OwnerId,
    now: domain::clock::Timestamp,
) -> Option<http::Response<Bytes>> {
    match budget_check(budget, store, owner, now).await {
        Ok(()) => None,
        Err(BudgetRefusal::Spent { retry_after_s, message }) => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, message);
            r.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from(retry_after_s));
            Some(r)
        }
        Err(BudgetRefusal::Unavailable) => {
            Some(error(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable; retry"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        execution_id: String,
    }

    /// An error names a field the way `<field>: <rule>` reads: a made-up key (Schemathesis sent
    /// `" Jd…"`) is quoted inside a `body:` error, never used as the field.
    #[test]
    fn errors_lead_with_a_field_name_or_body() {
        let e = parse::<Strict>(br#"{"execution_id": 1}"#).unwrap_err();
        assert!(e.starts_with("execution_id: invalid type"), "{e}");
        let e = parse::<Strict>(br#"{"execution_id": "x", " Jd: x": 1}"#).unwrap_err();
        assert!(e.starts_with("body: unknown field ` Jd: x`"), "{e}");
        assert_eq!(parse::<Strict>(b"[1]").unwrap_err(), "body: must be a JSON object");
    }
}
