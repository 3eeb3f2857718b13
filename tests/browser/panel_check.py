"""The owner's panel in a real browser (Debian's Chromium driven by Playwright), with a real MCP
client (the official Python SDK 2.x) on the other side — the scenario of issue 9.

Run by tests/tests/panel_browser.rs, which starts the local server (panel refresh 1 s) and passes:
  FC_PANEL_URL (the printed sign-in URL), FC_MCP_URL, FC_MCP_TOKEN, FC_CHROMIUM, FC_SCREENSHOT
Prints one JSON line of measurements; exits non-zero on the first failed check.
"""

import asyncio
import base64
import datetime
import hashlib
import json
import os
import sys
import time

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright, expect

ENV = {k: os.environ[k] for k in ["FC_PANEL_URL", "FC_MCP_URL", "FC_MCP_TOKEN", "FC_CHROMIUM", "FC_SCREENSHOT", "FC_PAIR_URL",
                                   "FC_AXE_JS"]}
TIMEOUT = 15_000
AXE = open(ENV["FC_AXE_JS"], encoding="utf-8").read()
# Every WCAG 2.x A/AA rule and axe's best practices; serious and critical findings fail the run.
AXE_RUN = """axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',
    'wcag22aa', 'best-practice', 'experimental']}}).then(r => r.violations.map(v => ({id: v.id, impact: v.impact,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))"""
SCANS = []


async def scan(page, state):
    """axe-core over the page as it is now (evaluated through the driver, which the panel's CSP
    does not govern); records the state and its serious or critical findings."""
    if not await page.evaluate("typeof axe !== 'undefined'"):
        await page.evaluate(AXE + "\n;0")
    found = await page.evaluate(AXE_RUN)
    bad = [v for v in found if v["impact"] in ("serious", "critical")]
    SCANS.append({"state": state, "serious_or_critical": bad, "minor_or_moderate": [v["id"] for v in found if v not in bad]})


async def no_overflow(page, state):
    """Nothing sticks out of the viewport sideways (the page does not scroll horizontally)."""
    wide = await page.evaluate("""() => {
        const w = document.documentElement.clientWidth;
        // Visually hidden (a 1 px box that clips, as .sr-only and a phone's table heads): not seen.
        const clipped = e => {
            for (let p = e; p; p = p.parentElement) {
                if (p.getBoundingClientRect().width <= 1 && getComputedStyle(p).overflow === 'hidden') return true;
            }
            return false;
        };
        const out = [...document.querySelectorAll('body *')].filter(e => {
            const r = e.getBoundingClientRect();
            return r.width > 0 && r.right > w + 1 && !clipped(e);
        }).slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' ' + Math.round(e.getBoundingClientRect().right));
        return {scroll: document.documentElement.scrollWidth, width: w, out};
    }""")
    check(wide["scroll"] <= wide["width"] and not wide["out"], f"{state}: wider than the {wide['width']} px viewport: {wide}")


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


