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

The fixed monthly floor comes first: what the stack costs whether or not anyone uses it (its
alarms, dashboard, the logs idle desktops write and their storage, the table's storage and
point-in-time recovery, the bucket, the user pool), counted from template.yaml (or the
template FOUNDRY_TEMPLATE names, to try a modified copy) and priced from FLOOR_PRICES below,
each price with where it was read and when. A resource type the script does not know stops it:
classify it in FIXED_PRICED or PER_USE first.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import template_yaml  # noqa: E402  (this folder's reader: no third-party import)

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


# The prices of the fixed monthly floor: us-east-1 list prices, each with the page it was read
# on and the day it was read. The AWS pricing pages' paid tabs are drawn by script, so the stored
# copies read here hold their free tiers but not always their rates: a rate read from another
# page says so. A price not found is not here, and what it would price stays out of the sum
# (FLOOR_UNPRICED says what).
READ_ON = "2026-12-07"
FLOOR_PRICES = [
    # key, price (USD), unit, always-free allowance per account, source
    ("alarm_metric", 0.10, "alarm metric-month, standard resolution", "10 alarm metrics",
     "https://aws.amazon.com/cloudwatch/pricing/ (the unit and the free tier: standard alarms that list "
     "their metrics, no Metrics Insights query); the rate from "
     "https://c3x.dev/resources/aws/aws_cloudwatch_metric_alarm"),
    ("dashboard", 3.00, "dashboard-month", "3 dashboards of up to 50 metrics each",
     "https://aws.amazon.com/cloudwatch/pricing/ (free tier); the rate from "
     "https://www.factualminds.com/blog/amazon-cloudwatch-pricing-metrics-logs-alarms-dashboards/ (2026-06-13)"),
    ("log_ingest_gb", 0.50, "GB of logs ingested (standard class)", "5 GB of ingestion, storage and Insights scans together",
     "https://aws.amazon.com/cloudwatch/pricing/ (free tier); the rate from "
     "https://c3x.dev/blog/cloudwatch-logs-cost-optimization (\"us-east-1, June 2026\")"),
    ("log_store_gb_month", 0.03, "GB-month of logs stored", "(the same 5 GB)",
     "https://c3x.dev/blog/cloudwatch-logs-cost-optimization; "
     "https://hykell.com/kb/platform-specific-guides/aws-cloudwatch-logs-pricing"),
    ("dynamodb_storage_gb_month", 0.25, "GB-month of table storage", "25 GB",
     "https://aws.amazon.com/dynamodb/pricing/"),
    ("dynamodb_pitr_gb_month", 0.20, "GB-month of table size, point-in-time recovery", "none",
     "https://finops.com.py/services/dynamodb/backups"),
    ("s3_standard_gb_month", 0.023, "GB-month in S3 Standard (first 50 TB)", "none counted",
     "https://devnotes.tech/understanding-aws-s3-pricing-a-complete-cost-breakdown-with-examples"),
    ("cognito_essentials_mau", None, "monthly active user past the free ones (Essentials, the default plan)",
     "10,000 MAU",
     "https://c3x.dev/resources/aws/aws_cognito_user_pool/ (the free 10,000); "
     "https://docs.aws.amazon.com/cognito/latest/developerguide/cognito-sign-in-feature-plans.html "
     "(Essentials the default); the rate past them was not found"),
]
# What the floor leaves out, because its price (or its amount) was not found.
FLOOR_UNPRICED = [
    "an alarm on a Metrics Insights query (priced by the metrics the query reads; no price found)",
    "the metrics the log filters publish (custom metrics, published only when a line matches: a 429, a failed delivery)",
    "the events queue's empty long polls by Lambda (SQS requests; how many Lambda makes is not published)",
]
# Resource types whose price is per request or per use, nothing by the month.
PER_USE = {
    "AWS::Serverless::Function", "AWS::Lambda::Permission", "AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Stage",
    "AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::Integration", "AWS::ApiGatewayV2::RouteResponse",
    "AWS::ApiGatewayV2::IntegrationResponse", "AWS::SQS::Queue", "AWS::S3::BucketPolicy",
    "AWS::Cognito::UserPoolClient", "AWS::Cognito::UserPoolDomain", "AWS::Cognito::UserPoolResourceServer",
    "AWS::Logs::MetricFilter",
}
# Resource types with a monthly price, which the floor counts below.
FIXED_PRICED = {
    "AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard", "AWS::Logs::LogGroup", "AWS::DynamoDB::Table",
    "AWS::S3::Bucket", "AWS::Cognito::UserPool",
}
# The table's size at each of the floor's sizes: assumed upper bounds, not measured (one owner's
# items are a few KB each; with 500 desktops the project item alone is about 84 KB, docs/scale.md).
TABLE_GB = {1: 0.01, 500: 0.1}
# Artifacts kept in the bucket: none while nothing is uploaded.
ARTIFACT_GB = 0.0


