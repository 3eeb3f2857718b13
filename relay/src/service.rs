//! Start at login: a launchd agent on macOS (`~/Library/LaunchAgents`), a systemd user unit on
//! Linux (`~/.config/systemd/user`). Writing the file is all `install` does; it prints the
//! command that loads it.

use std::path::{Path, PathBuf};

/// launchd label / systemd unit name.
pub const LABEL: &str = "com.foundry-connect.relay";

/// Where the service file goes on this platform.
pub fn service_file(home: &Path) -> PathBuf {
    if cfg!(target_os = "macos") {
        home.join(format!("Library/LaunchAgents/{LABEL}.plist"))
    } else {
        home.join(".config/systemd/user/foundry-relay.service")
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The service file's text for `exe` run with `config`.
pub fn service_text(exe: &Path, config: &Path, log_dir: &Path) -> String {
    if cfg!(target_os = "macos") {
        format!(
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
        )
    } else {
        format!(
            "[Unit]\nDescription=foundry-connect desktop relay\nAfter=network-online.target\n\n[Service]\nExecStart=\"{}\" --config \"{}\" run\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=default.target\n",
            exe.display(),
            config.display()
        )
    }
}

/// The command that loads the written service file.
pub fn load_hint(file: &Path) -> String {
    if cfg!(target_os = "macos") {
        format!("launchctl bootstrap gui/$(id -u) {}", file.display())
    } else {
        "systemctl --user daemon-reload && systemctl --user enable --now foundry-relay.service".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_file_runs_the_relay_with_its_config() {
        let text = service_text(Path::new("/opt/relay"), Path::new("/home/u/relay.toml"), Path::new("/tmp"));
        assert!(text.contains("/opt/relay") && text.contains("/home/u/relay.toml") && text.contains("run"));
        assert!(service_file(Path::new("/home/u")).starts_with("/home/u"));
    }
}
