"""Claude Code (npm @anthropic-ai/claude-code, its native binary) against the MCP server, its
model a loopback stand-in for the Anthropic Messages API (`Messages`).

The run: the page's snippet (`claude-code-bearer` / `claude-code-sign-in`, URL and token filled
in) configures Claude Code in a scratch HOME; with --sign-in, `claude mcp login` runs in a
terminal, opens the consent page through BROWSER and the owner approves it; then
`claude -p PROMPT --allowedTools mcp__foundry-connect__<tool>` asks the stand-in, which loads the
deferred MCP tool with ToolSearch, calls it, and answers `common.DONE` once its result comes back.

What it relies on, and where each is documented:

- `claude mcp add --transport http NAME URL [--header "Authorization: Bearer ..."]`: the MCP page,
  https://code.claude.com/docs/en/mcp, and the package's own
  `claude mcp add --help` (its example "Add HTTP server with headers"; `-s/--scope` default
  "local": the server is kept in ~/.claude.json under the folder it was added in, so every
  `claude` below runs in that folder, `project/`).
- `claude mcp login NAME`: added in 2.1.186 to run a configured server's OAuth flow from the
  shell instead of the /mcp menu (release notes, https://code.claude.com/docs/zh-CN/whats-new/2026-w26);
  `claude mcp login --help` (`--no-browser` prints the URL instead). Not yet on the MCP page
  (anthropics/claude-code#70133). It opens a browser only on a TTY, hence `common.Terminal`;
  BROWSER is the program it opens then: read from the binary (its browser check returns
  "headless" when stdout is not a TTY, and trusts BROWSER otherwise), not found in Anthropic's
  docs. The sign-in is kept in ~/.claude/.credentials.json under `mcpOAuth` (seen on Linux).
- Its OAuth client: when the server's RFC 8414 metadata says
  `client_id_metadata_document_supported` (the local server's does) and the redirect URI is a
  loopback `/callback`, Claude Code's `client_id` is its document
  https://claude.ai/oauth/claude-code-client-metadata (in the binary as MCP_CLIENT_METADATA_URL;
  the byte-for-byte copy is tests/fixtures/hosts/documents/claude-code.json, its sources beside
  it); it registers through DCR otherwise. Offline the server can fetch that document only from a
  loopback copy: the server's development switches FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA=true
  and FOUNDRY_DEV_DOCUMENT_HOSTS=claude.ai=127.0.0.1:PORT (local/src/config.rs) send its fetch of
  claude.ai to PORT, where `DocumentHost` serves the kept bytes over TLS with the tests' loopback
  certificate (tests/fixtures/README.md). The driver reads the same FOUNDRY_DEV_DOCUMENT_HOSTS
  from its own environment; --sign-in fails without it. (The binary also reads
  MCP_OAUTH_CLIENT_METADATA_URL to name another document; not used: the vendor's is served.)
- ANTHROPIC_BASE_URL (the stand-in's URL; Claude Code appends /v1/messages) and
  ANTHROPIC_API_KEY (any value; sent as X-Api-Key; in print mode it is always used, the one-time
  approval prompt is interactive only): the environment variables page,
  https://code.claude.com/docs/de/env-vars (read in its de and ja editions).
- CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: the same env-vars page and
  https://code.claude.com/docs/en/settings (the same as DISABLE_AUTOUPDATER, DISABLE_BUG_COMMAND,
  DISABLE_ERROR_REPORTING and DISABLE_TELEMETRY together, as quoted in
  anthropics/claude-code#29134). With it only the model requests reach the stand-in, and nothing
  goes off the machine.
- `-p/--print`: the CLI reference, https://docs.anthropic.com/claude/docs/claude-code/cli-usage;
  the package's `claude --help`: "The workspace trust dialog is skipped when Claude is run in
  non-interactive mode (via -p ...)". So no onboarding, theme, API-key or trust answers are
  needed and no ~/.claude.json keys are written by hand; `claude mcp add` and `claude mcp login`
  ask nothing either.
- `--allowedTools mcp__foundry-connect__<tool>`: the CLI reference ("tools that should be allowed
  without prompting the user for permission"); MCP tools are named mcp__<server>__<tool> (the
  name the system prompt gives it, and the permission rules' form). Without it print mode answers the
  call itself with "Claude requested permissions to use mcp__foundry-connect__list_graph_sessions,
  but you haven't granted it yet." (is_error), where a person in the TUI would answer Yes.
- Tool search: the MCP page's "Scale with MCP tool search". The env-vars page says it is off by
  default when ANTHROPIC_BASE_URL is not a first-party host, but 2.1.328 defers
  the MCP tools against 127.0.0.1 all the same (`--debug-file`: "Dynamic tool loading: 0/23
  deferred tools included"; the system prompt lists them "available via ToolSearch"), so the
  stand-in first calls ToolSearch with `select:<name>` (the form ToolSearch's own description
  gives), as a model would; ENABLE_TOOL_SEARCH is left alone.

Requests Claude Code 2.1.328 sends the stand-in in this run: three `POST /v1/messages?beta=true`
(stream: true; ToolSearch, the tool, the last answer), nothing else.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import common

SERVER = "foundry-connect"  # the name the page's snippets give the server


class Messages(common.StandIn):
    """The Anthropic Messages API as Claude Code uses it: `POST /v1/messages?beta=true`, streamed
    as server-sent events when the body asks `stream: true` (`POST /v1/messages/count_tokens`
    answered too, should it come). Answers the way a model does with Claude Code's tool search on:
    the MCP tool is only named in the system prompt's list of deferred tools, so the first answer
    loads it with `ToolSearch` (`select:<name>`, the query form its description gives), the next
    calls it, and the one that carries its result says `common.DONE`. When Claude Code offers the
    tool outright (tool search off) the first answer calls it. Any other request (none come in
    print mode with nonessential traffic off) gets a short text."""

    def __init__(self, tool_name: str):
        self.tool_name = tool_name
        self.steps: list[str] = []
        super().__init__()

    @staticmethod
    def _history(body) -> list[tuple[str, str, bool]]:
        """The tool results the request carries: (the called tool's name, text, is_error)."""
        names: dict[str, str] = {}
        results: list[tuple[str, str, bool]] = []
        messages = body.get("messages", []) if isinstance(body, dict) else []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use":
                    names[block.get("id", "")] = block.get("name", "")
                elif block.get("type") == "tool_result":
                    c = block.get("content")
                    if isinstance(c, list):
                        c = "".join(x.get("text", "") if isinstance(x, dict) and "text" in x else json.dumps(x)
                                    for x in c)
                    results.append((names.get(block.get("tool_use_id", ""), ""), str(c), bool(block.get("is_error"))))
        return results

    def tool_results(self) -> list[str]:
        """The text of every result of the MCP tool the requests carried."""
        with self.lock:
            bodies = [r["body"] for r in self.requests]
        return [t for b in bodies for n, t, error in self._history(b) if n == self.tool_name and not error]

    def answer(self, method, path, body):
        route = urllib.parse.urlsplit(path).path
        if method == "POST" and route == "/v1/messages/count_tokens":
            return 200, {"content-type": "application/json"}, json.dumps({"input_tokens": 100}).encode()
        if method != "POST" or route != "/v1/messages" or not isinstance(body, dict):
            return 404, {"content-type": "application/json"}, json.dumps(
                {"type": "error", "error": {"type": "not_found_error", "message": f"no {method} {route}"}}).encode()
        tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
        results = self._history(body)
        done = [name for name, _, _ in results]
        n = len(self.requests)
        if self.tool_name in done:
            failed = [text for name, text, error in results if name == self.tool_name and error]
            text = f"The tool failed: {failed[-1]}" if failed else f"{common.DONE}: the tool answered."
            blocks = [{"type": "text", "text": text}]
            stop, step = "end_turn", "failed" if failed else "done"
        elif (self.tool_name in tools and not tools[self.tool_name].get("defer_loading")) or "ToolSearch" in done:
            blocks = [{"type": "tool_use", "id": f"toolu_foundry{n:04d}", "name": self.tool_name, "input": {}}]
            stop, step = "tool_use", self.tool_name
        elif "ToolSearch" in tools and self.tool_name in json.dumps(body.get("system", "")) + json.dumps(
                body.get("messages", [])):
            blocks = [{"type": "tool_use", "id": f"toolu_foundry{n:04d}", "name": "ToolSearch",
                       "input": {"query": f"select:{self.tool_name}", "max_results": 1}}]
            stop, step = "tool_use", "ToolSearch"
        else:
            blocks = [{"type": "text", "text": "Foundry tool check"}]
            stop, step = "end_turn", "text"
        with self.lock:
            self.steps.append(step)
        model = body.get("model") or "claude-stand-in"
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        message = {"id": f"msg_foundry{len(self.requests):04d}", "type": "message", "role": "assistant",
                   "model": model, "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return 200, {"content-type": "application/json"}, json.dumps(message).encode()
        events: list[tuple[str | None, dict]] = [
            ("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                    "usage": {**usage, "output_tokens": 1}}}),
        ]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": b["text"]}}))
            else:
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {**b, "input": {}}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta",
                                                                 "partial_json": json.dumps(b["input"])}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": 10}}))
        events.append(("message_stop", {"type": "message_stop"}))
        return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, common.sse(events)


# Claude Code's published client metadata document (its `client_id` when the server takes
# documents, as the local server does), kept byte for byte in the tests' fixtures.
DOCUMENT_URL = "https://claude.ai/oauth/claude-code-client-metadata"
FIXTURES = common.ROOT / "tests" / "fixtures"
DOCUMENT = FIXTURES / "hosts" / "documents" / "claude-code.json"


class DocumentHost:
    """Claude Code's document served under its own URL's path, over TLS with the fixture
    certificate, at the loopback address the server pins `claude.ai` to: the server's development
    switches `FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA=true` and
    `FOUNDRY_DEV_DOCUMENT_HOSTS=claude.ai=127.0.0.1:PORT` (local/src/config.rs) make it fetch
    the document from there, without certificate checks for that host only. This driver reads the
    same `FOUNDRY_DEV_DOCUMENT_HOSTS` from its own environment to know the address."""

    def __init__(self, addr: tuple[str, int]):
        body = DOCUMENT.read_bytes()
        body = body[:-1] if body.endswith(b"\n") else body  # the fixture's one added newline
        path = urllib.parse.urlsplit(DOCUMENT_URL).path
        self.hits: list[str] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                host.hits.append(self.path)
                if self.path == path:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("cache-control", "public, max-age=300")
                    data = body
                else:
                    self.send_response(404)
                    data = b""
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(addr, Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(FIXTURES / "loopback-tls-cert.pem", FIXTURES / "loopback-tls-key.pem")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def pinned_document_host() -> tuple[str, int] | None:
    """The loopback address `FOUNDRY_DEV_DOCUMENT_HOSTS` (this process's environment, the
    server's setting) gives `claude.ai`, if any."""
    host = urllib.parse.urlsplit(DOCUMENT_URL).hostname
    for entry in os.environ.get("FOUNDRY_DEV_DOCUMENT_HOSTS", "").split(","):
        name, _, addr = entry.strip().partition("=")
        if name.strip().lower() == host and ":" in addr:
            ip, _, port = addr.strip().rpartition(":")
            return ip.strip("[]"), int(port)
    return None


def commands(tag: str, base: str) -> list[str]:
    """The page's snippet `tag`, one command a line, the page's URL replaced by `base`."""
    lines = [ln.strip() for ln in common.snippet(tag).splitlines()]
    return [ln.replace(common.PAGE_URL, base) for ln in lines if ln and not ln.startswith("#")]


def run_line(line: str, env: dict, cwd: Path, seconds: float = 60) -> str:
    """One of the page's commands, as a shell runs it (`$FOUNDRY_TOKEN` from `env`)."""
    r = subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=seconds)
    if r.returncode != 0:
        raise common.Failed(f"`{line}` exited {r.returncode}: {r.stdout[-800:]} {r.stderr[-800:]}")
    return r.stdout + r.stderr


PROMPT = "Call the {tool} tool of the {server} MCP server once and tell me what it answered."


def run(args, desk: common.Desk) -> dict:
    base = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(args.mcp_url))
    tool = f"mcp__{SERVER}__{args.tool}"
    project = desk.work / "project"
    project.mkdir(exist_ok=True)
    model = Messages(tool)
    env = desk.env(
        ANTHROPIC_BASE_URL=model.url,
        ANTHROPIC_API_KEY="sk-ant-api03-foundry-stand-in",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    if args.bearer:
        env["FOUNDRY_TOKEN"] = args.bearer
    documents = None
    terminal = None
    summary: dict = {"tool": args.tool, "mode": "sign-in" if args.sign_in else "bearer"}
    try:
        version = subprocess.run(["claude", "--version"], env=env, cwd=project, capture_output=True, text=True,
                                 timeout=60).stdout.strip()
        summary["version"] = version.split()[0] if version else ""
        lines = commands("claude-code-sign-in" if args.sign_in else "claude-code-bearer", base)
        summary["configured"] = lines
        run_line(lines[0], env, project)
        if args.sign_in:
            pin = pinned_document_host()
            if pin is None:
                raise common.Failed(
                    f"Claude Code names its document {DOCUMENT_URL} as its client_id; offline the server can "
                    "fetch it only from a loopback copy: start the server with "
                    "FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA=true and FOUNDRY_DEV_DOCUMENT_HOSTS=claude.ai=127.0.0.1:PORT "
                    "and give this driver the same FOUNDRY_DEV_DOCUMENT_HOSTS")
            documents = DocumentHost(pin)
            login = lines[1]
            terminal = common.Terminal("claude-login", ["bash", "-c", login], env, project)
            url = desk.opened_url(60)
            summary["authorize"] = url.split("?")[0]
            summary["client_id"] = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("client_id", [""])[0]
            common.approve(url, base, args.server, args.owner_token)
            screen = common.wait_until("`claude mcp login` to finish", 60,
                                       lambda: (lambda s: s if "[exited " in s else None)(terminal.screen()))
            summary["login"] = [ln for ln in screen.splitlines() if ln.strip()][-4:]
            if "[exited 0]" not in screen:
                raise common.Failed(f"`{login}` did not succeed:\n{screen}")
            summary["document_fetches"] = list(documents.hits)
        prompt = PROMPT.format(tool=args.tool, server=SERVER)
        argv = ["claude", "-p", prompt, "--allowedTools", tool]
        started = time.monotonic()
        r = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True, timeout=80)
        summary["print_seconds"] = round(time.monotonic() - started, 1)
        summary["argv"] = argv
        summary["model_requests"] = [f"{q['method']} {q['path']}" for q in model.requests]
        summary["model_answers"] = list(model.steps)
        results = model.tool_results()
        summary["tool_result"] = results[0][:200] if results else None
        if not any("projects" in t for t in results):
            raise common.Failed(f"the model saw no tool_result with `projects` (exit {r.returncode}; "
                                f"requests {summary['model_requests']}; results {results}; "
                                f"stdout {r.stdout[-1500:]!r}; stderr {r.stderr[-1500:]!r})")
        if common.DONE not in r.stdout:
            raise common.Failed(f"Claude Code did not print {common.DONE} (exit {r.returncode}): "
                                f"{r.stdout[-1500:]!r} {r.stderr[-1500:]!r}")
        summary["printed"] = r.stdout.strip()[:200]
        return summary
    finally:
        (desk.work / "model-requests.json").write_text(json.dumps(model.requests, indent=1))
        if terminal:
            terminal.close()
        if documents:
            documents.close()
        model.close()
