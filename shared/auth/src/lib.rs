//! # auth — who is calling: bearer tokens (SPEC §1)
//!
//! | module | what |
//! |---|---|
//! | this one | bearer tokens: RS256 against a cached JWKS, HS256 in local mode ([`Authenticator`]) |
//! | [`jwt_crypto`] | jsonwebtoken's HS256 and RS256 on *ring* ([`jwt_crypto::install`] before any encode/decode) |
//!
//!
//! Deployments verify RS256 JWTs against the issuer's JWKS (Amazon Cognito or any OpenID
//! provider), cached and refreshed when an unknown key id appears; local mode verifies HS256
//! tokens it minted itself with a generated secret. Both check the issuer, expiry against the
//! injected clock, that the token is an access token, and the [`Audience`]: a fixed list
//! (`aud`, or `client_id` for Cognito access tokens, which carry no `aud`) or, for the cloud
//! MCP endpoint, any app client of the deployment's own pool — chats register their own.
//!
//! The agent id is the token's client (`azp` or `client_id`) plus its subject; the owner is the
//! subject (one owner per deployment signs in through the connector's OAuth flow).

pub mod jwt_crypto;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

pub use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use domain::clock::{SharedClock, Timestamp};
use domain::ids::{AgentId, OwnerId};

/// Clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY: Duration = Duration::from_secs(60);
/// How long a fetched JWKS is trusted before it is fetched again.
pub const JWKS_TTL: Duration = Duration::from_secs(3600);
/// Shortest time between two fetches forced by an unknown key id (or after a failed refresh).
pub const JWKS_MIN_REFETCH: Duration = Duration::from_secs(60);
/// How long fetched keys keep verifying when every refresh fails (the issuer is down): long
/// enough to ride out an outage, short enough that a removed key does not live on.
pub const JWKS_MAX_STALE: Duration = Duration::from_secs(24 * 3600);

/// Who is calling, as proven by the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The owner the agent acts for (`sub`).
    pub owner: OwnerId,
    /// `client:subject`.
    pub agent: AgentId,
    /// Granted scopes.
    pub scopes: BTreeSet<String>,
}

impl Identity {
    /// Whether the token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.contains(scope)
    }
}

/// Why the issuer's key set could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The request failed (network, TLS, timeout).
    #[error("fetching {url}")]
    Fetch {
        /// The JWKS URL.
        url: String,
        /// The cause.
        #[source]
        source: domain::store::BoxError,
    },
    /// The issuer answered with an error status.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The JWKS URL.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// Refreshes keep failing and the cached keys are older than [`JWKS_MAX_STALE`].
    #[error("the key set could not be refreshed and the cached one is too old to trust")]
    TooOld,
    /// The answer is not a JWKS document.
    #[error("{url} did not answer a JWKS document")]
    Parse {
        /// The JWKS URL.
        url: String,
        /// The cause.
        #[source]
        source: domain::store::BoxError,
    },
}

/// Why a token was refused (the message is for logs; callers get a plain 401).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("missing bearer token")]
    Missing,
    /// Signature, format, issuer, audience or expiry failed.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// The key set could not be fetched (retryable, not the caller's fault).
    #[error("key set unavailable")]
    KeysUnavailable(#[source] Arc<JwksError>),
}

/// Claims this service reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Issuer.
    pub iss: String,
    /// Subject: the owner.
    pub sub: String,
    /// Audience (string or list); Cognito access tokens have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<serde_json::Value>,
    /// OAuth client (Cognito access tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Authorized party (OpenID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azp: Option<String>,
    /// Space-separated scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Expiry (epoch seconds).
    pub exp: i64,
    /// Not before (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Cognito's `access` / `id`: ID tokens prove who signed in, not what a client may do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_use: Option<String>,
    /// Token id: a local refresh token's `<family>.<token>` (rotation and reuse detection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

/// Fetches a JWKS document (an HTTPS GET in the Lambda; a fixture in tests).
#[async_trait::async_trait]
pub trait FetchJwks: Send + Sync {
    /// The current key set.
    ///
    /// # Errors
    /// [`JwksError`] when it cannot be fetched or parsed.
    async fn fetch(&self) -> Result<JwkSet, JwksError>;
}

/// A JWKS cache: refreshed after [`JWKS_TTL`], or when a token names an unknown key id (at
/// most once per [`JWKS_MIN_REFETCH`]).
pub struct JwksCache {
    fetcher: Arc<dyn FetchJwks>,
    state: tokio::sync::RwLock<Option<Fetched>>,
}

