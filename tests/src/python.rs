//! The pinned Python MCP SDKs that `infra/test.sh` installs, the OAuth client script that
//! drives them (`tests/python/oauth_connect.py`), and the runner of the browser scenarios
//! (`tests/browser/*.py`).

use std::ffi::OsString;
use std::path::PathBuf;

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

/// Runs one of the project's Python check scripts (`infra/<script>`) with the interpreter in
/// `var` (a pinned environment the test command installs): its summary line, the one starting
/// with `<script's name>: `, once it exited 0; `None` after [`sdk`]'s skip.
///
/// # Panics
/// When the script fails or prints no summary line (a check that ran nothing also exits 0).
pub fn run_check(var: &str, script: &str) -> Option<String> {
    let python = sdk(var)?;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../infra").join(script);
    #[allow(clippy::expect_used)]
    let out = std::process::Command::new(python).arg(&path).output().expect("the interpreter runs");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}:\n{said}");
    let prefix = format!("{}: ", script.trim_end_matches(".py"));
    let summary = said.lines().find(|l| l.starts_with(&prefix)).map(str::to_owned);
    assert!(summary.is_some(), "{script} printed no summary line:\n{said}");
    summary
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

/// Runs a browser scenario (a Python script that prints one JSON line of measurements last):
/// its measurements.
///
/// # Panics
/// When the script fails (its output in the message) or its last line is no JSON.
#[allow(clippy::expect_used)]
pub async fn run_scenario(mut command: tokio::process::Command) -> Value {
    let out = command.output().await.expect("the scenario starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser scenario failed:\n{stdout}\n{stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("its last line is the measurements")
}