async def mcp_call(tool, args):
    """One tool call through the official SDK; returns (is_error, structured or text)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ENV['FC_MCP_TOKEN']}"})
    async with Client(streamable_http_client(ENV["FC_MCP_URL"], http_client=http)) as client:
        r = await client.call_tool(tool, args)
        if r.is_error:
            return True, r.content[0].text
        return False, r.structured_content


async def main():
    metrics = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=ENV["FC_CHROMIUM"],
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        # The clipboard, to read back what a Copy button copied.
        context = await browser.new_context(accept_downloads=True, viewport={"width": 1200, "height": 900},
                                            permissions=["clipboard-read", "clipboard-write"])
        page = await context.new_page()
        # The page's timers run on Playwright's clock: it flows like the real one until the
        # checks below pause it and move it by hand, so no check waits on wall-clock time.
        await page.clock.install()
        dialogs = []

        async def on_dialog(d):
            dialogs.append(d.message)
            await d.accept()

        page.on("dialog", lambda d: asyncio.ensure_future(on_dialog(d)))
        loaded = []

        async def on_response(res):
            try:
                body = await res.body()
            except Exception:
                body = b""
            loaded.append((res.url, len(body)))

        page.on("response", lambda r: asyncio.ensure_future(on_response(r)))
        overview_requests = []
        page.on("request", lambda r: overview_requests.append(time.monotonic()) if r.url.endswith("/owner/overview") else None)
        refreshes_done = []
        page.on("requestfinished", lambda r: refreshes_done.append(r.url) if r.url.endswith("/owner/overview") else None)
        # Owner API requests on the way: a refresh is over when none is.
        inflight = {"n": 0}

        def count(delta):
            return lambda r: inflight.__setitem__("n", inflight["n"] + delta) if "/owner/" in r.url else None

        page.on("request", count(1))
        page.on("requestfinished", count(-1))
        page.on("requestfailed", count(-1))

        # ---- sign in through the printed URL; the token leaves the address bar at once ----
        started = time.monotonic()
        await page.goto(ENV["FC_PANEL_URL"])
        await expect(page.locator("#links li").first).to_be_visible(timeout=TIMEOUT)
        metrics["first_view_ms"] = round((time.monotonic() - started) * 1000)
        await page.wait_for_load_state("networkidle")
        metrics["first_load_bytes"] = sum(n for _, n in loaded)
        metrics["first_load_requests"] = len(loaded)
        check("token=" not in page.url, f"the token stayed in the address bar: {page.url}")
        # The demo chat's task list: from the click to its rows on screen.
        clicked = time.monotonic()
        await page.locator("#links li > button", has_text="Demo chat").click()
        await expect(page.locator("#tasks tr").first).to_contain_text("Waiting for host chat", timeout=TIMEOUT)
        metrics["task_list_ms"] = round((time.monotonic() - clicked) * 1000)
        metrics["signed_in_to_task_list_ms"] = round((time.monotonic() - started) * 1000)
        await scan(page, "signed in, the demo chat open")

        # ---- "Connect a chat" says whether a chat has connected: none yet, then one signs in ----
        await expect(page.locator("#chat-status")).to_contain_text("No chat has connected yet", timeout=TIMEOUT)
        client_id = await connect_a_chat(context)
        await expect(page.locator("#chat-status")).to_contain_text("A chat has connected", timeout=TIMEOUT)
        await expect(page.locator("#chat-status strong")).to_have_text(f"app {client_id[:12]}…")
        # The host it said it is, with its version and how it signed in.
        host_row = page.locator("#hosts-seen tr", has_text="browser-test-chat")
        await expect(host_row).to_contain_text("1.2.3", timeout=TIMEOUT)
        await expect(host_row).to_contain_text("Signed in (registered client)")
        metrics["chat_connected_shown"] = True
        await scan(page, "a chat connected")

        # ---- "Connect a chat" on the local server: the clients on this machine and the tunnel,
        # never the 127.0.0.1 URL for claude.ai or ChatGPT ----
        mcp_url = ENV["FC_MCP_URL"]
        base = mcp_url.rsplit("/mcp", 1)[0]
        connect = page.locator("section", has=page.locator("#h-connect"))
        said = await connect.text_content()
        check("Claude Code" in said and f"cloudflared tunnel --url {base}" in said and "FOUNDRY_PUBLIC_URL=" in said,
              f"'Connect a chat' does not name Claude Code and the tunnel: {said!r}")
        check("Paste this URL into Claude" not in said and "Paste this URL into your chat" not in said,
              f"'Connect a chat' tells to paste the local URL into a chat: {said!r}")
        for host in await connect.locator("details").all():
            text = await host.text_content()
            if "claude.ai" in text or "ChatGPT" in text:
                check(mcp_url not in text, f"claude.ai/ChatGPT are told the local URL: {text!r}")
        claude_code = connect.locator("details", has_text="Claude Code")
        await claude_code.locator("summary").click()
        await expect(claude_code.locator("code")).to_have_text(f"claude mcp add --transport http foundry {mcp_url}")
        await scan(page, "Connect a chat: Claude Code open")
        metrics["connect_a_chat_local"] = True

        # ---- "Add a desktop": this server's commands, the project filled in ----
        projects = (await owner_api(page, "GET", "/projects"))["projects"]
        await expect(page.locator("#install-line")).to_have_text(f"curl -fsSL {base}/relay/install.sh | sh")
        await expect(page.locator("#pair-line")).to_have_text(f"relay pair {base}")
        check(len(projects) == 1 and await page.locator("#hello-choose").is_hidden(), "a chooser for one project")
        await expect(page.locator("#hello-line")).to_have_text(
            f"relay session add --hello --project {projects[0]['project_id']}")
        await expect(page.locator("#run-line")).to_have_text("relay run")

        # ---- a project, enabled ----
        await page.fill("#project-name", "Browser project")
        await page.click("#project-form button[type=submit]")
        row = page.locator("#projects tr", has_text="Browser project")
        await expect(row).to_have_count(1, timeout=TIMEOUT)
        switch = row.get_by_role("switch")
        await expect(switch).to_have_attribute("aria-checked", "false", timeout=TIMEOUT)
        await switch.click()
        await expect(switch).to_have_attribute("aria-checked", "true", timeout=TIMEOUT)
        await expect(switch).to_have_text("Enabled for connected agents in Browser project")
        await scan(page, "a project enabled")
        # Its id, with a Copy button that copies exactly the API's id.
        browser_project = next(p["project_id"] for p in (await owner_api(page, "GET", "/projects"))["projects"]
                               if p["name"] == "Browser project")
        await expect(row).to_contain_text(browser_project)
        await row.get_by_role("button", name="Copy project id of Browser project").click()
        copied = await page.evaluate("navigator.clipboard.readText()")
        check(copied == browser_project, f"the project id copied is {copied!r}, the API's {browser_project!r}")
        # Two projects now: the hello line has a chooser, and follows it.
        await expect(page.locator("#hello-choose")).to_be_visible(timeout=TIMEOUT)
        await page.select_option("#hello-project", label="Browser project")
        await expect(page.locator("#hello-line")).to_have_text(f"relay session add --hello --project {browser_project}")
        await page.locator("#copy-hello").click()
        copied = await page.evaluate("navigator.clipboard.readText()")
        check(copied == f"relay session add --hello --project {browser_project}", f"the hello line copied: {copied!r}")
        metrics["add_a_desktop"] = True
        metrics["project_id_copied"] = True

        # ---- a device: its token is shown once, and gone after a reload ----
        await page.fill("#device-name", "CI desktop")
        await page.click("#device-form button[type=submit]")
        await expect(page.locator("#device-token-value")).to_contain_text("fcd_", timeout=TIMEOUT)
        token = await page.locator("#device-token-value").text_content()
        await page.reload()
        await expect(page.locator("#devices tr", has_text="CI desktop")).to_have_count(1, timeout=TIMEOUT)
        check(await page.locator("#device-token").is_hidden(), "the device token box survived a reload")
        check(token not in await page.content(), "the device token is still in the page after a reload")
        # ---- each desktop's state: never connected, online (the server's own relay synced) ----
        await expect(page.locator("#devices tr", has_text="CI desktop")).to_contain_text("Never connected")
        local = page.locator("#devices tr", has_text="local relay")
        await expect(local).to_contain_text("Online: polling", timeout=TIMEOUT)
        await expect(local).to_contain_text("0.4.0-ci · linux-x86_64 · ci-host · 3 runs at once")
        await expect(local).to_contain_text("0.5.0-ci available: relay update")
        await expect(local).to_contain_text(
            "2 shared sessions are unavailable here (a folder missing, or refused by macOS privacy controls): run relay check on this desktop")
        # ---- pause and resume it ----
        await local.get_by_role("button", name="Pause local relay").click()
        await expect(local).to_contain_text("Paused: runs wait", timeout=TIMEOUT)
        await local.get_by_role("button", name="Resume local relay").click()
        await expect(local).to_contain_text("Online: polling", timeout=TIMEOUT)
        # ---- busy with a run (named by its session), and a stale desktop removed ----
        busy = page.locator("#devices tr", has_text="Busy desktop")
        await expect(busy).to_contain_text("Busy: running “Quarterly numbers” since", timeout=TIMEOUT)
        await expect(busy).to_contain_text("Quarterly numbers")
        # Each id the owner types elsewhere is shown with its Copy button: desktops, sessions.
        await expect(busy).to_contain_text("gs_" + "d" * 32)
        for name in ["Copy device id of CI desktop", "Copy device id of Busy desktop",
                     "Copy session id of Quarterly numbers", "Copy session id of Monthly digest"]:
            await expect(page.get_by_role("button", name=name)).to_have_count(1)
        # ---- a running Graph's progress in the runs table: words, a bar, the log as text ----
        running = page.locator("#runs tr", has_text="quarterly")
        await expect(running).to_contain_text("Crunching Q3 40%", timeout=TIMEOUT)
        bar = running.locator("progress")
        check(await bar.count() == 1 and await bar.get_attribute("value") == "0.4", "no progress bar at 0.4")
        tail = await running.locator("td.run-progress").get_attribute("title")
        check(tail is not None and "loaded 1,204 rows" in tail, f"the log tail is not on the cell: {tail!r}")
        check(await page.locator("#runs img").count() == 0, "a log line became markup")
        # Its row opens its detail: timeline, who queued it, progress and the log lines as text.
        await running.get_by_role("button", name="Details of the quarterly run").click()
        await expect(page.locator("#h-run")).to_have_text("Run of quarterly", timeout=TIMEOUT)
        await expect(page.locator("#run-timeline")).to_contain_text("Started")
        await expect(page.locator("#run-agent")).to_have_text("panel-check")
        await expect(page.locator("#run-session")).to_contain_text("Quarterly numbers")
        await expect(page.locator("#run-session")).to_contain_text("gs_" + "d" * 32)
        await expect(page.locator("#run-detail").get_by_role("button", name="Copy session id of quarterly")).to_have_count(1)
        await expect(page.locator("#run-progress")).to_contain_text("Crunching Q3 (40%)")
        await expect(page.locator("#run-tail")).to_have_text("loaded 1,204 rows\n<img src=x onerror=alert(1)>")
        check(await page.locator("#run-detail img").count() == 0, "the run's log became markup")
        # ---- a queued run cancelled from the panel (with confirmation): it reads cancelled ----
        queued = page.locator("#runs tr", has_text="monthly")
        await expect(queued).to_contain_text("queued", timeout=TIMEOUT)
        check(await running.get_by_role("button", name="Cancel the quarterly run").count() == 1,
              "the running run offers no Cancel")
        await queued.get_by_role("button", name="Cancel the monthly run").click()
        await expect(queued).to_contain_text("cancelled", timeout=TIMEOUT)
        check(any("Cancel the monthly run?" in d for d in dialogs), f"no confirmation was asked: {dialogs}")
        await expect(queued.get_by_role("button", name="Cancel the monthly run")).to_have_count(0)
        metrics["run_cancelled_in_panel"] = True
        gone = page.locator("#devices tr", has_text="Gone desktop")
        await expect(gone).to_contain_text("Stale: never connected; remove it if it is gone", timeout=TIMEOUT)
        await expect(gone).to_contain_text("If the computer is on: run relay check there (systemctl --user status foundry-relay).")
        check(await busy.get_by_role("button", name="Remove Busy desktop").count() == 0,
              "a desktop that is not stale offers Remove")
        await scan(page, "desktops: online, never connected, busy, stale; a run with progress")
        await gone.get_by_role("button", name="Remove Gone desktop").click()
        await expect(gone).to_have_count(0, timeout=TIMEOUT)
        check(any("Remove Gone desktop?" in d for d in dialogs), f"no confirmation was asked: {dialogs}")

        # ---- a chat link in that project ----
        await page.select_option("#link-project", label="Browser project")
        await page.fill("#link-name", "Browser chat")
        await page.click("#link-form button[type=submit]")
        await expect(page.locator("#h-link")).to_have_text("Browser chat", timeout=TIMEOUT)
        await expect(page.locator("#subscription-line")).to_have_text("Open the host conversation to start each task.")
        link = (await page.locator("#link-id").text_content()).strip()
        await expect(page.get_by_role("button", name="Copy chat link id", exact=True)).to_have_count(1)
        await expect(page.get_by_role("button", name="Copy chat link id of Browser chat")).to_have_count(1)
        await expect(page.locator("#links li", has_text="Browser chat")).to_contain_text(link)

        # ---- double-click Assign: one task, waiting for the host chat ----
        await page.fill("#objective", "Summarize the quarterly numbers")
        await page.dblclick("#assign")
        rows = page.locator("#tasks tr")
        await expect(rows).to_have_count(1, timeout=TIMEOUT)
        await expect(rows.first).to_contain_text("Waiting for host chat")
        # Two refreshes later a second task would show.
        await refresh_ticks(page, refreshes_done, inflight, 2)
        await expect(rows).to_have_count(1)
        await page.clock.resume()
        err, inbox = await mcp_call("list_linked_chat_tasks", {"chat_link_id": link})
        check(not err and len(inbox["tasks"]) == 1, f"the double click made {inbox}")
        task = inbox["tasks"][0]["task_id"]

        # ---- the chat claims it: the panel follows on its refresh ----
        err, claim = await mcp_call("claim_linked_chat_task", {"chat_link_id": link, "task_id": task})
        check(not err, f"claim: {claim}")
        await expect(rows.first).to_contain_text("Claimed by host chat", timeout=TIMEOUT)

        # ---- an artifact and the result: Completed, with a working download ----
        content = b"quarter,revenue\nQ3,1200\n"
        err, up = await mcp_call("upload_linked_chat_artifact", {
            "chat_link_id": link, "task_id": task, "claim_id": claim["claim_id"], "artifact_id": "numbers",
            "name": "numbers.csv", "content_type": "text/csv", "content_base64": base64.b64encode(content).decode()})
        check(not err, f"upload: {up}")
        err, sub = await mcp_call("submit_linked_chat_result", {
            "chat_link_id": link, "task_id": task, "claim_id": claim["claim_id"], "status": "completed",
            "result": "Revenue grew 12% in Q3."})
        check(not err, f"submit: {sub}")
        await expect(rows.first).to_contain_text("Completed", timeout=TIMEOUT)
        await rows.first.get_by_role("button").click()
        await expect(page.locator("#task-result")).to_have_text("Revenue grew 12% in Q3.", timeout=TIMEOUT)
        # Its timeline: assigned, claimed after a wait, completed after the work (as text).
        steps = await page.locator("#task-timeline li").all_text_contents()
        check(len(steps) == 3 and steps[0].startswith("Assigned") and steps[1].startswith("Claimed")
              and "waiting" in steps[1] and steps[2].startswith("Completed") and "working" in steps[2],
              f"the task's timeline: {steps}")
        async with page.expect_download() as dl:
            await page.locator("#task-artifacts a", has_text="numbers.csv").click()
        download = await dl.value
        path = await download.path()
        check(open(path, "rb").read() == content, "the downloaded artifact differs")
        check(download.suggested_filename == "numbers.csv", f"download name {download.suggested_filename}")
        await scan(page, "a completed task's detail with its artifact")

        # ---- a second task, cancelled in the panel (with confirmation): the chat cannot claim it ----
        await page.fill("#objective", "Draft the board memo")
        await page.click("#assign")
        second = page.locator("#tasks tr", has_text="Draft the board memo")
        await expect(second).to_have_count(1, timeout=TIMEOUT)
        await second.get_by_role("button").click()
        await expect(page.locator("#cancel-task")).to_be_visible(timeout=TIMEOUT)
        await page.click("#cancel-task")
        await expect(second).to_contain_text("Cancelled", timeout=TIMEOUT)
        check(any("Cancel this task?" in d for d in dialogs), f"no confirmation was asked: {dialogs}")
        second_id = await second_task_id(page, link)
        err, inbox = await mcp_call("list_linked_chat_tasks", {"chat_link_id": link})
        check(not err and all(t["task_id"] != second_id for t in inbox["tasks"]),
              f"the cancelled task is still in the chat's list of open tasks: {inbox}")
        err2, refused = await mcp_call("claim_linked_chat_task", {"chat_link_id": link, "task_id": second_id})
        check(err2 and refused == "not claimable: cancelled", f"claim of the cancelled task: {refused}")

        # ---- bad objectives show the API's error next to the button ----
        await page.fill("#objective", "")
        await page.click("#assign")
        await expect(page.locator("#assign-error")).to_have_text(
            "objective: must be 1 to 10000 characters and not blank (got 0)", timeout=TIMEOUT)
        await page.evaluate("document.getElementById('objective').value = 'x'.repeat(10001)")
        await page.click("#assign")
        await expect(page.locator("#assign-error")).to_contain_text("objective: must be 1 to 10000 characters", timeout=TIMEOUT)

        # ---- the keyboard alone: type, Tab to Assign, Enter ----
        await page.fill("#objective", "")
        await page.focus("#objective")
        await page.keyboard.type("Reply to the supplier")
        await page.keyboard.press("Tab")
        check(await page.evaluate("document.activeElement.id") == "assign", "Tab from the objective does not reach Assign")
        await page.keyboard.press("Enter")
        await expect(page.locator("#tasks tr", has_text="Reply to the supplier")).to_have_count(1, timeout=TIMEOUT)
        await expect(page.locator("#assign-error")).to_be_hidden()

        # ---- an event subscription: the secret once, then the line and the last delivery ----
        hook = start_receiver()
        await page.fill("#subscription-url", hook)
        await page.click("#subscription-form button[type=submit]")
        await expect(page.locator("#subscription-secret-value")).to_contain_text("whsec_", timeout=TIMEOUT)
        await expect(page.locator("#subscription-line")).to_contain_text(
            "An event subscription is active for this chat", timeout=TIMEOUT)
        await page.fill("#objective", "Ping the webhook")
        await page.click("#assign")
        await expect(page.locator("#delivery-line")).to_contain_text(
            "Last delivery: task.assigned", timeout=TIMEOUT)
        await expect(page.locator("#delivery-line")).to_contain_text("delivered (HTTP 204)")
        await page.click("#unsubscribe")
        await expect(page.locator("#subscription-line")).to_have_text(
            "Open the host conversation to start each task.", timeout=TIMEOUT)

        # ---- refresh: while visible, paused while hidden, at once when shown again ----
        # Counted in periods of the panel's own timer (1 s here) on the paused page clock.
        visible, periods = await refresh_ticks(page, refreshes_done, inflight, 3)
        # Headless Chromium keeps every tab "visible" (a background tab or a minimized window
        # included), so the tab is hidden the way the browser reports it: the property and the
        # event the panel listens to.
        await set_visibility(page, "hidden")
        await flush(page)
        overview_requests.clear()
        await page.clock.run_for(3000)
        await flush(page)
        hidden = len(overview_requests)
        async with page.expect_request_finished(lambda r: r.url.endswith("/owner/overview"), timeout=TIMEOUT):
            await set_visibility(page, "visible")
        back = len(overview_requests)
        await page.clock.resume()
        check(visible == 3 and periods == 3,
              f"{visible} refreshes in {periods} periods of the panel's timer while visible (3 in 3)")
        check(hidden == 0, f"{hidden} refreshes in 3 periods while hidden")
        check(back >= 1, "no refresh when the tab became visible again")
        metrics["refreshes_in_3_periods_visible"] = visible
        metrics["refreshes_in_3_periods_hidden"] = hidden

        await page.locator("#h-link").scroll_into_view_if_needed()
        await page.screenshot(path=ENV["FC_SCREENSHOT"], full_page=True)

        # ---- a phone: 390 px wide, nothing sticks out sideways; and the dark scheme ----
        await page.set_viewport_size({"width": 390, "height": 844})
        await flush(page)
        await no_overflow(page, "390 px")
        await scan(page, "390 px wide")
        await page.screenshot(path=ENV["FC_SCREENSHOT"].replace(".png", "-phone.png"), full_page=True)
        await page.emulate_media(color_scheme="dark")
        await scan(page, "390 px wide, dark")
        await page.set_viewport_size({"width": 1200, "height": 900})
        await scan(page, "dark")
        await page.emulate_media(color_scheme="light")

        # ---- the keyboard alone, one whole journey: a project, enabled, a chat linked to it, a
        # task assigned, the chat completes it, its result opened — Tab, typing, Enter, Space ----
        await page.evaluate("document.activeElement && document.activeElement.blur()")
        await tab_to(page, "e.id === 'project-name'")
        await page.keyboard.type("Keyboard project")
        await page.keyboard.press("Enter")
        kb_row = page.locator("#projects tr", has_text="Keyboard project")
        await expect(kb_row).to_have_count(1, timeout=TIMEOUT)
        await tab_to(page, "e.getAttribute('role') === 'switch' && e.textContent.includes('Keyboard project')")
        check(await page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none",
              "the focused switch shows no focus ring")
        await page.keyboard.press("Space")
        await expect(kb_row.get_by_role("switch")).to_have_attribute("aria-checked", "true", timeout=TIMEOUT)
        await tab_to(page, "e.id === 'link-project'")
        await page.keyboard.type("Keyboard")
        await tab_to(page, "e.id === 'link-name'")
        await page.keyboard.type("Keyboard chat")
        await page.keyboard.press("Enter")
        await expect(page.locator("#h-link")).to_have_text("Keyboard chat", timeout=TIMEOUT)
        kb_link = (await page.locator("#link-id").text_content()).strip()
        err, kb_links = await mcp_call("list_linked_chat_tasks", {"chat_link_id": kb_link})
        check(not err, f"the keyboard's chat link: {kb_links}")
        await tab_to(page, "e.id === 'objective'")
        await page.keyboard.type("Keyboard task")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")
        kb_task_row = page.locator("#tasks tr", has_text="Keyboard task")
        await expect(kb_task_row).to_contain_text("Waiting for host chat", timeout=TIMEOUT)
        err, inbox = await mcp_call("list_linked_chat_tasks", {"chat_link_id": kb_link})
        check(not err and len(inbox["tasks"]) == 1, f"the keyboard's task: {inbox}")
        kb_task = inbox["tasks"][0]["task_id"]
        err, kb_claim = await mcp_call("claim_linked_chat_task", {"chat_link_id": kb_link, "task_id": kb_task})
        check(not err, f"claim: {kb_claim}")
        err, done = await mcp_call("submit_linked_chat_result", {"chat_link_id": kb_link, "task_id": kb_task,
                                   "claim_id": kb_claim["claim_id"], "status": "completed", "result": "Done by keyboard."})
        check(not err, f"submit: {done}")
        await expect(kb_task_row).to_contain_text("Completed", timeout=TIMEOUT)
        await tab_to(page, "e.closest('#tasks') && e.textContent.includes('Keyboard task')")
        await page.keyboard.press("Enter")
        await expect(page.locator("#task-result")).to_have_text("Done by keyboard.", timeout=TIMEOUT)
        metrics["keyboard_journey"] = True
        await scan(page, "after the keyboard journey")

        # A tool result's page: the claim's `url` (what ChatGPT cites) opens the task's detail.
        url = claim.get("url") or ""
        check(url.endswith(f"/panel?link={link}&task={task}"), f"the claim's url: {url!r}")
        await page.goto(url + "#token=" + await page.evaluate("sessionStorage.getItem('fc.token')"))
        await expect(page.locator("#task-result")).to_have_text("Revenue grew 12% in Q3.", timeout=TIMEOUT)
        check(await page.locator("#task-detail").is_visible(), "the linked task's detail is not shown")

        # Pairing a desktop: the URL `relay pair` printed, opened signed in; the panel shows
        # the waiting desktop and approves it. (The page's clock is real again: resume() above.)
        pair_url = ENV["FC_PAIR_URL"]
        await page.goto(pair_url + "#token=" + await page.evaluate("sessionStorage.getItem('fc.token')"))
        await page.locator("#pairing").wait_for(state="visible", timeout=TIMEOUT)
        name = await page.locator("#pairing-name").text_content()
        check(name == "Browser desktop", f"the waiting desktop shows as {name!r}")
        source = await page.locator("#pairing-source").text_content()
        check(source == "127.0.0.1", f"the approve page shows where the request came from: {source!r}")
        age = await page.locator("#pairing-age").text_content()
        check(age.endswith("ago"), f"the approve page shows how long ago it was asked: {age!r}")
        check("/relay/install.sh | sh" in (await page.locator("#install-line").text_content()), "no install line")
        await page.locator("#pair-approve").click()
        await page.locator("#pair-done", has_text="Approved").wait_for(timeout=TIMEOUT)
        await scan(page, "a desktop approved")
        metrics["paired_in_panel"] = True
        await page.screenshot(path=ENV["FC_SCREENSHOT"].replace(".png", "-paired.png"), full_page=True)
        await browser.close()
    bad = [s for s in SCANS if s["serious_or_critical"]]
    metrics["axe_states_scanned"] = len(SCANS)
    metrics["axe_serious_or_critical"] = sum(len(s["serious_or_critical"]) for s in bad)
    metrics["axe_minor_or_moderate"] = sorted({v for s in SCANS for v in s["minor_or_moderate"]})
    check(not bad, "axe-core found serious or critical violations: " + json.dumps(bad))
    print(json.dumps(metrics))


async def connect_a_chat(context):
    """A chat signs in as a chat does: it registers itself, the owner allows it on the local
    server's consent page (in this browser, which holds the owner's session), and it trades the
    code for tokens (PKCE). Returns its client id."""
    base = ENV["FC_MCP_URL"].rsplit("/mcp", 1)[0]
    redirect = "http://127.0.0.1:9/callback"
    async with httpx2.AsyncClient() as http:
        reg = await http.post(f"{base}/register", json={"client_name": "Browser test chat", "redirect_uris": [redirect]})
        check(reg.status_code == 201, f"registration: {reg.status_code} {reg.text}")
        client_id = reg.json()["client_id"]
        verifier = base64.urlsafe_b64encode(os.urandom(48)).rstrip(b"=").decode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        codes = []

        async def callback(route):
            codes.append(route.request.url)
            await route.fulfill(status=200, body="signed in", content_type="text/plain")

        await context.route("http://127.0.0.1:9/**", callback)
        consent = await context.new_page()
        query = httpx2.QueryParams({"response_type": "code", "client_id": client_id, "redirect_uri": redirect,
                                    "code_challenge": challenge, "code_challenge_method": "S256", "state": "chat-1",
                                    "scope": "osfoundry:read osfoundry:run", "resource": ENV["FC_MCP_URL"]})
        await consent.goto(f"{base}/oauth/authorize?{query}")
        await consent.get_by_role("button", name="Allow").click()
        await consent.wait_for_url("http://127.0.0.1:9/**", timeout=TIMEOUT)
        await consent.close()
        code = httpx2.URL(codes[-1]).params["code"]
        tokens = await http.post(f"{base}/oauth/token", data={"grant_type": "authorization_code", "code": code,
                                                               "redirect_uri": redirect, "client_id": client_id,
                                                               "code_verifier": verifier})
        check(tokens.status_code == 200, f"the code exchange: {tokens.status_code} {tokens.text}")
        # Its handshake, naming the host: the panel's list of hosts shows it.
        init = await http.post(ENV["FC_MCP_URL"], headers={
            "authorization": f"Bearer {tokens.json()['access_token']}",
            "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"},
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "browser-test-chat", "version": "1.2.3"}}})
        check(init.status_code == 200, f"the chat's initialize: {init.status_code} {init.text}")
    return client_id


def start_receiver():
    """A webhook receiver on 127.0.0.1 that answers 204 (the local server may call loopback)."""
    import http.server
    import threading

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook"


async def tab_to(page, is_target, most=200):
    """Presses Tab until the focused element `e` satisfies the JavaScript `is_target` (at most
    `most` presses): only the keyboard moves the focus, in the page's own order."""
    for _ in range(most):
        await page.keyboard.press("Tab")
        if await page.evaluate(f"(() => {{ const e = document.activeElement; return !!e && ({is_target}); }})()"):
            return
    check(False, f"Tab never reached the element where {is_target}")


