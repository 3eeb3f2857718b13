//! The settings' parsing: defaults, bad values named, the keys each function requires.

use std::time::Duration;

use super::*;

fn map(pairs: &[(String, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.clone(), (*v).to_owned())).collect();
    move |k| m.get(k).cloned()
}

#[test]
fn tool_config_reports_every_problem() {
    let e = ToolConfig::from_env(*ToolName::UploadLinkedChatArtifact.spec(), map(&[(LEASE_SECONDS.into(), "soon")]))
        .unwrap_err();
    assert_eq!(
        e.problems,
        vec![
            "TABLE_NAME: required",
            "LEASE_SECONDS: must be a whole number of seconds > 0 (got \"soon\")",
            "ARTIFACT_BUCKET: required"
        ]
    );
    let ok = ToolConfig::from_env(
        *ToolName::ClaimLinkedChatTask.spec(),
        map(&[(TABLE_NAME.into(), "t"), (LEASE_SECONDS.into(), "60")]),
    )
    .unwrap();
    assert_eq!((ok.table.as_str(), ok.policy.lease, ok.bucket), ("t", Duration::from_secs(60), None));
}

/// The template's `PairingsPerSourcePerHour` reaches the relay API's store policy; a bad
/// value is refused naming its key.
#[test]
fn the_pairings_per_source_come_from_the_environment() {
    let base = [(TABLE_NAME.to_owned(), "t"), (PUBLIC_URL.to_owned(), "https://api.example.com")];
    let pairs = |v: &'static str| {
        let mut all = base.to_vec();
        all.push((PAIRINGS_PER_SOURCE_PER_HOUR.to_owned(), v));
        all
    };
    let ok = RelayConfig::from_env(map(&pairs("500"))).unwrap();
    assert_eq!(ok.policy.pairings_per_source_per_hour, 500);
    let unset = RelayConfig::from_env(map(&base)).unwrap();
    assert_eq!(unset.policy.pairings_per_source_per_hour, domain::pairing::PAIRINGS_PER_SOURCE_PER_HOUR);
    let e = RelayConfig::from_env(map(&pairs("0"))).unwrap_err();
    assert_eq!(e.problems, vec!["PAIRINGS_PER_SOURCE_PER_HOUR: must be a whole number > 0 (got \"0\")"]);
}

