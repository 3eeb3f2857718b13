//! `relay pair <server-url>`: pairing this desktop with the owner's account, in the shape of
//! the OAuth device authorization grant (RFC 8628; `domain::pairing` has the server's side).
//!
//! 1. Make a device token here (`fcd_…`) and send only its sha256, with this desktop's name,
//!    OS and architecture; the server answers a user code and a URL of the panel.
//! 2. Print both and poll every `interval` seconds (5 more after each `slow_down`) until the
//!    owner approves (the token now authenticates this desktop), refuses, or the code expires.
//! 3. Print the account the desktop joined (the approving owner's id, as the panel shows it)
//!    and, on a terminal, ask before keeping anything: whoever has the code can approve it, so
//!    a desktop whose code someone else approved is not silently paired into their account
//!    (RFC 8628 §5.4). Without a terminal, `--yes` accepts the account shown (the installer
//!    passes it when it has no terminal to ask on).
//! 4. Keep the token in `<state folder>/device-token` (0600) and point the config at it,
//!    rewriting `server_url` and `device_token_file` and keeping everything else, comments
//!    included. The token never crosses the network, so a lost answer costs nothing: the next
//!    poll is answered with the same device. Declined, nothing is written and the token is
//!    forgotten: the device in the other account can never be used.

use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::relay::{PREFIX, PairError, PairRequest, PairResponse, PairTokenRequest, PairTokenResponse};

use crate::cli::CliError;
use crate::cli::sessions::replace;
use crate::config::{default_state_dir, resolve_path, server_url_problem};

/// The file the token is kept in, inside the state folder.
pub const TOKEN_FILE: &str = "device-token";

/// `std::env::consts::OS` in the server's spelling (`macos`, `linux`, …).
fn os_name() -> &'static str {
    std::env::consts::OS
}

/// What a poll came to.
enum Poll {
    Paired(PairTokenResponse),
    Wait,
    SlowDown(Option<u64>),
    Done(String),
}

fn read_poll(status: u16, text: &str) -> Result<Poll, String> {
    if status == 200 {
        return serde_json::from_str(text).map(Poll::Paired).map_err(|e| format!("unexpected answer ({e}): {text}"));
    }
    if status >= 500 || status == 429 {
        return Ok(Poll::Wait);
    }
    let e: PairError = serde_json::from_str(text).map_err(|_| format!("unexpected answer ({status}): {text}"))?;
    Ok(match e.error.as_str() {
        "authorization_pending" => Poll::Wait,
        "slow_down" => Poll::SlowDown(e.interval),
        "access_denied" => Poll::Done(format!("pairing refused: {}; nothing was changed", e.error_description)),
        "expired_token" => {
            Poll::Done("the code expired before it was approved (codes last 10 minutes); run `relay pair` again".into())
        }
        other => Poll::Done(format!("pairing failed: {other}: {}", e.error_description)),
    })
}

/// Where the answer to "keep this pairing?" comes from.
enum Confirm {
    /// `--yes`: the account shown is accepted.
    Yes,
    /// Ask on the terminal.
    Ask,
}

