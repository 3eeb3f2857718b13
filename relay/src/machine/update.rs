//! Self-update (`relay update`, and the daily check under `auto_update`): the relay replaces
//! its own binary with the newest build its server publishes for this platform, and restarts
//! into it between runs.
//!
//! 1. `GET <server>/relay/download/SHA256SUMS` — the same file the one-line installer trusts;
//!    the line for this platform (`relay-<version>-<target>.tar.gz`, [`target`]) names the
//!    version and the archive's SHA-256.
//! 2. Nothing to do when that version is not newer than this one, or when `pin = "x.y.z"`
//!    holds another (a pin is also how an owner goes back: the pinned build is installed when
//!    it is the published one).
//! 3. The archive is downloaded, its SHA-256 checked, and its `relay` unpacked beside the
//!    installed binary (the same file system, so the final rename is atomic), then run with
//!    `--version`: it must start and name the version `SHA256SUMS` promised.
//! 4. One `rename` puts it in place. A running relay keeps running its old inode; between
//!    passes (never during a run: runs happen inside a pass) it sees that the file at its path
//!    is no longer the one it started from ([`Binary::replaced`]) and execs the new one with
//!    its own arguments: same process id, so launchd and systemd see no exit, and a relay in a
//!    terminal restarts just the same.
//!
//! Any failure before step 4 leaves the installed binary untouched and says why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::identity::parse_version;
pub use crate::identity::{CHECK_EVERY, LAST_CHECK_FILE, LastCheck, VERSION, check_pin, compare};

/// The name of the checksum file under the server's downloads.
pub const SUMS_PATH: &str = "/relay/download/SHA256SUMS";
/// How long the new build may take to answer `--version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest archive accepted (a relay build is about 10 MB).
const MAX_ARCHIVE_BYTES: usize = 200 * 1024 * 1024;
/// How long one archive download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// This build's platform as the builds are named (`infra/relay-dist.sh`, the installer):
/// `aarch64-apple-darwin`, `x86_64-unknown-linux-musl`, …
pub fn target() -> String {
    let os = match std::env::consts::OS {
        "macos" => "apple-darwin",
        "linux" => "unknown-linux-musl",
        other => other,
    };
    format!("{}-{os}", std::env::consts::ARCH)
}

/// The build to install on this machine: `this` ([`target`]), except that an Intel build running
/// under Rosetta on Apple silicon (Migration Assistant copies it over) moves to the arm64 one
/// (`translated`: what `sysctl sysctl.proc_translated` printed, `…: 1` or `1` under Rosetta).
pub fn native_target(this: &str, translated: Option<&str>) -> String {
    let under_rosetta = translated.map(|t| {
        t.lines().filter(|l| !l.starts_with('%')).any(|l| l.rsplit(':').next().is_some_and(|v| v.trim() == "1"))
    });
    match (this, under_rosetta) {
        ("x86_64-apple-darwin", Some(true)) => "aarch64-apple-darwin".to_owned(),
        (t, _) => t.to_owned(),
    }
}

/// What `sysctl sysctl.proc_translated` prints on a Mac (`None` elsewhere, or when it fails).
fn translated() -> Option<String> {
    if !cfg!(target_os = "macos") {
        return None;
    }
    let out = std::process::Command::new("sysctl").arg("sysctl.proc_translated").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A build the server publishes for this platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Its version (from the archive's name).
    pub version: String,
    /// The archive's file name.
    pub archive: String,
    /// The archive's SHA-256 (hex).
    pub sha256: String,
}

/// The build for `target` in a `SHA256SUMS` text (`<sha256>  <file>` lines); the newest when
/// it lists several.
pub fn published(sums: &str, target: &str) -> Option<Published> {
    let suffix = format!("-{target}.tar.gz");
    sums.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (sha, file) = (parts.next()?, parts.next()?.trim_start_matches('*'));
            let version = file.strip_prefix("relay-")?.strip_suffix(&suffix)?;
            let ok = sha.len() == 64
                && sha.bytes().all(|b| b.is_ascii_hexdigit())
                && parse_version(version).is_some()
                && file.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            ok.then(|| Published {
                version: version.to_owned(),
                archive: file.to_owned(),
                sha256: sha.to_ascii_lowercase(),
            })
        })
        .max_by(|a, b| compare(&a.version, &b.version))
}

