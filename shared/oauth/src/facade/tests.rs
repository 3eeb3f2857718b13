//! The facade's parameter translation and answers, without Cognito.
use super::*;

fn pairs(q: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.as_bytes()).into_owned().collect()
}

const MCP: &str = "https://abc.execute-api.eu-west-1.amazonaws.com/mcp";

#[test]
fn a_connector_token_names_its_owner_and_nothing_else_does() {
    use base64::Engine as _;
    let answer = |claims: serde_json::Value| {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
        serde_json::json!({"access_token": format!("eyJhbGciOiJSUzI1NiJ9.{payload}.sig"), "token_type": "Bearer"})
            .to_string()
    };
    let read = answer(serde_json::json!({"sub": "owner-1", "scope": "osfoundry/read osfoundry/run"}));
    assert_eq!(connector_owner(read.as_bytes()).map(|o| o.as_str().to_owned()).as_deref(), Some("owner-1"));
    let owner_only = answer(serde_json::json!({"sub": "owner-1", "scope": "osfoundry/owner"}));
    assert_eq!(connector_owner(owner_only.as_bytes()), None, "the owner's own client is no chat");
    assert_eq!(connector_owner(answer(serde_json::json!({"scope": "osfoundry/read"})).as_bytes()), None);
    assert_eq!(connector_owner(b"not json"), None);
    assert_eq!(connector_owner(br#"{"access_token": "no-dots"}"#), None);
}

#[test]
fn the_exact_parameters_cognito_receives() {
    let spelling = ScopeSpelling::with_prefix("osfoundry/");
    let resources = vec![MCP.to_owned()];
    let q = format!(
        "response_type=code&client_id=c1&redirect_uri=https%3A%2F%2Fclaude.ai%2Fapi%2Fmcp%2Fauth_callback\
         &state=s&code_challenge=x&code_challenge_method=S256&resource={}\
         &scope=osfoundry%3Aread+osfoundry%2Frun+openid+offline_access+profile",
        url::form_urlencoded::byte_serialize(MCP.as_bytes()).collect::<String>()
    );
    let out = forwarded_params(&pairs(&q), &resources, &spelling).unwrap();
    assert_eq!(
        encode(&out),
        "response_type=code&client_id=c1&redirect_uri=https%3A%2F%2Fclaude.ai%2Fapi%2Fmcp%2Fauth_callback\
         &state=s&code_challenge=x&code_challenge_method=S256&scope=osfoundry%2Fread+osfoundry%2Frun"
    );
    // A token request: resource with a trailing slash is the same URL; no scope left → none sent.
    let t = format!(
        "grant_type=authorization_code&code=k&client_id=c1&code_verifier=v&resource={MCP}/&scope=offline_access"
    );
    assert_eq!(
        encode(&forwarded_params(&pairs(&t), &resources, &spelling).unwrap()),
        "grant_type=authorization_code&code=k&client_id=c1&code_verifier=v"
    );
}

#[test]
fn another_resource_or_a_repeated_parameter_is_refused() {
    let spelling = ScopeSpelling::with_prefix("osfoundry/");
    let resources = vec![MCP.to_owned()];
    let e =
        forwarded_params(&pairs("client_id=c&resource=https://evil.example/mcp"), &resources, &spelling).unwrap_err();
    assert_eq!(e.code, "invalid_target");
    assert!(e.description.starts_with("resource: must be this server's MCP URL"), "{}", e.description);
    let e = forwarded_params(&pairs("client_id=c&client_id=d"), &resources, &spelling).unwrap_err();
    assert_eq!((e.code, e.description.as_str()), ("invalid_request", "client_id: given more than once"));
    // Unknown scopes (Claude's own `claudeai`, OpenID's) are dropped, never refused.
    assert_eq!(forwarded_scope("admin openid claudeai", &spelling), None);
    assert_eq!(forwarded_scope("claudeai osfoundry:read", &spelling).as_deref(), Some("osfoundry/read"));
    assert_eq!(forwarded_scope("offline_access", &spelling), None);
}

#[test]
fn a_refresh_answer_always_carries_a_refresh_token() {
    // Cognito's answer to a refresh, as its token endpoint documents it: no refresh token.
    let cognito = Bytes::from_static(br#"{"access_token":"a","id_token":"i","token_type":"Bearer","expires_in":3600}"#);
    let out: serde_json::Value = serde_json::from_slice(&with_refresh_token(cognito, "r-1")).unwrap();
    assert_eq!(out["refresh_token"], "r-1");
    assert_eq!(out["access_token"], "a");
    // A rotated one is kept, and an error is left alone.
    let rotated = Bytes::from_static(br#"{"access_token":"a","refresh_token":"r-2"}"#);
    assert_eq!(with_refresh_token(rotated.clone(), "r-1"), rotated);
    let error = Bytes::from_static(br#"{"error":"invalid_grant"}"#);
    assert_eq!(with_refresh_token(error.clone(), "r-1"), error);
}
