"""What a chat does with foundry-connect, knowing only the connector URL and its token.

    python first_chat.py <MCP URL> <Bearer token>

It uses the official Python MCP SDK, 2.x (`pip install "mcp==2.3.0"`), and no id of any kind:
1. list_graph_sessions without arguments: the projects it may use, the Graph sessions their
   desktops share, and the owner's chat links;
2. runs the "hello" session (shared with `relay session add --hello`) and reads the run with
   get_graph_run until it ends, as a chat would after check_after_s;
3. for each chat link, lists the open tasks the owner assigned, claims the oldest queued one and
   submits a result with the claim id.

docs/quickstart.md runs it as its last step; the test command runs that page.
"""

import asyncio
import json
import sys
import time
import uuid

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TERMINAL = {"completed", "failed", "cancelled", "expired"}


def data(result):
    """A tool result's JSON, or exit with the tool's own message."""
    if result.is_error:
        sys.exit(f"tool error: {result.content[0].text}")
    return result.structured_content


async def main(url, token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with Client(streamable_http_client(url, http_client=http)) as chat:
        # A session appears once the desktop's relay has synced it: wait up to a minute.
        deadline = time.monotonic() + 60
        while True:
            where = data(await chat.call_tool("list_graph_sessions", {}))
            hello = next(((p["project_id"], s["graph_session_id"]) for p in where["projects"]
                          for s in p["sessions"] if s["slug"] == "hello"), None)
            if hello is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        for project in where["projects"]:
            print(f"project {project['name']!r} ({project['project_id']})")
            for s in project["sessions"]:
                print(f"  Graph session {s['name']!r} ({s['graph_session_id']})")
        for link in where["chat_links"]:
            print(f"chat link {link['name']!r} ({link['chat_link_id']})")
        if hello is None:
            sys.exit("no hello session is shared yet: run `relay session add --hello --project <Project id>`, "
                     "then `relay run`, and try again")

        project_id, session_id = hello
        ticket = data(await chat.call_tool("run_graph_session", {
            "graph_session_id": session_id,
            "project_id": project_id,
            "arguments": {"name": "quickstart"},
            "idempotency_key": f"first-chat-{uuid.uuid4()}",
        }))
        run_id = ticket["command_id"]
        print(f"run {run_id}: {ticket['status']}")
        deadline = time.monotonic() + 120
        while True:
            # A chat waits check_after_s; this script looks at least every 2 seconds.
            await asyncio.sleep(min(max(ticket.get("check_after_s", 1), 1), 2))
            ticket = data(await chat.call_tool("get_graph_run", {"command_id": run_id}))
            if ticket["status"] in TERMINAL:
                break
            if time.monotonic() > deadline:
                sys.exit(f"run {run_id} is still {ticket['status']} after 2 minutes: is `relay run` running?")
        outcome = ticket.get("result") or ticket.get("error")
        print(f"run {run_id}: {ticket['status']}: {outcome}")
        if ticket["status"] != "completed":
            sys.exit(1)

        for link in where["chat_links"]:
            link_id = link["chat_link_id"]
            tasks = data(await chat.call_tool("list_linked_chat_tasks", {"chat_link_id": link_id}))["tasks"]
            queued = [t for t in tasks if t["status"] == "queued"]
            if not queued:
                print(f"chat link {link['name']!r}: no queued task")
                continue
            task = queued[0]
            claim = data(await chat.call_tool("claim_linked_chat_task", {"chat_link_id": link_id, "task_id": task["task_id"]}))
            data(await chat.call_tool("submit_linked_chat_result", {
                "chat_link_id": link_id,
                "task_id": task["task_id"],
                "claim_id": claim["claim_id"],
                "status": "completed",
                "result": "Hello from first_chat.py",
            }))
            print(f"task {task['task_id']} ({task['objective']!r}): claimed and completed")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
