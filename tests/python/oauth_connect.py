"""Connect to foundry-connect with nothing but its MCP URL, using the official Python MCP SDK's
own OAuth client (1.x or 2.x): discovery (401 → protected-resource metadata → authorization-server
metadata), dynamic client registration, authorization code + PKCE, the token exchange — then
tools/list and a tool call with the token it got.

Run by tests/tests/oauth_local.rs against the local server, which passes FC_URL (the MCP URL),
FC_LINK (the demo chat link) and FC_OWNER_TOKEN. The person's part is scripted: the consent page is
fetched as a browser would and its Allow button submitted; the redirect back to the client is read
from the 303 (nothing listens on the redirect URI).

Run by tests/tests/cloud_connect.rs against the cloud shape with FC_FLOW=cognito: the stack's
/authorize redirects to Cognito's hosted page (emulated; it signs the owner in at once), which
redirects to the stack's callback, which sends the client back with the code and iss. FC_REDIRECT
overrides the redirect URI. FC_CIMD makes the client a Client ID Metadata Document client (its
client_id is that URL; nothing is registered). Without FC_LINK the tool call is list_graph_sessions.

FC_REFRESHES=N: after the first call, N times: the client's clock moves two hours on (the SDK's own
`time` is replaced in its modules: the test's clock, not a sleep), so its access token has expired
by its own reckoning, and one more tool call must refresh it without a browser.

Prints one JSON line with what happened; exits non-zero on the first failed check.
"""

import asyncio
import json
import logging
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from importlib.metadata import version

# The SDK says why a refresh failed as a warning: shown with the script's failure.
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
MAJOR = int(version("mcp").split(".")[0])
URL = os.environ["FC_URL"]
LINK = os.environ.get("FC_LINK")
FLOW = os.environ.get("FC_FLOW", "consent")
REDIRECT = os.environ.get("FC_REDIRECT", "http://127.0.0.1:49151/callback")
seen = {}


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


class Storage:
    """In-memory token and client storage (the SDK's TokenStorage protocol)."""

    def __init__(self):
        self.tokens = None
        self.client = None
        self.saved = 0

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens
        self.saved += 1

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def owner_cookie(authorize_url):
    """The owner's session, opened the way their panel does (POST /oauth/session with the
    owner's token): only a browser holding it can answer a consent page."""
    u = urllib.parse.urlparse(authorize_url)
    req = urllib.request.Request(f"{u.scheme}://{u.netloc}/oauth/session", data=b"", method="POST",
                                 headers={"Authorization": f"Bearer {os.environ['FC_OWNER_TOKEN']}"})
    with urllib.request.urlopen(req) as res:
        check(res.status == 204, f"the owner's session: {res.status}")
        return res.headers["Set-Cookie"].split(";")[0]


def click_allow(authorize_url):
    """What the person does: open the consent page, press Allow. Returns the redirect target."""
    cookie = owner_cookie(authorize_url)
    with urllib.request.urlopen(urllib.request.Request(authorize_url, headers={"Cookie": cookie})) as page:
        html = page.read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    check(csrf, "the consent page has its anti-forgery token")
    action = re.search(r'<form method="post" action="([^"]+)"', html)
    check(action, "the consent page has a form")
    u = urllib.parse.urlparse(authorize_url)
    target = f"{u.scheme}://{u.netloc}{action.group(1)}"
    data = urllib.parse.urlencode({"csrf": csrf.group(1), "decision": "allow"}).encode()
    try:
        urllib.request.build_opener(NoRedirect).open(urllib.request.Request(target, data=data, headers={"Cookie": cookie}))
    except urllib.error.HTTPError as e:
        check(e.code == 303, f"Allow answers 303, got {e.code}")
        return e.headers["Location"]
    check(False, "Allow did not redirect")


def follow_sign_in(authorize_url):
    """The cloud: the stack's /authorize answers 302 to Cognito's hosted page, which (emulated,
    the owner signed in) answers 302 to the stack's own callback, which answers 302 back to the
    client. Returns that last redirect target."""
    url = authorize_url
    for hop in range(4):
        try:
            urllib.request.build_opener(NoRedirect).open(url)
            check(False, f"hop {hop}: {url} did not redirect")
        except urllib.error.HTTPError as e:
            check(e.code in (302, 303), f"hop {hop}: {url} answered {e.code}: {e.read()[:300]!r}")
            url = e.headers["Location"]
            seen.setdefault("hops", []).append(url.split("?")[0])
        if url.startswith(REDIRECT):
            return url
    check(False, f"never sent back to {REDIRECT}: {seen.get('hops')}")


