"""Gemini CLI (npm @google/gemini-cli 0.61.0) against an MCP server, its model a loopback stand-in
for the Gemini API.

Configuration, each from Gemini CLI's own package (node_modules/@google/gemini-cli/bundle/…) or
the docs shipped in it (bundle/docs/…):

- The server: the page's `gemini mcp add --scope user --transport http [--header …] NAME URL`
  (docs/tools/mcp-server.md, "Adding a server (`gemini mcp add`)"; the command's options in
  bundle/gemini-3HFX2LNT.js `addCommand`): written to `~/.gemini/settings.json` as
  `mcpServers.NAME = {url, type: "http", headers}`.
- The model: `GEMINI_API_KEY` (any value; docs/reference/configuration.md, "Environment
  variables") with `security.auth.selectedType: "gemini-api-key"` (same page, `security`;
  `AuthType.USE_GEMINI` in bundle/chunk-JDPZ4CE3.js), and `GOOGLE_GEMINI_BASE_URL` = the
  stand-in's `http://127.0.0.1:PORT` ("Overrides the default base URL for Gemini API requests
  (when using `gemini-api-key` authentication) … must use HTTPS unless pointing to localhost",
  configuration.md; read in `createContentGenerator`, chunk-JDPZ4CE3.js; without `selectedType`
  the variable alone would pick the "gateway" auth type, `getAuthTypeFromEnv`). Gemini CLI then
  posts `/v1beta/models/MODEL:streamGenerateContent?alt=sse` there (and `:generateContent`
  for its side questions, e.g. the model router's `complexity_score`, answered from their
  `responseJsonSchema`); seen: one `gemini-3.5-flash-lite:generateContent`, then two
  `gemini-3.8-flash:streamGenerateContent?alt=sse` (the call, then the tool's result).
- No first-run questions, nothing sent elsewhere (configuration.md): `security.folderTrust.enabled:
  false` (when on, "the first time you run Gemini CLI from a folder, a dialog" asks to trust it,
  docs/cli/trusted-folders.md; that page says off by default, configuration.md says `true`),
  `ui.theme: "Default"` (docs/cli/themes.md),
  `privacy.usageStatisticsEnabled: false`, `telemetry.enabled: false`,
  `general.enableAutoUpdate: false`, `general.enableAutoUpdateNotification: false`.
- The prompt: `gemini -p PROMPT --approval-mode=yolo` (docs/cli/cli-reference.md: `-p` "Forces
  non-interactive mode"; `--approval-mode` choices `default`, `auto_edit`, `yolo`, `plan`, where
  `yolo` approves every tool call, as `--yolo`, "Deprecated … Use `--approval-mode=yolo`").
- The tool's name for the model: `mcp_<server>_<tool>` (`generateValidName`, chunk-JDPZ4CE3.js);
  the stand-in takes the declaration the request carries that ends in `_<tool>`.
- Sign-in: no `oauth` in the server's settings, so a 401 makes Gemini CLI say "requires
  authentication using: /mcp auth NAME" (`showAuthRequiredMessage`, chunk-JDPZ4CE3.js;
  docs/tools/mcp-server.md "Managing OAuth authentication"). In the TUI `/mcp auth NAME`
  discovers the server's metadata, registers itself (dynamic client registration, redirect
  `http://localhost:PORT/oauth/callback`), asks "Do you want to continue?" (Enter: yes), opens
  the consent page with `xdg-open URL` (`openBrowserSecurely`; xdg-utils' xdg-open without a
  desktop runs `$BROWSER URL`, /usr/bin/xdg-open `open_generic`), checks the callback's RFC 9207
  `iss`, and keeps the token in `~/.gemini/mcp-oauth-tokens.json` (mcp-server.md "Token
  management"). The prompt is then typed into the same TUI, started with
  `--approval-mode=yolo`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import urllib.parse
from pathlib import Path

import common

SERVER = "foundry-connect"
PROMPT = "Call the {tool} tool of the foundry-connect server and tell me what it says."


def _settings() -> dict:
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "ui": {"theme": "Default"},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }


def _stub(schema) -> object:
    """A value that fits a JSON schema (the side questions Gemini CLI asks its model)."""
    if not isinstance(schema, dict):
        return "ok"
    if schema.get("enum"):
        return schema["enum"][0]
    t = schema.get("type")
    t = (t[0] if isinstance(t, list) else t or "").lower()
    if t == "object" or "properties" in schema:
        out = {}
        for k, v in (schema.get("properties") or {}).items():
            out[k] = "user" if k == "next_speaker" else _stub(v)
        return out
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("number", "integer"):
        return schema.get("minimum", 1)
    return "ok"


class GeminiApi(common.StandIn):
    """The Gemini API: a conversation that declares the tool is answered with a call of it, and,
    once a request carries its `functionResponse`, with text saying DONE."""

    def __init__(self, tool: str):
        self.tool = tool
        self.called: str | None = None  # the name Gemini CLI declared the tool under
        self.result_seen = False
        super().__init__()

    def _declared(self, body) -> str | None:
        for t in (body or {}).get("tools") or []:
            for d in t.get("functionDeclarations") or []:
                name = d.get("name", "")
                if name == self.tool or name.endswith("_" + self.tool):
                    return name
        return None

    def _reply(self, body) -> dict:
        name = self._declared(body)
        contents = json.dumps((body or {}).get("contents") or [])
        if name and "functionResponse" in contents:
            self.result_seen = self.result_seen or "projects" in contents
            parts = [{"text": f"The tool answered. {common.DONE}"}]
        elif name:
            self.called = name
            parts = [{"functionCall": {"name": name, "args": {}}}]
        else:
            gen = (body or {}).get("generationConfig") or {}
            schema = gen.get("responseJsonSchema") or gen.get("responseSchema")
            parts = [{"text": json.dumps(_stub(schema)) if schema else "ok"}]
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": "stand-in",
        }

    def answer(self, method, path, body):
        route = urllib.parse.urlparse(path).path
        if route.endswith(":streamGenerateContent"):
            return 200, {"content-type": "text/event-stream"}, common.sse([(None, self._reply(body))])
        if route.endswith(":generateContent"):
            return 200, {"content-type": "application/json"}, json.dumps(self._reply(body)).encode()
        if route.endswith(":countTokens"):
            return 200, {"content-type": "application/json"}, b'{"totalTokens": 10}'
        if route.endswith(":embedContent"):
            return 200, {"content-type": "application/json"}, b'{"embedding": {"values": [0.0]}}'
        if method == "GET" and "/models" in route:
            return 200, {"content-type": "application/json"}, b'{"models": []}'
        return 404, {"content-type": "application/json"}, b'{"error": {"code": 404, "message": "not in the stand-in"}}'


def _add_commands(args, base: str) -> list[list[str]]:
    """The page's block for this mode, pointed at `base`, the token put in, split as sh does."""
    tag = "gemini-cli-sign-in" if args.sign_in else "gemini-cli-bearer"
    text = common.snippet(tag).replace(common.PAGE_URL, base)
    if args.bearer:
        text = text.replace("$FOUNDRY_TOKEN", args.bearer)
    cmds = [shlex.split(line) for line in text.splitlines() if line.strip()]
    for c in cmds:
        if c[:3] != ["gemini", "mcp", "add"]:
            raise common.Failed(f"{tag}: not a `gemini mcp add` line: {c}")
    return cmds


