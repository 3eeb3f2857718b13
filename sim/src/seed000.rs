//! Seed 000 (Graph runs on the owner's desktop): pickup wait, agent polling strategies,
//! cancel, the desktop offline, a lost completion POST.

use std::time::Duration;

use domain::ids::CommandId;
use domain::limits::Policy;
use domain::runs::RunStatus;
use serde_json::{Value, json};
use tools::ToolName;

use crate::{Rng, Stats, World, secs, session_id, wait_for};

const MINUTE_MEDIAN: Duration = Duration::from_secs(60);
const SIGMA: f64 = 0.5;
/// Run-to-run spread of one recurring graph session (its durations are what hints learn from).
const SESSION_SIGMA: f64 = 0.15;
const MIN_RUN: Duration = Duration::from_secs(5);
const CONTROL_POLL: Duration = Duration::from_secs(3);
const STEP: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(24 * 3600);

/// Queues a run of `duration` through the tool; the command id and the tool's answer.
async fn queue(w: &World, duration: Duration, key: u64) -> anyhow::Result<(CommandId, Value)> {
    let out = w
        .tool(
            ToolName::RunGraphSession,
            json!({
                "graph_session_id": session_id().to_string(),
                "arguments": {"duration_ms": duration.as_millis() as u64},
                "idempotency_key": format!("sim-key-{key:012}"),
            }),
        )
        .await?;
    let id = out["command_id"].as_str().ok_or_else(|| anyhow::anyhow!("queue refused: {out}"))?;
    Ok((CommandId::parse("command_id", id)?, out))
}

async fn terminal(w: &World, id: CommandId) -> anyhow::Result<domain::runs::Run> {
    wait_for(STEP, LIMIT, || async move {
        let r = w.run(id).await?;
        let status = r.view(domain::clock::Clock::now(w.clock.as_ref()), &w.policy).status;
        Ok(status.is_terminal().then_some(r))
    })
    .await
}

async fn world(seed: u64) -> anyhow::Result<World> {
    world_with(seed, false).await
}

async fn world_with(seed: u64, doorbell: bool) -> anyhow::Result<World> {
    let w = World::new(seed, Policy::default()).await?;
    let mut w = if doorbell { w.with_doorbell() } else { w };
    w.start_relay(CONTROL_POLL)?;
    // The relay's first pass shares the session.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(w)
}

/// Pickup wait: each run is queued at a random phase of the relay's 20 s poll.
async fn pickup(seed: u64, n: usize, doorbell: bool) -> anyhow::Result<String> {
    let mut rng = Rng::new(seed ^ 0x0001);
    let w = world_with(seed, doorbell).await?;
    let mut waits = Vec::new();
    for i in 0..n {
        tokio::time::sleep(rng.between(Duration::ZERO, w.policy.poll_interval)).await;
        let (id, _) = queue(&w, Duration::from_secs(1), i as u64).await?;
        let r = terminal(&w, id).await?;
        waits.push(secs(r.queued_at, r.started_at.unwrap_or(r.queued_at)));
    }
    Ok(if doorbell {
        format!(
            "pickup wait with the doorbell (ring latency log-normal, median 250 ms, σ 0.6), 20 s safety poll, n={n}\n  product: {}\n",
            Stats::of(&waits).line()
        )
    } else {
        format!(
            "pickup wait (queued -> started), 20 s poll, n={n}\n  report:  mean 9.8 s, median 9.8 s, p95 18.9 s, max 20.0 s\n  product: {}\n",
            Stats::of(&waits).line()
        )
    })
}

/// Five runs queued at once: with one slot (the seed's desktop, one worker) they finish in
/// sequence, in the order they were queued; with five they run together.
async fn five_at_once(seed: u64, slots: usize) -> anyhow::Result<String> {
    let mut w = World::new(seed, Policy::default()).await?;
    w.start_relay_with(CONTROL_POLL, slots)?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(queue(&w, Duration::from_secs(60), 9_000 + i).await?.0);
    }
    let mut line = String::new();
    let t0 = w.run(ids[0]).await?.queued_at;
    let mut last = 0.0_f64;
    for id in ids {
        let r = terminal(&w, id).await?;
        let end = secs(t0, r.finished_at.unwrap_or(t0));
        last = last.max(end);
        line += &format!(" [{:.0}–{end:.0} s]", secs(t0, r.started_at.unwrap_or(t0)));
    }
    let ratio = last / 60.0;
    Ok(format!(
        "five 60 s runs queued at once, {slots} slot{}, start–finish after queueing:{line}; all done after {last:.0} s = {ratio:.2}× one run\n",
        if slots == 1 { "" } else { "s" }
    ))
}

