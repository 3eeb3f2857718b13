//! # panel — the owner's web panel: its files, embedded, and how they are served
//!
//! The owner's web panel (SPEC §7): three static files embedded in the binary and served by the
//! stack itself — the `owner_api` function in the cloud, the local server locally — on the same
//! origin as the owner API, so there is no CORS to configure.
//!
//! Plain HTML, CSS and one JavaScript module, no build step: nothing to install, nothing to go
//! stale, and the whole panel is a few tens of kilobytes. Every response carries a strict
//! Content-Security-Policy (scripts and styles only from this origin, no inline code, no
//! framing), `X-Frame-Options: DENY` and `Referrer-Policy: no-referrer` (the sign-in code in the
//! callback URL never leaks to another site).
//!
//! | route | what |
//! |---|---|
//! | `GET /panel` | the page |
//! | `GET /panel/app.js`, `/panel/app.css` | the code and the style |
//! | `GET /panel/config.json` | how to sign in (local fragment token, or Cognito code + PKCE), where the server runs (`local` or `cloud`: which chats can reach it), the refresh period, the MCP URL |

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use serde::Serialize;

/// Path of the panel.
pub const PATH: &str = "/panel";

const INDEX: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");

/// Default seconds between refreshes while the tab is visible.
pub const DEFAULT_REFRESH_SECONDS: u32 = 15;

/// The refresh intervals a deployment may set (seconds).
pub const PANEL_REFRESH_RANGE: std::ops::RangeInclusive<u32> = 1..=3600;

/// How the owner signs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SignIn {
    /// The local server prints `…/panel#token=<owner token>`; the fragment never reaches a
    /// server, and the page moves the token into session storage at once.
    Local,
    /// Cognito's hosted page: authorization code + PKCE on the owner client.
    Cognito {
        /// `https://<domain>.auth.<region>.amazoncognito.com/oauth2/authorize`.
        authorize_url: String,
        /// `…/oauth2/token`.
        token_url: String,
        /// `…/logout`.
        logout_url: String,
        /// The owner app client.
        client_id: String,
        /// The scopes asked for (`openid osfoundry/owner`).
        scope: String,
        /// The owner client's one callback: the panel on the API's own URL. A panel opened on
        /// another origin (a custom domain) moves there before it signs in, because Cognito
        /// sends the code only to a registered callback.
        redirect_uri: String,
    },
}

/// What `config.json` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelConfig {
    /// How to sign in.
    pub sign_in: SignIn,
    /// Seconds between refreshes while the tab is visible.
    pub refresh_seconds: u32,
}

/// Where the server runs, as `config.json` tells the page (`server`): it decides which chats
/// can reach the MCP URL, so what "Connect a chat" says. The local server's
/// `http://127.0.0.1:…/mcp` is reached only by clients on the same machine (Claude Code, Codex,
/// VS Code, Cursor, the MCP Inspector); claude.ai and ChatGPT connect from their own servers
/// and need a public https URL (a tunnel and `FOUNDRY_PUBLIC_URL`). A cloud stack's URL is
/// public: every host can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Server {
    /// `cargo run -p local` on the owner's machine.
    Local,
    /// A deployed stack (Cognito signs the owner in).
    Cloud,
}

impl SignIn {
    /// Where a server signing its owner in this way runs.
    pub fn server(&self) -> Server {
        match self {
            Self::Local => Server::Local,
            Self::Cognito { .. } => Server::Cloud,
        }
    }
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    #[serde(flatten)]
    sign_in: &'a SignIn,
    server: Server,
    refresh_seconds: u32,
    mcp_url: String,
}

impl PanelConfig {
    /// The origin of the sign-in server, which the page may `fetch` (token exchange/refresh).
    fn connect_origin(&self) -> Option<String> {
        match &self.sign_in {
            SignIn::Local => None,
            SignIn::Cognito { token_url, .. } => {
                url::Url::parse(token_url).ok().map(|u| u.origin().ascii_serialization())
            }
        }
    }

