#!/usr/bin/env python3
"""The docs' pictures, drawn from the measured data the docs cite (no plotting library: plain SVG).

    python3 infra/pictures.py            rewrites docs/pictures/*.svg from the data
    python3 infra/pictures.py --check    exits 1 naming each picture that is not what its data draws
    python3 infra/pictures.py --from-ci-log LOG   keeps LOG's phase times (a `.ci/run` on a fresh
                                         clone) as docs/ci-phases.txt, then redraws
    --docs DIR                           another docs folder (the freshness test's planted change)

Data (each written by a command, named in docs/results.md or, for the CI phases, docs/history.md):
  docs/doorbell-figures.json   the doorbell benchmark: pickup and cancel, polling vs doorbell
  docs/sim-seed42.txt          `cargo run -p sim --profile server -- --seed 42 --runs 2000`
  docs/ci-phases.txt           the test command's "wall time per phase" on a fresh clone (--from-ci-log)
  docs/bench-figures.md        ./infra/bench.sh: the peer benchmark's tables, as it prints them
"""

import json
import os
import re
import sys
from html import escape

W = 720
FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"'
COLOURS = {"polling": "#8a94a3", "doorbell": "#2857d6", "bar": "#2857d6", "ref": "#b3261e"}


def svg(height, title, desc, body, width=W):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-labelledby="t d" {FONT} font-size="13">\n'
            f'<title id="t">{escape(title)}</title>\n<desc id="d">{escape(desc)}</desc>\n'
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>\n{body}</svg>\n')


def text(x, y, s, anchor="start", size=13, weight="normal", fill="#1d2128"):
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}" '
            f'fill="{fill}">{escape(s)}</text>\n')


def doorbell(data):
    """Pickup and cancel, p50 / p95 / max, polling vs doorbell, on a log scale of seconds."""
    b = data["benchmark"]
    rows = [("pickup", "pickup (queued → started)"), ("cancel_exec", "cancel, the Graph itself"),
            ("cancel_child", "cancel, a child of the Graph")]
    lo, hi = -2.0, 2.0  # 10 ms … 100 s
    width = 980
    left, right, top, row_h = 230, width - 300, 60, 70
    x = lambda s: left + (right - left) * (max(lo, min(hi, __import__("math").log10(max(s, 1e-3)))) - lo) / (hi - lo)
    body = text(20, 28, f"Doorbell vs polling: how long until a run starts or stops (n = {b['pickup']['on']['n']} each, log scale)",
                size=15, weight="bold")
    height = top + row_h * len(rows) + 60
    for tick in (0.01, 0.1, 1, 10, 100):
        tx = x(tick)
        body += f'<line x1="{tx:.1f}" y1="{top - 8}" x2="{tx:.1f}" y2="{height - 50}" stroke="#d6d9de"/>\n'
        body += text(tx, height - 34, f"{tick:g} s", anchor="middle", size=12, fill="#5c6470")
    for i, (key, label) in enumerate(rows):
        y0 = top + i * row_h
        body += text(20, y0 + 26, label)
        for j, mode in enumerate(("off", "on")):
            m = b[key][mode]
            y = y0 + 8 + j * 24
            colour = COLOURS["polling" if mode == "off" else "doorbell"]
            body += (f'<rect x="{left}" y="{y}" width="{x(m["p50"]) - left:.1f}" height="16" fill="{colour}"/>\n'
                     f'<line x1="{x(m["p95"]):.1f}" y1="{y - 2}" x2="{x(m["p95"]):.1f}" y2="{y + 18}" stroke="{colour}" stroke-width="3"/>\n')
            body += text(right + 16, y + 13,
                         f'{"polling" if mode == "off" else "doorbell"}: p50 {m["p50"]:.3f} s, p95 {m["p95"]:.3f}, max {m["max"]:.3f}',
                         size=11, fill="#5c6470")
    body += text(20, height - 12, "bar: median; tick: p95. " + b["command"], size=10, fill="#5c6470")
    return svg(height, "Doorbell vs polling", "Pickup and cancel latencies with and without the doorbell, from docs/doorbell-figures.json.", body, width)


