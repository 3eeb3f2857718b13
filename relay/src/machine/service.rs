//! Start at login: a launchd agent on macOS (`~/Library/LaunchAgents`), a systemd user unit on
//! Linux (`~/.config/systemd/user`). `install` writes the file and loads it (`launchctl
//! bootstrap`, `systemctl --user enable --now`); `uninstall` unloads it and removes it. When
//! loading fails (no user session bus, say), the command says so, with the command to run.

use std::path::{Path, PathBuf};

/// launchd label / systemd unit name.
pub const LABEL: &str = "com.foundry-connect.relay";
/// The systemd user unit's name.
pub const UNIT: &str = "foundry-relay.service";

/// Where login services live and how they are loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// launchd agents.
    MacOs,
    /// systemd user units.
    Linux,
}

/// Tests only: `macos` or `linux` makes `install`, `uninstall` and `check` act as on that
/// platform (the Linux tests drive the launchd path against a stubbed `launchctl`).
pub const TEST_PLATFORM_ENV: &str = "FOUNDRY_RELAY_TEST_PLATFORM";

impl Platform {
    /// The platform this binary was built for (or the one [`TEST_PLATFORM_ENV`] names).
    pub fn current() -> Self {
        match std::env::var(TEST_PLATFORM_ENV).as_deref() {
            Ok("macos") => Self::MacOs,
            Ok("linux") => Self::Linux,
            _ if cfg!(target_os = "macos") => Self::MacOs,
            _ => Self::Linux,
        }
    }
}

/// Where the service file goes.
pub fn service_file(platform: Platform, home: &Path) -> PathBuf {
    match platform {
        Platform::MacOs => home.join(format!("Library/LaunchAgents/{LABEL}.plist")),
        Platform::Linux => home.join(format!(".config/systemd/user/{UNIT}")),
    }
}

/// The relay's own log folder: `~/Library/Logs/foundry-connect` on macOS (where Console.app
/// looks), `~/.local/state/foundry-connect` on Linux (journald keeps the unit's output too).
pub fn log_dir(platform: Platform, home: &Path) -> PathBuf {
    match platform {
        Platform::MacOs => home.join("Library/Logs/foundry-connect"),
        Platform::Linux => home.join(".local/state/foundry-connect"),
    }
}

/// Set in the service's environment: the relay runs under launchd or systemd, which restart it.
/// On a bad config or a held lock it then waits and retries instead of exiting into a restart
/// loop.
pub const SUPERVISED_ENV: &str = "FOUNDRY_RELAY_SUPERVISED";

/// Set in the service's environment: the file the relay logs to, rotated at
/// [`LOG_MAX_BYTES`] (`logging::RotatingFile`; launchd never rotates its `StandardOutPath`).
/// What the service manager captures from stdout and stderr is then only what comes before
/// logging starts or after a crash (`relay.stdout.log` on macOS, the journal on Linux).
pub const LOG_FILE_ENV: &str = "FOUNDRY_RELAY_LOG_FILE";

/// Where a log file is rotated: 10 MiB, one older file kept beside it (`relay.log.1`).
pub const LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// Seconds launchd waits before starting the relay again after it exited with an error.
pub const THROTTLE_SECONDS: u32 = 30;

/// The variables `install` copies from the installing shell into the service, when set: the
/// proxies in both spellings (launchd and systemd start the relay with none of the shell's
/// variables, so a relay that paired through a proxy would never sync under them). `PATH` and
/// `LANG` are always set ([`ServiceSpec`]).
pub const CARRIED: [&str; 8] =
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"];

/// What the service runs: the binary, its config, and the environment a login shell would
/// have given it (launchd's own is `PATH=/usr/bin:/bin:/usr/sbin:/sbin` in `/`, where `node`,
/// `uv` and anything in `/opt/homebrew/bin` are not found and `python3` is Apple's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The relay binary.
    pub exe: PathBuf,
    /// Its config file.
    pub config: PathBuf,
    /// The log folder ([`log_dir`]).
    pub log_dir: PathBuf,
    /// The working directory of the relay (and of graphs without their own): the home folder.
    pub working_dir: PathBuf,
    /// `PATH` as it was when `install` ran.
    pub path: String,
    /// `LANG` as it was when `install` ran (`en_US.UTF-8` if unset).
    pub lang: String,
    /// The [`CARRIED`] variables that were set, in that order.
    pub carried: Vec<(String, String)>,
}

