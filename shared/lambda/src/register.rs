//! The `register_client` function: dynamic client registration (RFC 7591, `POST /register`)
//! backed by Cognito app clients of the deployment's own user pool, and the `/authorize` and
//! `/token` facade in front of Cognito's hosted endpoints (`oauth::facade`).
//!
//! The rules (redirect allowlist, reuse, rate limit, cap, RFC 7591 errors) are
//! `oauth::Registrar`'s; this module is the [`CognitoClients`] registry it runs over.
//! IAM lets this function create, list, describe and delete app clients of this one pool, and
//! read and write the table's `CLIENT#…` items (each client's first use), nothing else.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_cognitoidentityprovider::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_cognitoidentityprovider::operation::delete_user_pool_client::DeleteUserPoolClientError;
use aws_sdk_cognitoidentityprovider::operation::describe_user_pool_client::DescribeUserPoolClientError;
use aws_sdk_cognitoidentityprovider::types::{
    ExplicitAuthFlowsType, OAuthFlowType, PreventUserExistenceErrorTypes, TimeUnitsType, TokenValidityUnitsType,
};
use domain::clients::{ClientSummary, RegisteredClient};
use domain::clock::{SharedClock, SystemClock};
use domain::store::{ClientRedirects, ClientUse, RegisterClients};
use domain::store::{StoreError, StoreResult};
use oauth::cimd::Documents;
use oauth::facade::{Facade, FacadeParts};
use oauth::{ClientSource, RedirectPolicy, Registrar};
use tools::scopes::ScopeSpelling;

use crate::config::RegisterConfig;
use crate::http_glue::{http_request, lambda_response};
use crate::{Error, aws_config, env, init_tracing};

/// How long one Cognito API call may take (each attempt, and all of its retries together
/// under [`COGNITO_OPERATION_TIMEOUT`]): a registration makes a few, all inside the function's
/// 28 s, so a slow Cognito ends as the registrar's own 503.
pub const COGNITO_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4);
/// The most one Cognito call may take with its retries.
pub const COGNITO_OPERATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);

/// The explicit (non-OAuth) auth flows of a registered client: only the refresh. Sign-in is the
/// hosted page's authorization code + PKCE, which needs none.
///
/// Refresh-token rotation stays off: Cognito documents that "you can't authenticate with
/// REFRESH_TOKEN_AUTH in app clients with refresh token rotation enabled" and that rotation
/// requires disabling that flow (cognito/latest/developerguide/
/// amazon-cognito-user-pools-using-the-refresh-token.html), while an app client given any
/// explicit flows must keep ALLOW_REFRESH_TOKEN_AUTH, and leaving them out means the default
/// set, which has it. The pair documented as valid is this one: the flow, without rotation.
/// The harness's Cognito refuses the other pair as Cognito does (`infra/moto_serialized.py`).
pub const REGISTERED_CLIENT_AUTH_FLOWS: &[ExplicitAuthFlowsType] = &[ExplicitAuthFlowsType::AllowRefreshTokenAuth];
/// Access tokens of registered clients live this many minutes (Cognito's default).
pub const ACCESS_TOKEN_MINUTES: i32 = 60;
/// Refresh tokens of registered clients live this many days: as long as the registrar waits
/// before it counts a used client idle (held equal below, or the build fails).
pub const REFRESH_TOKEN_DAYS: i32 = 30;
const _: () = assert!(REFRESH_TOKEN_DAYS as u64 * 86_400 == oauth::IDLE_CLIENT_AGE.as_secs());

/// App clients of one Cognito user pool, each with the facade's callback as its only Cognito
/// callback; the client's own redirect URIs are kept in the table ([`ClientRedirects`]).
/// Cognito would refuse many that hosts register (`http://127.0.0.1`, a URL past 1,024
/// characters), and never needs them: the facade checks them and owns the one callback Cognito
/// returns to.
pub struct CognitoClients {
    client: aws_sdk_cognitoidentityprovider::Client,
    pool: String,
    callback: String,
    redirects: Arc<dyn ClientRedirects>,
}

/// Cognito's rule for a `ClientId` (`[\w+]+`, 1 to 128 characters; API_DescribeUserPoolClient):
/// an id outside it is answered `InvalidParameterException`, so it is no client of this server
/// and is never sent.
pub fn is_cognito_client_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '+')
}

