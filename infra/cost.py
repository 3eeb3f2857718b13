"""Prints docs/cost.md's tables from docs/cost-inputs.json: the DynamoDB requests each
operation makes (measured by tests/tests/tool_permissions.rs, which fails when they drift), the
functions' configured memory and list prices with their date; from docs/doorbell-figures.json the
syncs a day of an idle desktop (written by the doorbell benchmark, tests/tests/relay_doorbell.rs,
`doorbell_idle_requests`); and from docs/cold-start-figures.json each function's warm duration
(written by the cold-start benchmark through infra/lambda-figures.sh, which docs/results.md
quotes). Re-run it when prices or
figures change:

    python3 infra/cost.py [docs/cost-inputs.json]

Capacity units are measured, not derived from request kinds: the emulator's meter
(infra/moto_capacity.py) counts each request's read and write units by item size as DynamoDB
bills them (1 KB writes and 4 KB reads rounded up, eventually consistent reads at half, a query
paying for what its filter dropped, transactional items twice, index writes by what they
project), and tests/tests/tool_permissions.rs records them in cost-inputs.json's
`dynamodb_capacity` beside the requests (and fails when they drift).
"""

import json
import math
import os
import sys

TOOLS = [
    "list_graph_sessions", "run_graph_session", "get_graph_run", "cancel_graph_run",
    "list_linked_chat_tasks", "get_linked_chat_task", "claim_linked_chat_task",
    "submit_linked_chat_result", "upload_linked_chat_artifact",
]


def units(doc, section, name):
    """(read units, write units) the emulator measured for one operation."""
    try:
        c = doc["dynamodb_capacity"][section][name]
    except KeyError:
        raise SystemExit(f"cost-inputs.json has no measured capacity for {section}/{name}: "
                         "run tests/tests/tool_permissions.rs with FOUNDRY_UPDATE=1")
    return c["read"], c["write"]