#[cfg(all(feature = "mcp", feature = "register"))]
#[test]
fn mcp_config_needs_every_tool_function() {
    let e = McpConfig::from_env(map(&[])).unwrap_err();
    assert_eq!(e.problems.len(), 5 + ToolName::ALL.len());
    assert!(e.to_string().starts_with("bad configuration:\nOAUTH_ISSUER: required\n"), "{e}");
    let mut pairs: Vec<(String, &str)> = vec![
        (OAUTH_ISSUER.into(), "https://cognito-idp.eu-west-1.amazonaws.com/pool"),
        (JWKS_URL.into(), "https://cognito-idp.eu-west-1.amazonaws.com/pool/.well-known/jwks.json"),
        (PUBLIC_URL.into(), "https://abc.execute-api.eu-west-1.amazonaws.com"),
        (OAUTH_SCOPE_PREFIX.into(), "osfoundry/"),
        (ALLOWED_HOSTS.into(), "mcp.example.com"),
        (TABLE_NAME.into(), "t"),
        (OWNER_REQUESTS_PER_MINUTE.into(), "120"),
    ];
    let names: Vec<String> = ToolName::ALL.iter().map(|t| format!("fc-{}", t.as_str())).collect();
    for (t, n) in ToolName::ALL.iter().zip(&names) {
        pairs.push((tool_function_key(*t), n));
    }
    let c = McpConfig::from_env(map(&pairs)).unwrap();
    assert_eq!((c.table.as_str(), c.policy.owner_requests_per_minute), ("t", 120), "the budget's table and limit");
    // The stack's own facade, in front of Cognito's (which refuses `resource`), revocation
    // included (a document's client id names its app client there).
    assert_eq!(c.auth_server.token_endpoint, "/token");
    assert_eq!(c.auth_server.revocation_endpoint.as_deref(), Some(oauth::facade::REVOKE_PATH));
    let r = RegisterConfig::from_env(map(&[
        (USER_POOL_ID.into(), "pool"),
        (OAUTH_SCOPE_PREFIX.into(), "osfoundry/"),
        (HOSTED_AUTH_URL.into(), "https://fc.auth.eu-west-1.amazoncognito.com/"),
        (PUBLIC_URL.into(), "https://abc.execute-api.eu-west-1.amazonaws.com"),
        (ALLOWED_HOSTS.into(), "mcp.example.com"),
        (TABLE_NAME.into(), "t"),
    ]))
    .unwrap();
    assert_eq!(
        r.resources,
        ["https://abc.execute-api.eu-west-1.amazonaws.com/mcp", "https://mcp.example.com/mcp"],
        "a resource may name the API's MCP URL or a custom domain's"
    );
    assert_eq!(r.hosted_auth_url, "https://fc.auth.eu-west-1.amazoncognito.com");
    assert!(r.dev_document_hosts.is_empty());
    // The app-client caps stay under Cognito's 1,000 per pool, with the template's own.
    let base = [
        (USER_POOL_ID.to_owned(), "pool"),
        (OAUTH_SCOPE_PREFIX.to_owned(), "osfoundry/"),
        (HOSTED_AUTH_URL.to_owned(), "https://fc.auth.eu-west-1.amazoncognito.com/"),
        (PUBLIC_URL.to_owned(), "https://abc.execute-api.eu-west-1.amazonaws.com"),
        (TABLE_NAME.to_owned(), "t"),
    ];
    let with = |extra: &[(String, &'static str)]| {
        let mut all = base.to_vec();
        all.extend_from_slice(extra);
        RegisterConfig::from_env(map(&all))
    };
    assert!(with(&[(REGISTRATION_CAP.into(), "790")]).is_ok());
    let e = with(&[(REGISTRATION_CAP.into(), "791")]).unwrap_err().to_string();
    assert!(e.contains("REGISTRATION_CAP") && e.contains("1000 per user pool"), "{e}");
    // The development pins only with the loopback switch, and only to loopback addresses.
    let pins = (DEV_DOCUMENT_HOSTS.to_owned(), "chatgpt.com=127.0.0.1:8443,evil.example=10.0.0.1:443");
    assert!(with(std::slice::from_ref(&pins)).unwrap().dev_document_hosts.is_empty());
    let on = with(&[pins, (ALLOW_LOOPBACK_CLIENT_METADATA.to_owned(), "true")]).unwrap();
    assert_eq!(on.dev_document_hosts, [("chatgpt.com".to_owned(), "127.0.0.1:8443".parse().unwrap())]);
    assert_eq!(
        c.endpoint.allowed_hosts,
        Some(vec!["abc.execute-api.eu-west-1.amazonaws.com".to_owned(), "mcp.example.com".to_owned()])
    );
    let mut headers = http::HeaderMap::new();
    headers.insert("host", http::HeaderValue::from_static("abc.execute-api.eu-west-1.amazonaws.com"));
    assert_eq!(
        c.endpoint.resource(&c.endpoint.base_url(&headers)),
        "https://abc.execute-api.eu-west-1.amazonaws.com/mcp"
    );
    // A custom domain: the metadata names the URL the client used.
    headers.insert("host", http::HeaderValue::from_static("mcp.example.com"));
    assert_eq!(c.endpoint.resource(&c.endpoint.base_url(&headers)), "https://mcp.example.com/mcp");
    // Any other Host is not trusted for URLs (and rmcp refuses it).
    headers.insert("host", http::HeaderValue::from_static("evil.example"));
    assert_eq!(
        c.endpoint.resource(&c.endpoint.base_url(&headers)),
        "https://abc.execute-api.eu-west-1.amazonaws.com/mcp"
    );
    // Scopes are advertised as Cognito issues them.
    let meta = c.endpoint.resource_metadata("https://x");
    assert_eq!(meta["scopes_supported"], serde_json::json!(["osfoundry/read", "osfoundry/run"]));
    assert_eq!(c.functions.len(), 9);
    assert_eq!(required_keys("mcp").unwrap().len(), 14);
    assert_eq!(required_keys("upload_linked_chat_artifact").unwrap(), vec!["TABLE_NAME", "ARTIFACT_BUCKET"]);
    assert_eq!(required_keys("nope"), None);
}
