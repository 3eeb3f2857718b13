//! A Graph for the slot tests, as a shell script the relay runs: it leaves its process id and a
//! mark per start in a folder, writes one log line and one progress line on stderr, and then
//! waits until it is cancelled or killed. The relay tests on the local server
//! (`relay_e2e`) and on the cloud shape (`cloud_slots`) run the same one, and look at the
//! processes it leaves with [`process_alive`] and [`kill_group`].

use std::path::Path;
use std::time::Duration;

use crate::wait_until;

/// The progress line the Graph writes (and the fraction in it).
pub const PROGRESS: (&str, f64) = ("waiting to be stopped", 0.5);

/// The script: run `n` (the digits of its stdin) writes its pid to `<dir>/<n>`, appends a line
/// to `<dir>/ran-<n>` each time it starts, logs `log of <n>` and reports [`PROGRESS`] on
/// stderr, then waits.
pub fn waiting(dir: &Path) -> String {
    format!(
        r#"n=$(cat | tr -dc 0-9); echo $$ > {p}/$n; echo x >> {p}/ran-$n; echo "log of $n" >&2; echo '{{"progress": "{m}", "fraction": {f}}}' >&2; while :; do sleep 0.05; done"#,
        p = dir.display(),
        m = PROGRESS.0,
        f = PROGRESS.1,
    )
}

/// The process id run `n` of [`waiting`] recorded in `dir` (waited for, 20 s at most).
///
/// # Panics
/// When none appears in time.
pub async fn recorded_pid(path: &Path) -> i32 {
    wait_until(&format!("a pid in {}", path.display()), Duration::from_secs(20), || async {
        std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok())
    })
    .await
}

/// How many times run `n` of [`waiting`] started.
pub fn starts(dir: &Path, n: usize) -> usize {
    std::fs::read_to_string(dir.join(format!("ran-{n}"))).map_or(0, |s| s.lines().count())
}

/// Whether process `pid` is alive (a zombie waiting to be reaped counts as dead).
pub fn process_alive(pid: i32) -> bool {
    let probe = std::process::Command::new("ps").args(["-o", "stat=", "-p", &pid.to_string()]).output();
    match probe {
        Ok(o) => {
            let stat = String::from_utf8_lossy(&o.stdout);
            let stat = stat.trim();
            !stat.is_empty() && !stat.starts_with('Z')
        }
        Err(_) => false,
    }
}

/// Sends SIGKILL to the process group `pgid` (a graph command the relay started runs in its
/// own group, so this ends it and everything it spawned).
pub fn kill_group(pgid: i32) {
    let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
}
