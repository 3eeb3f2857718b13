//! The pinned Python MCP SDKs that `infra/test.sh` installs, and the OAuth client script that
//! drives them (`tests/python/oauth_connect.py`).

use std::ffi::OsString;

use serde_json::Value;

/// The interpreter in `var` (`FOUNDRY_PYTHON_MCP1` / `FOUNDRY_PYTHON_MCP2`), or `None` after a
/// loud skip notice. Under `CI=true` a missing one is a failure, not a skip.
///
/// # Panics
/// Under `CI=true` without `var`.
pub fn sdk(var: &str) -> Option<OsString> {
    let python = std::env::var_os(var);
    if python.is_none() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{var} is not set under CI=true");
        eprintln!("\n*** SKIPPING: {var} is not set; ./infra/test.sh installs the pinned Python MCP SDKs. ***\n");
    }
    python
}

/// Runs the SDK's own OAuth client against `FC_URL` with `envs`: the JSON line it prints, after
/// checking it connected (nine tools listed, PKCE with S256).
///
/// # Panics
/// When the script fails or its checks do.
pub async fn oauth_connect(python: &OsString, var: &str, envs: &[(&str, &str)]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/oauth_connect.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .envs(envs.iter().copied())
        .output()
        .await
        .unwrap_or_else(|e| panic!("{var}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{var} OAuth client failed:\n{stdout}\n{stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{var}: {e}: {stdout}"));
    eprintln!("{var}: {seen}");
    assert_eq!(seen["tools"], 9, "{seen}");
    assert_eq!(seen["code_challenge_method"], "S256", "{seen}");
    seen
}
