#!/usr/bin/env python3
"""Runs one host that calls tools only through its model against an MCP server, the way a person
would: its own configuration command (the snippet docs/hosts.md gives for it), its own sign-in
(with --sign-in: the consent page it opens through BROWSER is approved as the owner), then a
prompt; its model is a loopback stand-in (common.StandIn) that answers with a call of the tool,
and the host's own tool-calling path makes the MCP call.

    drive.py HOST --tools DIR --mcp-url URL --work DIR --tool NAME
             (--bearer TOKEN | --sign-in --server URL --owner-token TOKEN)

HOST is a module of this folder (claude_code, copilot, gemini_cli, opencode), DIR the npm folder
infra/hosts-tui/package.json was installed in, URL the MCP URL the host is given (a recording
proxy's, in the tests; --server is the same server's own address, where the owner approves).
The last line printed is a JSON summary; the exit code is 0 only when the host made the call and
its model saw the tool's result."""

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("--tools", required=True, type=Path)
    p.add_argument("--mcp-url", required=True)
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--tool", default="list_graph_sessions")
    p.add_argument("--bearer")
    p.add_argument("--sign-in", action="store_true")
    p.add_argument("--server")
    p.add_argument("--owner-token")
    a = p.parse_args()
    if bool(a.bearer) == a.sign_in or (a.sign_in and not (a.server and a.owner_token)):
        p.error("give --bearer TOKEN, or --sign-in with --server and --owner-token")
    host = importlib.import_module(a.host)
    a.work.mkdir(parents=True, exist_ok=True)
    desk = common.Desk(a.work, a.tools)
    started = time.monotonic()
    try:
        summary = host.run(a, desk)
    except common.Failed as e:
        print(json.dumps({"host": a.host, "ok": False, "error": str(e)}))
        return 1
    summary.update({"host": a.host, "ok": True, "seconds": round(time.monotonic() - started, 1)})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