    /// The Content-Security-Policy of every panel response.
    pub fn content_security_policy(&self) -> String {
        let connect = self.connect_origin().map(|o| format!(" {o}")).unwrap_or_default();
        format!(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'{connect}; \
             form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        )
    }

    /// Answers a request under [`PATH`]; `base_url` is where the stack is reached (for the MCP
    /// URL the panel shows). `None` when the path is not the panel's.
    pub fn handle(&self, method: &Method, path: &str, base_url: &str) -> Option<http::Response<Bytes>> {
        let (body, content_type): (Bytes, &str) = match path.trim_end_matches('/') {
            "/panel" => (Bytes::from_static(INDEX.as_bytes()), "text/html; charset=utf-8"),
            "/panel/app.js" => (Bytes::from_static(APP_JS.as_bytes()), "text/javascript; charset=utf-8"),
            "/panel/app.css" => (Bytes::from_static(APP_CSS.as_bytes()), "text/css; charset=utf-8"),
            "/panel/config.json" => {
                let v = ConfigJson {
                    sign_in: &self.sign_in,
                    server: self.sign_in.server(),
                    refresh_seconds: self.refresh_seconds,
                    mcp_url: format!("{}/mcp", base_url.trim_end_matches('/')),
                };
                (Bytes::from(serde_json::to_vec(&v).unwrap_or_default()), "application/json")
            }
            p if p.starts_with(PATH) => (Bytes::from_static(b"not found"), "text/plain"),
            _ => return None,
        };
        let found = content_type != "text/plain";
        let mut r = http::Response::new(if method == Method::HEAD { Bytes::new() } else { body });
        *r.status_mut() = match (found, method) {
            (false, _) => StatusCode::NOT_FOUND,
            (true, &Method::GET | &Method::HEAD) => StatusCode::OK,
            (true, _) => StatusCode::METHOD_NOT_ALLOWED,
        };
        let h = r.headers_mut();
        let mut set = |k: header::HeaderName, v: &str| {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(k, v);
            }
        };
        set(header::CONTENT_TYPE, content_type);
        set(header::CONTENT_SECURITY_POLICY, &self.content_security_policy());
        set(header::X_FRAME_OPTIONS, "DENY");
        set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
        set(header::REFERRER_POLICY, "no-referrer");
        // Small files: always revalidate, so a deploy is visible at once.
        set(header::CACHE_CONTROL, "no-cache");
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_served_with_a_strict_policy_and_no_inline_code() {
        let cfg = PanelConfig { sign_in: SignIn::Local, refresh_seconds: 15 };
        for path in ["/panel", "/panel/", "/panel/app.js", "/panel/app.css", "/panel/config.json"] {
            let r = cfg.handle(&Method::GET, path, "http://127.0.0.1:8787").unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            // The whole policy, as docs/panel.md states it: a loosened directive is a failure.
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert_eq!(
                csp,
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                 form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
                "{path}"
            );
            assert_eq!(r.headers()[header::X_FRAME_OPTIONS], "DENY");
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
            // The sign-in code in the page's URL never leaks in a `Referer`.
            assert_eq!(r.headers()[header::REFERRER_POLICY], "no-referrer", "{path}");
        }
        // The page has no inline script or style, and no inline event handlers: every script
        // element loads a file, no element carries a style, no attribute is an `on…` handler.
        assert_eq!(
            INDEX.matches("<script").count(),
            INDEX.matches("<script type=\"module\" src=").count(),
            "inline script"
        );
        assert!(!INDEX.contains("<style") && !INDEX.contains(" style="), "inline style");
        let handlers: Vec<&str> = INDEX
            .split('<')
            .filter_map(|tag| tag.split('>').next())
            .flat_map(|tag| tag.split_whitespace().skip(1))
            .filter(|attr| attr.to_ascii_lowercase().starts_with("on") && attr.contains('='))
            .collect();
        assert!(handlers.is_empty(), "inline event handlers: {handlers:?}");
        assert_eq!(cfg.handle(&Method::GET, "/panel/nope.js", "x").unwrap().status(), StatusCode::NOT_FOUND);
        assert!(cfg.handle(&Method::GET, "/owner/projects", "x").is_none());
        let c: serde_json::Value =
            serde_json::from_slice(cfg.handle(&Method::GET, "/panel/config.json", "http://h:1").unwrap().body())
                .unwrap();
        assert_eq!(
            c,
            serde_json::json!({"mode": "local", "server": "local", "refresh_seconds": 15, "mcp_url": "http://h:1/mcp"})
        );
    }

    #[test]
    fn cognito_mode_may_reach_its_token_endpoint_only() {
        let cfg = PanelConfig {
            sign_in: SignIn::Cognito {
                authorize_url: "https://fc.auth.eu-west-1.amazoncognito.com/oauth2/authorize".into(),
                token_url: "https://fc.auth.eu-west-1.amazoncognito.com/oauth2/token".into(),
                logout_url: "https://fc.auth.eu-west-1.amazoncognito.com/logout".into(),
                client_id: "owner-client".into(),
                scope: "openid osfoundry/owner".into(),
                redirect_uri: "https://abc.execute-api.eu-west-1.amazonaws.com/panel".into(),
            },
            refresh_seconds: 15,
        };
        assert!(
            cfg.content_security_policy().contains("connect-src 'self' https://fc.auth.eu-west-1.amazoncognito.com;")
        );
        // The page signs in with the owner client's registered callback, wherever it was opened.
        let res = cfg.handle(&Method::GET, "/panel/config.json", "https://mcp.example.com").unwrap();
        let c: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
        assert_eq!(c["redirect_uri"], "https://abc.execute-api.eu-west-1.amazonaws.com/panel");
        // The page is told it is a cloud stack: "Connect a chat" offers every host the URL.
        assert_eq!((c["server"].as_str(), c["mcp_url"].as_str()), (Some("cloud"), Some("https://mcp.example.com/mcp")));
    }

    /// The two shapes tell the page apart: a local panel says `local` (its chat section names
    /// the clients on this machine and the tunnel), a cloud one `cloud` (every host, the
    /// stack's URL); nothing else in `config.json` says where the server runs.
    #[test]
    fn the_page_is_told_where_the_server_runs() {
        let config = |sign_in: SignIn| {
            let cfg = PanelConfig { sign_in, refresh_seconds: 15 };
            let res = cfg.handle(&Method::GET, "/panel/config.json", "http://127.0.0.1:8787").unwrap();
            serde_json::from_slice::<serde_json::Value>(res.body()).unwrap()
        };
        let local = config(SignIn::Local);
        let cloud = config(SignIn::Cognito {
            authorize_url: "https://fc.auth.eu-west-1.amazoncognito.com/oauth2/authorize".into(),
            token_url: "https://fc.auth.eu-west-1.amazoncognito.com/oauth2/token".into(),
            logout_url: "https://fc.auth.eu-west-1.amazoncognito.com/logout".into(),
            client_id: "owner-client".into(),
            scope: "openid osfoundry/owner".into(),
            redirect_uri: "https://abc.execute-api.eu-west-1.amazonaws.com/panel".into(),
        });
        assert_eq!(local["server"], "local");
        assert_eq!(cloud["server"], "cloud");
        assert_ne!(local, cloud);
        // The page reads `server`, and its chat section has both variants.
        assert!(APP_JS.contains("cfg.server === \"local\""), "the page does not read where the server runs");
        for host in
            ["Claude Code", "Codex", "VS Code", "Cursor", "MCP Inspector", "claude.ai", "ChatGPT", "cloudflared tunnel"]
        {
            assert!(APP_JS.contains(host), "the chat section does not name {host}");
        }
    }
}