async def flush(page):
    """One round trip through the page: what its scripts started before now has been reported."""
    await page.evaluate("0")


async def refresh_ticks(page, refreshes_done, inflight, n):
    """Pauses the page's clock and moves it one refresh period (1 s) at a time until the panel's
    own timer has refreshed the overview `n` times; each period's refresh is awaited (bounded)
    before the next period, since the panel arms its next timer when a refresh ends. A period
    that starts none is moved again, at most 2n periods. Returns the refreshes seen and the
    periods it took (a panel refreshing at half the rate takes 2n)."""
    await pause_now(page)
    await settle(page, inflight, time.monotonic() + 5)
    seen, periods = 0, 0
    for _ in range(2 * n):
        if seen >= n:
            break
        periods += 1
        before = len(refreshes_done)
        await page.clock.run_for(1000)
        deadline = time.monotonic() + 5
        while len(refreshes_done) == before and time.monotonic() < deadline:
            await flush(page)
        seen += len(refreshes_done) - before
        # Let the refresh finish (the link's task list after the overview) and arm the next timer:
        # between the overview's answer and the task list's request nothing is in flight, so
        # the refresh counts as done only after several quiet round trips through the page.
        await settle(page, inflight, deadline)
    return seen, periods


async def settle(page, inflight, deadline, quiet=5):
    """Waits (until `deadline`) for `quiet` round trips through the page in a row with none of
    the panel's requests in flight."""
    calm = 0
    while calm < quiet and time.monotonic() < deadline:
        await flush(page)
        calm = calm + 1 if inflight["n"] == 0 else 0