/// The agent that fanned out: five 60 s runs queued at once of a session with history (three
/// runs before), and the agent following `check_after_s` on each of the five. With one slot
/// the later runs wait behind its own earlier ones, which `get_graph_run`'s hint counts
/// (`tools::Backlog`); with five they all start at the next pickup.
async fn five_at_once_followed(seed: u64, slots: usize) -> anyhow::Result<String> {
    let mut w = World::new(seed, Policy::default()).await?;
    w.start_relay_with(CONTROL_POLL, slots)?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    for i in 0..3 {
        let (id, _) = queue(&w, Duration::from_secs(60), 9_100 + i).await?;
        terminal(&w, id).await?;
    }
    let mut queued = Vec::new();
    for i in 0..5 {
        queued.push(queue(&w, Duration::from_secs(60), 9_200 + i).await?);
    }
    let followed =
        futures_util::future::join_all(queued.iter().map(|(id, answer)| follow(&w, Strategy::Hints, answer, *id)))
            .await;
    let (mut calls, mut late) = (Vec::new(), Vec::new());
    for f in followed {
        let (c, d) = f?;
        calls.push(c.to_string());
        late.push(d);
    }
    Ok(format!(
        "five 60 s runs queued at once (a session with history), {slots} slot{}, an agent following check_after_s on each: status calls per run [{}], result seen after it finished {}\n",
        if slots == 1 { "" } else { "s" },
        calls.join(" "),
        Stats::of(&late).line()
    ))
}

