"""What every host driver of infra/hosts-tui shares: the desk a host runs on (a scratch HOME and
a BROWSER script that records the URL it is asked to open), the owner's approval of the consent
page, a terminal (tmux) to run a host that wants one, and a loopback stand-in for a vendor's model
API that records what it is sent and answers from a script: first a call of the MCP tool, then,
once the tool's result comes back, a last message.

Only the standard library: the drivers run with the machine's Python 3.11, no virtualenv.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "hosts.md"
PAGE_URL = "http://127.0.0.1:8787"
# What the stand-in model says when the tool's result came back: the host prints it.
DONE = "FOUNDRY-TOOL-RESULT-SEEN"


class Failed(Exception):
    """A step did not happen: the driver exits non-zero with this message."""


def wait_until(what: str, seconds: float, probe):
    """`probe()`'s first truthy answer, polled every 0.2 s; `Failed` after `seconds`."""
    end = time.monotonic() + seconds
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            raise Failed(f"waited {seconds:.0f} s for {what}")
        time.sleep(0.2)


def snippet(tag: str) -> str:
    """The text of the fenced block tagged `tag` in docs/hosts.md (```<lang> <tag>)."""
    m = re.search(r"^```\S* " + re.escape(tag) + r"\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    if not m:
        raise Failed(f"no block tagged {tag!r} in docs/hosts.md")
    return m.group(1)


class Desk:
    """A scratch HOME under `work`, with a BROWSER script recording each URL into `opened`."""

    def __init__(self, work: Path, tools: Path):
        self.work = work
        self.home = work / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.opened = work / "opened"
        self.browser = work / "browser.sh"
        self.browser.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$1\" >> {shlex.quote(str(self.opened))}\n")
        self.browser.chmod(0o700)
        self.tools = tools  # the npm folder (node_modules/.bin has node 22 and the hosts)

    def env(self, **extra: str) -> dict[str, str]:
        """The host's whole environment: nothing of this shell's but PATH (Node 22 first)."""
        env = {
            "HOME": str(self.home),
            "PATH": f"{self.tools / 'node_modules' / '.bin'}:{os.environ.get('PATH', '')}",
            "BROWSER": str(self.browser),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
        }
        env.update(extra)
        return env

    def opened_url(self, seconds: float = 60) -> str:
        """The first URL the host asked the browser to open."""

        def probe():
            if self.opened.exists():
                lines = self.opened.read_text().splitlines()
                return lines[0] if lines else None
            return None

        return wait_until("the host to open its sign-in page", seconds, probe)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def approve(consent_url: str, public: str, server: str, owner_token: str) -> str:
    """The owner approves the consent page at `consent_url` as a browser does (the panel's
    session cookie, the page, its form's Allow), straight to the server (`server`, where the
    host was given `public`); the browser then follows the redirect to the host's loopback
    callback. Returns the callback URL."""
    direct = consent_url.replace(public.rstrip("/"), server.rstrip("/"), 1)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)
    req = urllib.request.Request(f"{server}/oauth/session", method="POST", data=b"")
    req.add_header("Authorization", f"Bearer {owner_token}")
    opener.open(req, timeout=30).read()
    html = opener.open(direct, timeout=30).read().decode()
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    if not m:
        raise Failed(f"no consent form at {direct}")
    form = urllib.parse.urlencode({"csrf": m.group(1), "decision": "allow"}).encode()
    try:
        opener.open(urllib.request.Request(f"{server}/oauth/authorize", data=form), timeout=30)
        raise Failed("the owner's Allow was not answered with a redirect")
    except urllib.error.HTTPError as e:
        if e.code not in (302, 303):
            raise Failed(f"the owner's Allow answered {e.code}: {e.read()[:300]!r}") from e
        callback = e.headers["Location"]
    urllib.request.urlopen(callback, timeout=30).read()
    return callback


class Terminal:
    """A host in a tmux session of its own (a real TTY), read through capture-pane."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path, width: int = 200):
        if not shutil.which("tmux"):
            raise Failed("tmux is not installed (Debian's package tmux)")
        self.name = name
        self.socket = str(cwd / "tmux.sock")
        envs = [f"{k}={v}" for k, v in env.items()]
        cmd = " ".join(shlex.quote(a) for a in argv)
        subprocess.run(
            ["tmux", "-S", self.socket, "new-session", "-d", "-s", name, "-x", str(width), "-y", "50", "-c", str(cwd),
             "env", "-i", *envs, "bash", "-c", cmd + "; echo '[exited '$?']'; sleep 3600"],
            check=True,
        )

    def screen(self) -> str:
        out = subprocess.run(["tmux", "-S", self.socket, "capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name],
                             capture_output=True, text=True)
        return out.stdout

    def keys(self, *keys: str) -> None:
        """tmux send-keys: literal text with -l, or key names (Enter, Escape, Down)."""
        subprocess.run(["tmux", "-S", self.socket, "send-keys", "-t", self.name, *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run(["tmux", "-S", self.socket, "send-keys", "-t", self.name, "-l", text], check=True)

    def wait_for(self, text: str, seconds: float = 60) -> str:
        try:
            return wait_until(f"{text!r} on the screen", seconds, lambda: self.screen() if text in self.screen() else None)
        except Failed as e:
            raise Failed(f"{e}; the screen:\n{self.screen()}") from e

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


class StandIn:
    """A loopback stand-in for a vendor's model API. Subclasses answer `answer(path, body)` with
    (status, headers, bytes); every request is kept in `requests` (method, path, body as JSON
    where it is JSON), so a driver can see the tool's result come back."""

    def __init__(self):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _serve(self):
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                with stand_in.lock:
                    stand_in.requests.append({"method": self.command, "path": self.path, "body": body,
                                              "headers": {k.lower(): v for k, v in self.headers.items()
                                                          if k.lower() not in ("authorization", "x-api-key", "cookie")}})
                status, headers, data = stand_in.answer(self.command, self.path, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str, body) -> tuple[int, dict, bytes]:
        raise NotImplementedError

    def bodies_text(self) -> str:
        with self.lock:
            return json.dumps([r["body"] for r in self.requests])

    def close(self) -> None:
        self.server.shutdown()


def sse(events: list[tuple[str | None, dict]]) -> bytes:
    """Server-sent events: `event:` (when named) and `data:` lines."""
    out = []
    for name, data in events:
        if name:
            out.append(f"event: {name}\n")
        out.append(f"data: {json.dumps(data)}\n\n")
    return "".join(out).encode()