answer = {}
browser = {"opened": 0}


class Clock:
    """The SDK's `time` module with a clock the script moves on."""

    def __init__(self, real):
        self.real = real
        self.offset = 0.0

    def time(self):
        return self.real.time() + self.offset

    def __getattr__(self, name):
        return getattr(self.real, name)


async def redirect_handler(authorize_url):
    browser["opened"] += 1
    q = urllib.parse.parse_qs(urllib.parse.urlparse(authorize_url).query)
    seen["code_challenge_method"] = q.get("code_challenge_method", [None])[0]
    seen["resource"] = q.get("resource", [None])[0]
    seen["scope"] = q.get("scope", [None])[0]
    sign_in = follow_sign_in if FLOW == "cognito" else click_allow
    location = await asyncio.to_thread(sign_in, authorize_url)
    back = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)
    check(location.startswith(REDIRECT), f"sent back to the registered redirect, got {location}")
    check("code" in back, f"a code came back: {location}")
    answer.update({k: v[0] for k, v in back.items()})
    seen["iss"] = answer.get("iss")


async def callback_handler():
    if MAJOR >= 2:
        from mcp.shared.auth import AuthorizationCodeResult

        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))
    return answer["code"], answer.get("state")


async def exercise(session, storage):
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    tasks = None
    if LINK:
        result = await session.call_tool("list_linked_chat_tasks", {"chat_link_id": LINK})
        data = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
        check(data is not None and "tasks" in data, f"list_linked_chat_tasks answered: {result}")
        tasks = len(data["tasks"])
    else:
        result = await session.call_tool("list_graph_sessions", {"project_id": "0190f0e2-7a3c-7cc4-8f0e-1a2b3c4d5e6f"})
        check(result.content and result.content[0].text, f"list_graph_sessions answered: {result}")
    refreshes = int(os.environ.get("FC_REFRESHES", "0"))
    if refreshes:
        import time as real_time
        clock = Clock(real_time)
        # Every module of the SDK's OAuth client that reads the time (the provider and the util
        # computing a token's expiry) reads this clock.
        for name, module in list(sys.modules.items()):
            if name.startswith(("mcp.client.auth", "mcp.shared.auth")) and getattr(module, "time", None) is real_time:
                module.time = clock
        seen["refresh_tokens"] = []
        for i in range(refreshes):
            before = storage.saved
            clock.offset += 2 * 3600
            if LINK:
                result = await session.call_tool("list_linked_chat_tasks", {"chat_link_id": LINK})
            else:
                result = await session.call_tool("list_graph_sessions",
                                                 {"project_id": "0190f0e2-7a3c-7cc4-8f0e-1a2b3c4d5e6f"})
            check(result.content and result.content[0].text, f"refresh {i + 1}: the tool answered: {result}")
            check(storage.saved > before, f"refresh {i + 1}: the client refreshed (no new token set)")
            check(storage.tokens.refresh_token, f"refresh {i + 1}: the answer kept a refresh token")
            seen["refresh_tokens"].append(storage.tokens.refresh_token[:8])
        check(browser["opened"] == 1, f"refreshing opened a browser ({browser['opened']} sign-ins)")
        seen["refreshes"] = refreshes
    client = storage.client
    print(json.dumps({
        "sdk": version("mcp"),
        "tools": len(names),
        "tasks": tasks,
        "client_id": client.client_id,
        "redirect_uri": str(client.redirect_uris[0]),
        **seen,
    }))


async def main():
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    storage = Storage()
    metadata = OAuthClientMetadata(
        client_name="foundry-connect test client",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    # FC_CIMD: the client's metadata document URL (a Client ID Metadata Document, used when the
    # server advertises client_id_metadata_document_supported) instead of registering.
    extra = {"client_metadata_url": os.environ["FC_CIMD"]} if os.environ.get("FC_CIMD") else {}
    provider = OAuthClientProvider(URL, metadata, storage, redirect_handler, callback_handler, **extra)
    storage.provider = provider
    if MAJOR >= 2:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(auth=provider)
        async with Client(streamable_http_client(URL, http_client=http), mode="auto") as client:
            await exercise(client, storage)
    else:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(URL, auth=provider) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await exercise(session, storage)


asyncio.run(main())