class Prices:
    def __init__(self, doc, cold):
        self.doc = doc
        p = doc["prices"]
        self.p = p
        self.gb = doc["lambda_memory_mb"] / 1024
        self.ms = {name: f["warm_ms"] for name, f in cold["functions"].items()}

    def invocation(self, function):
        """One invocation: the request and its GB-seconds (billed per started millisecond)."""
        billed = math.ceil(self.ms[function]) / 1000
        return self.p["lambda_requests_per_million"] / 1e6 + billed * self.gb * self.p["lambda_gb_second_arm64"]

    def dynamo(self, section, name):
        r, w = units(self.doc, section, name)
        return self.units(r, w)

    def units(self, r, w):
        return r * self.p["dynamodb_read_unit_per_million"] / 1e6 + w * self.p["dynamodb_write_unit_per_million"] / 1e6

    def api(self, n=1):
        return n * self.p["http_api_per_million"] / 1e6


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/cost-inputs.json"
    doc = json.load(open(path))
    pr = Prices(doc, json.load(open(os.path.join(os.path.dirname(path), "cold-start-figures.json"))))
    idle = json.load(open(os.path.join(os.path.dirname(path), "doorbell-figures.json")))["idle"]
    idle_per_day = idle["on_per_day"]
    req = doc["dynamodb_requests"]
    print(f"Prices as of {doc['prices']['as_of']} ({doc['prices']['source']}).\n")

    print("| tool | DynamoDB requests | read / write units | cost per 1,000 calls |")
    print("|---|---|---|---|")
    for t in TOOLS:
        ops = req["tools"][t]
        one = pr.api() + pr.invocation("mcp") + pr.invocation(t) + pr.dynamo("tools", t)
        if t == "upload_linked_chat_artifact":
            one += doc["prices"]["s3_put_per_thousand"] / 1000
        r, w = units(doc, "tools", t)
        print(f"| {t} | {', '.join(ops)} | {r:g} / {w:g} | ${one * 1000:.5f} |")

    apis = req["apis"]
    sync = pr.api() + pr.invocation("graph_relay") + pr.dynamo("apis", "relay_sync_with_work")
    step = {k: pr.api() + pr.invocation("graph_relay") + pr.dynamo("apis", k)
            for k in ("relay_start", "relay_control", "relay_control_reporting", "relay_control_progress",
                      "relay_complete")}
    month = 30 * 86400
    # A sync that changed nothing writes the project only to move its last sync, once a minute
    # (domain::projects::SYNC_STAMP_EVERY): polling every 20 s, one sync in three; with the
    # doorbell's syncs minutes apart, every one.
    stamped = pr.api() + pr.invocation("graph_relay") + pr.dynamo("apis", "relay_sync_a_minute_later")
    poll20 = month / 60 * stamped + (month / 20 - month / 60) * sync
    syncs300 = idle_per_day * 30 * stamped
    conn = month / 60 * doc["prices"]["websocket_connection_minutes_per_million"] / 1e6
    reconnects = month / (110 * 60) * (2 * pr.invocation("graph_relay") + 2 * pr.p["websocket_messages_per_million"] / 1e6
                                        + 2 * 2 * pr.p["dynamodb_write_unit_per_million"] / 1e6 + 2 * pr.p["dynamodb_read_unit_per_million"] / 1e6)
    # The keep-alive every 4 min is a data message and its route's answer: two messages.
    pings = month / 240 * 2 * doc["prices"]["websocket_messages_per_million"] / 1e6
    print()
    print("| the desktop relay | cost |")
    print("|---|---|")
    sr, sw = units(doc, "apis", "relay_sync_with_work")
    print(f"| one sync ({', '.join(apis['relay_sync_with_work'])}: {sr:g} read / {sw:g} write units) | ${sync * 1e6:.2f} per million |")
    mr, mw = units(doc, "apis", "relay_sync_a_minute_later")
    print(f"| one sync a minute or more after the last ({', '.join(apis['relay_sync_a_minute_later'])}: "
          f"{mr:g} read / {mw:g} write units) | ${stamped * 1e6:.2f} per million |")
    print(f"| idle desktop-month, polling every 20 s (129,600 syncs, 43,200 of them a minute apart) | ${poll20:.3f} |")
    print(f"| idle desktop-month, doorbell: syncs every 300 s ({idle_per_day:,}/day, measured) | ${syncs300:.3f} |")
    print(f"| ... the socket open all month (43,200 connection-minutes) | ${conn:.3f} |")
    print(f"| ... reconnects every 110 min ($connect + $disconnect) | ${reconnects:.4f} |")
    print(f"| ... the keep-alive every 4 min (its message and the answer) | ${pings:.3f} |")
    total = syncs300 + conn + reconnects + pings
    print(f"| **idle desktop-month with the doorbell** | **${total:.3f}** |")
    # One control poll a minute carries the relay's report (its last-seen write): 1 of the 20.
    run60 = step["relay_start"] + 19 * step["relay_control"] + step["relay_control_reporting"] + step["relay_complete"]
    print(f"| one 60 s run on the desktop (start, 20 control polls at 3 s, one with its report, complete) | ${run60 * 1000:.4f} per 1,000 runs |")
    hour = 1200 * step["relay_control"] + 60 * (step["relay_control_reporting"] - step["relay_control"])
    print(f"| one running hour's control polls (1,200 at 3 s, 60 with the report) | ${hour:.4f} |")
    # With the doorbell proven alive a cancel comes by ring, and the relay checks control every
    # 30 s (docs/relay.md, "The doorbell"): 120 checks an hour, 60 of them with the report.
    rung = 120 * step["relay_control"] + 60 * (step["relay_control_reporting"] - step["relay_control"])
    print(f"| ... with the doorbell proven alive (120 at 30 s, 60 with the report) | ${rung:.4f} |")
    # Progress rides on a control check (at most one per 10 s: 360 of the 1,200), the same
    # requests; what grows is the run item, and an UpdateItem is billed by the larger of the
    # item before and after it (1 write unit per KB): every heartbeat after the first
    # forward pays for the progress kept on the item.
    wru = doc["prices"]["dynamodb_write_unit_per_million"] / 1e6
    prog = 1200 * step["relay_control"] + 60 * (step["relay_control_reporting"] - step["relay_control"]) \
        + 360 * (step["relay_control_progress"] - step["relay_control"])
    print(f"| ... with progress forwarded every 10 s ({', '.join(apis['relay_control_progress'])} each, "
          f"360 of the 1,200), a small progress (under 1 KB with the run item) | ${prog:.4f} |")
    # The owner's-runs index holds keys only (gsi4; 0.2.0 removed gsi3, which projected the
    # whole item): a heartbeat copies nothing into it, whatever the item's size.
    for kb in (2, 9):
        print(f"| ... with a progress making the run item {kb} KB ({kb} write units per heartbeat, "
              f"none in the keys-only owner's-runs index) | ${prog + 1200 * (kb - 1) * wru:.4f} |")

    panel = pr.api() + pr.invocation("owner_api") + pr.dynamo("apis", "panel_refresh")
    print()
    print("| the owner's panel | cost |")
    print("|---|---|")
    panel_r, panel_w = units(doc, "apis", "panel_refresh")
    print(f"| one refresh ({', '.join(apis['panel_refresh'])}: {panel_r:g} read units) | ${panel * 1e6:.2f} per million |")
    print(f"| an open, visible panel-day (a refresh every 15 s: 5,760) | ${5760 * panel:.4f} |")

    # An event: the stream record → publish_events (one invocation per record at worst, one
    # SendMessageBatch), the queue → notify (one invocation, the SQS receive and delete the
    # event source makes, a link read and a delivery write: NOTIFIER_DYNAMODB_ACTIONS).
    sqs = doc["prices"]["sqs_per_million"] / 1e6
    event = pr.invocation("publish_events") + sqs + pr.invocation("notify") + 2 * sqs + pr.units(1, 1)
    print()
    print("| events | cost |")
    print("|---|---|")
    print(f"| one event delivered as a webhook (worst case: one record per batch) | ${event * 1e6:.2f} per million |")


if __name__ == "__main__":
    main()
