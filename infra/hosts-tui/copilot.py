"""GitHub Copilot CLI (npm `@github/copilot`, 1.0.102) against the MCP server, its model a
loopback stand-in for an OpenAI chat-completions API.

Copilot is configured with the page's snippet (`copilot mcp add …`, in the scratch HOME), then:
with the bearer token, `copilot -p PROMPT --allow-all-tools`; with --sign-in, its terminal UI,
where it starts its own OAuth flow for the server as it connects, opens the consent page through
BROWSER, and, once the owner approved, takes the prompt. The stand-in answers the first request
that offers the tool with a call of it, and the request that carries its result with
`common.DONE`, which Copilot prints.

What this relies on, and where each is said (PKG is the JavaScript the native package
`@github/copilot-linux-x64` unpacks to `~/.cache/copilot/pkg/linux-x64/1.0.102/` on first run,
RT its `prebuilds/linux-x64/runtime.node`):

- `COPILOT_PROVIDER_BASE_URL` (the stand-in's `/v1`; "API endpoint URL for a custom model
  provider (BYOK) … GitHub authentication is not required") and `COPILOT_MODEL` (required for
  BYOK; `gpt-4.1`, a model id of Copilot's own catalog, so its agent gets tool calling):
  `copilot help providers` / `copilot help environment` (PKG `cli-main.js`);
  https://docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/use-byok-models
  (provider type `openai` is the default and speaks OpenAI Chat Completions; "Models must
  support tool calling … and streaming"). No API key is set: "optional for local providers".
  Copilot then sends only `POST /v1/chat/completions` with `"stream": true`.
- `COPILOT_OFFLINE=true`: "the CLI skips all network access: GitHub authentication, telemetry,
  web tools, GitHub MCP server, and auto-update are disabled. Requires a local model provider"
  (`copilot help environment`, PKG `cli-main.js`;
  https://github.blog/changelog/2026-04-07-copilot-cli-now-supports-byok-and-local-models).
  Configured MCP servers still connect.
- `copilot mcp add --transport http [--header "Authorization: Bearer …"] NAME URL`, kept in
  `~/.copilot/mcp-config.json`: `copilot mcp add --help`, `copilot mcp --help` (PKG
  `cli-main.js`). Copilot names the server's tools `NAME-tool` (`foundry-connect-list_graph_sessions`:
  the `tools` it offers the model).
- `-p PROMPT` and `--allow-all-tools` ("required for non-interactive mode"): `copilot --help`;
  https://docs.github.com/en/copilot/reference/copilot-cli-reference/cli-programmatic-reference.
- Sign-in: `BROWSER` (PKG `cli-main.js`, its link opener reads `process.env.BROWSER`); Copilot
  starts the flow itself when a configured server answers 401 as it starts (the screen says
  "requires authentication. Use /mcp auth foundry-connect to connect"; `/mcp auth <server-name>
  - Authenticate with a remote MCP server` is in PKG `cli-main.js`'s `/mcp` help); the folder
  trust question of a fresh HOME ("Do you trust the files in this folder?", "1. Yes") is
  answered as a person would. Against a server whose metadata says
  `client_id_metadata_document_supported`, Copilot's client id is its document
  `https://github.com/copilot/cli/client-metadata.json` (RT's built-in default) and its
  redirect `http://127.0.0.1:<any port>/callback` (seen in the URL it opens). The local server
  fetches that document from loopback only with `FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA=true`
  and `FOUNDRY_DEV_DOCUMENT_HOSTS=github.com=127.0.0.1:PORT` (local/src/config.rs); when the
  driver's own environment has the latter, it serves the kept copy of the document
  (tests/fixtures/hosts/documents/copilot-cli.json, and its .source.md) there over HTTPS with
  the fixture certificate (tests/fixtures/loopback-tls-*.pem; the server skips certificate
  checks for pinned loopback hosts).

What does not work: the kept document lists one redirect, `http://127.0.0.1:33418/` (path `/`),
and Copilot 1.0.102 sends `…/callback`; the server matches loopback redirects on any port but
not on another path, so its consent page refuses the request ("redirect_uri is not one this
client registered") and the sign-in fails with that page's words. Copilot uses the document
whenever the server advertises documents, which the local server always does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import common

SERVER_NAME = "foundry-connect"  # the name the page's snippets give the server
MODEL = "gpt-4.1"  # a model id Copilot's catalog knows (its agent config: tools, limits)
DOCUMENT_URL = "https://github.com/copilot/cli/client-metadata.json"
KEPT_DOCUMENT = common.ROOT / "tests" / "fixtures" / "hosts" / "documents" / "copilot-cli.json"
PROMPT = "Call the tool {tool} of the foundry-connect MCP server and tell me what it answered."


class CopilotModel(common.StandIn):
    """OpenAI chat completions, streamed: the first request that offers the tool (as Copilot
    names it, `foundry-connect-<tool>`) is answered with a call of it; a request that carries
    its result (a `tool` message containing `projects`) with `common.DONE`."""

    def __init__(self, tool: str):
        self.tool = tool
        self.name = f"{SERVER_NAME}-{tool}"
        self.called_as: str | None = None
        self.saw_result = False
        self.offered: list[str] = []
        super().__init__()

    def answer(self, method, path, body):
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions") or not isinstance(body, dict):
            return 404, {"content-type": "application/json"}, b'{"error":{"message":"not here"}}'
        messages = body.get("messages") or []
        results = [m for m in messages if m.get("role") == "tool"]
        if any("projects" in json.dumps(m.get("content")) for m in results):
            self.saw_result = True
            return self._answer(body, {"role": "assistant", "content": f"The tool answered. {common.DONE}"}, "stop")
        self.offered = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
        if self.name in self.offered and not results:
            self.called_as = self.name
            call = {"index": 0, "id": "call_foundry_1", "type": "function",
                    "function": {"name": self.name, "arguments": "{}"}}
            return self._answer(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        return self._answer(body, {"role": "assistant", "content": "There is no tool to call."}, "stop")

    def _answer(self, body: dict, delta: dict, finish: str):
        base = {"id": "chatcmpl-foundry", "created": int(time.time()), "model": body.get("model") or MODEL}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            message = {k: v for k, v in delta.items() if v is not None}
            whole = {**base, "object": "chat.completion", "usage": usage,
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            return 200, {"content-type": "application/json"}, json.dumps(whole).encode()
        chunk = {**base, "object": "chat.completion.chunk"}
        events = [(None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
                  (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage})]
        return 200, {"content-type": "text/event-stream"}, common.sse(events) + b"data: [DONE]\n\n"


class DocumentHost:
    """The kept copy of Copilot's client metadata document under its URL's path, over HTTPS at
    `addr` (where the server's FOUNDRY_DEV_DOCUMENT_HOSTS puts github.com)."""

    PATH = urllib.parse.urlsplit(DOCUMENT_URL).path

    def __init__(self, addr: tuple[str, int]):
        doc = KEPT_DOCUMENT.read_bytes()
        self.fetches = 0
        host = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                host.fetches += 1
                ok = self.path.split("?")[0] == DocumentHost.PATH
                self.send_response(200 if ok else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(doc) if ok else 0))
                self.end_headers()
                if ok:
                    self.wfile.write(doc)

        fixtures = common.ROOT / "tests" / "fixtures"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(fixtures / "loopback-tls-cert.pem", fixtures / "loopback-tls-key.pem")
        try:
            self.server = ThreadingHTTPServer(addr, Handler)
        except OSError as e:
            raise common.Failed(f"cannot serve Copilot's document on {addr[0]}:{addr[1]}: {e}") from e
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def pinned() -> tuple[str, int] | None:
        """Where FOUNDRY_DEV_DOCUMENT_HOSTS in this process's environment (the server's setting,
        given to the driver too) puts github.com, if it does."""
        for entry in os.environ.get("FOUNDRY_DEV_DOCUMENT_HOSTS", "").split(","):
            name, _, addr = entry.strip().partition("=")
            ip, _, port = addr.strip().rpartition(":")
            if name.strip().lower() == "github.com" and ip and port.isdigit():
                return ip.strip("[]"), int(port)
        return None

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _configure(args, env: dict, work: Path) -> list[str]:
    """The page's snippet, run as the owner would: its URL pointed at `args.mcp_url`'s base, the
    token where it says `$FOUNDRY_TOKEN`."""
    parts = urllib.parse.urlsplit(args.mcp_url)
    text = common.snippet("copilot-sign-in" if args.sign_in else "copilot-bearer")
    text = text.replace(common.PAGE_URL, f"{parts.scheme}://{parts.netloc}")
    if args.bearer:
        text = text.replace("$FOUNDRY_TOKEN", args.bearer)
    ran = []
    for line in filter(None, (line.strip() for line in text.splitlines())):
        argv = shlex.split(line)
        out = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise common.Failed(f"{' '.join(argv[:3])} exited {out.returncode}: {out.stdout[-500:]} {out.stderr[-1000:]}")
        ran.append(line.replace(args.bearer, "<bearer>") if args.bearer else line)
    return ran