impl ServiceSpec {
    /// Every variable the service sets, in file order.
    pub fn environment(&self) -> Vec<(String, String)> {
        let mut env = vec![("PATH".to_owned(), self.path.clone()), ("LANG".to_owned(), self.lang.clone())];
        env.extend(self.carried.iter().cloned());
        env.push((SUPERVISED_ENV.to_owned(), "1".to_owned()));
        env.push((LOG_FILE_ENV.to_owned(), self.log_dir.join("relay.log").display().to_string()));
        env
    }
}

/// The [`CARRIED`] variables set (and not empty) in `lookup`.
pub fn carried_from(lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    CARRIED.iter().filter_map(|k| lookup(k).filter(|v| !v.is_empty()).map(|v| ((*k).to_owned(), v))).collect()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// The variables a service file written by [`service_text`] gives the relay: what `relay
/// check` runs its checks under (the agent's environment, not the terminal's).
pub fn service_environment(platform: Platform, text: &str) -> Vec<(String, String)> {
    match platform {
        Platform::MacOs => {
            let Some(start) = text.find("<key>EnvironmentVariables</key>") else { return Vec::new() };
            let rest = &text[start..];
            let dict = rest.find("</dict>").map_or(rest, |end| &rest[..end]);
            let mut out = Vec::new();
            for part in dict.split("<key>").skip(2) {
                let Some((key, after)) = part.split_once("</key>") else { continue };
                let value = after
                    .split_once("<string>")
                    .and_then(|(_, v)| v.split_once("</string>"))
                    .map(|(v, _)| xml_unescape(v))
                    .unwrap_or_default();
                out.push((xml_unescape(key), value));
            }
            out
        }
        Platform::Linux => text
            .lines()
            .filter_map(|l| l.strip_prefix("Environment="))
            .filter_map(|v| {
                let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
                let v = v.replace("\\\"", "\"").replace("\\\\", "\\");
                v.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect(),
    }
}

/// The install-time values a service file keeps ([`recorded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The program it starts.
    pub exe: PathBuf,
    /// `PATH`.
    pub path: String,
    /// `LANG`.
    pub lang: String,
    /// The [`CARRIED`] proxy variables.
    pub carried: Vec<(String, String)>,
}

/// What an installed service file records that `install` took from the installing shell: the
/// program it starts and the [`ServiceSpec::environment`] values. `install --refresh` (which
/// `relay update` runs through the installed build) rewrites the file with this build's text
/// from these, so a fix to the file reaches owners who never reinstall, and nothing the owner
/// set up changes. `None` when the file is not one [`service_text`] wrote.
pub fn recorded(platform: Platform, text: &str) -> Option<Recorded> {
    let exe = match platform {
        Platform::MacOs => {
            let after = text.split_once("<key>ProgramArguments</key>")?.1;
            let first = after.split_once("<string>")?.1.split_once("</string>")?.0;
            xml_unescape(first)
        }
        Platform::Linux => {
            let line = text.lines().find_map(|l| l.strip_prefix("ExecStart=\""))?;
            let mut exe = String::new();
            let mut chars = line.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => exe.push(chars.next()?),
                    '"' => break,
                    c => exe.push(c),
                }
            }
            exe
        }
    };
    let env = service_environment(platform, text);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let carried = carried_from(get);
    Some(Recorded { exe: PathBuf::from(exe), path: get("PATH")?, lang: get("LANG")?, carried })
}