/// The key set and when it was fetched (and when a refresh last failed).
struct Fetched {
    at: Timestamp,
    set: JwkSet,
    failed_at: Option<Timestamp>,
}

impl JwksCache {
    /// An empty cache over `fetcher`.
    pub fn new(fetcher: Arc<dyn FetchJwks>) -> Self {
        Self { fetcher, state: tokio::sync::RwLock::new(None) }
    }

    /// The key `kid`: from the cache while it is fresh; otherwise fetched again. When a refresh
    /// fails, keys fetched less than [`JWKS_MAX_STALE`] ago keep verifying (an issuer outage
    /// must not lock every client out), and the next refresh is tried after
    /// [`JWKS_MIN_REFETCH`], not on every request.
    async fn key(&self, kid: &str, now: Timestamp) -> Result<DecodingKey, AuthError> {
        let decode =
            |jwk: &jsonwebtoken::jwk::Jwk| DecodingKey::from_jwk(jwk).map_err(|e| AuthError::Invalid(e.to_string()));
        {
            let st = self.state.read().await;
            if let Some(f) = &*st
                && now < f.at.plus(JWKS_TTL)
                && let Some(jwk) = f.set.find(kid)
            {
                return decode(jwk);
            }
        }
        let mut st = self.state.write().await;
        let refresh = match &*st {
            None => true,
            Some(f) => {
                let failed_recently = f.failed_at.is_some_and(|t| now < t.plus(JWKS_MIN_REFETCH));
                let expired = now >= f.at.plus(JWKS_TTL);
                let unknown = f.set.find(kid).is_none() && now >= f.at.plus(JWKS_MIN_REFETCH);
                (expired || unknown) && !failed_recently
            }
        };
        if refresh {
            match self.fetcher.fetch().await {
                Ok(set) => *st = Some(Fetched { at: now, set, failed_at: None }),
                Err(e) => match st.as_mut().filter(|f| now < f.at.plus(JWKS_MAX_STALE)) {
                    Some(f) => {
                        tracing::warn!(error = %domain::errors::ErrorChain(&e), "JWKS refresh failed; verifying with the cached keys");
                        f.failed_at = Some(now);
                    }
                    None => return Err(AuthError::KeysUnavailable(Arc::new(e))),
                },
            }
        }
        match &*st {
            Some(f) if now < f.at.plus(JWKS_MAX_STALE) => {
                decode(f.set.find(kid).ok_or_else(|| AuthError::Invalid(format!("unknown key id {kid}")))?)
            }
            _ => Err(AuthError::KeysUnavailable(Arc::new(JwksError::TooOld))),
        }
    }
}

/// How token signatures are checked.
pub enum Keys {
    /// Local mode: HS256 with this secret.
    Hs256(Vec<u8>),
    /// Deployments: RS256 against a JWKS.
    Jwks(JwksCache),
}

/// Which clients' tokens are accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Only these (`aud`, or `client_id` for Cognito access tokens): the owner API accepts
    /// the owner client only; local tokens name the local audience.
    Only(Vec<String>),
    /// Any client of the issuer (the token must still name one): the MCP endpoint in the
    /// cloud, where every chat registers its own app client (RFC 7591). The issuer is this
    /// deployment's own user pool, and the endpoint checks the scopes.
    AnyClient,
}

/// Verifies bearer tokens.
pub struct Authenticator {
    /// Expected `iss`.
    pub issuer: String,
    /// Accepted clients.
    pub audience: Audience,
    /// Signature keys.
    pub keys: Keys,
    /// "Now" for `exp`/`nbf`.
    pub clock: SharedClock,
}

