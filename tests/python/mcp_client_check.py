"""Drive the foundry-connect MCP endpoint with the official Python MCP SDK (1.x or 2.x).

Run by tests/tests/python_clients.rs, which starts the local server, prepares data and passes:
  FC_URL, FC_TOKEN, FC_PROJECT, FC_LINK, FC_TASK, FC_SESSION, FC_KEY
Lists the tools, then calls every tool and checks the answers. Prints one JSON line with what it
saw (the Rust test checks it against the store) and exits non-zero on the first failed check.
"""

import asyncio
import base64
import json
import os
import sys
from importlib.metadata import version

MAJOR = int(version("mcp").split(".")[0])
ENV = {k: os.environ[k] for k in ["FC_URL", "FC_TOKEN", "FC_PROJECT", "FC_LINK", "FC_TASK", "FC_SESSION", "FC_KEY"]}
EXPECTED_TOOLS = {
    "list_graph_sessions", "run_graph_session", "get_graph_run", "cancel_graph_run",
    "list_linked_chat_tasks", "get_linked_chat_task", "claim_linked_chat_task",
    "submit_linked_chat_result", "upload_linked_chat_artifact",
}


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def attr(obj, camel, snake):
    # 1.x models use the wire names (isError), 2.x Python names (is_error).
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def structured(result):
    check(not attr(result, "isError", "is_error"), f"tool error: {result.content}")
    data = attr(result, "structuredContent", "structured_content")
    text = json.loads(result.content[0].text)
    check(text == data, "text block carries the same JSON as structuredContent")
    return data


def error_text(result):
    check(attr(result, "isError", "is_error"), f"expected isError, got {result}")
    return result.content[0].text


async def exercise(session, protocol):
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    check(names == EXPECTED_TOOLS, f"tools/list names: {sorted(names)}")
    e = ENV
    sessions = structured(await session.call_tool("list_graph_sessions", {"project_id": e["FC_PROJECT"]}))
    check([s["graph_session_id"] for s in sessions["sessions"]] == [e["FC_SESSION"]], f"sessions: {sessions}")
    run_args = {"graph_session_id": e["FC_SESSION"], "idempotency_key": e["FC_KEY"], "arguments": {"week": 48}}
    queued = structured(await session.call_tool("run_graph_session", run_args))
    again = structured(await session.call_tool("run_graph_session", run_args))
    check(queued["status"] == "queued" and again["command_id"] == queued["command_id"], "same key, same run")
    check(queued["check_after_s"] >= 1, "check_after_s")
    # Arguments that fail validation come back as the tool's result, which the model reads
    # (SEP-1303), not as a protocol error the SDK would raise.
    short = await session.call_tool("run_graph_session", {**run_args, "idempotency_key": "short"})
    check(error_text(short).startswith("idempotency_key: must be 8 to 128 characters"), f"invalid argument: {short}")
    other = await session.call_tool("run_graph_session", {**run_args, "arguments": {"week": 49}})
    check(error_text(other) == "idempotency_key was already used with different arguments", "key reuse")
    run = structured(await session.call_tool("get_graph_run", {"command_id": queued["command_id"]}))
    check(run["status"] == "queued", f"run: {run}")
    cancelled = structured(await session.call_tool("cancel_graph_run", {"command_id": queued["command_id"]}))
    check(cancelled["status"] == "cancelled", f"cancel: {cancelled}")
    missing = await session.call_tool("get_graph_run", {"command_id": "00000000-0000-4000-8000-000000000000"})
    check(error_text(missing) == "Graph run not found or access removed", "unknown run")
    inbox = structured(await session.call_tool("list_linked_chat_tasks", {"chat_link_id": e["FC_LINK"]}))
    check([t["task_id"] for t in inbox["tasks"]] == [e["FC_TASK"]], f"inbox: {inbox}")
    task = structured(await session.call_tool("get_linked_chat_task", {"chat_link_id": e["FC_LINK"], "task_id": e["FC_TASK"]}))
    check(task["status"] == "queued", f"task: {task}")
    ids = {"chat_link_id": e["FC_LINK"], "task_id": e["FC_TASK"]}
    claim = structured(await session.call_tool("claim_linked_chat_task", ids))
    claim2 = structured(await session.call_tool("claim_linked_chat_task", ids))
    check(claim["claim_id"] == claim2["claim_id"], "double claim returns the same claim")
    art = {**ids, "claim_id": claim["claim_id"], "artifact_id": f"notes-{MAJOR}", "name": "notes.md",
           "content_type": "text/markdown", "content_base64": base64.b64encode(b"# notes").decode()}
    check(structured(await session.call_tool("upload_linked_chat_artifact", art))["ok"] is True, "upload")
    sub = {**ids, "claim_id": claim["claim_id"], "status": "completed", "result": f"done by mcp {MAJOR}.x"}
    check(structured(await session.call_tool("submit_linked_chat_result", sub)) == {"ok": True}, "submit")
    check(structured(await session.call_tool("submit_linked_chat_result", sub)) == {"ok": True, "replayed": True}, "replay")
    print(json.dumps({"sdk": version("mcp"), "protocol": protocol, "tools": len(names), "command_id": queued["command_id"]}))


async def main():
    headers = {"Authorization": f"Bearer {ENV['FC_TOKEN']}"}
    if MAJOR >= 2:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers=headers)
        async with Client(streamable_http_client(ENV["FC_URL"], http_client=http), mode="auto") as client:
            await exercise(client, client.protocol_version)
    else:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(ENV["FC_URL"], headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                await exercise(session, init.protocolVersion)


asyncio.run(main())