/// What an update check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The published build is not newer.
    UpToDate {
        /// This build's version.
        current: String,
    },
    /// `pin` holds a version other than the published one.
    Pinned {
        /// The pin.
        pin: String,
        /// What the server publishes.
        published: String,
    },
    /// A newer build is published but was not installed: installing it would take away the
    /// owner's macOS privacy grants ([`grants_at_risk`]); `relay update` installs it.
    Available {
        /// This build's version.
        current: String,
        /// The published one.
        version: String,
        /// Why it waits for the owner.
        why: String,
    },
    /// The new build is in place (a running relay restarts into it between runs).
    Installed {
        /// The version replaced.
        from: String,
        /// The version installed.
        to: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UpToDate { current } => write!(f, "relay {current} is the newest build the server publishes"),
            Self::Pinned { pin, published } => {
                write!(f, "pinned to {pin} (pin in the config); the server publishes {published}: nothing changed")
            }
            Self::Available { current, version, why } => write!(
                f,
                "update available: relay {version} (this is {current}); not installed automatically: {why}; run relay update to install it"
            ),
            Self::Installed { from, to } => write!(
                f,
                "updated relay {from} → {to}; a running relay restarts into it when its current run (if any) ends"
            ),
        }
    }
}

/// Why an update did not happen (the installed binary is unchanged).
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The server could not be asked, or answered with an error.
    #[error("{0}")]
    Server(String),
    /// What was downloaded is not what `SHA256SUMS` promised.
    #[error(
        "checksum mismatch for {archive}: SHA256SUMS says {want}, the download is {got}; the relay was not changed"
    )]
    Checksum {
        /// The archive.
        archive: String,
        /// What `SHA256SUMS` says.
        want: String,
        /// What arrived.
        got: String,
    },
    /// The new build does not start, or names another version.
    #[error("the new build {0}; the relay was not changed")]
    Broken(String),
    /// A local file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> UpdateError {
    let what = what.into();
    move |source| UpdateError::Io { what, source }
}

/// Checks `server_url` for a newer build and, when there is one (and `pin` allows it),
/// installs it over `binary` (the installed relay's path) — unless `hold` says why it must
/// wait for the owner ([`grants_at_risk`]): then [`Outcome::Available`], nothing downloaded.
///
/// # Errors
/// [`UpdateError`]: nothing was changed.
pub async fn update(
    http: &reqwest::Client,
    server_url: &str,
    binary: &Path,
    pin: Option<&str>,
    hold: Option<&str>,
) -> Result<Outcome, UpdateError> {
    let base = server_url.trim_end_matches('/');
    let sums = fetch(http, &format!("{base}{SUMS_PATH}"), Duration::from_secs(30)).await?;
    let sums = String::from_utf8_lossy(&sums);
    let target = native_target(&target(), translated().as_deref());
    let Some(build) = published(&sums, &target) else {
        return Err(UpdateError::Server(format!("the server publishes no relay build for {target}")));
    };
    match pin {
        Some(pin) if build.version != pin => {
            return Ok(Outcome::Pinned { pin: pin.to_owned(), published: build.version });
        }
        Some(pin) if pin == VERSION => return Ok(Outcome::UpToDate { current: VERSION.to_owned() }),
        Some(_) => {}
        None if compare(&build.version, VERSION) != std::cmp::Ordering::Greater => {
            return Ok(Outcome::UpToDate { current: VERSION.to_owned() });
        }
        None => {}
    }
    if let Some(why) = hold {
        return Ok(Outcome::Available { current: VERSION.to_owned(), version: build.version, why: why.to_owned() });
    }
    let bytes = fetch(http, &format!("{base}/relay/download/{}", build.archive), DOWNLOAD_TIMEOUT).await?;
    let got = domain::runs::sha256_hex(&bytes);
    if got != build.sha256 {
        return Err(UpdateError::Checksum { archive: build.archive, want: build.sha256, got });
    }
    let version = build.version.clone();
    let binary = binary.to_path_buf();
    tokio::task::spawn_blocking(move || install(&bytes, &build, &binary))
        .await
        .map_err(|e| UpdateError::Broken(format!("could not be checked ({e})")))??;
    Ok(Outcome::Installed { from: VERSION.to_owned(), to: version })
}