/// Status calls of an agent that follows `check_after_s` on runs of one session that has no
/// history (its first run), of 10 minutes: without progress the hint can only say "check in
/// 15 s"; with the Graph reporting its fraction every 30 s the server estimates the end.
async fn progress_guided(seed: u64, n: usize) -> anyhow::Result<String> {
    let mut out = String::from(
        "agent following check_after_s on a 10 min run of a session without history (first run), calls per run\n",
    );
    for (label, every) in [("no progress", None), ("fraction every 30 s", Some(30_000u64))] {
        let mut calls = Vec::new();
        let mut late = Vec::new();
        for i in 0..n {
            let mut w = World::new(seed ^ (i as u64), Policy::default()).await?;
            w.start_relay(CONTROL_POLL)?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut arguments = json!({"duration_ms": 600_000u64});
            if let Some(e) = every {
                arguments["progress_every_ms"] = json!(e);
            }
            let queued = w
                .tool(
                    ToolName::RunGraphSession,
                    json!({
                        "graph_session_id": session_id().to_string(),
                        "arguments": arguments,
                        "idempotency_key": format!("sim-progress-{i:08}"),
                    }),
                )
                .await?;
            let id = CommandId::parse("command_id", queued["command_id"].as_str().unwrap_or_default())?;
            let (c, seen) = follow(&w, Strategy::Hints, &queued, id).await?;
            calls.push(f64::from(c));
            late.push(seen);
            w.stop_relay().await;
        }
        let calls = Stats::of(&calls);
        out += &format!(
            "  {label}: {:.1} calls per run (max {:.0}), the result seen {} after it finished\n",
            calls.mean,
            calls.max,
            Stats::of(&late).line()
        );
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Strategy {
    Fixed(u64),
    Backoff,
    Hints,
}

impl Strategy {
    fn name(self) -> String {
        match self {
            Self::Fixed(s) => format!("fixed {s} s"),
            Self::Backoff => "exponential 2 s doubling, cap 30 s".into(),
            Self::Hints => "follow check_after_s".into(),
        }
    }
}

/// One agent following `strategy` until it sees the run finished: (status calls, seconds
/// between the run finishing and the agent seeing it).
async fn follow(w: &World, strategy: Strategy, queued: &Value, id: CommandId) -> anyhow::Result<(u32, f64)> {
    let mut calls = 0u32;
    let mut wait = match strategy {
        Strategy::Fixed(s) => Duration::from_secs(s),
        Strategy::Backoff => Duration::from_secs(2),
        Strategy::Hints => Duration::from_secs(queued["check_after_s"].as_u64().unwrap_or(1)),
    };
    loop {
        tokio::time::sleep(wait).await;
        calls += 1;
        let out = w.tool(ToolName::GetGraphRun, json!({ "command_id": id.to_string() })).await?;
        let status: RunStatus = serde_json::from_value(out["status"].clone())?;
        if status.is_terminal() {
            let r = w.run(id).await?;
            let seen = domain::clock::Clock::now(w.clock.as_ref());
            return Ok((calls, secs(r.finished_at.unwrap_or(seen), seen)));
        }
        wait = match strategy {
            Strategy::Fixed(s) => Duration::from_secs(s),
            Strategy::Backoff => (wait * 2).min(Duration::from_secs(30)),
            Strategy::Hints => Duration::from_secs(out["check_after_s"].as_u64().unwrap_or(15).max(1)),
        };
    }
}

/// Status calls and detection delay per polling strategy, for runs of about a minute.
async fn polling(seed: u64, n: usize) -> anyhow::Result<String> {
    let mut out = format!(
        "agent polling get_graph_run, one recurring graph session of about a minute (log-normal, median 60 s, \
         sigma {SESSION_SIGMA} run to run, min 5 s), n={n} per row\n  \
         report: fixed 2 s = 47 calls; backoff as many calls as fixed 15 s and detects twice as late\n  \
         hints learn the session's durations from its completed runs (the first runs of a row have no history)\n  \
         {:<36} {:>18} {:>22}\n",
        "strategy", "calls mean (median, p95)", "detection delay"
    );
    for (k, strategy) in
        [Strategy::Fixed(2), Strategy::Fixed(15), Strategy::Backoff, Strategy::Hints].into_iter().enumerate()
    {
        let mut rng = Rng::new(seed ^ 0x0100 ^ k as u64);
        let w = world(seed).await?;
        let (mut calls, mut delays) = (Vec::new(), Vec::new());
        for i in 0..n {
            tokio::time::sleep(rng.between(Duration::ZERO, w.policy.poll_interval)).await;
            let d = rng.lognormal(MINUTE_MEDIAN, SESSION_SIGMA, MIN_RUN);
            let (id, queued) = queue(&w, d, (k * 100_000 + i) as u64).await?;
            let (c, delay) = follow(&w, strategy, &queued, id).await?;
            calls.push(f64::from(c));
            delays.push(delay);
        }
        let c = Stats::of(&calls);
        let d = Stats::of(&delays);
        out += &format!(
            "  {:<36} {:>5.1} ({:>2.0}, p95 {:>2.0}) {:>7.1} s (p95 {:>4.1} s)\n",
            strategy.name(),
            c.mean,
            c.median,
            c.p95,
            d.mean,
            d.p95
        );
    }
    Ok(out)
}

/// Cancel at a random 0–40 s after queueing: queued runs end at once, running ones within a
/// control poll.
async fn cancel(seed: u64, n: usize, doorbell: bool) -> anyhow::Result<String> {
    let mut rng = Rng::new(seed ^ 0x0200);
    let w = world_with(seed, doorbell).await?;
    let (mut queued_n, mut running_n, mut done_n) = (0, 0, 0);
    let (mut queued_t, mut running_t) = (Vec::new(), Vec::new());
    for i in 0..n {
        tokio::time::sleep(rng.between(Duration::ZERO, w.policy.poll_interval)).await;
        let d = rng.lognormal(MINUTE_MEDIAN, SIGMA, MIN_RUN);
        let (id, _) = queue(&w, d, 500_000 + i as u64).await?;
        tokio::time::sleep(rng.between(Duration::ZERO, Duration::from_secs(40))).await;
        let before = w.run(id).await?.status;
        let asked = domain::clock::Clock::now(w.clock.as_ref());
        w.tool(ToolName::CancelGraphRun, json!({ "command_id": id.to_string() })).await?;
        let r = terminal(&w, id).await?;
        let took = secs(asked, r.finished_at.unwrap_or(asked)).max(0.0);
        match before {
            RunStatus::Queued => {
                queued_n += 1;
                queued_t.push(took);
            }
            RunStatus::Running => {
                running_n += 1;
                running_t.push(took);
            }
            _ => done_n += 1,
        }
    }
    let q = if queued_t.is_empty() {
        "none".into()
    } else {
        format!("terminal after max {:.1} s", Stats::of(&queued_t).max)
    };
    let r = if running_t.is_empty() { "none".into() } else { Stats::of(&running_t).line() };
    let mode = if doorbell { ", with the doorbell (control rings)" } else { "" };
    Ok(format!(
        "cancel at a random 0–40 s after queueing, 3 s control poll{mode}, n={n}: still queued {queued_n}, running {running_n}, already finished {done_n}\n  \
         report:  queued: terminal after 0.0 s; running: mean 2.0 s, p95 3.3 s, max 3.5 s\n  \
         product: queued: {q}; running: {r}\n"
    ))
}

/// The desktop offline for 600 s with five runs queued, then back; and a lost completion POST.
async fn offline_and_lost(seed: u64) -> anyhow::Result<String> {
    let mut w = World::new(seed, Policy::default()).await?;
    w.start_relay(CONTROL_POLL)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.stop_relay().await;
    let mut rng = Rng::new(seed ^ 0x0300);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(queue(&w, rng.lognormal(Duration::from_secs(20), SIGMA, MIN_RUN), 700_000 + i).await?.0);
    }
    tokio::time::sleep(Duration::from_secs(600)).await;
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(
            w.run(*id).await?.view(domain::clock::Clock::now(w.clock.as_ref()), &w.policy).status.as_str().to_owned(),
        );
    }
    statuses.dedup();
    let back = domain::clock::Clock::now(w.clock.as_ref());
    w.start_relay(CONTROL_POLL)?;
    let mut first_start = f64::MAX;
    let mut last_end: f64 = 0.0;
    let mut completed = 0;
    for id in &ids {
        let r = terminal(&w, *id).await?;
        first_start = first_start.min(secs(back, r.started_at.unwrap_or(back)));
        last_end = last_end.max(secs(back, r.finished_at.unwrap_or(back)));
        completed += usize::from(r.status == RunStatus::Completed);
    }
    // A completion POST lost once: the outbox delivers it.
    w.faults.lose_next_complete.store(true, std::sync::atomic::Ordering::SeqCst);
    let (id, _) = queue(&w, Duration::from_secs(20), 800_000).await?;
    let r = terminal(&w, id).await?;
    let ran = r.started_at.map(|s| secs(s, r.finished_at.unwrap_or(s))).unwrap_or(0.0);
    w.stop_relay().await;
    Ok(format!(
        "desktop offline 600 s with 5 runs queued: statuses {statuses:?}, executed 0\n  \
         back online: first start +{first_start:.1} s, all 5 ended by +{last_end:.1} s, completed {completed}\n  \
         report: first start +3 s, all 5 completed by +131 s\n\
         completion POST lost once (outbox always on): recorded {:.1} s after start for a 20 s run (report: delivered 40 s after start; \
         with the outbox off the run stays running forever — the product has no such mode)\n  \
         product: the failed pass is retried after the backoff (about 1 s), not at the next 20 s tick\n",
        ran
    ))
}

/// Every seed-000 table.
///
/// # Errors
/// Simulation set-up failures.
pub async fn tables(seed: u64, n: usize) -> anyhow::Result<String> {
    let mut out = String::from("\n== seed 000: Graph runs on the owner's desktop ==\n");
    out += &pickup(seed, n, false).await?;
    out += &pickup(seed, n, true).await?;
    out += &five_at_once(seed, 1).await?;
    out += &five_at_once(seed, 5).await?;
    out += &five_at_once_followed(seed, 1).await?;
    out += &five_at_once_followed(seed, 5).await?;
    out += &progress_guided(seed, n.min(4)).await?;
    out += &polling(seed, n).await?;
    out += &cancel(seed, n, false).await?;
    out += &cancel(seed, n, true).await?;
    out += &offline_and_lost(seed).await?;
    Ok(out)
}