/// Asks on the terminal whether to keep the pairing; only `y`/`yes` keeps it.
fn ask_to_keep(question: &str) -> Result<bool, CliError> {
    use std::io::{BufRead, Write};
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// `relay pair SERVER_URL [--name NAME] [--yes]`.
///
/// # Errors
/// Bad arguments, an unreachable server, a refusal or an expired code, a pairing the owner of
/// this desktop declined, or a config or token file that cannot be written (the message says
/// which).
pub async fn command(config_path: &Path, args: crate::cli::args::Pair) -> Result<(), CliError> {
    let server_url = args.server_url.trim_end_matches('/').to_owned();
    let name = args.name.unwrap_or_else(crate::identity::host_name);
    let yes = args.yes;
    let confirm = if yes {
        Confirm::Yes
    } else if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        Confirm::Ask
    } else {
        return Err(CliError::new(
            "relay pair asks which account to join on a terminal; without one, pass --yes to accept the account it prints",
        ));
    };
    if let Some(problem) = server_url_problem(&server_url) {
        return Err(CliError(format!("server URL {server_url:?} {problem}")));
    }
    if args.keep_pairing && still_paired(config_path, &server_url).await {
        println!(
            "already paired with {server_url} (the server accepts this desktop's token): keeping that pairing; to pair again: relay pair {server_url}"
        );
        return Ok(());
    }
    let state_dir = state_dir_of(config_path)?;
    let (token, token_hash) = domain::devices::new_token().map_err(|e| CliError(format!("no randomness: {e}")))?;
    let http = crate::server::client::https_client().map_err(|e| CliError(format!("cannot start HTTPS: {e}")))?;
    let base = format!("{server_url}{PREFIX}/pairings");
    let req = PairRequest { name, os: os_name().into(), arch: std::env::consts::ARCH.into(), token_sha256: token_hash };
    let res =
        http.post(&base).json(&req).send().await.map_err(|e| CliError(format!("cannot reach {server_url}: {e}")))?;
    let status = res.status().as_u16();
    let text = res.text().await.unwrap_or_default();
    if status != 200 {
        let detail = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(CliError(format!("the server did not start a pairing ({status}): {detail}")));
    }
    let start: PairResponse =
        serde_json::from_str(&text).map_err(|e| CliError(format!("unexpected answer ({e}): {text}")))?;
    println!("To pair this desktop ({}), open this page signed in as the owner:", req.name);
    println!();
    println!("    {}", start.verification_uri_complete);
    println!();
    println!("and check that it shows the code {}. Waiting for the approval…", start.user_code);
    let device = wait(&http, &base, &start).await?;
    let account = if device.account.is_empty() { "(not named by this server)" } else { device.account.as_str() };
    println!("approved: this desktop joins account {account} as \"{}\"", device.device_name);
    if let Confirm::Ask = confirm
        && !ask_to_keep("Is this your account (the panel you approved it in shows its id)?")?
    {
        return Err(CliError::new(
            "not kept: nothing was written and the token is forgotten, so the device made in that account can never be used. Run `relay pair` again and approve it in your own panel",
        ));
    }
    let token_file = store_token(&state_dir, &token)?;
    point_config_at(config_path, &server_url, &token_file)?;
    println!("paired: this desktop is \"{}\" (device {}) in account {account}", device.device_name, device.device_id);
    println!("token:  {} (only this file holds it; the server keeps its sha256)", token_file.display());
    println!("config: {}", config_path.display());
    if !args.from_installer {
        println!(
            "next:   relay session add --hello --project PROJECT_ID (the built-in hello Graph; or --name NAME --project PROJECT_ID -- COMMAND), then relay install (or relay run)"
        );
    }
    Ok(())
}

/// Whether the config at `config_path` is paired with `server_url` and the server still
/// accepts its token: a control poll for a command that does not exist answers 404 to a
/// known device (401 to a revoked or unknown one), and writes nothing. Unreachable: not known
/// to be paired (the pairing that follows says why it cannot reach the server).
async fn still_paired(config_path: &Path, server_url: &str) -> bool {
    let Ok(config) = crate::config::Config::load(config_path) else { return false };
    if config.server_url != server_url || config.device_token.is_empty() {
        return false;
    }
    let Ok(http) = crate::server::client::https_client() else { return false };
    let nobody = "00000000-0000-4000-8000-000000000000";
    let url = format!("{server_url}{PREFIX}/commands/{nobody}/control");
    matches!(http.get(&url).bearer_auth(&config.device_token).send().await, Ok(r) if r.status().as_u16() == 404)
}

/// Polls until the pairing ends. Network failures and 5xx answers are waited out until the
/// code's expiry.
async fn wait(http: &reqwest::Client, base: &str, start: &PairResponse) -> Result<PairTokenResponse, CliError> {
    let mut interval = Duration::from_secs(start.interval.max(1));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(start.expires_in) + interval;
    let body = PairTokenRequest { device_code: start.device_code.clone() };
    loop {
        tokio::time::sleep(interval).await;
        let answer = match http.post(format!("{base}/token")).json(&body).send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                read_poll(status, &res.text().await.unwrap_or_default()).map_err(CliError)?
            }
            Err(e) => {
                tracing::debug!(error = %e, "pairing poll failed; trying again");
                Poll::Wait
            }
        };
        match answer {
            Poll::Paired(d) => return Ok(d),
            Poll::Done(msg) => return Err(CliError(msg)),
            Poll::SlowDown(next) => {
                interval = next.map_or(interval + Duration::from_secs(5), Duration::from_secs);
            }
            Poll::Wait => {}
        }
        if tokio::time::Instant::now() > deadline {
            return Err(CliError::new("the code expired before it was approved; run `relay pair` again"));
        }
    }
}

/// The state folder the config names (relative to the config's folder), else the platform's.
fn state_dir_of(config_path: &Path) -> Result<PathBuf, CliError> {
    let base = config_path.parent().unwrap_or(Path::new("."));
    let named = std::fs::read_to_string(config_path)
        .ok()
        .and_then(|t| t.parse::<toml_edit::DocumentMut>().ok())
        .and_then(|d| d.get("state_dir").and_then(|v| v.as_str()).map(PathBuf::from));
    match named {
        Some(p) => Ok(resolve_path(&p, base, std::env::var_os("HOME").map(PathBuf::from).as_deref())),
        None => {
            default_state_dir().ok_or_else(|| CliError::new("no state folder: set HOME or state_dir in the config"))
        }
    }
}

