//! The owner's session: only a browser holding it (opened by the panel with the owner's token)
//! sees a consent form and may answer it.

use bytes::Bytes;
use domain::store::{RefreshTokens, RegisterClients};
use http::{HeaderValue, StatusCode, header};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::{LocalAuthServer, MAX_SESSIONS, SESSION_COOKIE, SESSION_TTL, lock, page, random_token};
use crate::oauth_error;
use auth::Claims;
use tools::SCOPE_OWNER;

impl<R: RegisterClients + RefreshTokens + ?Sized> LocalAuthServer<R> {
    /// Opens an owner session for a request carrying the owner's own token (the panel's): the
    /// answer sets the session cookie, `HttpOnly`, `SameSite=Strict`, for `/oauth` only.
    pub(super) fn open_session(&self, headers: &http::HeaderMap) -> http::Response<Bytes> {
        let token = auth::bearer(headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
        if !token.is_some_and(|t| self.is_owner_token(t)) {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_token", "an owner token is required");
        }
        let now = self.clock.now();
        let id = random_token();
        {
            let mut sessions = lock(&self.sessions);
            sessions.retain(|_, until| *until > now);
            while sessions.len() >= MAX_SESSIONS {
                let Some(oldest) = sessions.iter().min_by_key(|(_, u)| **u).map(|(k, _)| k.clone()) else { break };
                sessions.remove(&oldest);
            }
            sessions.insert(id.clone(), now.plus(SESSION_TTL));
        }
        let secure = if self.signer.issuer.starts_with("https://") { "; Secure" } else { "" };
        let cookie = format!(
            "{SESSION_COOKIE}={id}; Path=/oauth; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            SESSION_TTL.as_secs()
        );
        let mut r = http::Response::new(Bytes::new());
        *r.status_mut() = StatusCode::NO_CONTENT;
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(header::SET_COOKIE, v);
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }

    /// `token` is one of this server's tokens for the owner with the owner scope.
    fn is_owner_token(&self, token: &str) -> bool {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_issuer(&[&self.signer.issuer]);
        v.set_audience(&[&self.signer.audience]);
        auth::jwt_crypto::install();
        let Ok(data) = jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&self.signer.secret), &v) else {
            return false;
        };
        let c = data.claims;
        c.sub == self.owner
            && c.token_use.is_none()
            && c.scope.unwrap_or_default().split_whitespace().any(|s| s == SCOPE_OWNER)
    }

    /// The request carries a live owner session.
    pub(super) fn owner_session(&self, headers: &http::HeaderMap) -> bool {
        let now = self.clock.now();
        let sessions = lock(&self.sessions);
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(SESSION_COOKIE).and_then(|rest| rest.strip_prefix('=')))
            .any(|id| sessions.get(id).is_some_and(|until| *until > now))
    }
}

/// The answer to a consent request from a browser without the owner's session.
pub(super) fn not_the_owner() -> http::Response<Bytes> {
    page(
        StatusCode::FORBIDDEN,
        "Approve from your own browser",
        "<p>Only the owner can connect an application. Open the <strong>Panel</strong> link the local server \
         printed when it started, in this browser (it signs you in), then reload this page.</p>",
        None,
    )
}