async fn fetch(http: &reqwest::Client, url: &str, timeout: Duration) -> Result<Vec<u8>, UpdateError> {
    let res = http
        .get(url)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| UpdateError::Server(format!("cannot reach the server for {url}: {e}")))?;
    let status = res.status();
    if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::FORBIDDEN {
        return Err(UpdateError::Server(format!(
            "the server has no relay builds to download (HTTP {}): its operator publishes them (docs/relay.md)",
            status.as_u16()
        )));
    }
    if !status.is_success() {
        return Err(UpdateError::Server(format!("{url} answered HTTP {}", status.as_u16())));
    }
    let bytes = res.bytes().await.map_err(|e| UpdateError::Server(format!("downloading {url}: {e}")))?;
    if bytes.len() > MAX_ARCHIVE_BYTES {
        return Err(UpdateError::Server(format!("{url} is larger than {MAX_ARCHIVE_BYTES} bytes")));
    }
    Ok(bytes.to_vec())
}

/// Unpacks, checks and renames into place (blocking: `tar` and `--version` are processes).
fn install(archive: &[u8], build: &Published, binary: &Path) -> Result<(), UpdateError> {
    let dir = binary.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let work = dir.join(format!(".relay-update-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io(format!("creating {}", work.display())))?;
    let result = unpack_and_check(archive, build, &work)
        .and_then(|new| std::fs::rename(&new, binary).map_err(io(format!("replacing {}", binary.display()))));
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn unpack_and_check(archive: &[u8], build: &Published, work: &Path) -> Result<PathBuf, UpdateError> {
    use std::os::unix::fs::PermissionsExt;
    let file = work.join(&build.archive);
    std::fs::write(&file, archive).map_err(io(format!("writing {}", file.display())))?;
    let out = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&file)
        .arg("-C")
        .arg(work)
        .arg("relay")
        .output()
        .map_err(io("running tar"))?;
    let new = work.join("relay");
    if !out.status.success() || !new.is_file() {
        return Err(UpdateError::Broken(format!(
            "archive {} does not hold the relay ({})",
            build.archive,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755))
        .map_err(io("making the new build executable"))?;
    // What arrived through a browser carries com.apple.quarantine; this did not, but a copy
    // made by hand might: Gatekeeper would kill it at the restart.
    if cfg!(target_os = "macos") {
        let _ = std::process::Command::new("xattr").arg("-d").arg("com.apple.quarantine").arg(&new).output();
    }
    let said = version_of(&new)?;
    let want = format!("relay {}", build.version);
    if said != want {
        return Err(UpdateError::Broken(format!("says {said:?} to --version, not {want:?}")));
    }
    Ok(new)
}

/// What `binary --version` prints (its first line), within [`VERSION_TIMEOUT`].
fn version_of(binary: &Path) -> Result<String, UpdateError> {
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| UpdateError::Broken(format!("does not start ({e})")))?;
    let deadline = std::time::Instant::now() + VERSION_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(UpdateError::Broken(format!("did not answer --version within {VERSION_TIMEOUT:?}")));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| UpdateError::Broken(format!("does not start ({e})")))?;
    if !out.status.success() {
        return Err(UpdateError::Broken(format!(
            "fails --version ({}: {})",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().trim().to_owned())
}

/// The binary a relay was started from: its path and the file's identity then.
#[derive(Debug, Clone)]
pub struct Binary {
    path: PathBuf,
    identity: Option<(u64, u64, i64, i64)>,
}

fn identity(path: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec()))
}

impl Binary {
    /// This process's executable, as it is now (call it at start, before anything replaces it).
    ///
    /// # Errors
    /// When the operating system cannot say where the executable is.
    pub fn current() -> std::io::Result<Self> {
        let path = std::env::current_exe()?;
        Ok(Self::at(path))
    }

    /// The binary at `path`, as it is now.
    pub fn at(path: PathBuf) -> Self {
        let identity = identity(&path);
        Self { path, identity }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether another file now stands at its path (an update renamed one there). A path that
    /// vanished is not a replacement: there is nothing to restart into.
    pub fn replaced(&self) -> bool {
        match (identity(&self.path), self.identity) {
            (Some(now), Some(then)) => now != then,
            _ => false,
        }
    }

    /// Replaces this process with the binary now at its path, with the same arguments and
    /// environment (the process id stays: launchd and systemd see no exit).
    ///
    /// # Errors
    /// Only when the exec fails (this process then goes on).
    pub fn restart(&self) -> std::io::Error {
        use std::os::unix::process::CommandExt;
        let mut args = std::env::args_os();
        let _ = args.next();
        std::process::Command::new(&self.path).args(args).exec()
    }
}

/// The daily check's first run waits at least this long after a start (a relay restarted in
/// a loop must not ask the server each time).
const FIRST_CHECK_DELAY: Duration = Duration::from_secs(60);

/// What one check found, as [`LastCheck`] keeps it.
fn record(outcome: &Result<Outcome, UpdateError>, now: domain::clock::Timestamp) -> LastCheck {
    let published = match outcome {
        Ok(Outcome::UpToDate { .. }) => Some(VERSION.to_owned()),
        Ok(Outcome::Pinned { published, .. }) => Some(published.clone()),
        Ok(Outcome::Installed { to, .. }) => Some(to.clone()),
        Ok(Outcome::Available { version, .. }) => Some(version.clone()),
        Err(_) => None,
    };
    let outcome = match outcome {
        Ok(o) => o.to_string(),
        Err(e) => format!("failed: {e}"),
    };
    LastCheck { at: now.rfc3339(), at_ms: now.as_millis(), outcome, published }
}

/// One check now (`relay update`, and each daily one): the outcome, also kept in the state
/// folder for `relay status`.
///
/// # Errors
/// [`UpdateError`]: nothing was changed.
pub async fn check_now(
    config: &crate::config::Config,
    binary: &Path,
    hold: Option<&str>,
) -> Result<Outcome, UpdateError> {
    use domain::clock::Clock;
    let http =
        crate::server::client::https_client().map_err(|e| UpdateError::Server(format!("cannot start TLS: {e}")))?;
    let outcome = update(&http, &config.server_url, binary, config.pin.as_deref(), hold).await;
    if let Err(e) = record(&outcome, domain::clock::SystemClock.now()).write(&config.state_dir) {
        tracing::warn!(error = %e, "cannot keep the update check's outcome in the state folder");
    }
    outcome
}

/// The daily check (`auto_update`): once a day (counted from the last check kept in the state
/// folder), between a minute after start and forever; it ends after installing a build (the
/// loop then restarts into it between runs).
pub async fn daily(config: std::sync::Arc<crate::config::Config>, binary: Binary) {
    use domain::clock::Clock;
    every_day(
        || LastCheck::read(&config.state_dir),
        || domain::clock::SystemClock.now(),
        || async {
            // An ad-hoc build on a Mac is offered, never installed behind the owner's back.
            let hold = grants_at_risk(crate::machine::service::Platform::current(), || codesign(binary.path()));
            check_now(&config, binary.path(), hold.as_deref()).await
        },
    )
    .await;
}

/// [`daily`]'s schedule, apart from what a check does and where its record is kept: waits
/// until a day after the `last` check kept (at least [`FIRST_CHECK_DELAY`]), checks, and goes
/// on until a check installs a build. A failed check is kept like any other (`check_now`), so
/// it is retried a day later, not in a loop.
async fn every_day<C, F>(last: impl Fn() -> Option<LastCheck>, now: impl Fn() -> domain::clock::Timestamp, check: C)
where
    C: Fn() -> F,
    F: std::future::Future<Output = Result<Outcome, UpdateError>>,
{
    loop {
        let wait = LastCheck::due_in(last().as_ref(), now()).max(FIRST_CHECK_DELAY);
        tokio::time::sleep(wait).await;
        match check().await {
            Ok(installed @ Outcome::Installed { .. }) => {
                tracing::info!(%installed, "daily update check");
                return;
            }
            Ok(other) => tracing::debug!(outcome = %other, "daily update check"),
            Err(e) => tracing::warn!(error = %e, "daily update check failed; the relay keeps running this build"),
        }
    }
}

/// How a binary is signed, as `codesign -dv --verbose=4` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signing {
    /// `Signature=adhoc`: macOS knows the code by its exact bytes (its cdhash).
    AdHoc,
    /// Signed by an identity (the first `Authority=` line): grants follow the identity.
    Identity(String),
    /// Not signed at all, or `codesign` could not say.
    Unknown(String),
}

/// Reads `codesign -dv --verbose=4`'s output (it writes to stderr).
pub fn signing(codesign_output: &str) -> Signing {
    let lines = || codesign_output.lines().map(str::trim);
    if lines().any(|l| l == "Signature=adhoc") {
        return Signing::AdHoc;
    }
    match lines().find_map(|l| l.strip_prefix("Authority=")) {
        Some(a) => Signing::Identity(a.to_owned()),
        None => Signing::Unknown(codesign_output.lines().next().unwrap_or("no output").trim().to_owned()),
    }
}

/// `codesign -dv --verbose=4 <binary>`'s output (`Err`: it could not run).
pub fn codesign(binary: &Path) -> Result<String, String> {
    let out = std::process::Command::new("codesign")
        .args(["-dv", "--verbose=4"])
        .arg(binary)
        .output()
        .map_err(|e| format!("codesign: {e}"))?;
    Ok(format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout)))
}

/// Why replacing this build would take the owner's macOS privacy grants away (`None`: it
/// would not). macOS records a Full Disk Access or Files and Folders grant against the code's
/// designated requirement; for an ad-hoc signature that is the exact binary (codesign(1): an
/// ad-hoc signature "identifies exactly one instance of code"), so every new build stops
/// matching, and a grant made to a signing identity follows the identity. Off macOS there are
/// no such grants.
pub fn grants_at_risk(
    platform: crate::machine::service::Platform,
    codesign: impl FnOnce() -> Result<String, String>,
) -> Option<String> {
    if platform != crate::machine::service::Platform::MacOs {
        return None;
    }
    let why = match codesign().map(|o| signing(&o)) {
        Ok(Signing::Identity(_)) => return None,
        Ok(Signing::AdHoc) => "this build is ad-hoc signed",
        Ok(Signing::Unknown(_)) | Err(_) => "this build's signature cannot be read",
    };
    Some(format!(
        "installing it resets macOS privacy permissions for relay ({why}: macOS knows it by its exact bytes, so Full Disk Access and Files and Folders grants stop matching the new build; grant them again after installing, docs/relay.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::service::Platform;

    const ADHOC: &str = include_str!("../../../tests/fixtures/macos/codesign-adhoc.txt");
    const DEVELOPER_ID: &str = include_str!("../../../tests/fixtures/macos/codesign-developer-id.txt");
    const CC_CONNECT: &str = include_str!("../../../tests/fixtures/macos/codesign-adhoc-cc-connect-abridged.txt");

    /// An Intel build under Rosetta updates to the arm64 build, on the real `sysctl` output.
    #[test]
    fn an_intel_build_under_rosetta_moves_to_arm64() {
        let fixture = include_str!("../../../tests/fixtures/macos/sysctl-proc-translated.txt");
        let (native, rosetta) = fixture.split_once("% arch -x86_64").unwrap();
        assert!(native.contains(": 0") && rosetta.contains(": 1"));
        assert_eq!(native_target("x86_64-apple-darwin", Some(rosetta)), "aarch64-apple-darwin");
        assert_eq!(native_target("x86_64-apple-darwin", Some(native)), "x86_64-apple-darwin");
        assert_eq!(native_target("aarch64-apple-darwin", Some(native)), "aarch64-apple-darwin");
        assert_eq!(native_target("x86_64-unknown-linux-musl", None), "x86_64-unknown-linux-musl");
    }

    #[test]
    fn an_ad_hoc_build_on_a_mac_is_held_and_a_signed_one_or_linux_is_not() {
        assert_eq!(signing(ADHOC), Signing::AdHoc);
        assert_eq!(signing(CC_CONNECT), Signing::AdHoc);
        assert_eq!(
            signing(DEVELOPER_ID),
            Signing::Identity("Developer ID Application: The Tor Project, Inc (MADPSAYN6T)".into())
        );
        let held = grants_at_risk(Platform::MacOs, || Ok(ADHOC.to_owned())).unwrap();
        assert!(held.starts_with("installing it resets macOS privacy permissions for relay"), "{held}");
        assert!(grants_at_risk(Platform::MacOs, || Err("codesign: not found".into())).is_some());
        assert_eq!(grants_at_risk(Platform::MacOs, || Ok(DEVELOPER_ID.to_owned())), None);
        assert_eq!(grants_at_risk(Platform::Linux, || Ok(ADHOC.to_owned())), None);
    }

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_newest_build_for_this_platform_is_found_and_odd_lines_are_ignored() {
        let sums = format!(
            "{SHA}  relay-0.4.0-x86_64-unknown-linux-musl.tar.gz\n\
             {SHA}  relay-0.10.0-x86_64-unknown-linux-musl.tar.gz\n\
             {SHA}  relay-0.11.0-aarch64-apple-darwin.tar.gz\n\
             {SHA}  relay-0.12.0-rc.1-x86_64-unknown-linux-musl.tar.gz\n\
             nothing here\n\
             abc  relay-9.9.9-x86_64-unknown-linux-musl.tar.gz\n\
             {SHA}  relay-../x-x86_64-unknown-linux-musl.tar.gz\n"
        );
        let p = published(&sums, "x86_64-unknown-linux-musl").unwrap();
        assert_eq!(p.version, "0.12.0-rc.1");
        assert_eq!(
            published(&sums, "aarch64-apple-darwin").unwrap().archive,
            "relay-0.11.0-aarch64-apple-darwin.tar.gz"
        );
        assert_eq!(published(&sums, "riscv64-unknown-linux-musl"), None);
    }

    #[test]
    fn versions_compare_as_semantic_versions() {
        use std::cmp::Ordering::*;
        assert_eq!(compare("0.10.0", "0.9.9"), Greater);
        assert_eq!(compare("1.0.0-rc.1", "1.0.0"), Less);
        assert_eq!(compare("1.0.0+build.5", "1.0.0"), Equal);
        assert_eq!(compare("junk", "0.0.1"), Less);
        assert!(check_pin("0.4.0").is_ok());
        for bad in ["", "0.4", "latest", "0.4.0-", "v0.4.0"] {
            assert!(check_pin(bad).unwrap_err().starts_with("pin: "), "{bad}");
        }
    }

    #[test]
    fn a_replaced_file_is_noticed_and_a_vanished_one_is_not() {
        let dir = std::env::temp_dir().join(format!("relay-binary-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay");
        std::fs::write(&path, b"old").unwrap();
        let b = Binary::at(path.clone());
        assert!(!b.replaced());
        std::fs::write(dir.join("new"), b"new").unwrap();
        std::fs::rename(dir.join("new"), &path).unwrap();
        assert!(b.replaced(), "a rename over it was not noticed");
        let gone = Binary::at(dir.join("absent"));
        assert!(!gone.replaced());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The daily loop on virtual time: a relay that checked an hour before it started checks
    /// again 23 hours later (not at each restart), one that never checked a minute after it
    /// starts; each check, failed or not, is kept and the next comes a day after it; the loop
    /// ends when a check installs a build.
    #[tokio::test(start_paused = true)]
    async fn the_daily_loop_checks_a_day_after_the_last_kept_check_and_stops_after_installing() {
        use std::sync::Mutex;
        let began = tokio::time::Instant::now();
        let start = domain::clock::Timestamp::from_millis(1_800_000_000_000);
        let now = move || start.plus(began.elapsed());
        let hour = Duration::from_secs(3600);
        for (kept_before, first_after) in [(Some(hour), CHECK_EVERY - hour), (None, FIRST_CHECK_DELAY)] {
            let began_round = tokio::time::Instant::now();
            let round_start = now();
            let kept: Mutex<Option<LastCheck>> = Mutex::new(
                kept_before.map(|d| LastCheck { at_ms: round_start.minus(d).as_millis(), ..LastCheck::default() }),
            );
            let checks: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
            let outcomes = Mutex::new(vec![
                Err(UpdateError::Server("the server did not answer".into())),
                Ok(Outcome::UpToDate { current: VERSION.to_owned() }),
                Ok(Outcome::Installed { from: VERSION.to_owned(), to: "99.0.0".into() }),
            ]);
            every_day(
                || kept.lock().unwrap().clone(),
                now,
                || async {
                    checks.lock().unwrap().push(began_round.elapsed());
                    let outcome = outcomes.lock().unwrap().remove(0);
                    *kept.lock().unwrap() = Some(record(&outcome, now()));
                    outcome
                },
            )
            .await;
            let at = checks.into_inner().unwrap();
            assert_eq!(at, [first_after, first_after + CHECK_EVERY, first_after + CHECK_EVERY * 2], "{kept_before:?}");
            assert!(outcomes.into_inner().unwrap().is_empty(), "the loop stopped only after installing");
        }
    }

    #[test]
    fn the_daily_check_is_due_a_day_after_the_last() {
        let now = domain::clock::Timestamp::from_millis(1_800_000_000_000);
        assert_eq!(LastCheck::due_in(None, now), Duration::ZERO);
        let last = LastCheck { at_ms: now.minus(Duration::from_secs(3600)).as_millis(), ..LastCheck::default() };
        assert_eq!(LastCheck::due_in(Some(&last), now), CHECK_EVERY - Duration::from_secs(3600));
        let old = LastCheck { at_ms: now.minus(CHECK_EVERY * 2).as_millis(), ..LastCheck::default() };
        assert_eq!(LastCheck::due_in(Some(&old), now), Duration::ZERO);
    }
}
