//! Whether each session's folder can be used now: one session whose folder is missing (an
//! unplugged disk, a share not mounted yet at login) or refused (macOS privacy controls) is
//! *unavailable*, and the others go on.
//!
//! The relay tries every session's `working_dir` before each pass, as the running agent (so a
//! refusal is the one launchd's process gets, which `relay check` from Terminal may not see).
//! An unavailable session is not offered in that pass's sync, a run of it handed over anyway
//! (queued before the folder went) is refused `failed` with the reason and the real errno, and
//! `relay status`, `relay check` and the log say what to do. It is tried again before the next
//! pass, so a disk plugged back in or a grant given takes effect within one poll, without a
//! restart. A session without a `working_dir` runs in the relay's own folder (the home
//! folder under the login service) and is always available.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Config;
use crate::machine::service::{LABEL, Platform};

/// The sessions that cannot run now: slug → why (the folder, the OS's error with its errno,
/// and the fix).
pub type Unavailable = BTreeMap<String, String>;

/// Tries each session's folder (`read_dir`: what a Graph does first, and what macOS's privacy
/// controls refuse with `EPERM`).
pub fn unavailable(config: &Config, platform: Platform, exe: &Path) -> Unavailable {
    config
        .sessions
        .iter()
        .filter_map(|s| {
            let dir = s.launch.working_dir.as_deref()?;
            let e = std::fs::read_dir(dir).err()?;
            Some((s.meta.slug.clone(), reason(dir, &e, platform, exe)))
        })
        .collect()
}

/// The words for a folder that cannot be listed: the OS's error as it is (with `os error N`)
/// and what to do about it.
pub fn reason(dir: &Path, e: &std::io::Error, platform: Platform, exe: &Path) -> String {
    let fix = match (e.kind(), platform) {
        (std::io::ErrorKind::PermissionDenied, Platform::MacOs) => privacy_fix(exe),
        (std::io::ErrorKind::NotFound, _) => {
            "plug in or mount the disk it is on (the relay tries again before every pass), or point the session's working_dir at a folder that exists".to_owned()
        }
        (std::io::ErrorKind::PermissionDenied, _) => "make it readable by you".to_owned(),
        _ => "the relay tries again before every pass".to_owned(),
    };
    format!("folder {}: {e}; {fix}", dir.display())
}

/// What to do when macOS's privacy controls refuse `exe`: a grant made before an update names
/// the old build (an ad-hoc signature is the exact binary), System Settings keeps showing it
/// on, and only removing and adding it again makes it match; a running agent keeps the grants
/// it started with, so it must restart.
pub fn privacy_fix(exe: &Path) -> String {
    let folder = exe.parent().map_or_else(|| "its folder".to_owned(), |p| p.display().to_string());
    format!(
        "macOS privacy controls refused relay: in System Settings > Privacy & Security > Full Disk Access, \
         select relay and remove it (−) even if it is switched on, then add it again (+; press ⌘⇧G and type {folder} \
         to reach a hidden folder) and switch it on; then restart the agent: \
         launchctl kickstart -k gui/$(id -u)/{LABEL}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_folder_says_its_errno_and_a_refused_one_on_a_mac_says_how_to_grant_again() {
        let gone = std::io::Error::from_raw_os_error(2);
        let r =
            reason(Path::new("/Volumes/Work/graphs"), &gone, Platform::MacOs, Path::new("/Users/ana/.local/bin/relay"));
        assert!(r.starts_with("folder /Volumes/Work/graphs: No such file or directory (os error 2); plug in"), "{r}");
        let eperm = std::io::Error::from_raw_os_error(1);
        let r = reason(
            Path::new("/Users/ana/Documents/g"),
            &eperm,
            Platform::MacOs,
            Path::new("/Users/ana/.local/bin/relay"),
        );
        assert!(r.contains("Operation not permitted (os error 1)"), "{r}");
        for needle in [
            "remove it (−)",
            "add it again",
            "⌘⇧G and type /Users/ana/.local/bin",
            "launchctl kickstart -k gui/$(id -u)/com.foundry-connect.relay",
        ] {
            assert!(r.contains(needle), "{needle} missing from {r}");
        }
        let r = reason(Path::new("/srv/g"), &eperm, Platform::Linux, Path::new("/usr/bin/relay"));
        assert!(!r.contains("Full Disk Access"), "{r}");
    }
}
