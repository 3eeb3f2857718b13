"""Prints docs/cost.md's tables from docs/cost-inputs.json: the DynamoDB requests each
operation makes (measured by tests/tests/tool_permissions.rs, which fails when they drift), the
functions' configured memory and measured warm durations, and list prices with their date; and
from docs/doorbell-figures.json the syncs a day of an idle desktop (written by the doorbell
benchmark, tests/tests/relay_doorbell.rs, `doorbell_idle_requests`). Re-run it when prices or
figures change:

    python3 infra/cost.py [docs/cost-inputs.json]

Capacity units from request kinds (items of this code are small, so one unit each):
GetItem 1 read unit (strongly consistent, <= 4 KB); Query 1 read unit (<= 4 KB returned);
TransactGetItems 2 read units per item, 2 items (the artifact record and the task);
UpdateItem / PutItem / DeleteItem 1 write unit (<= 1 KB); in TransactWriteItems each Put /
Update / Delete 2 write units and each ConditionCheck 2 read units.
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


def units(ops):
    """(read units, write units) of a list of logged DynamoDB requests."""
    r = w = 0.0
    for op in ops:
        kind, _, parts = op.partition(":")
        if kind == "GetItem" or kind == "Query":
            r += 1
        elif kind == "TransactGetItems":
            r += 4
        elif kind in ("UpdateItem", "PutItem", "DeleteItem"):
            w += 1
        elif kind == "TransactWriteItems":
            for p in parts.split(","):
                if p == "ConditionCheck":
                    r += 2
                else:
                    w += 2
        else:
            raise SystemExit(f"cost.py does not know the request kind {op!r}")
    return r, w


class Prices:
    def __init__(self, doc):
        p = doc["prices"]
        self.p = p
        self.gb = doc["lambda_memory_mb"] / 1024
        self.ms = doc["warm_duration_ms"]

    def invocation(self, function):
        """One invocation: the request and its GB-seconds (billed per started millisecond)."""
        billed = math.ceil(self.ms[function]) / 1000
        return self.p["lambda_requests_per_million"] / 1e6 + billed * self.gb * self.p["lambda_gb_second_arm64"]

    def dynamo(self, ops):
        r, w = units(ops)
        return r * self.p["dynamodb_read_unit_per_million"] / 1e6 + w * self.p["dynamodb_write_unit_per_million"] / 1e6

    def api(self, n=1):
        return n * self.p["http_api_per_million"] / 1e6


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/cost-inputs.json"
    doc = json.load(open(path))
    pr = Prices(doc)
    idle = json.load(open(os.path.join(os.path.dirname(path), "doorbell-figures.json")))["idle"]
    idle_per_day = idle["on_per_day"]
    req = doc["dynamodb_requests"]
    print(f"Prices as of {doc['prices']['as_of']} ({doc['prices']['source']}).\n")

    print("| tool | DynamoDB requests | read / write units | cost per 1,000 calls |")
    print("|---|---|---|---|")
    for t in TOOLS:
        ops = req["tools"][t]
        one = pr.api() + pr.invocation("mcp") + pr.invocation(t) + pr.dynamo(ops)
        if t == "upload_linked_chat_artifact":
            one += doc["prices"]["s3_put_per_thousand"] / 1000
        r, w = units(ops)
        print(f"| {t} | {', '.join(ops)} | {r:g} / {w:g} | ${one * 1000:.5f} |")

    apis = req["apis"]
    sync = pr.api() + pr.invocation("graph_relay") + pr.dynamo(apis["relay_sync_with_work"])
    step = {k: pr.api() + pr.invocation("graph_relay") + pr.dynamo(apis[k])
            for k in ("relay_start", "relay_control", "relay_control_reporting", "relay_control_progress",
                      "relay_complete")}
    month = 30 * 86400
    poll20 = month / 20 * sync
    syncs300 = idle_per_day * 30 * sync
    conn = month / 60 * doc["prices"]["websocket_connection_minutes_per_million"] / 1e6
    reconnects = month / (110 * 60) * (2 * pr.invocation("graph_relay") + 2 * pr.p["websocket_messages_per_million"] / 1e6
                                        + 2 * 2 * pr.p["dynamodb_write_unit_per_million"] / 1e6 + 2 * pr.p["dynamodb_read_unit_per_million"] / 1e6)
    # The keep-alive every 4 min is a data message and its route's answer: two messages.
    pings = month / 240 * 2 * doc["prices"]["websocket_messages_per_million"] / 1e6
    print()
    print("| the desktop relay | cost |")
    print("|---|---|")
    print(f"| one sync ({', '.join(apis['relay_sync_with_work'])}) | ${sync * 1e6:.2f} per million |")
    print(f"| idle desktop-month, polling every 20 s (129,600 syncs) | ${poll20:.3f} |")
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
    # Progress rides on a control check (at most one per 10 s: 360 of the 1,200), the same
    # requests; what grows is the run item, and an UpdateItem is billed by the larger of the
    # item before and after it (1 write unit per KB): every heartbeat after the first
    # forward pays for the progress kept on the item.
    wru = doc["prices"]["dynamodb_write_unit_per_million"] / 1e6
    prog = 1200 * step["relay_control"] + 60 * (step["relay_control_reporting"] - step["relay_control"]) \
        + 360 * (step["relay_control_progress"] - step["relay_control"])
    print(f"| ... with progress forwarded every 10 s ({', '.join(apis['relay_control_progress'])} each, "
          f"360 of the 1,200), a small progress (under 1 KB with the run item) | ${prog:.4f} |")
    for kb in (2, 9):
        print(f"| ... with a progress making the run item {kb} KB ({kb} write units per heartbeat) "
              f"| ${prog + 1200 * (kb - 1) * wru:.4f} |")

    panel = pr.api() + pr.invocation("owner_api") + pr.dynamo(apis["panel_refresh"])
    print()
    print("| the owner's panel | cost |")
    print("|---|---|")
    print(f"| one refresh ({', '.join(apis['panel_refresh'])}) | ${panel * 1e6:.2f} per million |")
    print(f"| an open, visible panel-day (a refresh every 15 s: 5,760) | ${5760 * panel:.4f} |")

    # An event: the stream record → publish_events (one invocation per record at worst, one
    # SendMessageBatch), the queue → notify (one invocation, the SQS receive and delete the
    # event source makes, a link read and a delivery write: NOTIFIER_DYNAMODB_ACTIONS).
    sqs = doc["prices"]["sqs_per_million"] / 1e6
    event = pr.invocation("publish_events") + sqs + pr.invocation("notify") + 2 * sqs + pr.dynamo(["GetItem", "PutItem"])
    print()
    print("| events | cost |")
    print("|---|---|")
    print(f"| one event delivered as a webhook (worst case: one record per batch) | ${event * 1e6:.2f} per million |")


if __name__ == "__main__":
    main()