impl CognitoClients {
    /// The app clients of `pool`, sent back to `callback`, their redirect URIs kept in `redirects`.
    pub fn new(aws: &aws_config::SdkConfig, pool: &str, callback: &str, redirects: Arc<dyn ClientRedirects>) -> Self {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(COGNITO_ATTEMPT_TIMEOUT)
            .operation_timeout(COGNITO_OPERATION_TIMEOUT)
            .build();
        let config = aws_sdk_cognitoidentityprovider::config::Builder::from(aws).timeout_config(timeouts).build();
        Self {
            client: aws_sdk_cognitoidentityprovider::Client::from_conf(config),
            pool: pool.to_owned(),
            callback: callback.to_owned(),
            redirects,
        }
    }
}

/// Cognito's throttling and server errors are retryable; anything else is a refusal.
fn sdk<E>(e: SdkError<E, aws_sdk_cognitoidentityprovider::config::http::HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let retryable = match &e {
        SdkError::ServiceError(se) => {
            se.raw().status().is_server_error()
                || matches!(se.err().code(), Some("TooManyRequestsException" | "InternalErrorException"))
        }
        SdkError::ConstructionFailure(_) => false,
        _ => true,
    };
    tracing::warn!(error = %DisplayErrorContext(&e), retryable, "Cognito request failed");
    if retryable { StoreError::unavailable(e) } else { StoreError::refused(e) }
}