impl Authenticator {
    /// Verifies `token` and returns who it is.
    ///
    /// # Errors
    /// [`AuthError`] when the token is not acceptable (or keys cannot be fetched).
    pub async fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        self.verify_until(token).await.map(|(identity, _)| identity)
    }

    /// [`Self::verify`], also returning the instant the token stops being accepted (its `exp`
    /// plus the leeway): how long a caller may remember the answer.
    ///
    /// # Errors
    /// As [`Self::verify`].
    pub async fn verify_until(&self, token: &str) -> Result<(Identity, Timestamp), AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        let (key, alg) = match &self.keys {
            Keys::Hs256(secret) => (DecodingKey::from_secret(secret), Algorithm::HS256),
            Keys::Jwks(cache) => {
                let kid = header.kid.as_deref().ok_or_else(|| AuthError::Invalid("token has no kid".into()))?;
                (cache.key(kid, self.clock.now()).await?, Algorithm::RS256)
            }
        };
        if header.alg != alg {
            return Err(AuthError::Invalid(format!("algorithm {:?} is not accepted", header.alg)));
        }
        let mut v = Validation::new(alg);
        // Expiry, not-before and audience are checked below against the injected clock and
        // both audience spellings.
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.required_spec_claims = ["iss".to_owned(), "sub".to_owned(), "exp".to_owned()].into_iter().collect();
        v.set_issuer(&[&self.issuer]);
        jwt_crypto::install();
        let claims =
            jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(|e| AuthError::Invalid(e.to_string()))?.claims;
        self.check_claims(&claims)?;
        let client = claims
            .azp
            .as_deref()
            .or(claims.client_id.as_deref())
            .or(match &claims.aud {
                Some(serde_json::Value::String(a)) => Some(a.as_str()),
                _ => None,
            })
            .ok_or_else(|| AuthError::Invalid("token names no client (azp/client_id)".into()))?;
        let identity = Identity {
            owner: OwnerId::new(claims.sub.clone()).map_err(|e| AuthError::Invalid(e.to_string()))?,
            agent: AgentId::new(client, &claims.sub).map_err(|e| AuthError::Invalid(e.to_string()))?,
            scopes: claims.scope.as_deref().unwrap_or_default().split_whitespace().map(normalize_scope).collect(),
        };
        let until = Timestamp::from_millis((claims.exp + LEEWAY.as_secs() as i64).saturating_mul(1000));
        Ok((identity, until))
    }

    fn check_claims(&self, c: &Claims) -> Result<(), AuthError> {
        let now = self.clock.now().as_epoch_seconds();
        let leeway = LEEWAY.as_secs() as i64;
        if c.exp + leeway <= now {
            return Err(AuthError::Invalid("token expired".into()));
        }
        if c.nbf.is_some_and(|nbf| nbf - leeway > now) {
            return Err(AuthError::Invalid("token not yet valid".into()));
        }
        if c.token_use.as_deref().is_some_and(|u| u != "access") {
            return Err(AuthError::Invalid("only access tokens are accepted (token_use is not access)".into()));
        }
        let Audience::Only(accepted) = &self.audience else { return Ok(()) };
        let auds: Vec<&str> = match &c.aud {
            Some(serde_json::Value::String(a)) => vec![a.as_str()],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        };
        let matches = auds.iter().chain(c.client_id.as_deref().iter()).any(|a| accepted.iter().any(|x| x == a));
        if !matches {
            return Err(AuthError::Invalid("audience not accepted".into()));
        }
        Ok(())
    }
}

pub use tools::scopes::ScopeSpelling;

/// Cognito writes custom scopes as `<resource server>/<scope>` (`osfoundry/read`); the product
/// names them `osfoundry:read`. Both spellings grant the same scope.
fn normalize_scope(s: &str) -> String {
    match s.strip_prefix("osfoundry/") {
        Some(rest) => format!("osfoundry:{rest}"),
        None => s.to_owned(),
    }
}

/// Signs HS256 tokens (local mode and tests): the secret, and the issuer and audience every
/// token it mints carries.
#[derive(Clone)]
pub struct Hs256Signer {
    /// The shared secret.
    pub secret: Vec<u8>,
    /// `iss`.
    pub issuer: String,
    /// `aud`.
    pub audience: String,
}

/// What one token grants: to whom, through which client, which scopes.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// `sub`: the owner.
    pub subject: &'a str,
    /// `client_id`.
    pub client: &'a str,
    /// The scopes, as they are spelled in `scope`.
    pub scopes: &'a [&'a str],
}

impl Hs256Signer {
    /// A signer with `secret` for tokens of `issuer` to `audience`.
    pub fn new(secret: &[u8], issuer: &str, audience: &str) -> Self {
        Self { secret: secret.to_vec(), issuer: issuer.to_owned(), audience: audience.to_owned() }
    }

    /// Mints a token for `grant`, valid from `now` for `ttl`.
    ///
    /// # Errors
    /// When signing fails (it does not with HS256 and a non-empty secret).
    pub fn mint(&self, grant: Grant<'_>, now: Timestamp, ttl: Duration) -> Result<String, jsonwebtoken::errors::Error> {
        self.mint_for(grant, None, now, ttl)
    }