def _prompt(args, env: dict, work: Path, model: CopilotModel) -> None:
    """`copilot -p PROMPT --allow-all-tools`: one prompt, non-interactive."""
    argv = ["copilot", "-p", PROMPT.format(tool=args.tool), "--allow-all-tools"]
    try:
        out = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=75,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise common.Failed(f"copilot -p ran past 75 s; model requests: {len(model.requests)}") from e
    (work / "copilot.out").write_text(out.stdout + "\n--- stderr\n" + out.stderr)
    if out.returncode != 0 or common.DONE not in out.stdout:
        raise common.Failed(f"copilot -p exited {out.returncode} without {common.DONE}:\n{out.stdout[-1500:]}\n"
                            f"{out.stderr[-1500:]}\nmodel requests: {len(model.requests)}; tools offered: "
                            f"{model.offered}; called as {model.called_as}; saw the result: {model.saw_result}")


def _refusal(e: urllib.error.HTTPError) -> str:
    """The consent page's words."""
    html = e.read().decode(errors="replace")
    return f"{e.code}: " + " ".join(re.sub(r"<style.*?</style>|<[^>]+>", " ", html, flags=re.S).split())


def _sign_in_and_prompt(args, desk: common.Desk, env: dict, work: Path, docs: DocumentHost | None) -> str:
    """Copilot's terminal UI: its own sign-in (started as it connects to the server, which
    answers 401; the consent page opened through BROWSER is approved as the owner), then the
    prompt. The URL it opened."""
    parts = urllib.parse.urlsplit(args.mcp_url)
    public = f"{parts.scheme}://{parts.netloc}"
    term = common.Terminal(f"copilot-{os.getpid()}", ["copilot", "--allow-all-tools"], env, work)
    try:
        term.wait_for("Do you trust the files in this folder?", 60)
        term.keys("Enter")  # "1. Yes" (this session)
        url = desk.opened_url(60)
        try:
            common.approve(url, public, args.server, args.owner_token)
        except urllib.error.HTTPError as e:
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
            listed = json.loads(KEPT_DOCUMENT.read_text()).get("redirect_uris")
            served = (f"the kept copy of its document, served where FOUNDRY_DEV_DOCUMENT_HOSTS puts github.com "
                      f"({docs.fetches} fetches), lists redirect_uris {listed}") if docs else \
                "FOUNDRY_DEV_DOCUMENT_HOSTS (in the driver's environment) names no github.com: no copy of its document was served"
            raise common.Failed(f"the consent page refused Copilot's authorization request ({_refusal(e)}); Copilot "
                                f"signs in as {query.get('client_id')} with redirect_uri {query.get('redirect_uri')}; "
                                f"{served}; opened: {url}") from e
        term.wait_for("1 server connected", 40)  # "MCP Servers reloaded: 1 server connected"
        term.type(PROMPT.format(tool=args.tool))
        term.keys("Enter")
        term.wait_for(common.DONE, 60)
        return url
    finally:
        (work / "copilot.screen").write_text(term.screen())
        term.close()


