//! docs/quickstart.md's local path, run as a newcomer runs it: every fenced block marked
//! `sh local-quickstart` is taken from the page as it is and run in order by bash, in a clean
//! `HOME`, from the checkout — so a changed command in the page is a changed test. Blocks marked
//! `background` are the commands the page runs "in a terminal of its own"; they keep running
//! until the end. The last block must print the hello Graph's result and the claimed task.
//!
//! The stand-ins, each where the page's step needs what a test cannot be:
//! - the `clone` block (`git clone … && cd foundry-connect`): the checkout under test is the clone
//!   (infra/first-hour.sh clones HEAD and names it with `FOUNDRY_QUICKSTART_CHECKOUT`);
//! - the page's `target/` folder: a cargo target folder of its own in the tools' cache
//!   (`$FOUNDRY_CACHE_DIR/quickstart-target`, or `FOUNDRY_QUICKSTART_TARGET`), so the page's
//!   `cargo build` runs as a newcomer's does (no test-command wrapper or flags) without
//!   replacing the binaries other tests are running (`infra/test.sh` brings that folder up to
//!   date before the tests start, in this test's environment, so here the page's command finds
//!   it built; `infra/first-hour.sh` runs it on an empty folder and times it);
//! - the Rust toolchain the page's prerequisites install: this machine's (`RUSTUP_HOME`,
//!   `CARGO_HOME`), and pip's download cache, shared between runs;
//! - the two values the page says to paste from the server's output, `<Project id>` and
//!   `<Bearer token>`: read from that output;
//! - the owner's click on *Approve desktop*: the approval the panel's button sends
//!   (`POST /owner/pairings/{code}/approve` with the owner token the server printed), made when
//!   `relay pair` prints its code (`panel_browser` clicks the button itself).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The page.
const PAGE: &str = "docs/quickstart.md";
/// The most commands the local path may take (the clone included).
const MAX_COMMANDS: usize = 10;
/// The port the page's commands use.
const PORT: u16 = 8787;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// A scratch folder, removed when the test ends.
struct Work(PathBuf);

impl Work {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One marked block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    /// Its commands, as on the page.
    pub text: String,
    /// Run in a terminal of its own (kept running).
    pub background: bool,
    /// The `git clone` step.
    pub clone: bool,
}