def run(args, desk) -> dict:
    u = urllib.parse.urlparse(args.mcp_url)
    base = f"{u.scheme}://{u.netloc}"
    project = args.work / "project"
    project.mkdir(parents=True, exist_ok=True)
    gdir = desk.home / ".gemini"
    gdir.mkdir(parents=True, exist_ok=True)
    (gdir / "settings.json").write_text(json.dumps(_settings(), indent=2))

    api = GeminiApi(args.tool)
    env = desk.env(GEMINI_API_KEY="stand-in-key", GOOGLE_GEMINI_BASE_URL=api.url)
    bin_ = desk.tools / "node_modules" / ".bin"
    version = subprocess.run([str(bin_ / "gemini"), "--version"], env=env, cwd=project, capture_output=True,
                             text=True, timeout=60).stdout.strip()
    try:
        for cmd in _add_commands(args, base):
            done = subprocess.run([str(bin_ / "gemini"), *cmd[1:]], env=env, cwd=project, capture_output=True,
                                  text=True, timeout=60)
            if done.returncode != 0:
                raise common.Failed(f"{' '.join(cmd[:3])}: {done.returncode} {done.stderr[-2000:]}")
        server = json.loads((gdir / "settings.json").read_text()).get("mcpServers", {}).get(SERVER)
        if not server or server.get("url") != args.mcp_url:
            raise common.Failed(f"gemini mcp add left no {SERVER} server for {args.mcp_url}: {server}")
        prompt = PROMPT.format(tool=args.tool)
        summary = {"version": version, "tool": args.tool}
        if args.sign_in:
            summary.update(_signed_in(args, desk, env, project, base, prompt))
        else:
            summary.update(_headless(env, project, bin_, prompt))
        if not api.called:
            raise common.Failed(f"Gemini CLI never declared {args.tool} to its model: {_paths(api)}")
        if not api.result_seen:
            raise common.Failed(f"no functionResponse with `projects` reached the model: {api.bodies_text()[-3000:]}")
        summary.update({"model_tool_name": api.called, "model_requests": len(api.requests),
                        "model_paths": _paths(api)})
        return summary
    finally:
        api.close()


def _paths(api) -> list[str]:
    with api.lock:
        return [f"{r['method']} {r['path']}" for r in api.requests]


def _headless(env, project: Path, bin_: Path, prompt: str) -> dict:
    try:
        done = subprocess.run([str(bin_ / "gemini"), "-p", prompt, "--approval-mode=yolo"], env=env, cwd=project,
                              capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise common.Failed(f"gemini -p did not finish in 80 s: {e.stdout!r} {e.stderr!r}") from e
    if common.DONE not in done.stdout:
        raise common.Failed(f"gemini -p printed no {common.DONE} (exit {done.returncode}): "
                            f"{done.stdout[-2000:]} {done.stderr[-3000:]}")
    return {"mode": "gemini -p --approval-mode=yolo", "exit": done.returncode}


def _signed_in(args, desk, env, project: Path, base: str, prompt: str) -> dict:
    term = common.Terminal("gemini", ["gemini", "--approval-mode=yolo"], env, project)

    def submit(text: str) -> None:
        term.type(text)
        time.sleep(1)  # the input shows the text before Enter (tried: text sent too early stayed unsent)
        term.keys("Enter")

    try:
        term.wait_for("Type your message", 60)
        time.sleep(2)  # the input line is drawn a moment before it takes keys
        submit(f"/mcp auth {SERVER}")
        term.wait_for("Do you want to continue?", 30)
        term.keys("Enter")
        url = desk.opened_url(30)
        callback = common.approve(url, base, args.server, args.owner_token)
        term.wait_for(f"Successfully authenticated and reloaded tools for '{SERVER}'", 30)
        submit(prompt)
        term.wait_for(common.DONE, 60)
        return {"mode": "tui: /mcp auth, then the prompt", "opened": url.split("?")[0],
                "callback": callback.split("?")[0]}
    finally:
        term.close()
