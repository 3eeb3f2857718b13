"""opencode (npm `opencode-ai`, pinned in infra/hosts-tui/package.json) against the MCP server,
its model a loopback stand-in for an OpenAI-compatible chat-completions API.

The owner's part is the snippet of docs/hosts.md (`opencode-bearer` / `opencode-sign-in`, sh
blocks): `opencode mcp add` writes the server into opencode's global configuration in the scratch
HOME's `~/.config/opencode`; with `--sign-in`, `opencode mcp auth` registers itself (dynamic
client registration), opens the consent page through BROWSER, waits on its loopback callback and
keeps the tokens in `~/.local/share/opencode/mcp-auth.json`. Then `opencode run --format json
"<prompt>"` (no TTY needed): the stand-in answers the request that offers the MCP tool with a call
of it as opencode names it (`<server>_<tool>`), opencode's own tool loop makes the MCP call and
sends the result back, and the stand-in's last answer (`common.DONE`) is what `opencode run`
prints. opencode also asks the model for a session title (a request without tools): it gets text.

What this relies on, and where it is written (opencode 1.18.33). "binary" is the JavaScript bundled
in the release binary `node_modules/opencode-linux-x64/bin/opencode` (the file that
`opencode-ai/bin/opencode.exe` is), read with `strings`; "docs" are the pages of
https://opencode.ai/docs/ (source: packages/web/src/content/docs/*.mdx of anomalyco/opencode).
- `opencode mcp add NAME --url URL [--header KEY=VALUE]`: `opencode mcp add --help`; with a name
  given it asks nothing and writes `{type: "remote", url, headers}` into the global config
  directory (binary: the `Cli.mcp.add` handler, `Global.Path.config`). The remote server options
  `type`, `url`, `headers`: docs mcp-servers/#remote.
- `{env:NAME}` in a config file is replaced by that environment variable when the config is read:
  docs config/#env-vars; binary: `text.replace(/\{env:([^}]+)\}/g, ...)` in the config loader.
- `opencode mcp auth NAME`: docs mcp-servers/#authenticating ("will open your browser"; Dynamic
  Client Registration (RFC 7591) under #oauth; tokens in `~/.local/share/opencode/mcp-auth.json`,
  binary: `path.join(Global.Path.data, "mcp-auth.json")`). Its redirect URI is
  `http://127.0.0.1:19876/mcp/oauth/callback` (binary: `callbackPort ?? 19876`, path
  `/mcp/oauth/callback`, and the config schema's description of `oauth.redirectUri`). The browser
  is opened with the `open` package, which on Linux spawns `xdg-open` (binary: `... ? "xdg-open"
  : bundled`); xdg-open without a desktop session runs `$BROWSER` (xdg-utils' generic opener), so
  the Desk's BROWSER script receives the URL. The command also prints the URL.
- The model: a custom provider, `npm: "@ai-sdk/openai-compatible"`, `options.baseURL`,
  `options.apiKey`, `models`; `model` / `small_model` as `provider/model`: docs
  providers/#custom-provider and config/#models. `@ai-sdk/openai-compatible` is bundled in the
  binary (its map of bundled providers: `"@ai-sdk/openai-compatible": () => import(...).then(m =>
  m.createOpenAICompatible)`), so nothing is installed for it; a provider package outside that map
  would be installed from the npm registry at run time (binary: `Npm.add(model.api.npm)`).
- `OPENCODE_CONFIG_CONTENT` (inline config, merged over the global config): docs
  config/#precedence-order and cli/#environment-variables. It carries the stand-in provider, so
  the owner's config holds only what the snippet wrote.
- `OPENCODE_DISABLE_MODELS_FETCH=1`: no fetch of the models catalogue
  (`OPENCODE_MODELS_URL || "https://models.opencode.ai"`) at start nor its hourly refresh
  (binary: `ModelsDev.populate` returns the cache or the bundled snapshot, else `{}` when the flag
  is set, before any fetch; the refresh fiber is forked only `if (!Flag.OPENCODE_DISABLE_MODELS_FETCH)`);
  named for this in anomalyco/opencode#10766 (offline "Failed to fetch models.dev").
- `OPENCODE_DISABLE_AUTOUPDATE=1` and `"autoupdate": false`: no version check (binary:
  `if (config.autoupdate === false || Flag.OPENCODE_DISABLE_AUTOUPDATE) return`); docs
  cli/#environment-variables and config/#autoupdate. `OPENCODE_DISABLE_DEFAULT_PLUGINS=1`,
  `OPENCODE_DISABLE_LSP_DOWNLOAD=1`: docs cli/#environment-variables. `"share": "disabled"`:
  docs config/#sharing.
- What still leaves the machine: for each config directory opencode starts a background
  `npm install` of `@opencode-ai/plugin` (its own version) from the npm registry (binary: the config loader's
  `Npm.install(dir, {add: [{name: "@opencode-ai/plugin", ...}]})`, forked, failure only logged;
  no flag skips it). It reaches only the npm registry and nothing waits on it; no other host
  (strace of a run: DNS for registry.npmjs.org, then loopback only).
- `opencode run [message..]`, `--format json`: `opencode run --help`, docs cli/#run.
- MCP tools reach the model as `sanitize(server) + "_" + sanitize(tool)`,
  `sanitize = s => s.replace(/[^a-zA-Z0-9_-]/g, "_")` (binary, the MCP tool map); the stand-in
  takes the name from the request's `tools` rather than building it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.parse
from pathlib import Path

import common

SERVER = "foundry-connect"
PROVIDER = "standin"
MODEL = "standin-model"
PROMPT = "Call the list_graph_sessions tool of the foundry-connect MCP server and tell me what it returned."
RUN_SECONDS = 60


class ChatCompletions(common.StandIn):
    """OpenAI chat completions (`POST …/chat/completions`, SSE when `stream` is true): a call of
    the MCP tool while no request carries its result, then `common.DONE`. Requests without the
    tool (opencode's title generation) get a short text."""

    def __init__(self, tool: str):
        self.tool = tool
        self.tool_name: str | None = None
        self.result: str | None = None
        self.n = 0
        self.answered: list[str] = []  # what each chat request was answered with
        super().__init__()

    def answer(self, method, path, body):
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return 200, {"content-type": "application/json"}, json.dumps(
                {"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
        if not (method == "POST" and path.endswith("/chat/completions") and isinstance(body, dict)):
            return 404, {"content-type": "application/json"}, b'{"error":{"message":"not here"}}'
        self.n += 1
        names = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
        ours = [n for n in names if n.endswith("_" + self.tool) or n == self.tool]
        results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if ours and results:
            content = results[-1].get("content")
            self.result = content if isinstance(content, str) else json.dumps(content)
            self.answered.append(f"{path} ({len(names)} tools, the tool's result) -> {common.DONE}")
            return self._reply(body, text=f"{common.DONE}: the tool answered.")
        if ours:
            self.tool_name = ours[0]
            self.answered.append(f"{path} ({len(names)} tools) -> call {ours[0]}")
            return self._reply(body, call=ours[0])
        self.answered.append(f"{path} ({len(names)} tools: title request) -> text")
        return self._reply(body, text="Foundry sessions")

    def _reply(self, body, text: str | None = None, call: str | None = None):
        rid = f"chatcmpl-{self.n}"
        created = int(time.time())
        if call:
            tool_call = {"index": 0, "id": f"call_{self.n}", "type": "function",
                         "function": {"name": call, "arguments": "{}"}}
            delta, finish = {"role": "assistant", "content": None, "tool_calls": [tool_call]}, "tool_calls"
            message = {"role": "assistant", "content": None,
                       "tool_calls": [{k: v for k, v in tool_call.items() if k != "index"}]}
        else:
            delta, finish = {"role": "assistant", "content": text}, "stop"
            message = {"role": "assistant", "content": text}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            data = {"id": rid, "object": "chat.completion", "created": created, "model": MODEL,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
            return 200, {"content-type": "application/json"}, json.dumps(data).encode()
        chunk = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": MODEL}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        out = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, out.encode()


def commands(tag: str, base: str) -> list[list[str]]:
    """The snippet's command lines, the page's server replaced by `base`."""
    text = common.snippet(tag).replace(common.PAGE_URL, base)
    return [shlex.split(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def version(env: dict[str, str]) -> str:
    out = subprocess.run(["opencode", "--version"], env=env, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def run(args, desk) -> dict:
    base = args.mcp_url.rsplit("/mcp", 1)[0]
    stand_in = ChatCompletions(args.tool)
    project = desk.work / "project"
    project.mkdir(parents=True, exist_ok=True)
    inline = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{MODEL}",
        "small_model": f"{PROVIDER}/{MODEL}",
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Stand-in",
            "options": {"baseURL": f"{stand_in.url}/v1", "apiKey": "stand-in"},
            "models": {MODEL: {"name": "Stand-in model"}},
        }},
    }
    env = desk.env(
        OPENCODE_CONFIG_CONTENT=json.dumps(inline),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
    )
    if args.bearer:
        env["FOUNDRY_TOKEN"] = args.bearer
    log = desk.work / "opencode.log"
    try:
        with log.open("w") as out:
            def step(argv: list[str], seconds: float = 60) -> None:
                out.write(f"$ {shlex.join(argv)}\n")
                out.flush()
                p = subprocess.run(argv, env=env, cwd=project, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, timeout=seconds)
                if p.returncode != 0:
                    raise common.Failed(f"`{shlex.join(argv)}` exited {p.returncode}; see {log}")

            lines = commands("opencode-sign-in" if args.sign_in else "opencode-bearer", base)
            for argv in lines:
                if argv[:3] == ["opencode", "mcp", "auth"]:
                    sign_in(argv, env, project, out, desk, base, args)
                else:
                    step(argv)
            out.write(f"$ opencode run --format json {shlex.quote(PROMPT)}\n")
            out.flush()
            p = subprocess.run(["opencode", "run", "--format", "json", PROMPT], env=env, cwd=project,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_SECONDS)
            out.write(p.stdout + p.stderr)
        printed = p.stdout
        if stand_in.tool_name is None:
            raise common.Failed(f"the model was never offered {args.tool}: tools {tools_seen(stand_in)}; see {log}")
        if stand_in.result is None or "projects" not in stand_in.result:
            raise common.Failed(f"no tool result with `projects` came back to the model ({stand_in.result!r}); see {log}")
        if common.DONE not in printed:
            raise common.Failed(f"opencode did not print the model's last answer (exit {p.returncode}); see {log}")
        return {
            "version": version(env),
            "tool": stand_in.tool_name,
            "mode": "sign-in" if args.sign_in else "bearer",
            "run_exit": p.returncode,
            "model_requests": [f"{r['method']} {r['path']}" for r in stand_in.requests],
            "answered": stand_in.answered,
            "tool_result": stand_in.result[:200],
        }
    finally:
        stand_in.close()


def sign_in(argv, env, project, out, desk, base, args) -> None:
    """`opencode mcp auth NAME`: it opens the consent page through BROWSER and waits on its
    loopback callback; the owner approves."""
    out.write(f"$ {shlex.join(argv)}\n")
    out.flush()
    p = subprocess.Popen(argv, env=env, cwd=project, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = desk.opened_url(45)
        redirect = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("redirect_uri", ["?"])[0]
        out.write(f"[driver] consent page {url}\n[driver] redirect_uri {redirect}\n")
        out.flush()
        common.approve(url, base, args.server, args.owner_token)
        rc = p.wait(timeout=30)
        if rc != 0:
            raise common.Failed(f"`{shlex.join(argv)}` exited {rc} after the approval")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 15)
            p.wait(timeout=10)


def tools_seen(stand_in: ChatCompletions) -> list[str]:
    names = set()
    with stand_in.lock:
        for r in stand_in.requests:
            if isinstance(r["body"], dict):
                names.update(t.get("function", {}).get("name", "") for t in r["body"].get("tools") or [])
    return sorted(names)
