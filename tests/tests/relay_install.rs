//! The one-line install, as an owner runs it: `curl -fsSL <server>/relay/install.sh | sh` in a
//! fresh `$HOME` against the local server. The installer downloads the Linux build, checks its
//! SHA-256, installs it into `~/.local/bin`, pairs it (approved here through the owner API) and
//! installs the systemd user unit (`systemctl` is a stub that records its calls). The unit's own
//! `ExecStart` line then runs the installed relay, which completes a run queued through MCP.
//! `relay update` then refuses a tampered build, one that fails `--version` and one that names
//! another version, each leaving the binary as it was, and installs a good one published during
//! a run: the running relay restarts into it (the same process) only after that run completed.
//! A tampered archive is refused by the installer with nothing installed.
//!
//! The builds come from `$FOUNDRY_TEST_RELAY_DIST` when set (the `dist/` of
//! `infra/relay-dist.sh`: its static musl binary); otherwise the workspace's debug `relay` is
//! packed here in the same layout (`relay-<version>-<target>.tar.gz` + `SHA256SUMS`), so the test
//! command needs no release build.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use domain::limits::Policy;
use foundry_tests::{built_binary, wait_until};
use local::LocalConfig;
use serde_json::json;

fn target() -> String {
    let arch = std::env::consts::ARCH;
    format!("{arch}-unknown-linux-musl")
}

/// A `dist/` folder with `relay` packed as the installer expects.
fn pack(dir: &Path, relay: &Path) -> PathBuf {
    pack_version(dir, relay, "0.1.0")
}

/// [`pack`] as build `version` (the archive's name says it; `SHA256SUMS` lists only it).
fn pack_version(dir: &Path, relay: &Path, version: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("x")).unwrap();
    std::fs::copy(relay, dir.join("x/relay")).unwrap();
    let name = format!("relay-{version}-{}.tar.gz", target());
    let ok = Command::new("tar").args(["-C"]).arg(dir.join("x")).arg("-czf").arg(dir.join(&name)).arg("relay").status();
    assert!(ok.unwrap().success());
    std::fs::write(dir.join("SHA256SUMS"), format!("{}  {name}\n", foundry_tests::sha256_of(&dir.join(&name))))
        .unwrap();
    dir.join(name)
}

