"""The run card (MCP Apps) in a real browser: Debian's Chromium driven by Playwright, the card in
a sandboxed frame of a test host built on the pinned @modelcontextprotocol/ext-apps AppBridge,
against the local server and a real relay that runs the Graph — the scenario of issue 41.

Run by tests/tests/mcp_apps_browser.rs, which starts the local server (1 s poll) and a relay
whose one session ("Quarterly report") says its progress, waits for the file FC_GO, then prints
41 lines. Passes: FC_MCP_URL, FC_MCP_TOKEN, FC_PROJECT, FC_SESSION, FC_GO, FC_NODE_MODULES,
FC_CHROMIUM, FC_SHOTS (the screenshots' folder), FC_AXE_JS.
Prints one JSON line of measurements; exits non-zero on the first failed check.
"""

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request
import uuid

from playwright.async_api import async_playwright

ENV = {k: os.environ[k] for k in ["FC_MCP_URL", "FC_MCP_TOKEN", "FC_PROJECT", "FC_SESSION", "FC_GO",
                                   "FC_NODE_MODULES", "FC_CHROMIUM", "FC_SHOTS", "FC_AXE_JS"]}
UI = {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}
HERE = pathlib.Path(__file__).parent
TIMEOUT = 30_000
# The card's wait before checking a run whose answer had no check_after_s (run-card.html).
CARD_LONGEST_WAIT_S = 30
# Every host-relayed tool call the views made: when, which tool, and the check_after_s it got.
CALLS = []
# cancel_graph_run calls the host put to its user (the test's user approves each).
ASKED = []
CONSOLE = []
AXE = open(ENV["FC_AXE_JS"], encoding="utf-8").read()
AXE_RUN = """axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',
    'wcag22aa', 'best-practice']}}).then(r => r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.id + ' ' + v.nodes.slice(0, 2).map(n => n.target.join(' ')).join(', ')))"""


def fail(message):
    print(json.dumps({"failed": message}))
    sys.exit(1)


def check(ok, message):
    if not ok:
        fail(message)


def mcp(method, params, name=None):
    """One request of the 2026-07-28 revision, as a host that declared MCP Apps sends it."""
    params = dict(params)
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                       "io.modelcontextprotocol/clientCapabilities": UI}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2026-07-28", "mcp-method": method,
               "authorization": "Bearer " + ENV["FC_MCP_TOKEN"]}
    if name:
        headers["mcp-name"] = name
    req = urllib.request.Request(ENV["FC_MCP_URL"], data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=30) as res:
        answer = json.loads(res.read())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def call(tool, arguments):
    return mcp("tools/call", {"name": tool, "arguments": arguments}, tool)


def bridge_bundle():
    """The host side of ext-apps, bundled for the browser by the pinned esbuild."""
    modules = pathlib.Path(ENV["FC_NODE_MODULES"])
    entry = ('import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";\n'
             "window.AppBridge = AppBridge; window.PostMessageTransport = PostMessageTransport;\n")
    out = subprocess.run([str(modules / ".bin" / "esbuild"), "--bundle", "--format=iife", "--platform=browser",
                          "--log-level=warning"], input=entry.encode(), cwd=modules.parent, capture_output=True,
                         timeout=120)
    check(out.returncode == 0, "esbuild: " + out.stderr.decode())
    return out.stdout


async def host_call(params_json):
    """The host's side of a view's tools/call: the MCP request, made by the host's client."""
    params = json.loads(params_json)
    if params["name"] == "cancel_graph_run":
        ASKED.append(params)
    at = time.monotonic()
    try:
        result = await asyncio.to_thread(call, params["name"], params.get("arguments") or {})
    except Exception as e:  # the view sees a refused call
        result = {"content": [{"type": "text", "text": str(e)}], "isError": True}
    structured = result.get("structuredContent") or {}
    CALLS.append({"at": at, "done": time.monotonic(), "tool": params["name"],
                  "command_id": (params.get("arguments") or {}).get("command_id"),
                  "status": structured.get("status"), "check_after_s": structured.get("check_after_s")})
    return json.dumps(result)


def polls(command_id):
    return [c for c in CALLS if c["tool"] == "get_graph_run" and c["command_id"] == command_id]


async def text(frame, selector):
    return await frame.locator(selector).text_content()


async def wait_text(frame, selector, want, timeout=TIMEOUT):
    await frame.locator(selector).filter(has_text=want).wait_for(timeout=timeout)


async def card(page, index):
    handle = await page.locator("iframe").nth(index).element_handle()
    return await handle.content_frame()


async def quiet_for(command_id, seconds):
    """The calls for the run made during the next `seconds` (an absence can only be shown by
    waiting); a call already under way when the window opened is not one of them."""
    start = time.monotonic()
    await asyncio.sleep(seconds)
    return len([c for c in polls(command_id) if c["at"] >= start])