#[async_trait]
impl RegisterClients for CognitoClients {
    async fn list_clients(&self) -> StoreResult<Vec<ClientSummary>> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = self
                .client
                .list_user_pool_clients()
                .user_pool_id(&self.pool)
                .max_results(60)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(sdk)?;
            out.extend(page.user_pool_clients().iter().map(|c| ClientSummary {
                client_id: c.client_id().unwrap_or_default().to_owned(),
                name: c.client_name().unwrap_or_default().to_owned(),
            }));
            match page.next_token() {
                Some(t) if !t.is_empty() => next = Some(t.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// The app client and, when the table keeps them, its redirect URIs beside the facade's
    /// callback; an app client made before they were kept there has its Cognito callbacks.
    async fn get_client(&self, client_id: &str) -> StoreResult<Option<RegisteredClient>> {
        if !is_cognito_client_id(client_id) {
            return Ok(None);
        }
        let out =
            match self.client.describe_user_pool_client().user_pool_id(&self.pool).client_id(client_id).send().await {
                Ok(o) => o,
                Err(SdkError::ServiceError(se))
                    if matches!(se.err(), DescribeUserPoolClientError::ResourceNotFoundException(_)) =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(sdk(e)),
            };
        let Some(c) = out.user_pool_client() else { return Ok(None) };
        let mut redirect_uris = c.callback_urls().to_vec();
        if redirect_uris.contains(&self.callback)
            && let Some(kept) = self.redirects.client_redirects(client_id).await?
        {
            redirect_uris = kept;
            redirect_uris.push(self.callback.clone());
        }
        Ok(Some(RegisteredClient {
            client_id: c.client_id().unwrap_or(client_id).to_owned(),
            name: c.client_name().unwrap_or_default().to_owned(),
            redirect_uris,
            scopes: c.allowed_o_auth_scopes().to_vec(),
        }))
    }

    async fn create_client(
        &self,
        name: &str,
        redirect_uris: &[String],
        scopes: &[String],
    ) -> StoreResult<RegisteredClient> {
        let units = TokenValidityUnitsType::builder()
            .access_token(TimeUnitsType::Minutes)
            .id_token(TimeUnitsType::Minutes)
            .refresh_token(TimeUnitsType::Days)
            .build();
        let out = self
            .client
            .create_user_pool_client()
            .user_pool_id(&self.pool)
            .client_name(name)
            .generate_secret(false)
            .allowed_o_auth_flows_user_pool_client(true)
            .allowed_o_auth_flows(OAuthFlowType::Code)
            .set_allowed_o_auth_scopes(Some(scopes.to_vec()))
            .callback_urls(&self.callback)
            .supported_identity_providers("COGNITO")
            .set_explicit_auth_flows(Some(REGISTERED_CLIENT_AUTH_FLOWS.to_vec()))
            .prevent_user_existence_errors(PreventUserExistenceErrorTypes::Enabled)
            // A refresh token can be revoked (`/oauth2/revoke`); rotation stays off (above).
            .enable_token_revocation(true)
            .access_token_validity(ACCESS_TOKEN_MINUTES)
            .id_token_validity(ACCESS_TOKEN_MINUTES)
            .refresh_token_validity(REFRESH_TOKEN_DAYS)
            .token_validity_units(units)
            .send()
            .await
            .map_err(sdk)?;
        let c = out
            .user_pool_client()
            .ok_or_else(|| StoreError::Corrupt("CreateUserPoolClient returned no client".into()))?;
        let client_id = c.client_id().unwrap_or_default().to_owned();
        let own: Vec<String> = redirect_uris.iter().filter(|u| **u != self.callback).cloned().collect();
        if !own.is_empty()
            && let Err(e) = self.redirects.keep_client_redirects(&client_id, &own).await
        {
            // Without its redirect URIs the client could never be used: take it back.
            if let Err(d) = self.delete_client(&client_id).await {
                tracing::error!(error = %domain::errors::ErrorChain(&d), client_id, "deleting a client whose redirect URIs were not kept");
            }
            return Err(e);
        }
        let mut redirect_uris = own;
        redirect_uris.push(self.callback.clone());
        Ok(RegisteredClient { client_id, name: name.to_owned(), redirect_uris, scopes: scopes.to_vec() })
    }

    async fn delete_client(&self, client_id: &str) -> StoreResult<()> {
        if !is_cognito_client_id(client_id) {
            return Ok(());
        }
        match self.client.delete_user_pool_client().user_pool_id(&self.pool).client_id(client_id).send().await {
            Ok(_) => self.redirects.forget_client_redirects(client_id).await,
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), DeleteUserPoolClientError::ResourceNotFoundException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(sdk(e)),
        }
    }
}

/// Runs the `register_client` function until the runtime stops it: `POST /register`, and the
/// `/authorize` and `/token` facade in front of Cognito's hosted endpoints.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = RegisterConfig::from_env(env)?;
    let aws = aws_config().await;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = Arc::new(crate::dynamo_store(&aws, &config.table, Default::default()));
    let usage: Arc<dyn ClientUse> = Arc::clone(&store) as _;
    let scopes = ScopeSpelling::with_prefix(&config.scope_prefix);
    let callback = oauth::facade::callback_url(&config.public_url);
    let clients = Arc::new(CognitoClients::new(&aws, &config.user_pool_id, &callback, Arc::clone(&store) as _));
    let documents = Documents::new(Arc::new(events::SystemResolver), Arc::clone(&clock))
        .allowing_loopback(config.allow_loopback_client_metadata)
        .pinning(config.dev_document_hosts.clone())
        .with_copies(Arc::clone(&store) as _);
    let redirects = RedirectPolicy::cloud(config.extra_redirect_hosts.clone());
    let facade = Arc::new(Facade::new(FacadeParts {
        upstream: config.hosted_auth_url.clone(),
        public_url: config.public_url.clone(),
        resources: config.resources.clone(),
        scopes: scopes.clone(),
        usage: Some(Arc::clone(&usage)),
        clients: Arc::clone(&clients) as _,
        flows: Arc::clone(&store) as _,
        document_clients: Arc::clone(&store) as _,
        documents: Some(Arc::new(documents)),
        redirects: redirects.clone(),
        document_client_cap: oauth::facade::DEFAULT_DOCUMENT_CLIENT_CAP,
        clock: Arc::clone(&clock),
    })?);
    let registrar = Arc::new(
        Registrar::new(clients, redirects.clone(), scopes, clock, config.limits, Some(usage))
            .with_settings(crate::config::REGISTRATION_SETTINGS)
            .with_owned_callback(facade.callback().to_owned()),
    );
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let (registrar, facade) = (Arc::clone(&registrar), Arc::clone(&facade));
        async move {
            let source = crate::http_glue::source_ip(&req);
            let mut req = http_request(req);
            let span = crate::http_glue::request_span(&req);
            let (method, path) = (req.method().clone(), req.uri().path().to_owned());
            // `/register`, `/token` and `/revoke` are called cross-origin by browser-based
            // clients (`http_util::cors`); `/authorize` and the callback are navigations.
            let answer = http_util::cors::with_cors(&method, &path, || async {
                if let Some(answer) = tracing::Instrument::instrument(facade.handle(&req), span.clone()).await {
                    return answer;
                }
                req.extensions_mut().insert(ClientSource(source));
                tracing::Instrument::instrument(registrar.handle(req), span).await
            })
            .await;
            Ok::<_, Error>(lambda_response(answer))
        }
    }))
    .await
}