def run(args, desk: common.Desk) -> dict:
    work = desk.work
    model = CopilotModel(args.tool)
    pinned = DocumentHost.pinned() if args.sign_in else None
    docs = DocumentHost(pinned) if pinned else None
    try:
        env = desk.env(
            COPILOT_OFFLINE="true",
            COPILOT_PROVIDER_BASE_URL=f"{model.url}/v1",
            COPILOT_MODEL=MODEL,
        )
        shown = subprocess.run(["copilot", "--version"], env=env, cwd=work, capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL).stdout
        m = re.search(r"\d+\.\d+\.\d+", shown)
        configured = _configure(args, env, work)
        summary: dict = {}
        if args.sign_in:
            summary["opened"] = _sign_in_and_prompt(args, desk, env, work, docs)
            mode = "tui"
        else:
            _prompt(args, env, work, model)
            mode = "prompt"
        if not model.saw_result:
            raise common.Failed(f"the stand-in never saw the tool's result (called as {model.called_as})")
        summary.update({
            "version": m.group(0) if m else shown.strip(),
            "tool": model.called_as,
            "mode": mode,
            "configured": configured,
            "model_requests": len(model.requests),
            "model_paths": sorted({f"{r['method']} {r['path']}" for r in model.requests}),
        })
        if docs:
            summary["document_fetches"] = docs.fetches
        return summary
    finally:
        model.close()
        if docs:
            docs.close()