/// A fresh `$HOME` with a `systemctl` stub on `PATH` that records its arguments.
fn home(root: &Path) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(home.join("stub")).unwrap();
    let stub = home.join("stub/systemctl");
    std::fs::write(&stub, format!("#!/bin/sh\necho \"$@\" >> {}\n", home.join("systemctl.log").display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    home
}

/// The installer's command, in `home`, as `curl … | sh`, in a session of its own (`setsid`):
/// no terminal, as in CI, so `relay pair` is given `--yes` whether or not the test runs in one.
fn installer(home: &Path, url: &str) -> Command {
    let mut c = Command::new("setsid");
    c.args(["-w", "sh", "-c"]).arg(format!("curl -fsSL {url}/relay/install.sh | sh -s -- --name 'Test desktop'"));
    c.env_clear()
        .env("HOME", home)
        .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", home.join("stub").display()))
        .env("LANG", "C.UTF-8")
        .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
        .current_dir(home);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_pipe_sh_installs_pairs_and_the_installed_relay_completes_a_run() {
    let root = std::env::temp_dir().join(format!("relay-install-{}", uuid::Uuid::new_v4()));
    // The server's builds live in a folder of this test's own: the update below publishes
    // newer ones into it.
    let dist = root.join("dist");
    match std::env::var_os("FOUNDRY_TEST_RELAY_DIST") {
        Some(d) => {
            std::fs::create_dir_all(&dist).unwrap();
            for f in std::fs::read_dir(d).unwrap() {
                let f = f.unwrap().path();
                if f.is_file() {
                    std::fs::copy(&f, dist.join(f.file_name().unwrap())).unwrap();
                }
            }
        }
        None => {
            pack(&dist, &built_binary("relay", &["relay/src", "shared/domain/src"]));
        }
    }
    let policy = Policy { poll_interval: Duration::from_secs(1), ..Policy::default() };
    let running =
        local::start(LocalConfig { policy, relay_dist: dist.clone(), ..LocalConfig::at(root.join("server")) })
            .await
            .unwrap();
    let url = running.base_url.clone();
    let home = home(&root);

    // The installer prints the panel URL with the code, then waits for the approval.
    let mut child = installer(&home, &url).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut rx = lines_of(&mut child);
    let mut printed = Vec::new();
    let code = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("installer output").unwrap();
        printed.push(line.clone());
        if let Some((_, code)) = line.split_once("?pair=") {
            break code.trim().to_owned();
        }
    };
    assert!(printed.iter().any(|l| l.contains("downloading relay-")), "{printed:?}");
    let http = foundry_tests::http();
    let owner = |method: reqwest::Method, path: String| {
        http.request(method, format!("{url}/owner{path}")).bearer_auth(&running.owner_token)
    };
    let pending: serde_json::Value =
        owner(reqwest::Method::GET, format!("/pairings/{code}")).send().await.unwrap().json().await.unwrap();
    assert_eq!(pending["status"], "pending", "{pending}");
    assert_eq!((pending["name"].as_str(), pending["os"].as_str()), (Some("Test desktop"), Some("linux")), "{pending}");
    let approved =
        owner(reqwest::Method::POST, format!("/pairings/{code}/approve")).json(&json!({})).send().await.unwrap();
    assert_eq!(approved.status(), 200);
    let status = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    while let Ok(l) = rx.try_recv() {
        printed.push(l);
    }
    assert!(status.status.success(), "installer failed: {printed:?}\n{}", String::from_utf8_lossy(&status.stderr));
    assert!(!printed.iter().any(|l| l.contains("then relay install")), "{printed:?}");

    // What it left: the binary, the token (0600), the config, the unit, the service loaded.
    let bin = home.join(".local/bin/relay");
    assert!(bin.exists());
    let token_file = home.join(".local/state/foundry-relay/device-token");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert!(token.starts_with("fcd_"));
    let config = home.join(".config/foundry-relay/relay.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("server_url = \"{url}\"")) && !text.contains(&token), "{text}");
    let calls = std::fs::read_to_string(home.join("systemctl.log")).unwrap();
    assert!(calls.contains("--user"), "{calls}");
    let devices: serde_json::Value =
        owner(reqwest::Method::GET, "/devices".into()).send().await.unwrap().json().await.unwrap();
    assert!(devices["devices"].as_array().unwrap().iter().any(|d| d["name"] == "Test desktop"), "{devices}");

    // The owner shares a graph; the unit's ExecStart runs the installed relay.
    let project = running.demo.project_id.to_string();
    let added = Command::new(&bin)
        .args(["--config"])
        .arg(&config)
        .args(["session", "add", "--name", "Echo", "--project", &project, "--", "sh", "-c", "echo installed-ok"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    // A slow one, for the update during a run below.
    let added = Command::new(&bin)
        .args(["--config"])
        .arg(&config)
        .args(["session", "add", "--name", "Slow", "--project", &project, "--", "sh", "-c", "sleep 3; echo slow-ok"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    // Updates happen when this test says (`relay update`), not at the daily check's whim.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("auto_update = false\n{text}")).unwrap();
    let unit = std::fs::read_to_string(home.join(".config/systemd/user/foundry-relay.service")).unwrap();
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).unwrap().to_owned();
    let mut service = Command::new("sh");
    service.arg("-c").arg(format!("exec {exec}")).env_clear().env("HOME", &home).env("PATH", "/usr/bin:/bin");
    for line in unit.lines().filter_map(|l| l.strip_prefix("Environment=")) {
        if let Some((k, v)) = line.trim_matches('"').split_once('=') {
            service.env(k, v);
        }
    }
    let mut relay = service.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();

    let text = std::fs::read_to_string(&config).unwrap();
    let gs = text.lines().find_map(|l| l.strip_prefix("graph_session_id = ")).unwrap().trim_matches('"').to_owned();
    let mcp = running.mcp_url.clone();
    let call = |tool: &'static str, args: serde_json::Value| {
        let (http, mcp, token) = (http.clone(), mcp.clone(), running.token.clone());
        async move {
            let params = json!({"name": tool, "arguments": args});
            foundry_tests::mcp::rpc_2026(&http, &mcp, &token, "tools/call", Some(tool), params, json!({})).await
        }
    };
    let queued = wait_until("the installed relay to share the session", Duration::from_secs(30), || {
        let call = call("run_graph_session", json!({"graph_session_id": gs, "idempotency_key": "installed-run-1"}));
        async move {
            let v = call.await;
            v["result"]["structuredContent"]["command_id"].as_str().map(str::to_owned)
        }
    })
    .await;
    let done = wait_until("the run to complete", Duration::from_secs(30), || {
        let call = call("get_graph_run", json!({"command_id": queued}));
        async move {
            let v = call.await;
            (v["result"]["structuredContent"]["status"] == "completed").then_some(v)
        }
    })
    .await;
    assert!(done.to_string().contains("installed-ok"), "{done}");

    // ---- self-update: `relay update` against the builds the server publishes ----
    let update = || {
        let out = Command::new(&bin).arg("--config").arg(&config).arg("update").env("HOME", &home).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let installed = foundry_tests::sha256_of(&bin);
    let (ok, said) = update();
    assert!(ok && said.contains("is the newest build the server publishes"), "{said}");
    // The "new" builds: scripts that answer --version as 99.0.0; the good one records that it
    // ran (its process id: an exec keeps it) and then runs the real relay.
    let real = built_binary("relay", &["relay/src"]);
    let marker = root.join("new-build-ran");
    let script = |body: &str| {
        let f = root.join(format!("script-{}", uuid::Uuid::new_v4()));
        std::fs::write(&f, format!("#!/bin/sh\n{body}\n")).unwrap();
        f
    };
    let good = script(&format!(
        "if [ \"$1\" = --version ]; then echo 'relay 99.0.0'; exit 0; fi\necho \"$$ $*\" >> {}\nexec {} \"$@\"",
        marker.display(),
        real.display()
    ));
    let publish = |relay: &Path| {
        let _ = std::fs::remove_dir_all(dist.join("x"));
        for f in std::fs::read_dir(&dist).unwrap() {
            let _ = std::fs::remove_file(f.unwrap().path());
        }
        pack_version(&dist, relay, "99.0.0")
    };
    // A tampered archive: refused, the installed binary untouched.
    let archive = publish(&good);
    let mut bytes = std::fs::read(&archive).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xFF;
    std::fs::write(&archive, bytes).unwrap();
    let (ok, said) = update();
    assert!(!ok && said.contains("checksum mismatch") && said.contains("the relay was not changed"), "{said}");
    assert_eq!(foundry_tests::sha256_of(&bin), installed, "a tampered build was installed");
    // A build that fails --version: refused, untouched.
    publish(&script("echo 'cannot load library' >&2; exit 3"));
    let (ok, said) = update();
    assert!(!ok && said.contains("fails --version") && said.contains("cannot load library"), "{said}");
    assert_eq!(foundry_tests::sha256_of(&bin), installed, "a build that does not start was installed");
    // One that names another version: refused, untouched.
    publish(&script("echo 'relay 98.0.0'"));
    let (ok, said) = update();
    assert!(!ok && said.contains("not \"relay 99.0.0\""), "{said}");
    assert_eq!(foundry_tests::sha256_of(&bin), installed);

    // The good build, published while a run is in progress: installed at once, but the running
    // relay restarts into it only once the run has finished (a restart mid-run would fail it).
    let text = std::fs::read_to_string(&config).unwrap();
    let slow = text
        .lines()
        .filter_map(|l| l.strip_prefix("graph_session_id = "))
        .map(|v| v.trim_matches('"').to_owned())
        .find(|v| *v != gs)
        .unwrap();
    let run = wait_until("the relay to share the slow session", Duration::from_secs(30), || {
        let call = call("run_graph_session", json!({"graph_session_id": slow, "idempotency_key": "update-slow-1"}));
        async move { call.await["result"]["structuredContent"]["command_id"].as_str().map(str::to_owned) }
    })
    .await;
    wait_until("the slow run to start", Duration::from_secs(30), || {
        let call = call("get_graph_run", json!({"command_id": run}));
        async move { (call.await["result"]["structuredContent"]["status"] == "running").then_some(()) }
    })
    .await;
    publish(&good);
    let (ok, said) = update();
    assert!(ok && said.contains("→ 99.0.0"), "{said}");
    assert_ne!(foundry_tests::sha256_of(&bin), installed, "the new build is not in place");
    assert!(!marker.exists(), "the relay restarted during its run");
    let slow_done = wait_until("the slow run to finish", Duration::from_secs(30), || {
        let call = call("get_graph_run", json!({"command_id": run}));
        async move {
            let v = call.await["result"]["structuredContent"].clone();
            (v["status"] != "running" && v["status"] != "queued").then_some(v)
        }
    })
    .await;
    assert_eq!(slow_done["status"], "completed", "the update cut the run short: {slow_done}");
    let restarted = wait_until("the relay to restart into the new build", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&marker).unwrap_or_default();
        async move { (!text.is_empty()).then_some(text) }
    })
    .await;
    let pid = format!("{} ", relay.id());
    assert!(
        restarted.trim().starts_with(&pid) && restarted.trim().ends_with(" run"),
        "not the same process ({pid}), or not `relay run`: {restarted}"
    );
    // The restarted relay works.
    let again = call("run_graph_session", json!({"graph_session_id": gs, "idempotency_key": "after-update-1"})).await;
    let again = again["result"]["structuredContent"]["command_id"].as_str().unwrap().to_owned();
    wait_until("a run after the update to complete", Duration::from_secs(30), || {
        let call = call("get_graph_run", json!({"command_id": again}));
        async move { (call.await["result"]["structuredContent"]["status"] == "completed").then_some(()) }
    })
    .await;
    // What the owner sees: the relay running says which newer build its last check found (the
    // "new build" here runs the same relay underneath, so the version it reports is still the old one).
    let seen = wait_until("the owner to see the published build", Duration::from_secs(30), || {
        let req = owner(reqwest::Method::GET, "/devices".into());
        async move {
            let v: serde_json::Value = req.send().await.ok()?.json().await.ok()?;
            let d = v["devices"].as_array()?.iter().find(|d| d["name"] == "Test desktop")?.clone();
            (d["relay"]["update"] == "99.0.0").then_some(d)
        }
    })
    .await;
    assert_eq!(seen["relay"]["version"], relay::machine::update::VERSION, "{seen}");
    // And `relay status` on the desktop says so too, with the last check's outcome.
    let status = Command::new(&bin).arg("--config").arg(&config).arg("status").env("HOME", &home).output().unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("newer build: 99.0.0 is published") && status.contains("→ 99.0.0"), "{status}");

    // ---- the installer run again (issue 58) while a run is in progress: it keeps the
    // pairing (no second device, nothing to approve), leaves the unchanged loaded service
    // alone (no reload, which would stop the run), and the run completes ----
    let text = std::fs::read_to_string(&config).unwrap();
    let slow =
        text.lines().filter_map(|l| l.strip_prefix("graph_session_id = ")).nth(1).unwrap().trim_matches('"').to_owned();
    let slow_run =
        call("run_graph_session", json!({"graph_session_id": slow, "idempotency_key": "reinstall-during-run"})).await;
    let slow_run = slow_run["result"]["structuredContent"]["command_id"].as_str().unwrap().to_owned();
    wait_until("the slow run to be running", Duration::from_secs(30), || {
        let call = call("get_graph_run", json!({"command_id": slow_run}));
        async move { (call.await["result"]["structuredContent"]["status"] == "running").then_some(()) }
    })
    .await;
    let log = home.join("systemctl.log");
    let before = std::fs::read_to_string(&log).unwrap().len();
    let (h, u) = (home.clone(), url.clone());
    let second = installer(&h, &u).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = second.id();
    // A second pairing would wait for the owner's approval: the test fails instead of hanging.
    let again =
        tokio::time::timeout(Duration::from_secs(90), tokio::task::spawn_blocking(move || second.wait_with_output()))
            .await;
    let Ok(again) = again else {
        let _ = Command::new("pkill").arg("-KILL").arg("-P").arg(pid.to_string()).status();
        let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        panic!("the second installer did not finish within 90 s (did it start a new pairing?)");
    };
    let again = again.unwrap().unwrap();
    let said = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(again.status.success(), "{said}\n{}", String::from_utf8_lossy(&again.stderr));
    assert!(said.contains(&format!("already paired with {url}")), "{said}");
    assert!(said.contains("unchanged and loaded: left running"), "{said}");
    let calls = std::fs::read_to_string(&log).unwrap()[before..].to_owned();
    assert!(!calls.contains("--now") && !calls.contains("restart"), "the second install reloaded the service: {calls}");
    let devices: serde_json::Value =
        owner(reqwest::Method::GET, "/devices".into()).send().await.unwrap().json().await.unwrap();
    let named = devices["devices"].as_array().unwrap().iter().filter(|d| d["name"] == "Test desktop").count();
    assert_eq!(named, 1, "the installer paired a second device: {devices}");
    let done = wait_until("the slow run to complete across the reinstall", Duration::from_secs(60), || {
        let call = call("get_graph_run", json!({"command_id": slow_run}));
        async move {
            let v = call.await;
            (v["result"]["structuredContent"]["status"] == "completed").then_some(v)
        }
    })
    .await;
    assert!(done.to_string().contains("slow-ok"), "{done}");
    let _ = relay.kill();
    let _ = relay.wait();

    // A tampered archive: refused, nothing installed.
    let bad = root.join("tampered");
    let archive = pack(&bad, &built_binary("relay", &["relay/src"]));
    let mut bytes = std::fs::read(&archive).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xFF;
    std::fs::write(&archive, bytes).unwrap();
    drop(running);
    let running =
        local::start(LocalConfig { policy, relay_dist: bad, ..LocalConfig::at(root.join("server2")) }).await.unwrap();
    let home2 = {
        let h = root.join("other");
        std::fs::create_dir_all(&h).unwrap();
        self::home(&h)
    };
    let out = installer(&home2, &running.base_url).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("checksum mismatch") && err.contains("Nothing was installed"),
        "{err}"
    );
    assert!(!home2.join(".local/bin/relay").exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// The child's stdout, line by line, as it prints them.
fn lines_of(child: &mut std::process::Child) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// A stub program in `dir`: a shell script.
fn stub(dir: &Path, name: &str, script: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Approves the pairing the installer's output names (the owner, through the owner API).
async fn approve_printed_code(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    printed: &mut Vec<String>,
    url: &str,
    owner_token: &str,
) {
    let code = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("installer output").unwrap();
        printed.push(line.clone());
        if let Some((_, code)) = line.split_once("?pair=") {
            break code.trim().to_owned();
        }
    };
    let approved = foundry_tests::http()
        .post(format!("{url}/owner/pairings/{code}/approve"))
        .bearer_auth(owner_token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
}

/// The installer on a Mac as the issue describes it, with fake `uname`, `sysctl`, `xattr` and
/// `launchctl` (the relay is told to act as on macOS): a shell under Rosetta (`uname -m` says
/// x86_64, `sysctl -n hw.optional.arm64` says 1) gets the Apple silicon build — the Intel
/// archive here is a binary that fails, so a wrong pick cannot pass; the download loses its
/// quarantine attribute before it is moved into place; over SSH with no GUI login
/// (`launchctl print gui/<uid>` fails) the agent is written, 0644 under a umask of 002, and the
/// installer exits 0 saying it starts at the next login, without bootstrapping; a relative
/// `--prefix` is made absolute in the plist; the zsh line that puts the prefix on `PATH` is
/// printed; a proxy variable of the installing shell is carried into the agent; and `relay
/// pair` does not tell the owner to run `relay install`, which the installer did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_mac_under_rosetta_over_ssh_the_installer_picks_arm64_and_defers_to_the_next_login() {
    let root = std::env::temp_dir().join(format!("relay-install-mac-{}", uuid::Uuid::new_v4()));
    let dist = root.join("dist");
    std::fs::create_dir_all(dist.join("x")).unwrap();
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let mut sums = String::new();
    for (t, bin) in [
        ("aarch64-apple-darwin", None),
        ("x86_64-apple-darwin", Some("#!/bin/sh\necho 'the Intel build ran' >&2\nexit 86\n")),
    ] {
        match bin {
            None => {
                std::fs::copy(&relay, dist.join("x/relay")).unwrap();
            }
            Some(script) => {
                std::fs::remove_file(dist.join("x/relay")).unwrap();
                std::fs::write(dist.join("x/relay"), script).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dist.join("x/relay"), std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let name = format!("relay-0.1.0-{t}.tar.gz");
        assert!(
            Command::new("tar")
                .arg("-C")
                .arg(dist.join("x"))
                .arg("-czf")
                .arg(dist.join(&name))
                .arg("relay")
                .status()
                .unwrap()
                .success()
        );
        sums.push_str(&format!("{}  {name}\n", foundry_tests::sha256_of(&dist.join(&name))));
    }
    std::fs::write(dist.join("SHA256SUMS"), sums).unwrap();
    let running = local::start(LocalConfig { relay_dist: dist, ..LocalConfig::at(root.join("server")) }).await.unwrap();
    let url = running.base_url.clone();
    let home = root.join("Users/ana");
    let stubs = home.join("stub");
    std::fs::create_dir_all(&stubs).unwrap();
    let log = |n: &str| home.join(format!("{n}.log"));
    stub(&stubs, "uname", "case $1 in -s) echo Darwin ;; -m) echo x86_64 ;; *) echo Darwin ;; esac");
    stub(&stubs, "sysctl", "[ \"$*\" = \"-n hw.optional.arm64\" ] && echo 1");
    stub(&stubs, "xattr", &format!("echo \"$*\" >> {}", log("xattr").display()));
    stub(
        &stubs,
        "launchctl",
        &format!(
            "echo \"$*\" >> {}\ncase $1 in print) echo 'Could not find domain for port identifier: 0x0' >&2; exit 113 ;; esac",
            log("launchctl").display()
        ),
    );
    let mut c = Command::new("setsid");
    c.args(["-w", "sh", "-c"])
        .arg(format!("umask 002; curl -fsSL {url}/relay/install.sh | sh -s -- --prefix tools --name 'Ana Mac'"))
        .env_clear()
        .env("HOME", &home)
        .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", stubs.display()))
        .env("LANG", "C.UTF-8")
        .env("SHELL", "/bin/zsh")
        .env("HTTPS_PROXY", "http://proxy.invalid:3128")
        .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
        .env(relay::machine::service::TEST_PLATFORM_ENV, "macos")
        .current_dir(&home);
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut rx = lines_of(&mut child);
    let mut printed = Vec::new();
    approve_printed_code(&mut rx, &mut printed, &url, &running.owner_token).await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    while let Ok(l) = rx.try_recv() {
        printed.push(l);
    }
    let text = printed.join("\n");
    assert!(out.status.success(), "installer failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    let bin = home.join("tools/bin/relay");
    assert!(text.contains("under Rosetta") && text.contains("relay-0.1.0-aarch64-apple-darwin.tar.gz"), "{text}");
    assert!(!text.contains("the Intel build ran"), "{text}");
    let xattr = std::fs::read_to_string(log("xattr")).unwrap();
    assert_eq!(xattr.trim(), format!("-d com.apple.quarantine {}/tools/bin/.relay.new", home.display()));
    assert!(text.contains("add this line to ~/.zprofile"), "{text}");
    assert!(text.contains(&format!("export PATH=\"{}/tools/bin:$PATH\"", home.display())), "{text}");
    assert!(text.contains(&format!("done. Share a graph with: {} session add", bin.display())), "{text}");
    assert!(!text.contains("then relay install"), "pair told the owner to do what the installer did: {text}");
    assert!(text.contains("no GUI login session now") && text.contains("starts at your next login"), "{text}");
    let calls = std::fs::read_to_string(log("launchctl")).unwrap();
    assert!(calls.contains("print gui/") && !calls.contains("bootstrap"), "{calls}");
    let plist = home.join("Library/LaunchAgents/com.foundry-connect.relay.plist");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&plist).unwrap().permissions().mode() & 0o777, 0o644);
    let env = relay::machine::service::service_environment(
        relay::machine::service::Platform::MacOs,
        &std::fs::read_to_string(&plist).unwrap(),
    );
    assert!(env.contains(&("HTTPS_PROXY".to_owned(), "http://proxy.invalid:3128".to_owned())), "{env:?}");
    let args = std::fs::read_to_string(&plist).unwrap();
    assert!(
        args.contains(&format!("<string>{}</string>", bin.display())),
        "the plist's binary is not absolute: {args}"
    );
    // The check at the end ran as on a Mac: the privacy note is there.
    assert!(text.contains("Local Network permission"), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `SHA256SUMS` names reach a path in the installer: only the builds' own shape of name is
/// taken (letters, digits, `.`, `_`, `-`), so a listed `relay-x/../../…` is refused before any
/// download is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installer_refuses_archive_names_that_are_paths() {
    let root = std::env::temp_dir().join(format!("relay-install-names-{}", uuid::Uuid::new_v4()));
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let bad = format!("relay-x/../../../outside-{}.tar.gz", target());
    std::fs::write(dist.join("SHA256SUMS"), format!("{}  {bad}\n", "0".repeat(64))).unwrap();
    let running = local::start(LocalConfig { relay_dist: dist, ..LocalConfig::at(root.join("server")) }).await.unwrap();
    let home = home(&root);
    let out = tokio::task::spawn_blocking({
        let url = running.base_url.clone();
        move || installer(&home, &url).output().unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("unexpected file name in SHA256SUMS"), "{err}");
    assert!(!root.join("outside").exists() && !root.join("home/.local/bin/relay").exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// The owner's environment reaches Graphs on purpose (issue 58): the relay asks the owner's
/// login shell (here `sh -l -i`, which reads `~/.profile` as zsh reads `~/.zprofile` and
/// `~/.zshrc`) to run the real `relay print-environment`, and gets what the profile exported,
/// past the lines the profile printed; what the relay sets itself and the shell's own
/// bookkeeping are left out.
#[test]
fn the_login_shells_exported_variables_are_read_by_the_real_relay() {
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let home = std::env::temp_dir().join(format!("relay-shell-env-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".profile"),
        "echo 'Welcome back'\nexport OWNER_API_KEY='sk-from-the-profile'\nexport SSH_AUTH_SOCK=\"$HOME/.1password/agent.sock\"\nexport FOUNDRY_RELAY_CONFIG=/elsewhere\n",
    )
    .unwrap();
    let got = relay::machine::environment::login_shell(Path::new("/bin/sh"), &relay, &home).unwrap();
    assert_eq!(got.get("OWNER_API_KEY").map(String::as_str), Some("sk-from-the-profile"));
    assert_eq!(got.get("SSH_AUTH_SOCK"), Some(&format!("{}/.1password/agent.sock", home.display())));
    for left_out in ["FOUNDRY_RELAY_CONFIG", "PWD", "SHLVL", "_"] {
        assert!(!got.contains_key(left_out), "{left_out} was passed on");
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// Issue 58: on a Mac, an ad-hoc build's daily check offers a newer build and installs
/// nothing (installing would take the owner's privacy grants away). Here the hold comes from
/// the real `codesign` output of an ad-hoc binary (`tests/fixtures/macos/codesign-adhoc.txt`);
/// the server publishes 99.0.0; nothing is downloaded, the installed binary is unchanged, and
/// the outcome says why and what to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ad_hoc_build_on_a_mac_is_offered_an_update_not_given_one() {
    use relay::machine::update::{Outcome, grants_at_risk, target, update};
    let root = std::env::temp_dir().join(format!("relay-adhoc-{}", uuid::Uuid::new_v4()));
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    // Only the checksum line: a download would 404 and fail the update.
    std::fs::write(dist.join("SHA256SUMS"), format!("{}  relay-99.0.0-{}.tar.gz\n", "0".repeat(64), target())).unwrap();
    let running = local::start(LocalConfig { relay_dist: dist, ..LocalConfig::at(root.join("server")) }).await.unwrap();
    let installed = root.join("bin/relay");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::write(&installed, b"the installed build").unwrap();
    let adhoc = include_str!("../fixtures/macos/codesign-adhoc.txt");
    let hold = grants_at_risk(relay::machine::service::Platform::MacOs, || Ok(adhoc.to_owned()));
    let http = relay::server::client::https_client().unwrap();
    let outcome = update(&http, &running.base_url, &installed, None, hold.as_deref()).await.unwrap();
    assert!(matches!(&outcome, Outcome::Available { version, .. } if version == "99.0.0"), "{outcome:?}");
    let said = outcome.to_string();
    assert!(
        said.contains("installing it resets macOS privacy permissions for relay") && said.contains("run relay update"),
        "{said}"
    );
    assert_eq!(std::fs::read(&installed).unwrap(), b"the installed build");
    // Without the hold (a signed build, or the owner's `relay update`), the same check goes on
    // to download, and fails on the missing archive: proof the hold is what stopped it.
    assert!(update(&http, &running.base_url, &installed, None, None).await.is_err());
    let _ = std::fs::remove_dir_all(&root);
}

/// `pin = "x.y.z"`: the relay installs that version and no other. The server publishes 99.0.0:
/// a relay pinned to 0.0.1 stays (nothing downloaded, the outcome says so). It then publishes
/// only 0.0.1, older than this build: an unpinned relay calls itself up to date, the pinned one
/// goes on to install it (the way an owner goes back) and fails only on the archive this test
/// does not serve. A relay pinned to its own version is up to date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_holds_its_version_and_installs_it_even_when_older() {
    use relay::machine::update::{Outcome, VERSION, target, update};
    let root = std::env::temp_dir().join(format!("relay-pin-{}", uuid::Uuid::new_v4()));
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let publish = |version: &str| {
        let line = format!("{}  relay-{version}-{}.tar.gz\n", "0".repeat(64), target());
        std::fs::write(dist.join("SHA256SUMS"), line).unwrap();
    };
    publish("99.0.0");
    let running =
        local::start(LocalConfig { relay_dist: dist.clone(), ..LocalConfig::at(root.join("server")) }).await.unwrap();
    let installed = root.join("bin/relay");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::write(&installed, b"the installed build").unwrap();
    let http = relay::server::client::https_client().unwrap();
    let base = running.base_url.clone();
    let pinned = update(&http, &base, &installed, Some("0.0.1"), None).await.unwrap();
    assert!(
        matches!(&pinned, Outcome::Pinned { pin, published } if pin == "0.0.1" && published == "99.0.0"),
        "{pinned:?}"
    );
    assert!(pinned.to_string().contains("pinned to 0.0.1"), "{pinned}");
    assert_eq!(std::fs::read(&installed).unwrap(), b"the installed build");
    publish("0.0.1");
    let unpinned = update(&http, &base, &installed, None, None).await.unwrap();
    assert!(matches!(unpinned, Outcome::UpToDate { .. }), "an older build is not an update: {unpinned:?}");
    let back = update(&http, &base, &installed, Some("0.0.1"), None).await;
    let Err(e) = back else { panic!("the pinned older build was not installed: {back:?}") };
    // (The checksum list was served a moment ago: the 404 is the archive's.)
    assert!(e.to_string().contains("HTTP 404"), "it went on to download the pinned build: {e}");
    assert_eq!(std::fs::read(&installed).unwrap(), b"the installed build", "a failed install changes nothing");
    publish(VERSION);
    let own = update(&http, &base, &installed, Some(VERSION), None).await.unwrap();
    assert!(matches!(own, Outcome::UpToDate { .. }), "{own:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `relay update` rewrites the launchd agent's plist when this build writes it differently
/// (here: a file from a build before `SoftResourceLimits`), keeping the program, `PATH`, `LANG`
/// and proxy the file records rather than the updating terminal's, and reloads it; run again,
/// the file is current and nothing is reloaded. On Linux with a stubbed `launchctl` acting as a
/// Mac (`FOUNDRY_RELAY_TEST_PLATFORM=macos`), against the local server publishing this version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_update_rewrites_a_changed_plist_and_keeps_what_it_records() {
    use relay::machine::service::{Platform, ServiceSpec, service_text};
    let root = std::env::temp_dir().join(format!("relay-refresh-{}", uuid::Uuid::new_v4()));
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let version = relay::machine::update::VERSION;
    let target = relay::machine::update::target();
    std::fs::write(dist.join("SHA256SUMS"), format!("{}  relay-{version}-{target}.tar.gz\n", "0".repeat(64))).unwrap();
    let running = local::start(LocalConfig { relay_dist: dist, ..LocalConfig::at(root.join("server")) }).await.unwrap();
    let home = root.join("Users/ana");
    let stubs = home.join("stub");
    std::fs::create_dir_all(&stubs).unwrap();
    let calls = home.join("launchctl.log");
    stub(&stubs, "launchctl", &format!("echo \"$*\" >> {}\necho 'state = running'", calls.display()));
    stub(&stubs, "codesign", "echo 'Signature=adhoc' >&2");
    let config = home.join(".config/foundry-connect/relay.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "server_url = \"{}\"\ndevice_token = \"fcd_unpaired\"\nstate_dir = \"{}\"\n",
            running.base_url,
            home.join("state").display()
        ),
    )
    .unwrap();
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    // What an older build wrote at install: the owner's PATH and proxy then, no open-file limit.
    let spec = ServiceSpec {
        exe: PathBuf::from("/Users/ana/.local/bin/relay"),
        config: std::fs::canonicalize(&config).unwrap(),
        log_dir: home.join("Library/Logs/foundry-connect"),
        working_dir: home.clone(),
        path: "/opt/homebrew/bin:/usr/bin:/bin".into(),
        lang: "de_DE.UTF-8".into(),
        carried: vec![("HTTPS_PROXY".into(), "http://proxy.corp:3128".into())],
    };
    let current = service_text(Platform::MacOs, &spec);
    let start = current.find("  <key>SoftResourceLimits</key>").unwrap();
    let end = current.find("  <key>WorkingDirectory</key>").unwrap();
    let older = format!("{}{}", &current[..start], &current[end..]);
    let plist = home.join("Library/LaunchAgents/com.foundry-connect.relay.plist");
    std::fs::create_dir_all(plist.parent().unwrap()).unwrap();
    std::fs::write(&plist, &older).unwrap();
    let (relay, config_file, home_dir, stub_dir) = (relay, config.clone(), home.clone(), stubs.clone());
    let update = move || {
        let (config, home, stubs) = (&config_file, &home_dir, &stub_dir);
        let out = Command::new(&relay)
            .arg("--config")
            .arg(config)
            .arg("update")
            .env_clear()
            .env("HOME", home)
            .env("PATH", format!("{}:/usr/bin:/bin", stubs.display()))
            .env("LANG", "C.UTF-8")
            .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
            .env(relay::machine::service::TEST_PLATFORM_ENV, "macos")
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{said}");
        said
    };
    let said = tokio::task::spawn_blocking(update.clone()).await.unwrap();
    assert!(said.contains("the login service changed: reloading it"), "{said}");
    assert_eq!(std::fs::read_to_string(&plist).unwrap(), current, "{said}");
    let reloads = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(reloads.matches("bootstrap gui/").count(), 1, "{reloads}");
    // Current now: left as it is, nothing reloaded.
    let said = tokio::task::spawn_blocking(update).await.unwrap();
    assert!(said.contains("the login service file is current for this build"), "{said}");
    assert_eq!(std::fs::read_to_string(&plist).unwrap(), current);
    assert_eq!(std::fs::read_to_string(&calls).unwrap().matches("bootstrap gui/").count(), 1);
    let _ = std::fs::remove_dir_all(&root);
}

/// `infra/mac-check.sh` (the script an owner or maintainer runs on a Mac) on Linux, with stubs of
/// the macOS tools answering from the real outputs in `tests/fixtures/macos/`: an ad-hoc build is
/// a warning, a designated requirement that changed since the last check (an update) fails with
/// the re-grant steps, an agent that is not running and one switched off under Login Items fail
/// (the label is the fixture's, `com.apple.Siri.agent`, switched off there), a PAC-only proxy is
/// a warning, and `relay check`'s failure is counted.
#[test]
fn the_mac_check_script_reads_each_macos_tool_and_says_what_to_do() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/macos");
    let root = std::env::temp_dir().join(format!("mac-check-{}", uuid::Uuid::new_v4()));
    let stubs = root.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let f = |n: &str| fixtures.join(n).display().to_string();
    stub(&stubs, "uname", "echo Darwin");
    stub(&stubs, "id", "echo 501");
    let requirement = root.join("requirement");
    std::fs::copy(fixtures.join("codesign-requirement-adhoc.txt"), &requirement).unwrap();
    stub(
        &stubs,
        "codesign",
        &format!(
            "case \"$*\" in *-r-*) cat {} ;; *) cat {} >&2 ;; esac",
            requirement.display(),
            f("codesign-adhoc.txt")
        ),
    );
    stub(
        &stubs,
        "launchctl",
        &format!(
            "case $1 in print) cat {} ;; print-disabled) cat {} ;; esac",
            f("launchctl-print-exited.txt"),
            f("launchctl-print-disabled.txt")
        ),
    );
    stub(&stubs, "scutil", &format!("cat {}", f("scutil-proxy-pac.txt")));
    let relay = stubs.join("relay");
    stub(&stubs, "relay", "echo 'FAIL  session graphs: folder refused'; exit 1");
    let run = || {
        let out = Command::new("sh")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/mac-check.sh"))
            .env("PATH", format!("{}:/usr/bin:/bin", stubs.display()))
            .env("HOME", &root)
            .env("RELAY", &relay)
            .env("FOUNDRY_RELAY_LABEL", "com.apple.Siri.agent")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, said) = run();
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("warn  relay is ad-hoc signed"), "{said}");
    assert!(said.contains("ok    designated requirement noted (cdhash H\"2f67bf86"), "{said}");
    assert!(said.contains("FAIL  the agent is loaded but not running (last exit code 127)"), "{said}");
    assert!(said.contains("FAIL  the agent is switched off: System Settings > General > Login Items"), "{said}");
    assert!(said.contains("warn  the system proxy is a PAC file"), "{said}");
    assert!(said.contains("warn  otool is not installed"), "{said}");
    assert!(said.contains("FAIL  relay check found problems"), "{said}");
    // The same build again: the grants still match. Then an update (another build's requirement).
    let (_, said) = run();
    assert!(said.contains("ok    the designated requirement is the one of the last check"), "{said}");
    std::fs::copy(fixtures.join("codesign-requirement-adhoc-universal.txt"), &requirement).unwrap();
    let (_, said) = run();
    assert!(said.contains("FAIL  relay's designated requirement changed since the last check"), "{said}");
    assert!(said.contains("launchctl kickstart -k gui/501/com.apple.Siri.agent"), "{said}");
    // A running agent that nobody switched off, and a system HTTP proxy, pass those checks.
    stub(
        &stubs,
        "launchctl",
        &format!(
            "case $1 in print) cat {} ;; print-disabled) echo 'disabled services = {{' ; echo '}}' ;; esac",
            f("launchctl-print-running.txt")
        ),
    );
    stub(&stubs, "scutil", &format!("cat {}", f("scutil-proxy-http.txt")));
    let (_, said) = run();
    assert!(said.contains("ok    the agent is loaded and running"), "{said}");
    assert!(!said.contains("switched off"), "{said}");
    assert!(said.contains("ok    a system proxy is set"), "{said}");
    let _ = std::fs::remove_dir_all(&root);
}