def strategies(report):
    """The seed's status-call table: calls per run by polling strategy, detection delay beside it."""
    rows = []
    for line in report.splitlines():
        m = re.match(r"\s{2}(fixed 2 s|fixed 15 s|exponential 2 s doubling, cap 30 s|follow check_after_s)\s+"
                     r"([\d.]+) \(\s*\d+, p95\s+\d+\)\s+([\d.]+) s \(p95\s+([\d.]+) s\)", line)
        if m:
            rows.append((m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))))
    if len(rows) != 4:
        raise SystemExit(f"docs/sim-seed42.txt: the strategy table has {len(rows)} of its 4 rows")
    width = 980
    left, right, top, row_h = 250, width - 360, 56, 36
    most = max(47.0, max(r[1] for r in rows))
    x = lambda v: left + (right - left) * v / most
    height = top + row_h * len(rows) + 50
    body = text(20, 28, "Status calls per run by agent strategy (simulation, seed 42, 2,000 runs per row)", size=15, weight="bold")
    for i, (name, calls, delay, p95) in enumerate(rows):
        y = top + i * row_h
        body += text(20, y + 14, name)
        body += f'<rect x="{left}" y="{y}" width="{x(calls) - left:.1f}" height="20" fill="{COLOURS["bar"]}"/>\n'
        body += text(right + 16, y + 14, f"{calls:g} calls · seen {delay:g} s after the end (p95 {p95:g} s)", size=12, fill="#5c6470")
    rx = x(47)
    body += f'<line x1="{rx:.1f}" y1="{top - 6}" x2="{rx:.1f}" y2="{height - 40}" stroke="{COLOURS["ref"]}" stroke-dasharray="4 3"/>\n'
    body += text(rx, height - 26, "the seed report: 47 calls at a fixed 2 s", anchor="end", size=11, fill=COLOURS["ref"])
    return svg(height, "Status calls per strategy", "Mean get_graph_run calls per run and detection delay, from docs/sim-seed42.txt.", body, width)


def slots(report):
    """Five 60 s runs queued at once: each run's start–finish, with 1 slot and with 5."""
    lanes = []
    for line in report.splitlines():
        m = re.match(r"five 60 s runs queued at once, (\d+) slots?, start–finish after queueing:(.*); all done after (\d+) s", line)
        if m:
            spans = [(int(a), int(b)) for a, b in re.findall(r"\[(\d+)–(\d+) s\]", m.group(2))]
            lanes.append((int(m.group(1)), spans, int(m.group(3))))
    if len(lanes) != 2:
        raise SystemExit(f"docs/sim-seed42.txt: {len(lanes)} of the 2 five-at-once lines")
    left, right, top = 110, W - 30, 56
    end = max(l[2] for l in lanes)
    right -= 110
    x = lambda t: left + (right - left) * t / end
    bar_h, gap = 10, 4
    body = text(20, 28, "Five 60 s runs queued at once: each run's start to finish (simulation, seed 42)", size=15, weight="bold")
    y = top
    for n, spans, done in lanes:
        body += text(20, y + 3 * (bar_h + gap), f"{n} slot{'s' if n > 1 else ''}")
        for k, (a, b) in enumerate(spans):
            body += f'<rect x="{x(a):.1f}" y="{y + k * (bar_h + gap)}" width="{x(b) - x(a):.1f}" height="{bar_h}" fill="{COLOURS["bar"]}"/>\n'
        body += text(x(done) + 4, y + 5 * (bar_h + gap) - 4, f"all done at {done} s", size=11, fill="#5c6470")
        y += 5 * (bar_h + gap) + 24
    for t in range(0, end + 1, 60):
        body += f'<line x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{y - 16}" stroke="#d6d9de"/>\n'
        body += text(x(t), y, f"{t} s", anchor="middle", size=11, fill="#5c6470")
    return svg(y + 24, "Five runs at once, one slot vs five", "Start and finish of five queued runs, from docs/sim-seed42.txt.", body)


def ci_phases(log):
    """The test command's phases on a fresh clone: seconds each, as one stacked bar and a legend."""
    m = re.search(r"wall time per phase \(total (\d+)s\):\n((?:\s+\d+s  .*\n)+)", log)
    if not m:
        raise SystemExit("docs/ci-phases.txt: no \"wall time per phase\" block")
    total = int(m.group(1))
    phases = [(int(a), b.strip()) for a, b in re.findall(r"\s+(\d+)s  (.*)", m.group(2))]
    left, right, top = 20, W - 20, 56
    x = lambda t: left + (right - left) * t / total
    colours = ["#5c6470", "#2857d6", "#8a94a3", "#1e6b34", "#7fa2ff", "#b3261e"]
    body = text(20, 28, f"The test command on a fresh clone (pinned tools cached): {total} s, by phase", size=15, weight="bold")
    at = 0
    for i, (s, _) in enumerate(phases):
        body += f'<rect x="{x(at):.1f}" y="{top}" width="{max(x(at + s) - x(at), 0):.1f}" height="22" fill="{colours[i % len(colours)]}"/>\n'
        at += s
    y = top + 48
    for i, (s, name) in enumerate(phases):
        body += f'<rect x="20" y="{y - 10}" width="12" height="12" fill="{colours[i % len(colours)]}"/>\n'
        body += text(40, y, f"{s} s  {name if len(name) <= 90 else name[:89] + '…'}", size=12)
        y += 20
    return svg(y + 10, "The test command's phases", f"Seconds per phase of the test command ({total} s in all), from docs/ci-phases.txt.", body)


