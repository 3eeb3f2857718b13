//! Reading a Mac's system proxy (`scutil --proxy`) for the agent and `relay check`; what it
//! means, and which proxy wins, is `crate::server::system_proxy`'s.

use std::time::Duration;

/// A Mac's system proxy settings (`scutil --proxy`, at most 5 s), `None` elsewhere or when
/// `scutil` cannot be run (`crate::server::system_proxy`).
pub fn system_proxy() -> Option<crate::server::system_proxy::System> {
    if crate::machine::service::Platform::current() != crate::machine::service::Platform::MacOs {
        return None;
    }
    let mut child = std::process::Command::new("scutil")
        .arg("--proxy")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while child.try_wait().ok()?.is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().ok()?;
    out.status.success().then(|| crate::server::system_proxy::parse_scutil(&String::from_utf8_lossy(&out.stdout)))
}

/// Reads the system proxy again and sets what the relay uses ([`crate::server::system_proxy::live`]);
/// whether that changed. Logs a change, and a PAC-only setup the relay cannot follow.
pub fn refresh_proxies() -> bool {
    let system = system_proxy();
    let changed = crate::server::system_proxy::set_live(system.as_ref());
    if changed {
        let live = crate::server::system_proxy::live();
        tracing::info!(proxy = live.describe(), "the proxy in use is now set");
        if let Some(pac) = system.as_ref().and_then(crate::server::system_proxy::System::pac_only)
            && !live.any()
        {
            tracing::warn!(
                "the system proxy is {pac}, which the relay does not run: it connects directly; set HTTPS_PROXY for the agent (relay install from a shell that has it)"
            );
        }
    }
    changed
}
