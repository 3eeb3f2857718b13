"""Schemathesis hooks for tests/tests/api_fuzz.rs: a refused request changes nothing.

Before every call the embedded store's rows are hashed (every table, read-only); a custom check
then fails any refusal (a 4xx whose body is `{"error": ...}`) after which the hash differs.

Left out of the hash, because the local server's notifier writes them in the background:
`deliveries` (the latest delivery outcome per link) and `event_outbox` (events are deleted once
delivered). Events are still checked: the test installs a trigger that copies every event ever
written into `fuzz_event_log`, which is hashed. So a refusal that emitted an event fails too.

One write on a refusal is the point of it: a pairing code an owner looked up (or decided) in
vain is counted in `attempts`, so guessing is bounded (issue 42). That table is hashed on its
own, and may change only on a 404 of `/owner/pairings/...`; every other table must not. Its
rows that count each owner's budget (`budget:...`, every request counts, refused or not) are left
out.

Not refusals: a pairing poll's RFC 8628 answers (`authorization_pending`, `slow_down`, ...,
with `error_description`) are the protocol's 400s, and a poll records its time by design.

Runs with one worker (`-w 1`), so the hash taken before a call belongs to that call.
"""

import hashlib
import json
import os
import re
import sqlite3

import schemathesis

DB = os.environ["FC_DB"]
SKIP = {"deliveries", "event_outbox"}
# Counted on a pairing lookup that matched nothing, by design (hashed separately).
COUNTERS = "attempts"
# "<field>: <rule>": `name: ...`, `sessions[3].slug: ...`, `body: ...`, or the unknown field
# the caller sent, whatever its characters.
NAMES_A_FIELD = re.compile(r"^[^ ].*?: \S", re.DOTALL)
_before = {"hash": None, "what": None}
_stats = {"refusals_checked": 0}


def fingerprint():
    """(hash of every table but the counters, hash of the counters)."""
    con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True, timeout=30)
    try:
        main, counters = hashlib.sha256(), hashlib.sha256()
        tables = [
            r[0]
            for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if r[0] not in SKIP and not r[0].startswith("sqlite_")
        ]
        for t in tables:
            h = counters if t == COUNTERS else main
            # Each owner's budget is counted there too, on every request (`domain::budget`):
            # admission, not a change of the owner's data.
            where = " WHERE key NOT LIKE 'budget:%'" if t == COUNTERS else ""
            rows = sorted(repr(r) for r in con.execute(f'SELECT * FROM "{t}"{where}'))
            h.update(t.encode())
            h.update(str(len(rows)).encode())
            for r in rows:
                h.update(r.encode())
        return main.hexdigest(), counters.hexdigest()
    finally:
        con.close()


@schemathesis.hook
def before_call(context, case, kwargs):
    _before["hash"] = fingerprint()
    _before["what"] = f"{case.method} {case.formatted_path}"


@schemathesis.check
def refusals_change_nothing(ctx, response, case):
    """A 4xx refusal (`{"error": "<field>: <rule>"}`) left every table as it was."""
    if not 400 <= response.status_code < 500 or _before["hash"] is None:
        return None
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        raise AssertionError(f"a {response.status_code} refusal without a JSON body: {response.content[:200]!r}")
    if not isinstance(body, dict):
        raise AssertionError(f"a {response.status_code} refusal whose body is not a JSON object: {body!r}")
    if "error_description" in body:
        return None  # RFC 8628's poll answers, not a refusal of input
    # The relay protocol's 409s answer the command's status instead (SPEC §4).
    state_answer = response.status_code == 409 and set(body) == {"status"}
    if not state_answer and not isinstance(body.get("error"), str):
        raise AssertionError(f"a {response.status_code} refusal without an error field: {body!r}")
    if response.status_code == 400 and not NAMES_A_FIELD.match(body["error"]):
        raise AssertionError(f"a 400 whose error does not name the field: {body['error']!r}")
    after = fingerprint()
    _stats["refusals_checked"] += 1
    with open(os.environ["FC_REFUSALS_LOG"], "a") as f:
        f.write(f"{response.status_code}\n")
    if after[0] != _before["hash"][0]:
        raise AssertionError(
            f"{_before['what']} was refused ({response.status_code} {body!r}) but the store changed"
        )
    missed_code = response.status_code == 404 and "/owner/pairings/" in _before["what"]
    if after[1] != _before["hash"][1] and not missed_code:
        raise AssertionError(
            f"{_before['what']} was refused ({response.status_code} {body!r}) and counted a failed attempt"
        )
    return None