def cadence(command_id, delivered_at, first_after):
    """Seconds each refresh came after the earliest moment its check_after_s allowed (negative:
    too early). The first counts from the tool result the host delivered."""
    slack, since, after = [], delivered_at, first_after
    for c in polls(command_id):
        slack.append(round(c["at"] - since - after, 3))
        since, after = c["done"], c["check_after_s"] or 0
    return slack


async def main():
    listed = mcp("tools/list", {}, "tools/list")["tools"]
    uris = {t["name"]: t.get("_meta", {}).get("ui", {}).get("resourceUri") for t in listed}
    uri = uris["run_graph_session"]
    check(uri and uris["get_graph_run"] == uri, f"the card tools are not linked: {uris}")
    content = mcp("resources/read", {"uri": uri}, uri)["contents"][0]
    html, csp = content["text"], content["_meta"]["ui"]["csp"]
    check(content["mimeType"] == "text/html;profile=mcp-app", content["mimeType"])
    go = pathlib.Path(ENV["FC_GO"])
    project, session = ENV["FC_PROJECT"], ENV["FC_SESSION"]

    # A first run of the session, done at once: the server learns how long it takes, so the
    # card's check_after_s is seconds, not the 15 s of a session without history.
    go.write_text("go")
    warm = call("run_graph_session", {"graph_session_id": session, "project_id": project,
                                      "idempotency_key": "warm-" + uuid.uuid4().hex})["structuredContent"]
    deadline = time.monotonic() + 30
    while call("get_graph_run", {"command_id": warm["command_id"]})["structuredContent"]["status"] != "completed":
        check(time.monotonic() < deadline, "the warm-up run did not complete")
        await asyncio.sleep(0.2)
    go.unlink()

    bundle = bridge_bundle()
    host_html = (HERE / "apps_host.html").read_bytes()
    shots = pathlib.Path(ENV["FC_SHOTS"])
    shots.mkdir(parents=True, exist_ok=True)
    metrics = {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=ENV["FC_CHROMIUM"], args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 600, "height": 900}, device_scale_factor=2)
        page.on("console", lambda m: CONSOLE.append(m.type + ": " + m.text))
        page.on("pageerror", lambda e: CONSOLE.append("pageerror: " + str(e)))

        async def serve(route):
            path = route.request.url.split("://", 1)[1].split("/", 1)[1]
            if path == "bridge.js":
                await route.fulfill(body=bundle, content_type="text/javascript")
            elif path == "":
                await route.fulfill(body=host_html, content_type="text/html")
            else:
                await route.fulfill(status=404, body="")

        await page.route("http://host.test/**", serve)
        await page.expose_function("hostCall", host_call)
        await page.goto("http://host.test/")

        async def start(arguments, result, theme, server_tools=True):
            index = await page.evaluate("(a) => window.startCard(a)", {
                "html": html, "csp": csp, "tool": "run_graph_session", "input": arguments, "result": result,
                "theme": theme, "serverTools": server_tools})
            delivered = time.monotonic()
            return index, delivered

        # ---- card A: queued → running (progress) → completed, with the result's first lines ----
        args_a = {"graph_session_id": session, "project_id": project, "idempotency_key": "card-a-" + uuid.uuid4().hex}
        result_a = call("run_graph_session", args_a)
        run_a = result_a["structuredContent"]
        check(run_a["status"] == "queued", f"{run_a}")
        index_a, delivered_a = await start(args_a, result_a, "light")
        a = await card(page, index_a)
        await wait_text(a, "#status", "queued")
        await wait_text(a, "#name", "Quarterly report")
        await wait_text(a, "#status", "running")
        await wait_text(a, "#progress-text", "Reading page 1 of 3 (33%)")
        check(await a.locator("#cancel").is_visible(), "no Cancel while running")
        go.write_text("go")
        await wait_text(a, "#status", "completed")
        shown = await text(a, "#result-text")
        check(shown.startswith("line 1 of the quarterly report") and "line 13" not in shown and shown.endswith("…"),
              f"not the first lines: {shown!r}")
        check(await text(a, "#more") == "Show all (41 lines)", await text(a, "#more"))
        await page.locator("iframe").nth(index_a).screenshot(path=str(shots / "run-card-light.png"))
        await a.locator("#more").click()
        full = await text(a, "#result-text")
        check("line 40 of the quarterly report" in full and "<img src=x onerror=alert(1)>" in full, "show all")
        check(await a.locator("img").count() == 0, "markup in a result became an element")
        check(not await a.locator("#cancel").is_visible(), "Cancel offered on a finished run")
        check("waited" in await text(a, "#times") and "ran" in await text(a, "#times"), await text(a, "#times"))
        # From here card A must stay silent; counted at the end, when the card's longest wait
        # between two checks has passed (a run without check_after_s — a finished one — would be
        # checked again after CARD_LONGEST_WAIT_S if the card ignored that it ended).
        a_done = time.monotonic()
        go.unlink()

        # ---- card B: running, hidden (no call), shown again (a call), then Cancel through the host ----
        args_b = {"graph_session_id": session, "project_id": project, "idempotency_key": "card-b-" + uuid.uuid4().hex}
        result_b = call("run_graph_session", args_b)
        run_b = result_b["structuredContent"]
        index_b, delivered_b = await start(args_b, result_b, "dark")
        b = await card(page, index_b)
        await wait_text(b, "#status", "running")
        await wait_text(b, "#progress-text", "Reading page 1 of 3")
        ca = max(c["check_after_s"] or 0 for c in polls(run_b["command_id"]))
        await b.evaluate("""() => { Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
                                    document.dispatchEvent(new Event('visibilitychange')); }""")
        metrics["calls_while_hidden"] = await quiet_for(run_b["command_id"], 2 * ca + 1)
        before = len(polls(run_b["command_id"]))
        await b.evaluate("""() => { Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});
                                    document.dispatchEvent(new Event('visibilitychange')); }""")
        deadline = time.monotonic() + ca + 3
        while len(polls(run_b["command_id"])) == before:
            check(time.monotonic() < deadline, "shown again, the card did not check")
            await asyncio.sleep(0.05)
        await page.locator("iframe").nth(index_b).screenshot(path=str(shots / "run-card-dark.png"))
        await b.locator("#cancel").click()
        await wait_text(b, "#status", "cancel")
        await wait_text(b, "#status", "cancelled")
        check(len(ASKED) == 1 and ASKED[0]["arguments"] == {"command_id": run_b["command_id"]}, f"{ASKED}")
        after = call("get_graph_run", {"command_id": run_b["command_id"]})["structuredContent"]
        check(after["status"] == "cancelled", f"the server has {after}")

        # ---- card C: a host that relays no tool calls (no serverTools): the card shows what it
        # was handed, offers no Cancel, says why, and calls nothing ----
        index_c, _ = await start(args_b, result_b, "light", server_tools=False)
        c = await card(page, index_c)
        await wait_text(c, "#status", "queued")
        await wait_text(c, "#note", "does not let the card check")
        check(not await c.locator("#cancel").is_visible(), "Cancel offered by a host that cannot relay it")
        # Its window is sized from what card C was handed (a card that called anyway would call
        # once that result's check_after_s passed, or the card's default wait without one), not
        # from what card B's later checks were told.
        hint_c = run_b.get("check_after_s")
        first_c = max(1, hint_c if hint_c is not None else CARD_LONGEST_WAIT_S)
        metrics["calls_without_server_tools"] = await quiet_for(run_b["command_id"], 2 * first_c + 1)

        # ---- theme change, accessibility, the CSP in force ----
        await page.evaluate("() => window.setTheme(0, 'dark')")
        # The change is a notification: the card applies it when its message arrives.
        try:
            await a.wait_for_function("document.documentElement.dataset.theme === 'dark' && "
                                      "document.documentElement.style.colorScheme === 'dark'", timeout=TIMEOUT)
        except Exception:
            fail("the theme change was not applied")
        serious = []
        for f in (a, b, c):
            if not await f.evaluate("typeof axe !== 'undefined'"):
                await f.evaluate(AXE + "\n;0")
            serious += await f.evaluate(AXE_RUN)
        metrics["console_problems"] = [m for m in CONSOLE if "Content Security Policy" in m or "pageerror" in m]
        # The policy is in force: the card's frame cannot reach the network, and the browser says
        # why (the message the check above found none of).
        seen = len(CONSOLE)
        reached = await a.evaluate("fetch('http://127.0.0.1:9/').then(() => 'reached', () => 'refused')")
        deadline = time.monotonic() + 5
        while not any("Content Security Policy" in m for m in CONSOLE[seen:]) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        metrics["csp_enforced"] = reached == "refused" and any("Content Security Policy" in m for m in CONSOLE[seen:])
        await asyncio.sleep(max(0.0, a_done + CARD_LONGEST_WAIT_S + 1 - time.monotonic()))
        metrics["calls_after_terminal"] = len([c for c in polls(run_a["command_id"]) if c["at"] >= a_done])
        teardown = await page.evaluate("() => window.teardown(1)")
        metrics["teardown_answer"] = teardown
        await browser.close()

    metrics["axe_serious_or_critical"] = serious
    metrics["asked_to_cancel"] = len(ASKED)
    metrics["slack_a"] = cadence(run_a["command_id"], delivered_a, run_a["check_after_s"])
    metrics["slack_b"] = cadence(run_b["command_id"], delivered_b, run_b["check_after_s"])
    metrics["polls_a"] = len(polls(run_a["command_id"]))
    metrics["polls_b"] = len(polls(run_b["command_id"]))
    metrics["session_lookups"] = len([c for c in CALLS if c["tool"] == "list_graph_sessions"])
    print(json.dumps(metrics))


asyncio.run(main())