/// Writes the token, 0600 in a 0700 folder, replacing an earlier one atomically.
fn store_token(state_dir: &Path, token: &str) -> Result<PathBuf, CliError> {
    private_files::create_dir_all(state_dir).map_err(|e| CliError(format!("{}: {e}", state_dir.display())))?;
    let path = state_dir.join(TOKEN_FILE);
    let tmp = state_dir.join(format!(".{TOKEN_FILE}.{}.tmp", std::process::id()));
    private_files::write(&tmp, format!("{token}\n").as_bytes()).and_then(|()| std::fs::rename(&tmp, &path)).map_err(
        |e| {
            let _ = std::fs::remove_file(&tmp);
            CliError(format!("writing {}: {e}", path.display()))
        },
    )?;
    Ok(path)
}

/// Sets `server_url` and `device_token_file` in the config (creating it when there is none),
/// removing an inline `device_token`; every other line stays.
fn point_config_at(config_path: &Path, server_url: &str, token_file: &Path) -> Result<(), CliError> {
    let existing = std::fs::read_to_string(config_path).ok();
    let mut doc = match &existing {
        Some(text) => text
            .parse::<toml_edit::DocumentMut>()
            .map_err(|e| CliError(format!("{} is not valid TOML, left as it is: {e}", config_path.display())))?,
        None => "# Written by `relay pair`. Add sessions with `relay session add`; `relay check` tests the setup.\n"
            .parse::<toml_edit::DocumentMut>()
            .map_err(|e| CliError(e.to_string()))?,
    };
    doc["server_url"] = toml_edit::value(server_url);
    doc["device_token_file"] = toml_edit::value(token_file.to_string_lossy().as_ref());
    doc.remove("device_token");
    if existing.is_none()
        && let Some(dir) = config_path.parent().filter(|d| !d.as_os_str().is_empty())
    {
        private_files::create_dir_all(dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    }
    replace(config_path, &doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_read_as_the_grant_says() {
        let pending = r#"{"error":"authorization_pending","error_description":"x"}"#;
        assert!(matches!(read_poll(400, pending), Ok(Poll::Wait)));
        let slow = r#"{"error":"slow_down","error_description":"x","interval":10}"#;
        assert!(matches!(read_poll(400, slow), Ok(Poll::SlowDown(Some(10)))));
        let denied = r#"{"error":"access_denied","error_description":"the owner refused this desktop"}"#;
        assert!(matches!(read_poll(400, denied), Ok(Poll::Done(m)) if m.contains("the owner refused")));
        let expired = r#"{"error":"expired_token","error_description":"x"}"#;
        assert!(matches!(read_poll(400, expired), Ok(Poll::Done(m)) if m.contains("expired")));
        assert!(matches!(read_poll(503, "busy"), Ok(Poll::Wait)));
        let ok = format!(r#"{{"device_id":"{}","device_name":"Mac","account":"ana"}}"#, uuid::Uuid::nil());
        assert!(matches!(read_poll(200, &ok), Ok(Poll::Paired(d)) if d.device_name == "Mac" && d.account == "ana"));
        assert!(read_poll(400, "<html>").is_err());
    }

    #[test]
    fn the_config_is_pointed_at_the_token_and_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("relay-pair-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("relay.toml");
        std::fs::write(
            &config,
            "# mine\nserver_url = \"https://old.example\" # old\ndevice_token = \"fcd_x\"\n\n[[sessions]]\n# keep\nname = \"A\"\n",
        )
        .unwrap();
        point_config_at(&config, "https://new.example", &dir.join("state/device-token")).unwrap();
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("# mine") && text.contains("# keep") && text.contains("name = \"A\""), "{text}");
        assert!(text.contains("server_url = \"https://new.example\""), "{text}");
        assert!(!text.contains("fcd_x"), "the inline token must go: {text}");
        let token = store_token(&dir.join("state"), "fcd_secret").unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&token).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&token).unwrap(), "fcd_secret\n");
        // No config yet: one is written with the two keys.
        let fresh = dir.join("new/relay.toml");
        point_config_at(&fresh, "http://127.0.0.1:8787", &token).unwrap();
        let text = std::fs::read_to_string(&fresh).unwrap();
        assert!(
            text.contains("server_url = \"http://127.0.0.1:8787\"") && text.contains("device_token_file"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