def peer(table):
    """The peer benchmark: requests/s of the local server and of the seed-004 reconstruction, per
    call and connection count, each bar labelled with its p99."""
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 15 and cells[1].isdigit():
            rows.append((cells[0], int(cells[1]), float(cells[2]), float(cells[4]), float(cells[6]), float(cells[8])))
    if len(rows) != 4:
        raise SystemExit(f"docs/bench-figures.md: {len(rows)} of the 4 benchmark rows")
    width = 900
    left, right, top, group_h, bar_h = 250, width - 210, 70, 66, 20
    step = 2500
    hi = step * -(-max(max(r[2], r[4]) for r in rows) // step)
    x = lambda v: left + (right - left) * v / hi
    body = text(20, 28, "Peer benchmark: requests per second, the local server vs the seed-004 reconstruction",
                size=15, weight="bold")
    body += f'<rect x="20" y="42" width="12" height="12" fill="{COLOURS["doorbell"]}"/>\n' + text(38, 52, "local server", size=12)
    body += f'<rect x="140" y="42" width="12" height="12" fill="{COLOURS["polling"]}"/>\n'
    body += text(158, 52, "reconstruction (../shared/bench)", size=12)
    bottom = top + group_h * len(rows)
    for v in range(0, int(hi) + 1, step):
        body += f'<line x1="{x(v):.1f}" y1="{top - 6}" x2="{x(v):.1f}" y2="{bottom}" stroke="#d6d9de"/>\n'
        body += text(x(v), bottom + 16, f"{v:,}", anchor="middle", size=11, fill="#5c6470")
    for i, (call, conns, ours, ours_p99, theirs, theirs_p99) in enumerate(rows):
        y0 = top + i * group_h
        name = call.replace("_linked_chat_tasks", "").replace("_linked_chat_task", "")
        body += text(20, y0 + 20, f"{name}, {conns} connection{'s' if conns > 1 else ''}")
        body += text(20, y0 + 38, f"{ours / theirs:.1f}× the requests/s", size=12, fill="#5c6470")
        for j, (rps, p99, colour) in enumerate(((ours, ours_p99, COLOURS["doorbell"]), (theirs, theirs_p99, COLOURS["polling"]))):
            y = y0 + 4 + j * (bar_h + 4)
            body += f'<rect x="{left}" y="{y}" width="{x(rps) - left:.1f}" height="{bar_h}" fill="{colour}"/>\n'
            body += text(x(rps) + 6, y + 15, f"{rps:,.0f} req/s · p99 {p99:.2f} ms", size=12)
    return svg(bottom + 30, "Peer benchmark",
               "Requests per second and p99 of list and claim at 1 and 4 connections, local server vs the seed-004 "
               "reconstruction, from docs/bench-figures.md.", body, width)


def pictures(docs):
    with open(os.path.join(docs, "doorbell-figures.json"), encoding="utf-8") as f:
        bell = json.load(f)
    with open(os.path.join(docs, "sim-seed42.txt"), encoding="utf-8") as f:
        sim = f.read()
    with open(os.path.join(docs, "ci-phases.txt"), encoding="utf-8") as f:
        ci = f.read()
    with open(os.path.join(docs, "bench-figures.md"), encoding="utf-8") as f:
        bench = f.read()
    return {"doorbell.svg": doorbell(bell), "status-calls.svg": strategies(sim), "slots.svg": slots(sim),
            "ci-phases.svg": ci_phases(ci), "peer.svg": peer(bench)}


def main():
    args = sys.argv[1:]
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
    if "--docs" in args:
        docs = args[args.index("--docs") + 1]
    out = os.path.join(docs, "pictures")
    if "--from-ci-log" in args:
        with open(args[args.index("--from-ci-log") + 1], encoding="utf-8", errors="replace") as f:
            log = re.sub(r"\x1b\[[0-9;]*m|\x1b\(B", "", f.read())
        m = re.search(r"wall time per phase \(total \d+s\):\n(?:\s+\d+s  .*\n)+", log)
        if not m:
            raise SystemExit("that log has no \"wall time per phase\" block")
        with open(os.path.join(docs, "ci-phases.txt"), "w", encoding="utf-8") as f:
            f.write(m.group(0))
    drawn = pictures(docs)
    if "--check" in args:
        stale = []
        for name, body in drawn.items():
            try:
                with open(os.path.join(out, name), encoding="utf-8") as f:
                    if f.read() == body:
                        continue
            except FileNotFoundError:
                pass
            stale.append(name)
        if stale:
            print(f"older than their data: {', '.join(stale)} (run: python3 infra/pictures.py)", file=sys.stderr)
            sys.exit(1)
        return
    os.makedirs(out, exist_ok=True)
    for name, body in drawn.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(body)


if __name__ == "__main__":
    main()
