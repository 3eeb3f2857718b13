//! What the local authorization server shows a browser: its pages (a strict CSP, no scripts),
//! the consent form, and the redirect back to the client.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

use super::{AUTHORIZE_PATH, Asking, Pending};
use tools::{SCOPE_READ, SCOPE_RUN};

/// `303` to `uri` with `params`, `state` and `iss` appended to its query.
pub(super) fn redirect(uri: &str, params: &[(&str, &str)], state: Option<&str>, issuer: &str) -> http::Response<Bytes> {
    let Some(u) = crate::authorization_response(uri, params, state, issuer) else {
        return bad_page("The registered redirect URI cannot be used.");
    };
    let mut r = http::Response::new(Bytes::new());
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(u.as_str()) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) fn bad_page(message: &str) -> http::Response<Bytes> {
    page(StatusCode::BAD_REQUEST, "Cannot connect", message, None)
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// An HTML page with a strict CSP: no scripts, forms only to this server (and, after Allow,
/// the redirect's origin — CSP `form-action` applies to the redirect too), no framing.
pub(crate) fn page(
    status: StatusCode,
    title: &str,
    body_html: &str,
    form_target: Option<&str>,
) -> http::Response<Bytes> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{t} · foundry-connect</title><style>body{{font:16px system-ui,sans-serif;max-width:34em;margin:4em auto;padding:0 1em;color:#222}}\
         button{{font:inherit;padding:.5em 1.4em;margin-right:.6em;border-radius:6px;border:1px solid #888;cursor:pointer}}\
         button.allow{{background:#1b5e20;color:#fff;border-color:#1b5e20}}code{{background:#f2f2f2;padding:0 .3em}}</style></head>\
         <body><h1>{t}</h1>{body_html}</body></html>",
        t = escape(title)
    );
    let mut r = http::Response::new(Bytes::from(html));
    *r.status_mut() = status;
    let form_action = match form_target {
        Some(origin) => format!("'self' {origin}"),
        None => "'none'".to_owned(),
    };
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
    );
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    r
}

pub(super) fn consent_page(client: &Asking, p: &Pending, csrf: &str, owner: &str) -> http::Response<Bytes> {
    // Where the code goes, named for the owner; the CSP's `form-action` admits it (an origin,
    // or a private-use scheme's `scheme:` source).
    let origin = match url::Url::parse(&p.redirect_uri) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u.origin().ascii_serialization(),
        Ok(u) => format!("{}:", u.scheme()),
        Err(_) => String::new(),
    };
    let shown = match url::Url::parse(&p.redirect_uri) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {
            format!("{}{}", u.host_str().unwrap_or_default(), u.port().map(|p| format!(":{p}")).unwrap_or_default())
        }
        _ => crate::RedirectPolicy::destination(&p.redirect_uri),
    };
    // Who asks: a document's client by its name and the host that vouches for it; a registered
    // client by its id only (its name is whatever it registered, so it proves nothing).
    let who = match &client.from_document {
        Some((name, host)) => format!(
            "<strong>{name}</strong> (described by <code>{host}</code>)",
            name = escape(name),
            host = escape(host)
        ),
        None => format!("A registered MCP client (<code>{}</code>)", escape(&client.client_id)),
    };
    let scopes: Vec<String> = p
        .scopes
        .iter()
        .map(|s| match s.as_str() {
            SCOPE_READ => "read your graph sessions, runs and linked chat tasks".to_owned(),
            SCOPE_RUN => "queue and cancel graph runs, claim and complete linked chat tasks".to_owned(),
            other => escape(other),
        })
        .map(|s| format!("<li>{s}</li>"))
        .collect();
    let body = format!(
        "<p>{who} wants to use this local foundry-connect as <code>{owner}</code>. The sign-in code goes \
         to <code>{shown}</code>{dest}.</p><p>It will be able to:</p><ul>{scopes}</ul>\
         <form method=\"post\" action=\"{AUTHORIZE_PATH}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button class=\"allow\" name=\"decision\" value=\"allow\" type=\"submit\">Allow</button>\
         <button name=\"decision\" value=\"deny\" type=\"submit\">Deny</button></form>",
        owner = escape(owner),
        shown = escape(&shown),
        dest = if crate::RedirectPolicy::destination(&p.redirect_uri) == "this computer" {
            " (this computer)"
        } else {
            ""
        },
        scopes = scopes.join(""),
        csrf = escape(csrf),
    );
    page(StatusCode::OK, "Connect an MCP client", &body, Some(&origin))
}