    /// [`Self::mint`], with `resource` (RFC 8707) beside the audience in `aud` when given.
    ///
    /// # Errors
    /// When signing fails (it does not with HS256 and a non-empty secret).
    pub fn mint_for(
        &self,
        grant: Grant<'_>,
        resource: Option<&str>,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let aud = match resource {
            Some(r) => serde_json::json!([self.audience, r]),
            None => serde_json::Value::String(self.audience.clone()),
        };
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: grant.subject.to_owned(),
            aud: Some(aud),
            client_id: Some(grant.client.to_owned()),
            azp: None,
            scope: Some(grant.scopes.join(" ")),
            exp: now.plus(ttl).as_epoch_seconds(),
            nbf: None,
            token_use: None,
            jti: None,
        };
        jwt_crypto::install();
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(&self.secret))
    }
}

pub use http_util::bearer;

#[cfg(test)]
mod tests {
    use super::*;
    use domain::clock::{Clock, ManualClock};

    fn auth(clock: Arc<ManualClock>) -> Authenticator {
        Authenticator {
            issuer: "http://127.0.0.1:8787".into(),
            audience: Audience::Only(vec!["foundry-connect".into()]),
            keys: Keys::Hs256(b"0123456789abcdef0123456789abcdef".to_vec()),
            clock,
        }
    }

    fn token(clock: &ManualClock, aud: &str, iss: &str, secret: &[u8]) -> String {
        Hs256Signer::new(secret, iss, aud)
            .mint(
                Grant { subject: "owner-1", client: "claude", scopes: &["osfoundry:read"] },
                clock.now(),
                Duration::from_secs(3600),
            )
            .unwrap()
    }

    #[tokio::test]
    async fn accepts_its_own_tokens_and_names_the_agent() {
        let clock = Arc::new(ManualClock::starting_now());
        let a = auth(clock.clone());
        let id =
            a.verify(&token(&clock, "foundry-connect", &a.issuer, b"0123456789abcdef0123456789abcdef")).await.unwrap();
        assert_eq!(id.owner.as_str(), "owner-1");
        assert_eq!(id.agent.as_str(), "claude:owner-1");
        assert!(id.has_scope("osfoundry:read") && !id.has_scope("osfoundry:run"));
    }

    #[tokio::test]
    async fn refuses_wrong_audience_issuer_secret_and_expired_tokens() {
        let clock = Arc::new(ManualClock::starting_now());
        let a = auth(clock.clone());
        let secret = b"0123456789abcdef0123456789abcdef";
        assert!(a.verify(&token(&clock, "someone-else", &a.issuer, secret)).await.is_err());
        assert!(a.verify(&token(&clock, "foundry-connect", "https://evil", secret)).await.is_err());
        assert!(
            a.verify(&token(&clock, "foundry-connect", &a.issuer, b"another secret, also 32 bytes..")).await.is_err()
        );
        let t = token(&clock, "foundry-connect", &a.issuer, secret);
        // Past `exp` but within the clock-skew leeway: still accepted; at its end: expired.
        clock.advance(Duration::from_secs(3600) + LEEWAY - Duration::from_secs(1));
        assert!(a.verify(&t).await.is_ok(), "refused within the leeway");
        clock.advance(Duration::from_secs(1));
        assert!(matches!(a.verify(&t).await, Err(AuthError::Invalid(m)) if m == "token expired"));
        assert!(a.verify("not.a.jwt").await.is_err());
    }

    #[tokio::test]
    async fn any_client_accepts_other_clients_of_the_issuer_only() {
        let clock = Arc::new(ManualClock::starting_now());
        let mut a = auth(clock.clone());
        let secret = b"0123456789abcdef0123456789abcdef";
        let other_client = token(&clock, "registered-client-7", &a.issuer, secret);
        assert!(matches!(a.verify(&other_client).await, Err(AuthError::Invalid(m)) if m == "audience not accepted"));
        a.audience = Audience::AnyClient;
        assert_eq!(a.verify(&other_client).await.unwrap().agent.as_str(), "claude:owner-1");
        assert!(a.verify(&token(&clock, "registered-client-7", "https://evil", secret)).await.is_err());
    }

    #[test]
    fn parses_bearer_headers() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
