//! Tests of the module above.

use super::*;

fn sh(script: &str) -> Launch {
    Launch::from(vec!["sh".into(), "-c".into(), script.into()])
}

/// The sleep assertion outlives the cancelled graph's leader: a child that ignores SIGTERM
/// keeps the group alive through the grace, and the stand-in `caffeinate` (a script that
/// records its pid and waits) must still run then, and be gone once the group was killed.
#[tokio::test]
async fn the_mac_stays_awake_until_a_cancelled_graph_is_gone() {
    let dir = std::env::temp_dir().join(format!("relay-awake-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("caffeinate");
    std::fs::write(&fake, format!("#!/bin/sh\necho \"$$ $*\" > {}/awake\nexec sleep 600\n", dir.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = dir.join("started");
    // The leader exits at SIGTERM; its child ignores it and lives until SIGKILL.
    let script = format!("sh -c 'trap \"\" TERM; touch {}; sleep 600' & wait", started.display());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let grace = Duration::from_secs(3);
    let launch = sh(&script);
    let run = tokio::spawn(async move {
        run_awake(
            &launch,
            &serde_json::json!({}),
            async { rx.await.unwrap_or(()) },
            grace,
            Some(fake.to_str().unwrap()),
            Arc::default(),
        )
        .await
    });
    let alive = |pid: i32| nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok();
    let pid = loop {
        if started.exists()
            && let Some(line) = std::fs::read_to_string(dir.join("awake")).ok().filter(|l| l.ends_with('\n'))
        {
            assert!(line.contains(&format!("-i -w {}", std::process::id())), "it watches the relay: {line}");
            break line.split_whitespace().next().unwrap().parse::<i32>().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tx.send(()).unwrap();
    let cancelled = std::time::Instant::now();
    assert_eq!(run.await.unwrap().status, FinalStatus::Cancelled);
    // Reported cancelled at once; the group is in its grace, and the Mac is held awake.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cancelled.elapsed() < grace, "the check must fall inside the grace");
    assert!(alive(pid), "caffeinate ended while the cancelled graph was still stopping");
    let gone = std::time::Instant::now();
    while alive(pid) && gone.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "caffeinate outlived the graph's group");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn passes_arguments_on_stdin_and_reads_the_result() {
    let o = run(&sh("cat"), &serde_json::json!({"a": 1}), std::future::pending(), Duration::from_secs(1)).await;
    assert_eq!(o.result.as_deref(), Some(r#"{"a":1}"#));
    let o = run(
        &sh(r#"echo '{"result":"hi","total_tokens":12,"reported_cost":0.5}'"#),
        &serde_json::json!({}),
        std::future::pending(),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!((o.result.as_deref(), o.total_tokens, o.reported_cost), (Some("hi"), Some(12), Some(0.5)));
}

/// The progress channel: JSON lines with `progress` on stderr reach `live` and stay out of
/// the log (its tail and a failed run's error); every other line is the log. A line without
/// an end (the last one) and an endless line still arrive.
#[tokio::test]
async fn progress_lines_on_stderr_reach_live_and_stay_out_of_the_log() {
    let live = Arc::new(crate::run::live::Live::default());
    let script = r#"echo starting >&2; echo '{"progress": "half", "fraction": 0.5}' >&2; echo 'still going' >&2;
        echo '{"progress":"almost","fraction":0.9}' >&2; head -c 10000 /dev/zero | tr '\0' y >&2; echo >&2;
        printf boom >&2; exit 2"#;
    let o = run_live(
        &sh(script),
        &serde_json::json!({}),
        std::future::pending(),
        Duration::from_secs(1),
        Arc::clone(&live),
    )
    .await;
    let (_, p) = live.snapshot();
    assert_eq!((p.message.as_str(), p.fraction), ("almost", Some(0.9)));
    assert_eq!(p.tail.first().map(String::as_str), Some("starting"));
    assert_eq!(p.tail.last().map(String::as_str), Some("boom"));
    assert!(p.tail.iter().all(|l| !l.contains("progress")), "{:?}", p.tail);
    p.validate().unwrap();
    let error = o.error.unwrap();
    let (end, len) = (&error[error.len().saturating_sub(80)..], error.len());
    // The log reaches the error (its end: the 10,000 y's pushed "still going" out of it),
    // progress lines never do.
    assert!(error.ends_with("yy\nboom") && !error.contains("almost") && !error.contains("half"), "{len}: …{end}");
}

#[tokio::test]
async fn a_failing_command_reports_its_stderr() {
    let o =
        run(&sh("echo boom >&2; exit 3"), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
    assert_eq!(o.status, FinalStatus::Failed);
    assert!(o.error.as_deref().unwrap().ends_with(": boom"), "{o:?}");
    let o = run(
        &Launch::from(vec!["/nonexistent/graph".to_owned()]),
        &serde_json::json!({}),
        std::future::pending(),
        Duration::from_secs(1),
    )
    .await;
    assert!(o.error.as_deref().unwrap().starts_with("cannot start"));
}

/// Whether `pid` is a live process (a zombie waiting to be reaped counts as dead).
fn alive(pid: i32) -> bool {
    if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    let stat = std::process::Command::new("ps").args(["-o", "stat=", "-p", &pid.to_string()]).output();
    stat.map(|o| !String::from_utf8_lossy(&o.stdout).trim_start().starts_with('Z')).unwrap_or(true)
}

/// Waits (with a deadline) until `path` holds a pid.
async fn pid_in(path: &std::path::Path) -> i32 {
    for _ in 0..500 {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()) {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pid written to {}", path.display());
}

#[tokio::test]
async fn cancel_stops_the_whole_process_group() {
    let dir = std::env::temp_dir().join(format!("relay-group-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (child, grandchild) = (dir.join("child.pid"), dir.join("grandchild.pid"));
    // The child starts a grandchild in the background and waits for it; both record their pids,
    // and the grandchild sleeps.
    let script =
        format!("sh -c 'echo $$ > {}; exec sleep 30' & echo $$ > {}; wait", grandchild.display(), child.display());
    // Cancel once both are up (not after a guessed delay).
    let (c, g) = (child.clone(), grandchild.clone());
    let cancel = async move {
        pid_in(&c).await;
        pid_in(&g).await;
    };
    let o = run(&sh(&script), &serde_json::json!({}), cancel, Duration::from_secs(1)).await;
    assert_eq!(o.status, FinalStatus::Cancelled);
    for pid in [pid_in(&child).await, pid_in(&grandchild).await] {
        // Signals are delivered asynchronously: wait for the condition, with a deadline.
        let mut tries = 0;
        while alive(pid) && tries < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(!alive(pid), "process {pid} survived the cancel");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_background_child_holding_stdout_does_not_hang_the_run() {
    let dir = std::env::temp_dir().join(format!("relay-bg-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let bg = dir.join("bg.pid");
    // The graph prints its result and exits, leaving a child that keeps stdout open.
    let script = format!("sh -c 'echo $$ > {}; exec sleep 300' & echo done", bg.display());
    let o = tokio::time::timeout(
        Duration::from_secs(60),
        run(&sh(&script), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)),
    )
    .await
    .expect("the run hung on a background child's open stdout");
    assert_eq!((o.status, o.result.as_deref()), (FinalStatus::Completed, Some("done")));
    let pid = pid_in(&bg).await;
    let mut tries = 0;
    while alive(pid) && tries < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tries += 1;
    }
    assert!(!alive(pid), "the background child outlived the run");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn stdout_is_bounded_and_an_oversized_result_is_reported_truncated() {
    let o = run(
        &sh("head -c 5000000 /dev/zero | tr '\\0' a"),
        &serde_json::json!({}),
        std::future::pending(),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(o.status, FinalStatus::Completed);
    assert!(o.truncated && o.result.is_none(), "{:?}", (o.truncated, o.result.as_ref().map(String::len)));
    // What stays in memory is the bound, whatever the Graph writes (the same reader, on 5 MB).
    let kept = Arc::new(Mutex::new(Vec::new()));
    let five_mb = vec![b'a'; 5_000_000];
    assert!(read_bounded(&five_mb[..], Arc::clone(&kept), MAX_STDOUT_BYTES).await, "nothing was dropped");
    assert_eq!(kept.lock().unwrap().len(), MAX_STDOUT_BYTES, "the reader kept more than its bound");
}

#[tokio::test]
async fn cancel_kills_children_that_ignore_sigterm_even_when_the_leader_obeys() {
    let dir = std::env::temp_dir().join(format!("relay-term-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (child, grandchild) = (dir.join("child.pid"), dir.join("grandchild.pid"));
    // The grandchild ignores SIGTERM; the leader exits on it.
    let script = format!(
        "sh -c 'trap \"\" TERM; echo $$ > {}; while :; do sleep 1; done' & echo $$ > {}; wait",
        grandchild.display(),
        child.display()
    );
    let (c, g) = (child.clone(), grandchild.clone());
    let cancel = async move {
        pid_in(&c).await;
        pid_in(&g).await;
    };
    let o = run(&sh(&script), &serde_json::json!({}), cancel, Duration::from_millis(500)).await;
    assert_eq!(o.status, FinalStatus::Cancelled);
    let pid = pid_in(&grandchild).await;
    let mut tries = 0;
    while alive(pid) && tries < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tries += 1;
    }
    assert!(!alive(pid), "a child that ignored SIGTERM survived the cancel");
    let _ = std::fs::remove_dir_all(dir);
}

/// The relay stopping mid-run (its pass dropped, as on SIGTERM) takes the graph's whole
/// process group with it, not only the leader.
#[tokio::test]
async fn a_run_dropped_while_the_graph_runs_kills_its_whole_group() {
    let pidfile = std::env::temp_dir().join(format!("relay-drop-{}", uuid::Uuid::new_v4()));
    let script = format!("sleep 60 & echo $! > {}; sleep 60", pidfile.display());
    let launch = sh(&script);
    let args = serde_json::json!({});
    let running = run(&launch, &args, std::future::pending(), Duration::from_secs(1));
    // Let it start, then drop it.
    let _ = tokio::time::timeout(Duration::from_millis(500), running).await;
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    for _ in 0..50 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the graph's child outlived the relay's run");
    let _ = std::fs::remove_file(pidfile);
}

/// A session's `env` and `working_dir` reach the graph.
#[tokio::test]
async fn a_session_sets_the_graphs_environment_and_folder() {
    let dir = std::env::temp_dir();
    let mut launch = sh("printf '%s %s' \"$GRAPH_MODE\" \"$(pwd)\"");
    launch.env.insert("GRAPH_MODE".into(), "weekly".into());
    launch.working_dir = Some(dir.clone());
    let o = run(&launch, &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
    let want = format!("weekly {}", std::fs::canonicalize(&dir).unwrap().display());
    assert_eq!(o.result.as_deref(), Some(want.as_str()), "{o:?}");
}

/// What stdout may be: the JSON object `{"result", "total_tokens", "reported_cost"}` (a result
/// that is not a string is its JSON text; counts of the wrong type are left out), or anything
/// else — plain text, JSON that is not an object, an object without `result` — taken as the
/// result as printed, its trailing whitespace removed.
#[tokio::test]
async fn what_stdout_may_be() {
    let cases = [
        ("plain text\n\n", Some("plain text"), None, None),
        ("  two\nlines \n", Some("  two\nlines"), None, None),
        (r#"{"result": "hi", "total_tokens": 12, "reported_cost": 0.5}"#, Some("hi"), Some(12), Some(0.5)),
        (r#"{"result": {"a": [1, 2]}, "reported_cost": 2}"#, Some(r#"{"a":[1,2]}"#), None, Some(2.0)),
        (r#"{"result": "x", "total_tokens": -3, "reported_cost": "1.5", "other": true}"#, Some("x"), None, None),
        (r#"{"answer": 42}"#, Some(r#"{"answer": 42}"#), None, None),
        ("[1, 2]", Some("[1, 2]"), None, None),
        (r#""quoted""#, Some(r#""quoted""#), None, None),
        ("", Some(""), None, None),
    ];
    for (printed, result, tokens, cost) in cases {
        let script = format!("printf '%s' {}", shell_quote(printed));
        let o = run(&sh(&script), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
        assert_eq!(o.status, FinalStatus::Completed, "{printed:?}: {o:?}");
        assert_eq!((o.result.as_deref(), o.total_tokens, o.reported_cost), (result, tokens, cost), "{printed:?}");
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Exit 0 completes the run with stdout's result; any other exit, and a death by a signal,
/// fail it with the program, how it ended and the end of stderr as the error, whatever stdout
/// said.
#[tokio::test]
async fn exit_codes_decide_the_status() {
    let go = |script: &'static str| async move {
        run(&sh(script), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await
    };
    let o = go("echo done; echo a log line >&2; exit 0").await;
    assert_eq!((o.status, o.result.as_deref(), o.error.as_deref()), (FinalStatus::Completed, Some("done"), None));
    let o = go(r#"echo '{"result": "half done"}'; echo 'no key for the API' >&2; exit 3"#).await;
    assert_eq!((o.status, o.result.as_deref()), (FinalStatus::Failed, None), "{o:?}");
    assert_eq!(o.error.as_deref(), Some("sh (exit status: 3): no key for the API"));
    let o = go("echo partial; kill -KILL $$").await;
    assert_eq!((o.status, o.result.as_deref()), (FinalStatus::Failed, None), "{o:?}");
    assert_eq!(o.error.as_deref(), Some("sh (signal: 9 (SIGKILL))"));
    let o = go("exit 1").await;
    assert_eq!(o.error.as_deref(), Some("sh (exit status: 1)"), "no stderr: no colon");
}

/// A failed run's error keeps the end of stderr — the reason a Graph gives last, after
/// however much log — within the error's 2,000 characters, and the completion sends it whole.
#[tokio::test]
async fn a_failed_runs_error_is_the_end_of_stderr() {
    let script = "for i in $(seq 1 400); do echo \"log line $i of a long run\" >&2; done; \
                  echo 'Error: the API refused the key' >&2; exit 1";
    let o = run(&sh(script), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
    let error = o.error.clone().unwrap();
    assert!(error.starts_with("sh (exit status: 1): …"), "{}", error.chars().take(80).collect::<String>());
    assert!(error.ends_with("log line 400 of a long run\nError: the API refused the key"), "{error}");
    assert_eq!(error.chars().count(), domain::limits::MAX_ERROR_CHARS);
    let sent = domain::runs::Completion {
        execution_id: "e".into(),
        status: o.status,
        result: None,
        result_truncated: false,
        error: o.error,
        total_tokens: None,
        reported_cost: None,
    }
    .bounded();
    assert_eq!(sent.error.as_deref(), Some(error.as_str()), "the completion cut the error again");
}

/// A cancel: SIGTERM to the group, the grace, then SIGKILL to the group. A child that traps
/// SIGTERM gets the whole grace (it is alive after SIGTERM, for about the grace, and may still
/// write to stdout and stderr: the relay reads and drops it) and is killed once it is over,
/// although the leader obeyed SIGTERM at once.
#[tokio::test]
async fn a_cancelled_graph_gets_the_grace_then_sigkill() {
    let dir = std::env::temp_dir().join(format!("relay-grace-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (child, termed) = (dir.join("child.pid"), dir.join("termed"));
    // The child notes SIGTERM and goes on; the leader exits at SIGTERM.
    let script = format!(
        "sh -c 'trap \"echo cleaning up; echo cleaning up >&2; touch {}\" TERM; echo $$ > {}; while :; do sleep 0.05; done' & wait",
        termed.display(),
        child.display()
    );
    let c = child.clone();
    let cancel = async move {
        pid_in(&c).await;
    };
    let grace = Duration::from_millis(1500);
    let o = run(&sh(&script), &serde_json::json!({}), cancel, grace).await;
    assert_eq!(o.status, FinalStatus::Cancelled);
    assert_eq!(o.error.as_deref(), Some("cancelled on request; the process was stopped"));
    let pid = pid_in(&child).await;
    let mut tries = 0;
    while !termed.exists() && tries < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tries += 1;
    }
    let got_term = std::time::Instant::now();
    assert!(termed.exists(), "the child never got SIGTERM");
    assert!(alive(pid), "the child was killed before its grace");
    while alive(pid) && got_term.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lived = got_term.elapsed();
    assert!(!alive(pid), "a child that trapped SIGTERM outlived the grace");
    assert!(lived >= grace.mul_f64(0.6), "killed {lived:?} after SIGTERM, grace {grace:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The relay puts no memory or CPU limit of its own on a Graph: it has the relay's.
#[tokio::test]
async fn a_graph_gets_no_resource_limit_of_the_relays() {
    let limits = "ulimit -v; ulimit -t; ulimit -d";
    let o = run(&sh(limits), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
    let mine = std::process::Command::new("sh").args(["-c", limits]).output().unwrap();
    assert_eq!(o.result.as_deref(), Some(String::from_utf8_lossy(&mine.stdout).trim_end()), "{o:?}");
}
