//! How scopes are spelled where they are advertised: [`ScopeSpelling`].

/// How the authorization server spells the product's scopes, in one place: `osfoundry:read`
/// locally, `<resource server>/read` with Cognito (`osfoundry/read`). Everything the endpoint
/// advertises — the protected-resource metadata, the 403 challenge, the tools' security schemes
/// — is spelled with it, so a client asks for scopes the server actually issues. (Checks accept
/// either spelling.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSpelling {
    prefix: String,
}

impl ScopeSpelling {
    /// The local spelling, `osfoundry:<name>`.
    pub fn local() -> Self {
        Self { prefix: "osfoundry:".into() }
    }

    /// Scopes of a resource server: `<prefix><name>`, e.g. `osfoundry/` for Cognito.
    pub fn with_prefix(prefix: &str) -> Self {
        Self { prefix: prefix.to_owned() }
    }

    /// The spelling of a product scope (`osfoundry:read` → `osfoundry/read`).
    pub fn spell(&self, scope: &str) -> String {
        match scope.strip_prefix("osfoundry:") {
            Some(name) => format!("{}{name}", self.prefix),
            None => scope.to_owned(),
        }
    }
}

impl Default for ScopeSpelling {
    fn default() -> Self {
        Self::local()
    }
}