/// The service file's text.
///
/// launchd: `RunAtLoad`; `KeepAlive` only after a failed exit (`SuccessfulExit` false) with
/// [`THROTTLE_SECONDS`] between starts, so a relay that stops cleanly stays stopped and one
/// that keeps failing does not spin every 10 s; `ProcessType Interactive` (as the GitHub runner
/// and Buildkite agent do: `Background` puts every graph on efficiency cores with throttled
/// I/O); the install-time `PATH` and `LANG`, the home folder as working directory.
pub fn service_text(platform: Platform, spec: &ServiceSpec) -> String {
    let stdout = spec.log_dir.join("relay.stdout.log");
    match platform {
        Platform::MacOs => {
            let e = |p: &Path| xml_escape(&p.display().to_string());
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>{LABEL}</string>
  <key>ProgramArguments</key>
  <array><string>{exe}</string><string>--config</string><string>{config}</string><string>run</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key>
  <dict><key>SuccessfulExit</key><false/></dict>
  <key>ThrottleInterval</key><integer>{THROTTLE_SECONDS}</integer>
  <key>ProcessType</key><string>Interactive</string>
  <key>SoftResourceLimits</key>
  <dict><key>NumberOfFiles</key><integer>{open_files}</integer></dict>
  <key>WorkingDirectory</key><string>{wd}</string>
  <key>EnvironmentVariables</key>
  <dict>
{env}  </dict>
  <key>StandardOutPath</key><string>{stdout}</string>
  <key>StandardErrorPath</key><string>{stdout}</string>
</dict>
</plist>
"#,
                exe = e(&spec.exe),
                config = e(&spec.config),
                wd = e(&spec.working_dir),
                env = spec
                    .environment()
                    .iter()
                    .map(|(k, v)| format!("    <key>{}</key><string>{}</string>\n", xml_escape(k), xml_escape(v)))
                    .collect::<String>(),
                stdout = e(&stdout),
                open_files = crate::machine::environment::OPEN_FILES,
            )
        }
        Platform::Linux => {
            // systemd quoting: a value with spaces is one word inside double quotes.
            let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
            format!(
                "[Unit]\nDescription=foundry-connect desktop relay\nAfter=network-online.target\n\n[Service]\n\
                 ExecStart={} --config {} run\nWorkingDirectory={}\n{}\
                 Restart=on-failure\nRestartSec={THROTTLE_SECONDS}\nKillMode=control-group\n\n[Install]\nWantedBy=default.target\n",
                q(&spec.exe.display().to_string()),
                q(&spec.config.display().to_string()),
                q(&spec.working_dir.display().to_string()),
                spec.environment()
                    .iter()
                    .map(|(k, v)| format!("Environment={}\n", q(&format!("{k}={v}"))))
                    .collect::<String>(),
            )
        }
    }
}

