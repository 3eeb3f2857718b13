"""A chat answering a task a Graph on the owner's desktop handed it, with the official Python MCP
SDK (2.x; 1.x works the same).

Run by tests/tests/desktop_asks.rs, which starts the local server and a real relay whose Graph
asks, and passes:
  FC_URL, FC_TOKEN   the MCP endpoint and a chat's token
  FC_LINK            the chat link
  FC_OBJECTIVE       the objective the Graph asked (the task to answer)
  FC_RESULT          what to submit
  FC_COUNT           how many tasks to answer, one after another (default 1)
Lists the link's open tasks until one with that objective and an origin appears, claims it and
submits the result. Prints one JSON line per answer: the task id, its origin, and the time
just before and just after the submit (time.time()), for the latency figures.
"""

import asyncio
import json
import os
import sys
import time
from importlib.metadata import version

MAJOR = int(version("mcp").split(".")[0])
ENV = {k: os.environ[k] for k in ["FC_URL", "FC_TOKEN", "FC_LINK", "FC_OBJECTIVE", "FC_RESULT"]}
COUNT = int(os.environ.get("FC_COUNT", "1"))


def fail(what):
    print(f"FAILED: {what}", file=sys.stderr)
    sys.exit(1)


def data(result):
    error = getattr(result, "is_error", None)
    if error is None:
        error = getattr(result, "isError", False)
    if error:
        fail(f"tool error: {result.content}")
    out = getattr(result, "structured_content", None)
    return out if out is not None else getattr(result, "structuredContent")


async def answer_one(session, n):
    link = ENV["FC_LINK"]
    deadline = time.time() + 60
    while True:
        listed = data(await session.call_tool("list_linked_chat_tasks", {"chat_link_id": link}))
        mine = [t for t in listed["tasks"] if t["objective"] == ENV["FC_OBJECTIVE"] and t.get("origin")]
        queued = [t for t in mine if t["status"] == "queued"]
        if queued:
            task = queued[0]
            break
        if time.time() > deadline:
            fail(f"no queued task with the objective appeared: {listed}")
        await asyncio.sleep(0.05)
    ids = {"chat_link_id": link, "task_id": task["task_id"]}
    detail = data(await session.call_tool("get_linked_chat_task", ids))
    if detail.get("origin") != task["origin"]:
        fail(f"the task's detail and the list disagree on its origin: {detail}")
    claim = data(await session.call_tool("claim_linked_chat_task", ids))
    sub = {**ids, "claim_id": claim["claim_id"], "status": "completed", "result": ENV["FC_RESULT"]}
    before = time.time()
    if data(await session.call_tool("submit_linked_chat_result", sub)) != {"ok": True}:
        fail("submit")
    after = time.time()
    print(json.dumps({"n": n, "task_id": task["task_id"], "origin": task["origin"], "submit_start": before,
                      "submitted": after}), flush=True)


async def main():
    headers = {"Authorization": f"Bearer {ENV['FC_TOKEN']}"}
    if MAJOR >= 2:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers=headers)
        async with Client(streamable_http_client(ENV["FC_URL"], http_client=http), mode="auto") as client:
            for n in range(COUNT):
                await answer_one(client, n)
    else:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(ENV["FC_URL"], headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for n in range(COUNT):
                    await answer_one(session, n)


asyncio.run(main())