def floor_price(key):
    for k, price, *_ in FLOOR_PRICES:
        if k == key:
            return price
    raise KeyError(key)


def template_path():
    return os.environ.get("FOUNDRY_TEMPLATE") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "template.yaml")


def parameter(t, value):
    """A property's value with a `Ref` to a parameter replaced by the parameter's default."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return t["Parameters"][value["Ref"]]["Default"]
    return value


def alarm_metrics(name, props):
    """(alarm metrics billed, Metrics Insights alarms) of one alarm: one metric for an alarm on a
    metric, each metric read for one on a math expression (the pricing page's unit is the alarm
    metric); an alarm on a Metrics Insights query is not priced here."""
    if int(props.get("Period", 60)) < 60 or "ThresholdMetricId" in props:
        raise SystemExit(f"{name}: a high-resolution or anomaly-detection alarm: price it in FLOOR_PRICES")
    metrics = props.get("Metrics")
    if not metrics:
        return 1, 0
    for m in metrics:
        stat = m.get("MetricStat")
        if stat and int(stat.get("Period", 60)) < 60:
            raise SystemExit(f"{name}: a high-resolution alarm: price it in FLOOR_PRICES")

    def expression(m):
        e = m.get("Expression", "")
        return str(e.get("Fn::Sub", "") if isinstance(e, dict) else e).lstrip().upper()

    if any(expression(m).startswith("SELECT") for m in metrics):
        return 0, 1
    return sum(1 for m in metrics if "MetricStat" in m), 0


def dashboard_metrics(props):
    body = props["DashboardBody"]
    if isinstance(body, dict):
        body = body.get("Fn::Sub")
    widgets = json.loads(body)["widgets"]
    return sum(len(w.get("properties", {}).get("metrics", [])) for w in widgets)


def lambda_platform_bytes(memory_mb):
    """The bytes of Lambda's own lines for one invocation (START, END, REPORT, text format), by
    their documented shapes with a request id and typical figures."""
    rid = "8f507cfc-1a2b-4697-b07a-ac58fc914c95"
    lines = [
        f"START RequestId: {rid} Version: $LATEST",
        f"END RequestId: {rid}",
        f"REPORT RequestId: {rid}\tDuration: 12.34 ms\tBilled Duration: 13 ms\tMemory Size: {memory_mb} MB\t"
        "Max Memory Used: 31 MB\t",
    ]
    return sum(len(l) + 1 for l in lines)


def access_line_bytes(t, route_key):
    """The bytes of the HTTP API's access line for one request, from the stage's format."""
    fmt = next(r["Properties"]["AccessLogSettings"]["Format"] for r in t["Resources"].values()
               if r["Type"] == "AWS::ApiGatewayV2::Stage" and "AccessLogSettings" in r.get("Properties", {}))
    line = (fmt.replace("$context.requestId", "JxKrmgH7IAMEcXw=").replace("$context.routeKey", route_key)
            .replace("$context.status", "200").replace("$context.responseLatency", "25"))
    return len(line) + 1


def floor(dirname, idle_per_day, idle_month_cost):
    """Prints the fixed floor's table and its prices' table; the floor at each size."""
    t = template_yaml.load_file(template_path())
    res = t["Resources"]
    types = {}
    for name, r in res.items():
        types.setdefault(r["Type"], []).append(name)
    unknown = sorted(set(types) - PER_USE - FIXED_PRICED)
    if unknown:
        raise SystemExit(f"template.yaml has resource types the floor does not know: {unknown}: "
                         "classify each in infra/cost.py (FIXED_PRICED with its price, or PER_USE)")
    alarms = [(n, r["Properties"]) for n, r in res.items() if r["Type"] == "AWS::CloudWatch::Alarm"]
    counted = [alarm_metrics(n, p) for n, p in alarms]
    alarm_metric_count = sum(c for c, _ in counted)
    insights = sum(i for _, i in counted)
    math = [c for (_, props), (c, _) in zip(alarms, counted) if props.get("Metrics") and c]
    dashboards = [dashboard_metrics(r["Properties"]) for r in res.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    groups = [r["Properties"] for r in res.values() if r["Type"] == "AWS::Logs::LogGroup"]
    retention = {int(parameter(t, g.get("RetentionInDays"))) for g in groups if g.get("RetentionInDays") is not None}
    if len(retention) != 1 or any(g.get("RetentionInDays") is None for g in groups):
        raise SystemExit(f"the log groups keep their logs for {sorted(retention)} days (or forever): "
                         "the floor prices one retention")
    days = retention.pop()
    tables = [r["Properties"] for r in res.values() if r["Type"] == "AWS::DynamoDB::Table"]
    pitr = sum(1 for p in tables if parameter(t, p.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")) is True)
    buckets = [r["Properties"] for r in res.values() if r["Type"] == "AWS::S3::Bucket"]
    expiries = [parameter(t, rule["ExpirationInDays"]) for b in buckets
                for rule in b.get("LifecycleConfiguration", {}).get("Rules", []) if "ExpirationInDays" in rule]
    if len(buckets) != 1 or len(expiries) != 1:
        raise SystemExit("the floor prices one bucket whose artifacts expire: price the others")
    expiry = expiries[0]
    pools = len(types.get("AWS::Cognito::UserPool", []))
    memory = int(t["Globals"]["Function"]["MemorySize"])
    sync_route = res["RelaySyncRoute"]["Properties"]["RouteKey"]

    # An idle desktop's logs a month: each sync is one access line and one graph_relay
    # invocation (a sync logs nothing of its own at info); each reconnect every 110 minutes
    # is a $disconnect and a $connect invocation of doorbell, the connect with its one line.
    month = 30 * 86400
    syncs = idle_per_day * 30
    reconnects = month / (110 * 60)
    connected = '{"level":"INFO","fields":{"message":"doorbell connected","device":"0b4f8f5e-2d1c-4b7a-9e59-3c2f6a7d8e90","replaced":0},"target":"lambda::doorbell","span":{"request_id":"JxKrmgH7IAMEcXw=","name":"request"}}'
    desktop_bytes = (syncs * (access_line_bytes(t, sync_route) + lambda_platform_bytes(memory))
                     + reconnects * (2 * lambda_platform_bytes(memory) + len(connected) + 1))
    gb = 1e9

    sizes = [1, json.load(open(os.path.join(dirname, "scale-figures.json")))["desktops"]]
    p = floor_price
    print(f"Fixed monthly floor: us-east-1 list prices read on {READ_ON} (the prices table below), "
          f"resources counted from template.yaml.\n")
    print("| fixed monthly cost | in template.yaml | " + " | ".join(
        f"one owner, {n:,} desktop{'s' if n > 1 else ''}" for n in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    rows = []

    def row(what, counted_as, costs, in_sum=True):
        rows.append((costs, in_sum))
        cells = [c if isinstance(c, str) else f"${c:.2f}" if c >= 0.995 or c == 0 else f"${c:.3f}" for c in costs]
        print(f"| {what} | {counted_as} | " + " | ".join(cells) + " |")

    row(f"CloudWatch alarms, ${p('alarm_metric'):.2f} per alarm metric",
        f"{len(alarms)} alarms: {alarm_metric_count} alarm metrics ({len(math)} alarms on a math expression count "
        f"the {sum(math)} metrics they read)"
        + (f"; {insights} on a Metrics Insights query, not priced" if insights else ""),
        [alarm_metric_count * p("alarm_metric")] * len(sizes))
    row(f"CloudWatch dashboard, ${p('dashboard'):.2f} a month",
        f"{len(dashboards)} dashboard of {', '.join(str(m) for m in dashboards)} metrics (the free tier's 3 are of up to 50 each)",
        [len(dashboards) * p("dashboard")] * len(sizes))
    row(f"logs ingested, ${p('log_ingest_gb'):.2f} per GB: the idle desktops' syncs and reconnects",
        f"{len(groups)} log groups",
        [n * desktop_bytes / gb * p("log_ingest_gb") for n in sizes])
    row(f"logs stored, ${p('log_store_gb_month'):.2f} per GB-month (uncompressed: an upper bound)",
        f"kept {days} days (`LogRetentionDays`)",
        [n * desktop_bytes * days / 30 / gb * p("log_store_gb_month") for n in sizes])
    row(f"DynamoDB storage, ${p('dynamodb_storage_gb_month'):.2f} per GB-month",
        f"{len(tables)} table, on demand; " + ", ".join(f"{TABLE_GB[n] * 1000:g} MB" for n in sizes) + " assumed",
        [len(tables) * TABLE_GB[n] * p("dynamodb_storage_gb_month") for n in sizes])
    row(f"point-in-time recovery, ${p('dynamodb_pitr_gb_month'):.2f} per GB-month of table",
        f"on for {pitr} table", [pitr * TABLE_GB[n] * p("dynamodb_pitr_gb_month") for n in sizes])
    row(f"S3 Standard, ${p('s3_standard_gb_month'):.3f} per GB-month",
        f"{len(buckets)} bucket; artifacts expire after {expiry} days (`ArtifactRetentionDays`); none kept",
        [len(buckets) * ARTIFACT_GB * p("s3_standard_gb_month") for n in sizes])
    row("Cognito user pool (Essentials), per monthly active user past 10,000 free",
        f"{pools} user pool; one owner is one MAU", ["free"] * len(sizes), in_sum=False)
    per_use = sum(len(types[k]) for k in PER_USE if k in types)
    row("everything else: functions, APIs, queues, app clients, metric filters",
        f"{per_use} resources of {len([k for k in PER_USE if k in types])} types, billed per request", [0.0] * len(sizes))
    fixed = [sum(c[i] for c, s in rows if s) for i in range(len(sizes))]
    row("**the floor**", "", [f"**${v:.2f}**" for v in fixed], in_sum=False)
    row("idle desktops on the doorbell (the relay table below)", "",
        [n * idle_month_cost for n in sizes], in_sum=False)
    row("**an idle month in all**", "", [f"**${fixed[i] + sizes[i] * idle_month_cost:.2f}**" for i in range(len(sizes))],
        in_sum=False)
    # The always-free allowances, if this stack is the account's only use of them: 10 alarm
    # metrics, and 5 GB of logs (ingestion and storage together: counted against ingestion
    # first, the dearer), 25 GB of table; 3 dashboards if each reads at most 50 metrics.
    free_dashboards = min(3, len(dashboards)) if all(m <= 50 for m in dashboards) else 0

    def free(i):
        ingested, stored = sizes[i] * desktop_bytes / gb, sizes[i] * desktop_bytes * days / 30 / gb
        free_ingest = min(ingested, 5)
        free_store = min(stored, 5 - free_ingest)
        return (min(10, alarm_metric_count) * p("alarm_metric") + free_dashboards * p("dashboard")
                + free_ingest * p("log_ingest_gb")
                + free_store * p("log_store_gb_month") + min(TABLE_GB[sizes[i]], 25) * p("dynamodb_storage_gb_month"))

    row("... with the account's always-free allowances (10 alarm metrics, 5 GB of logs, 25 GB of table), "
        "if nothing else uses them", "",
        [f"${fixed[i] + sizes[i] * idle_month_cost - free(i):.2f}" for i in range(len(sizes))], in_sum=False)

    print()
    print("| price | per | always free, per account | read on | source |")
    print("|---|---|---|---|---|")
    for _, price, unit, allowance, source in FLOOR_PRICES:
        shown = "not found" if price is None else f"${price:.2f}" if round(price, 2) == price else f"${price:.3f}"
        print(f"| {shown} | {unit} | {allowance} | {READ_ON} | {source} |")
    print()
    print("Not in the floor (no price or amount found): " + "; ".join(FLOOR_UNPRICED) + ".\n")
    return fixed


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/cost-inputs.json"
    doc = json.load(open(path))
    pr = Prices(doc, json.load(open(os.path.join(os.path.dirname(path), "cold-start-figures.json"))))
    idle = json.load(open(os.path.join(os.path.dirname(path), "doorbell-figures.json")))["idle"]
    idle_per_day = idle["on_per_day"]
    req = doc["dynamodb_requests"]
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
    # The idle desktop-month on the doorbell (the relay table's total), which the floor adds.
    total = syncs300 + conn + reconnects + pings
    floor(os.path.dirname(path), idle_per_day, total)

    print(f"Per request: prices as of {doc['prices']['as_of']} ({doc['prices']['source']}).\n")

    print("| tool | DynamoDB requests | read / write units | cost per 1,000 calls |")
    print("|---|---|---|---|")
    for t in TOOLS:
        ops = req["tools"][t]
        one = pr.api() + pr.invocation("mcp") + pr.invocation(t) + pr.dynamo("tools", t)
        if t == "upload_linked_chat_artifact":
            one += doc["prices"]["s3_put_per_thousand"] / 1000
        r, w = units(doc, "tools", t)
        print(f"| {t} | {', '.join(ops)} | {r:g} / {w:g} | ${one * 1000:.5f} |")

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