/// The blocks marked `sh local-quickstart` in `page`, in order.
pub(crate) fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```sh local-quickstart") else { continue };
        let words: Vec<&str> = info.split_whitespace().collect();
        let mut text = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        out.push(Block { text, background: words.contains(&"background"), clone: words.contains(&"clone") });
    }
    out
}

/// The commands a block holds: its lines that are neither blank nor comments, a line ending in
/// `\` joined to the next.
pub(crate) fn commands(block: &str) -> usize {
    let mut n = 0;
    let mut continued = false;
    for l in block.lines().map(str::trim) {
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if !continued {
            n += 1;
        }
        continued = l.ends_with('\\');
    }
    n
}

/// The value printed after `label` in the server's banner.
fn banner_value(banner: &str, label: &str) -> Option<String> {
    banner.lines().find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_owned())).filter(|v| !v.is_empty())
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FOUNDRY_CACHE_DIR") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
    base.join("foundry-connect")
}

/// The environment of a newcomer's shell with a clean `HOME`. `FOUNDRY_QUICKSTART_CARGO_HOME`
/// names another cargo home (infra/first-hour.sh passes an empty one: no crate downloaded yet).
fn clean_env(home: &Path, target: &Path) -> Vec<(String, String)> {
    let real_home = PathBuf::from(std::env::var_os("HOME").unwrap());
    let inherited = |k: &str, default: PathBuf| std::env::var(k).unwrap_or_else(|_| default.display().to_string());
    let cargo_home = std::env::var("FOUNDRY_QUICKSTART_CARGO_HOME")
        .unwrap_or_else(|_| inherited("CARGO_HOME", real_home.join(".cargo")));
    vec![
        ("PATH".into(), std::env::var("PATH").unwrap()),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), std::env::temp_dir().display().to_string()),
        ("RUSTUP_HOME".into(), inherited("RUSTUP_HOME", real_home.join(".rustup"))),
        ("CARGO_HOME".into(), cargo_home),
        ("CARGO_TARGET_DIR".into(), target.display().to_string()),
        ("PIP_CACHE_DIR".into(), cache_dir().join("pip").display().to_string()),
        ("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into()),
    ]
}

/// A block's process: bash in its own process group, its output in `log`.
struct Step {
    child: tokio::process::Child,
    log: PathBuf,
}

impl Step {
    fn start(script: &str, cwd: &Path, env: &[(String, String)], log: PathBuf) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = tokio::process::Command::new("bash")
            .args(["-e", "-c", script])
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self { child, log }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the block and everything it started.
    fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &format!("-{pid}")]).status();
        }
    }
}

#[test]
fn the_page_marks_its_local_path_in_at_most_ten_commands() {
    let page = std::fs::read_to_string(repo_root().join(PAGE)).unwrap();
    let b = blocks(&page);
    assert_eq!(b.iter().filter(|b| b.clone).count(), 1, "one clone block");
    assert!(b[0].clone && b[0].text.trim_start().starts_with("git clone"), "the path starts with the clone: {b:?}");
    assert_eq!(b.iter().filter(|b| b.background).count(), 2, "the server and the relay run in terminals of their own");
    let n: usize = b.iter().map(|b| commands(&b.text)).sum();
    assert!(n <= MAX_COMMANDS, "the local path takes {n} commands, more than {MAX_COMMANDS}");
    // The counter itself: comments and blank lines are no commands; a continued line is one.
    assert_eq!(commands("# a\n\ncargo build \\\n  -p local\nls\n"), 2);
}

#[tokio::test]
async fn the_quickstart_runs_as_written_from_a_clean_home() {
    // The checkout the page is read from and run in: this one, or the fresh clone
    // infra/first-hour.sh makes (`FOUNDRY_QUICKSTART_CHECKOUT`).
    let root = std::env::var_os("FOUNDRY_QUICKSTART_CHECKOUT").map_or_else(repo_root, PathBuf::from);
    let page = std::fs::read_to_string(root.join(PAGE)).unwrap();
    if std::net::TcpListener::bind(("127.0.0.1", PORT)).is_err() {
        panic!("port {PORT} is in use: the quickstart's commands use it (stop the local server running on it)");
    }
    let work = Work(std::env::temp_dir().join(format!("foundry-quickstart-{}", uuid::Uuid::new_v4())));
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let target = std::env::var_os("FOUNDRY_QUICKSTART_TARGET")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("quickstart-target"));
    let env = clean_env(&home, &target);
    let target_prefix = format!("{}/", target.display());
    let http = foundry_tests::http();

    let mut background: Vec<Step> = Vec::new();
    let mut banner = String::new();
    let mut last = String::new();
    // How long each step took, for the first hour's figures (infra/first-hour.sh).
    let mut steps: Vec<serde_json::Value> = Vec::new();
    let run_started = Instant::now();
    let all = blocks(&page);
    let typed: usize = all.iter().map(|b| commands(&b.text)).sum();
    for (i, block) in all.into_iter().enumerate() {
        if block.clone {
            continue;
        }
        let step_started = Instant::now();
        let mut script = block.text.replace("target/", &target_prefix);
        for (placeholder, label) in [("<Project id>", "Project id:"), ("<Bearer token>", "Bearer token:")] {
            if script.contains(placeholder) {
                let v = banner_value(&banner, label).unwrap_or_else(|| panic!("the server printed no {label:?}"));
                script = script.replace(placeholder, &v);
            }
        }
        let log = work.path().join(format!("step-{i}.log"));
        let mut step = Step::start(&script, &root, &env, log);
        if block.background {
            // The server: wait for its banner (it is what the next steps paste from).
            if banner.is_empty() {
                let started = Instant::now();
                while banner_value(&step.output(), "Owner token:").is_none() {
                    assert!(step.child.try_wait().unwrap().is_none(), "{script} stopped:\n{}", step.output());
                    assert!(
                        started.elapsed() < Duration::from_secs(300),
                        "no banner from {script}:\n{}",
                        step.output()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                banner = step.output();
            }
            steps
                .push(serde_json::json!({"block": block.text.trim(), "seconds": step_started.elapsed().as_secs_f64()}));
            background.push(step);
            continue;
        }
        let started = Instant::now();
        let mut approved = Vec::new();
        let status = loop {
            if let Some(status) = step.child.try_wait().unwrap() {
                break status;
            }
            // The owner's click on "Approve desktop" for the code `relay pair` printed.
            let out = step.output();
            if let Some(code) = out.split("shows the code ").nth(1).and_then(|s| s.get(..9))
                && !approved.contains(&code.to_owned())
            {
                let owner = banner_value(&banner, "Owner token:").unwrap();
                let url = format!("http://127.0.0.1:{PORT}/owner/pairings/{code}/approve");
                let res = http.post(&url).bearer_auth(owner).send().await.unwrap();
                assert_eq!(res.status(), 200, "approving {code}: {}", res.text().await.unwrap());
                approved.push(code.to_owned());
            }
            if started.elapsed() > Duration::from_secs(900) {
                step.stop();
                panic!("{script} did not end in 15 minutes:\n{out}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let out = step.output();
        let logs: Vec<String> = background.iter().map(Step::output).collect();
        assert!(
            status.success(),
            "the page's step failed ({status}):\n{script}\n{out}\nbackground:\n{}",
            logs.join("\n---\n")
        );
        steps.push(serde_json::json!({"block": block.text.trim(), "seconds": step_started.elapsed().as_secs_f64()}));
        last = out;
    }
    let total = run_started.elapsed().as_secs_f64();
    for mut b in background {
        b.stop();
    }
    for expected in ["Graph session 'Hello'", "completed: Hello, quickstart!", "claimed and completed"] {
        assert!(last.contains(expected), "the chat did not print {expected:?}:\n{last}");
    }
    let figures = serde_json::json!({"commands": typed, "seconds": total, "steps": steps});
    eprintln!("the quickstart's figures: {figures:#}");
    if let Some(path) = std::env::var_os("FOUNDRY_QUICKSTART_FIGURES") {
        std::fs::write(path, serde_json::to_string_pretty(&figures).unwrap()).unwrap();
    }
}

/// docs/results.md's "The first hour" quotes what `./infra/first-hour.sh` measured and wrote to
/// docs/first-hour-figures.json (which it writes only when the goals are met): the commands,
/// the whole time, the build's share and the commit.
#[test]
fn the_first_hour_figures_in_the_docs_are_the_script() {
    let root = repo_root();
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/first-hour-figures.json")).unwrap()).unwrap();
    let results = std::fs::read_to_string(root.join("docs/results.md")).unwrap();
    let section = results.split("\n## The first hour").nth(1).expect("results.md has a section \"The first hour\"");
    let section = section.split("\n## ").next().unwrap();
    let commands = figures["commands"].as_u64().unwrap();
    let seconds = figures["seconds"].as_f64().unwrap();
    assert!(commands <= MAX_COMMANDS as u64 && seconds <= 300.0, "the file holds a run that missed its goals");
    let build = figures["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["block"].as_str().is_some_and(|b| b.starts_with("cargo build")))
        .and_then(|s| s["seconds"].as_f64())
        .unwrap();
    for quoted in [
        format!("**{commands} commands**"),
        format!("**{seconds:.0} s**"),
        format!("**{build:.0} s**"),
        format!("`{}`", figures["commit"].as_str().unwrap()),
    ] {
        assert!(section.contains(&quoted), "results.md's first hour does not quote {quoted}:\n{section}");
    }
}
