//! What launchd says of the agent (`relay check` on macOS): loaded or not, running or not, how
//! it last exited, and whether the owner switched it off under Login Items.
//!
//! `launchctl print gui/<uid>/com.foundry-connect.relay` prints the service as a nested
//! `key = value` block; its top-level lines (one tab deep) carry `state`, `pid`, `runs` and
//! `last exit code` (real outputs: `tests/fixtures/macos/launchctl-print-*.txt`). A label that
//! is not loaded makes it fail. `launchctl print-disabled gui/<uid>` lists `"label" => true`
//! (disabled) or `=> false` before macOS 13, `=> disabled` / `=> enabled` since
//! (`launchctl-print-disabled.txt`). System Settings > General > Login Items & Extensions >
//! "Allow in the Background" is the switch owners turn off, where a bare binary shows as
//! `relay` or as "from an unidentified developer".

use crate::machine::check::Finding;
use crate::machine::service::LABEL;

/// The top-level facts of one `launchctl print` service block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Service {
    /// `running`, `not running`, `waiting`, …
    pub state: Option<String>,
    /// The process id, while running.
    pub pid: Option<u32>,
    /// `last exit code = …` (e.g. `127`, or `78: EX_CONFIG`).
    pub last_exit: Option<String>,
}

/// Reads the top-level lines of `launchctl print`'s block (one tab deep; nested blocks are
/// skipped).
pub fn parse_print(text: &str) -> Service {
    let mut s = Service::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix('\t') else { continue };
        if rest.starts_with('\t') {
            continue;
        }
        let Some((key, value)) = rest.split_once(" = ") else { continue };
        match key {
            "state" => s.state = Some(value.trim().to_owned()),
            "pid" => s.pid = value.trim().parse().ok(),
            "last exit code" => s.last_exit = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    s
}

/// Whether `print-disabled` lists `label` as disabled (`None`: not listed, i.e. enabled).
pub fn disabled(text: &str, label: &str) -> Option<bool> {
    let quoted = format!("\"{label}\"");
    text.lines().find_map(|line| {
        let (name, value) = line.trim().split_once(" => ")?;
        (name == quoted).then(|| matches!(value.trim(), "true" | "disabled"))
    })
}

/// What `relay check` says, from the two outputs: `print` (`Err`: launchctl's error text)
/// and `print-disabled`.
pub fn findings(print: Result<&str, &str>, print_disabled: Option<&str>, log: &str) -> Vec<Finding> {
    let fail = |what: String, fix: String| Finding { level: crate::machine::check::Level::Fail, what, fix: Some(fix) };
    let mut out = Vec::new();
    let off = print_disabled.and_then(|t| disabled(t, LABEL)) == Some(true);
    if off {
        out.push(fail(
            format!("the agent {LABEL} is switched off (launchctl print-disabled)"),
            "System Settings > General > Login Items & Extensions > Allow in the Background: switch on \"relay\" (it may read \"from an unidentified developer\"), then run relay install".into(),
        ));
    }
    match print {
        Err(e) => {
            if !off {
                out.push(fail(
                    format!("the agent {LABEL} is not loaded ({})", e.trim()),
                    "relay install (it loads it), or log in at the Mac's screen: agents run only in a GUI login".into(),
                ));
            }
        }
        Ok(text) => {
            let s = parse_print(text);
            match (s.state.as_deref(), s.pid) {
                (Some("running"), Some(pid)) => out.push(Finding {
                    level: crate::machine::check::Level::Ok,
                    what: format!("the agent {LABEL} is running (pid {pid})"),
                    fix: None,
                }),
                (state, _) => out.push(fail(
                    format!(
                        "the agent {LABEL} is loaded but {} (last exit code {})",
                        state.unwrap_or("in no known state"),
                        s.last_exit.as_deref().unwrap_or("unknown")
                    ),
                    format!("read {log}; launchd restarts it after a failure every 30 s"),
                )),
            }
        }
    }
    out
}

/// Asks launchd (`launchctl` on `PATH`) about the agent of user `uid`.
pub fn ask(uid: &str, log: &str) -> Vec<Finding> {
    let run = |args: &[&str]| std::process::Command::new("launchctl").args(args).output();
    let target = format!("gui/{uid}/{LABEL}");
    let print = run(&["print", &target]);
    let print = match &print {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))),
        Err(e) => Err(format!("launchctl: {e}")),
    };
    let disabled = run(&["print-disabled", &format!("gui/{uid}")])
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    findings(print.as_deref().map_err(String::as_str), disabled.as_deref(), log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::check::Level;

    const RUNNING: &str = include_str!("../../../tests/fixtures/macos/launchctl-print-running.txt");
    const EXITED: &str = include_str!("../../../tests/fixtures/macos/launchctl-print-exited.txt");
    const DISABLED: &str = include_str!("../../../tests/fixtures/macos/launchctl-print-disabled.txt");

    #[test]
    fn launchctl_print_is_read_at_its_top_level_only() {
        assert_eq!(
            parse_print(RUNNING),
            Service { state: Some("running".into()), pid: Some(35711), last_exit: parse_print(RUNNING).last_exit }
        );
        let exited = parse_print(EXITED);
        assert_eq!(
            (exited.state.as_deref(), exited.pid, exited.last_exit.as_deref()),
            (Some("not running"), None, Some("127"))
        );
    }

    #[test]
    fn print_disabled_is_read_in_both_dialects() {
        assert_eq!(disabled(DISABLED, "com.apple.Siri.agent"), Some(true));
        assert_eq!(disabled(DISABLED, "com.docker.helper"), Some(false));
        assert_eq!(disabled(DISABLED, LABEL), None);
        // macOS 13+ writes `disabled` / `enabled` in the same shape.
        let ventura = DISABLED.replace("\"com.apple.Siri.agent\" => true", &format!("\"{LABEL}\" => disabled"));
        assert_eq!(disabled(&ventura, LABEL), Some(true));
    }

    /// A switched-off agent, one not loaded, and one crash-looping each fail the check; a
    /// running one passes.
    #[test]
    fn a_switched_off_stopped_or_unloaded_agent_fails_the_check() {
        let off = DISABLED.replace("\"com.apple.Siri.agent\" => true", &format!("\"{LABEL}\" => true"));
        let f = findings(Err("Could not find service"), Some(&off), "relay.log");
        assert_eq!(f.len(), 1);
        assert!(f[0].level == Level::Fail && f[0].fix.as_deref().unwrap().contains("Allow in the Background"), "{f:?}");
        let f = findings(Err("Could not find service"), Some(DISABLED), "relay.log");
        assert!(f[0].level == Level::Fail && f[0].what.contains("not loaded"), "{f:?}");
        let f = findings(Ok(EXITED), Some(DISABLED), "~/Library/Logs/foundry-connect/relay.log");
        assert!(f[0].level == Level::Fail && f[0].what.contains("not running (last exit code 127)"), "{f:?}");
        let f = findings(Ok(RUNNING), Some(DISABLED), "relay.log");
        assert_eq!((f.len(), f[0].level), (1, Level::Ok), "{f:?}");
    }
}