async def pause_now(page):
    """Pauses the page's flowing clock at about its present time. Playwright pauses only at a
    time given ahead, and the page's clock moves on while that call travels (tens of ms on a
    loaded machine: "Cannot fast-forward to the past"), so the lead is read again and doubled
    until the pause lands. A refresh the lead's fast-forward starts is let finish by the caller
    before it counts."""
    lead_ms = 10
    for _ in range(8):
        now_ms = await page.evaluate("Date.now()")
        at = datetime.datetime.fromtimestamp((now_ms + lead_ms) / 1000, tz=datetime.timezone.utc)
        try:
            await page.clock.pause_at(at)
            return
        except PlaywrightError as e:
            if "to the past" not in str(e):
                raise
            lead_ms *= 2
    raise AssertionError("the page's clock could not be paused (it kept passing the pause time)")


async def set_visibility(page, state):
    """Reports the tab as `state` to the page (document.visibilityState and the event)."""
    await page.evaluate(
        """state => {
            Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => state });
            Object.defineProperty(document, 'hidden', { configurable: true, get: () => state === 'hidden' });
            document.dispatchEvent(new Event('visibilitychange'));
        }""",
        state,
    )


async def owner_api(page, method, path):
    """The owner API with the panel's own token: what the panel shows is checked against it."""
    token = await page.evaluate("sessionStorage.getItem('fc.token')")
    base = ENV["FC_MCP_URL"].rsplit("/mcp", 1)[0]
    async with httpx2.AsyncClient() as http:
        r = await http.request(method, f"{base}/owner{path}", headers={"Authorization": f"Bearer {token}"})
        check(r.status_code == 200, f"{method} {path}: {r.status_code} {r.text}")
        return r.json()


async def second_task_id(page, link):
    """The id of the cancelled task: the panel's API (the owner's view), as the chat cannot list it."""
    token = await page.evaluate("sessionStorage.getItem('fc.token')")
    base = ENV["FC_MCP_URL"].rsplit("/mcp", 1)[0]
    async with httpx2.AsyncClient() as http:
        r = await http.get(f"{base}/owner/links/{link}/tasks", headers={"Authorization": f"Bearer {token}"})
        tasks = r.json()["tasks"]
    return next(t["task_id"] for t in tasks if t["objective"] == "Draft the board memo")


asyncio.run(main())
