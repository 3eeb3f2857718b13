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

impl Platform {
    /// The platform this binary was built for.
    pub fn current() -> Self {
        if cfg!(target_os = "macos") { Self::MacOs } else { Self::Linux }
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
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The service file's text.
///
/// launchd: `RunAtLoad`; `KeepAlive` only after a failed exit (`SuccessfulExit` false) with
/// [`THROTTLE_SECONDS`] between starts, so a relay that stops cleanly stays stopped and one
/// that keeps failing does not spin every 10 s; `ProcessType Interactive` (as the GitHub runner
/// and Buildkite agent do: `Background` puts every graph on efficiency cores with throttled
/// I/O); the install-time `PATH` and `LANG`, the home folder as working directory.
pub fn service_text(platform: Platform, spec: &ServiceSpec) -> String {
    let log = spec.log_dir.join("relay.log");
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
  <key>WorkingDirectory</key><string>{wd}</string>
  <key>EnvironmentVariables</key>
  <dict>
    <key>PATH</key><string>{path}</string>
    <key>LANG</key><string>{lang}</string>
    <key>{SUPERVISED_ENV}</key><string>1</string>
    <key>{LOG_FILE_ENV}</key><string>{log}</string>
  </dict>
  <key>StandardOutPath</key><string>{stdout}</string>
  <key>StandardErrorPath</key><string>{stdout}</string>
</dict>
</plist>
"#,
                exe = e(&spec.exe),
                config = e(&spec.config),
                wd = e(&spec.working_dir),
                path = xml_escape(&spec.path),
                lang = xml_escape(&spec.lang),
                log = e(&log),
                stdout = e(&stdout),
            )
        }
        Platform::Linux => {
            // systemd quoting: a value with spaces is one word inside double quotes.
            let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
            format!(
                "[Unit]\nDescription=foundry-connect desktop relay\nAfter=network-online.target\n\n[Service]\n\
                 ExecStart={} --config {} run\nWorkingDirectory={}\nEnvironment={}\nEnvironment={}\nEnvironment={SUPERVISED_ENV}=1\nEnvironment={}\n\
                 Restart=on-failure\nRestartSec={THROTTLE_SECONDS}\nKillMode=control-group\n\n[Install]\nWantedBy=default.target\n",
                q(&spec.exe.display().to_string()),
                q(&spec.config.display().to_string()),
                q(&spec.working_dir.display().to_string()),
                q(&format!("PATH={}", spec.path)),
                q(&format!("LANG={}", spec.lang)),
                q(&format!("{LOG_FILE_ENV}={}", log.display())),
            )
        }
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
        }
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