/// Writes the service file atomically with mode 0644, whatever the umask: launchd refuses an
/// agent whose file is group- or world-writable ("Path had bad ownership/permissions",
/// launchctl(1)), and a umask of 002 would make it so.
///
/// # Errors
/// The folder cannot be written.
pub fn write_service_file(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = file.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("service"),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        // The mode given to open() is masked by the umask; set it exactly.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        crate::machine::disk::sync_file(&f)?;
        std::fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether the user has a session the service can be loaded into now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Session {
    /// Loading now works.
    Present,
    /// No GUI login (macOS: over SSH, a headless Mac, before login) or no user service
    /// manager (Linux: no user bus): the file is written and the service starts at the next
    /// login. The reason, as the system said it.
    Absent(String),
}

/// Whether the service is loaded now (`launchctl print gui/<uid>/<label>` answers;
/// `systemctl --user is-active` says active): a second `relay install` with an unchanged file
/// leaves it alone, so a run in progress is not stopped.
pub fn loaded(platform: Platform, uid: &str) -> bool {
    let (program, args) = match platform {
        Platform::MacOs => ("launchctl", vec!["print".to_owned(), format!("gui/{uid}/{LABEL}")]),
        Platform::Linux => ("systemctl", vec!["--user".to_owned(), "is-active".to_owned(), UNIT.to_owned()]),
    };
    std::process::Command::new(program)
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Asks the platform whether there is a session to load into: `launchctl print gui/<uid>`
/// (the `gui/<uid>` domain exists only while the user is logged in at the GUI, launchctl(1));
/// `systemctl --user is-system-running` (answers, in any state, only with a user manager to
/// ask; "Failed to connect to bus" otherwise).
pub fn session(platform: Platform, uid: &str) -> Session {
    let (program, args): (&str, Vec<String>) = match platform {
        Platform::MacOs => ("launchctl", vec!["print".into(), format!("gui/{uid}")]),
        Platform::Linux => ("systemctl", vec!["--user".into(), "is-system-running".into()]),
    };
    match std::process::Command::new(program).args(&args).output() {
        Err(e) => Session::Absent(format!("{program}: {e}")),
        Ok(out) => {
            let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let absent = match platform {
                // Any failure: the domain is not there.
                Platform::MacOs => !out.status.success(),
                // is-system-running exits non-zero when "degraded" too: only no answer counts.
                Platform::Linux => {
                    said.contains("Failed to connect to bus") || said.trim().is_empty() && !out.status.success()
                }
            };
            if absent {
                Session::Absent(said.trim().lines().next().unwrap_or("no answer").to_owned())
            } else {
                Session::Present
            }
        }
    }
}

/// Whether systemd keeps this user's services running after logout (`loginctl show-user
/// <uid> --property=Linger --value`): `Some(false)` when it says `no`, `None` when it cannot
/// say.
pub fn lingering(uid: &str) -> Option<bool> {
    let out = std::process::Command::new("loginctl")
        .args(["show-user", uid, "--property=Linger", "--value"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// What to tell the owner when loading failed with `error` (the failing command's output).
pub fn load_failure_hint(platform: Platform, error: &str) -> Option<&'static str> {
    match platform {
        // launchctl's error 5 (EIO) on bootstrap: the job is disabled — most often because the
        // owner switched "foundry-connect relay" off under Login Items after macOS announced
        // "Background Items Added" (macOS 13+).
        Platform::MacOs if error.contains("Bootstrap failed: 5") || error.contains(": 5: Input/output error") => Some(
            "macOS refused to start the agent (error 5). If you switched the relay off under System Settings > General > \
             Login Items & Extensions (\"Allow in the Background\"), switch it on and run `relay install` again; \
             otherwise run `launchctl enable gui/$(id -u)/com.foundry-connect.relay` and install again.",
        ),
        Platform::Linux if error.contains("Failed to connect to bus") => Some(
            "no systemd user manager is reachable from this shell (su/sudo, a container, cron): run `relay install` from \
             your own login session",
        ),
        _ => None,
    }
}

/// One command of a load or unload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Its failure is expected and ignored (booting out a job that is not loaded).
    pub may_fail: bool,
    /// Attempts before its failure counts (launchd may still be tearing the old job down).
    pub attempts: u32,
}

fn step(a: &[&str], may_fail: bool, attempts: u32) -> Step {
    Step { command: a.iter().map(|s| (*s).to_owned()).collect(), may_fail, attempts }
}

/// The commands that (re)load the written file, in order; `uid` is the user's id.
///
/// launchd answers `bootstrap` of a job that is already loaded with error 5 (a second `relay
/// install`), so the old job is booted out first (ignoring "not found"), enabled (a job once
/// disabled stays disabled across bootstraps), then bootstrapped, retried briefly while the old
/// one finishes going.
pub fn load_commands(platform: Platform, file: &Path, uid: &str) -> Vec<Step> {
    match platform {
        Platform::MacOs => {
            let (domain, target) = (format!("gui/{uid}"), format!("gui/{uid}/{LABEL}"));
            vec![
                step(&["launchctl", "bootout", &target], true, 1),
                step(&["launchctl", "enable", &target], false, 1),
                step(&["launchctl", "bootstrap", &domain, &file.display().to_string()], false, 5),
            ]
        }
        Platform::Linux => vec![
            step(&["systemctl", "--user", "daemon-reload"], false, 1),
            step(&["systemctl", "--user", "enable", UNIT], false, 1),
            step(&["systemctl", "--user", "restart", UNIT], false, 1),
        ],
    }
}

/// The commands that unload it, whether or not its file is still there (a job loaded from a
/// file deleted by hand is still loaded, by label).
pub fn unload_commands(platform: Platform, uid: &str) -> Vec<Step> {
    match platform {
        Platform::MacOs => vec![step(&["launchctl", "bootout", &format!("gui/{uid}/{LABEL}")], true, 1)],
        Platform::Linux => vec![step(&["systemctl", "--user", "disable", "--now", UNIT], true, 1)],
    }
}

/// Runs `steps` in order, stopping at the first that fails (and may not), retrying each up to
/// its attempts with `pause` between.
///
/// # Errors
/// The failing command and what it said (or why it could not start).
pub fn run_commands(steps: &[Step], pause: std::time::Duration) -> Result<(), String> {
    for s in steps {
        let Some((program, args)) = s.command.split_first() else { continue };
        let mut last = String::new();
        let mut ok = false;
        for attempt in 1..=s.attempts.max(1) {
            match std::process::Command::new(program).args(args).output() {
                Ok(out) if out.status.success() => {
                    ok = true;
                    break;
                }
                Ok(out) => {
                    last = format!(
                        "{} ({}): {}",
                        s.command.join(" "),
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                Err(e) => last = format!("{}: {e}", s.command.join(" ")),
            }
            if attempt < s.attempts {
                std::thread::sleep(pause);
            }
        }
        if !ok && !s.may_fail {
            return Err(last);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            exe: PathBuf::from("/opt/re<lay>"),
            config: PathBuf::from("/home/u/a & b.toml"),
            log_dir: PathBuf::from("/home/u/Library/Logs/foundry-connect"),
            working_dir: PathBuf::from("/home/u"),
            path: "/opt/homebrew/bin:/usr/bin:/bin".into(),
            lang: "de_DE.UTF-8".into(),
            carried: vec![
                ("HTTPS_PROXY".into(), "http://u:p&q@proxy.corp:3128".into()),
                ("no_proxy".into(), "localhost,.corp \"x\"".into()),
            ],
        }
    }

    /// What the service file gives the relay reads back as exactly the spec's variables, on
    /// both platforms (`relay check` runs under them), proxies included.
    #[test]
    fn the_service_environment_round_trips() {
        for platform in [Platform::MacOs, Platform::Linux] {
            let env = service_environment(platform, &service_text(platform, &spec()));
            assert_eq!(env, spec().environment(), "{platform:?}");
            assert!(env.iter().any(|(k, v)| k == "HTTPS_PROXY" && v == "http://u:p&q@proxy.corp:3128"));
        }
        let carried = carried_from(|k| (k == "http_proxy" || k == "NO_PROXY").then(|| format!("v-{k}")));
        assert_eq!(
            carried,
            [("http_proxy".to_owned(), "v-http_proxy".to_owned()), ("NO_PROXY".into(), "v-NO_PROXY".into())]
        );
        assert!(carried_from(|_| Some(String::new())).is_empty(), "an empty variable is not carried");
    }

    /// What `install --refresh` keeps reads back from either platform's file exactly as it was
    /// written (escapes included); a file no build wrote gives nothing to refresh from.
    #[test]
    fn a_service_file_gives_back_what_install_recorded() {
        let s = spec();
        for platform in [Platform::MacOs, Platform::Linux] {
            let got = recorded(platform, &service_text(platform, &s));
            let want =
                Recorded { exe: s.exe.clone(), path: s.path.clone(), lang: s.lang.clone(), carried: s.carried.clone() };
            assert_eq!(got, Some(want), "{platform:?}");
        }
        assert_eq!(recorded(Platform::MacOs, "<plist><dict></dict></plist>"), None);
        assert_eq!(recorded(Platform::Linux, "[Service]\nExecStart=/bin/true\n"), None);
    }

    /// Under a umask that would leave it group-writable (002) the file is still 0644: launchd
    /// refuses an agent others can write.
    #[test]
    fn the_service_file_is_0644_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("relay-svc-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("x.plist");
        // The umask is process-wide: set and restore it around the write only.
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o002));
        std::fs::write(dir.join("probe"), b"").unwrap();
        let written = write_service_file(&file, "text");
        nix::sys::stat::umask(old);
        written.unwrap();
        assert_eq!(std::fs::metadata(dir.join("probe")).unwrap().permissions().mode() & 0o777, 0o664, "the umask took");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o644);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_service_file(&file, "again").unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o644, "a rewrite fixes the mode");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn known_load_failures_say_what_to_do() {
        let e = "launchctl bootstrap gui/501 /x.plist (exit status: 5): Bootstrap failed: 5: Input/output error";
        assert!(load_failure_hint(Platform::MacOs, e).unwrap().contains("Login Items"));
        assert!(
            load_failure_hint(Platform::Linux, "Failed to connect to bus: No medium found")
                .unwrap()
                .contains("login session")
        );
        assert_eq!(load_failure_hint(Platform::MacOs, "something else"), None);
    }

    #[test]
    fn service_files_run_the_relay_with_its_config() {
        for platform in [Platform::MacOs, Platform::Linux] {
            let text = service_text(platform, &spec());
            assert!(text.contains("run") && text.contains("/opt/homebrew/bin"), "{text}");
            assert!(service_file(platform, Path::new("/home/u")).starts_with("/home/u"));
            assert!(log_dir(platform, Path::new("/home/u")).ends_with("foundry-connect"));
        }
        let unit = service_text(Platform::Linux, &spec());
        assert!(unit.contains("Restart=on-failure") && unit.contains("KillMode=control-group"), "{unit}");
        assert!(unit.contains("ExecStart=\"/opt/re<lay>\" --config \"/home/u/a & b.toml\" run"), "{unit}");
    }

    /// The launchd file is a valid property list (checked by Python's plistlib, an
    /// independent parser), with what a Mac owner needs: restarted only after a failure and not
    /// faster than every 30 s, interactive priority, the install-time PATH, the home folder.
    #[test]
    fn the_launchd_agent_is_a_valid_property_list() {
        let text = service_text(Platform::MacOs, &spec());
        let file = std::env::temp_dir().join(format!("relay-{}.plist", uuid::Uuid::new_v4()));
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new("python3")
            .args(["-c", "import plistlib,sys,json; print(json.dumps(plistlib.load(open(sys.argv[1],'rb'))))"])
            .arg(&file)
            .output()
            .expect("python3 is needed to check the property list");
        assert!(out.status.success(), "not a property list: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["Label"], LABEL);
        assert_eq!(v["ProgramArguments"], serde_json::json!(["/opt/re<lay>", "--config", "/home/u/a & b.toml", "run"]));
        assert_eq!(v["RunAtLoad"], true);
        assert_eq!(v["KeepAlive"], serde_json::json!({"SuccessfulExit": false}));
        assert_eq!(v["ThrottleInterval"], THROTTLE_SECONDS);
        assert_eq!(v["ProcessType"], "Interactive");
        assert_eq!(v["WorkingDirectory"], "/home/u");
        assert_eq!(v["EnvironmentVariables"]["PATH"], "/opt/homebrew/bin:/usr/bin:/bin");
        assert_eq!(v["EnvironmentVariables"]["LANG"], "de_DE.UTF-8");
        assert_eq!(v["EnvironmentVariables"][SUPERVISED_ENV], "1");
        assert_eq!(v["StandardOutPath"], "/home/u/Library/Logs/foundry-connect/relay.stdout.log");
        assert_eq!(v["EnvironmentVariables"][LOG_FILE_ENV], "/home/u/Library/Logs/foundry-connect/relay.log");
        assert_eq!(v["EnvironmentVariables"]["HTTPS_PROXY"], "http://u:p&q@proxy.corp:3128");
        assert_eq!(v["EnvironmentVariables"]["no_proxy"], "localhost,.corp \"x\"");
        let _ = std::fs::remove_file(file);
    }

    /// A second install boots the loaded job out first (failure ignored), enables it, then
    /// bootstraps with retries; uninstall boots out by label.
    #[test]
    fn reinstalling_boots_the_old_job_out_first() {
        let steps = load_commands(Platform::MacOs, Path::new("/h/x.plist"), "501");
        let cmds: Vec<String> = steps.iter().map(|s| s.command.join(" ")).collect();
        assert_eq!(
            cmds,
            [
                format!("launchctl bootout gui/501/{LABEL}"),
                format!("launchctl enable gui/501/{LABEL}"),
                "launchctl bootstrap gui/501 /h/x.plist".to_owned(),
            ]
        );
        assert!(steps[0].may_fail && !steps[2].may_fail && steps[2].attempts > 1);
        let out = unload_commands(Platform::MacOs, "501");
        assert_eq!(out[0].command.join(" "), format!("launchctl bootout gui/501/{LABEL}"));
        // A failure that may happen is ignored; one that may not stops the load.
        let ok = run_commands(&[step(&["false"], true, 1), step(&["true"], false, 1)], std::time::Duration::ZERO);
        assert_eq!(ok, Ok(()));
        let err = run_commands(&[step(&["false"], false, 2)], std::time::Duration::ZERO).unwrap_err();
        assert!(err.starts_with("false"), "{err}");
    }
}
