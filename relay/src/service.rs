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

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The service file's text for `exe` run with `config`.
pub fn service_text(platform: Platform, exe: &Path, config: &Path, log_dir: &Path) -> String {
    match platform {
        Platform::MacOs => format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>{LABEL}</string>
  <key>ProgramArguments</key>
  <array><string>{}</string><string>--config</string><string>{}</string><string>run</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>ProcessType</key><string>Background</string>
  <key>StandardOutPath</key><string>{}</string>
  <key>StandardErrorPath</key><string>{}</string>
</dict>
</plist>
"#,
            xml_escape(&exe.display().to_string()),
            xml_escape(&config.display().to_string()),
            xml_escape(&log_dir.join("relay.log").display().to_string()),
            xml_escape(&log_dir.join("relay.log").display().to_string()),
        ),
        Platform::Linux => format!(
            "[Unit]\nDescription=foundry-connect desktop relay\nAfter=network-online.target\n\n[Service]\nExecStart=\"{}\" --config \"{}\" run\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=default.target\n",
            exe.display(),
            config.display()
        ),
    }
}

/// The commands that load the written file (run in order; `uid` is the user's id).
pub fn load_commands(platform: Platform, file: &Path, uid: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    match platform {
        Platform::MacOs => vec![v(&["launchctl", "bootstrap", &format!("gui/{uid}"), &file.display().to_string()])],
        Platform::Linux => {
            vec![v(&["systemctl", "--user", "daemon-reload"]), v(&["systemctl", "--user", "enable", "--now", UNIT])]
        }
    }
}

/// The commands that unload it (before the file is removed).
pub fn unload_commands(platform: Platform, uid: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    match platform {
        Platform::MacOs => vec![v(&["launchctl", "bootout", &format!("gui/{uid}/{LABEL}")])],
        Platform::Linux => vec![v(&["systemctl", "--user", "disable", "--now", UNIT])],
    }
}

/// Runs `commands` in order, stopping at the first that fails.
///
/// # Errors
/// The failing command and what it said (or why it could not start).
pub fn run_commands(commands: &[Vec<String>]) -> Result<(), String> {
    for c in commands {
        let Some((program, args)) = c.split_first() else { continue };
        let out =
            std::process::Command::new(program).args(args).output().map_err(|e| format!("{}: {e}", c.join(" ")))?;
        if !out.status.success() {
            return Err(format!("{} ({}): {}", c.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_files_run_the_relay_with_its_config() {
        for platform in [Platform::MacOs, Platform::Linux] {
            let text = service_text(
                platform,
                Path::new("/opt/relay"),
                Path::new("/home/u/relay & co.toml"),
                Path::new("/tmp"),
            );
            assert!(text.contains("/opt/relay") && text.contains("run"), "{text}");
            assert!(service_file(platform, Path::new("/home/u")).starts_with("/home/u"));
        }
    }

    /// The launchd file is a valid property list (checked by Python's plistlib, an
    /// independent parser), with the escaped path read back intact.
    #[test]
    fn the_launchd_agent_is_a_valid_property_list() {
        let text = service_text(
            Platform::MacOs,
            Path::new("/opt/re<lay>"),
            Path::new("/home/u/a & b.toml"),
            Path::new("/tmp"),
        );
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
        assert_eq!((v["RunAtLoad"].as_bool(), v["KeepAlive"].as_bool()), (Some(true), Some(true)));
        let _ = std::fs::remove_file(file);
    }
}
