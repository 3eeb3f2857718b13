"""DynamoDB's capacity units, counted as DynamoDB bills them, for each request moto answers.

moto reports no capacity (or one unit whatever the size), so the tests and the cost model had
counted requests. This meter runs inside `moto_serialized.SerializeDynamoDB`'s lock, where
nothing else changes the table, and reads the items a request touches before and after it
(an internal `GetItem`, or the request's `Query` again without its filter), by DynamoDB's
documented rules:

- Item size (developerguide/CapacityUnitCalculations.html): attribute names and values in
  UTF-8 bytes; a number 1 byte per two significant digits plus 1; a binary value its raw
  bytes; a null or Boolean 1 byte; a list or map 3 bytes plus its elements, each element 1
  byte more (a map's element also its name).
- Reads (ReadWriteCapacityMode / "Read request units"): one unit per 4 KB read, rounded up,
  at least one; half for an eventually consistent read. A `Query` or `Scan` pays for the
  items it reads before its filter, summed then rounded once per request; a `GetItem` of a
  missing item still pays the minimum. A `TransactGetItems` item pays two units per 4 KB.
- Writes: one unit per 1 KB of the larger of the item before and after the write, rounded up,
  at least one (a failed conditional write pays too); a delete pays for the item it removes.
  A `TransactWriteItems` item pays two units per 1 KB; a `ConditionCheck` in it is billed as
  a transactional write of the item it checks (the meter's reading of the transactions page:
  every item of a write transaction goes through the two-phase write).
- Global secondary indexes (GSI.ThroughputConsiderations): a write that puts an item into an
  index, removes it, or changes a projected attribute costs one index write of the projected
  item's size (1 KB units); one that changes the index's key costs two (delete and put); one
  that leaves the index's key and projected attributes alone costs none. Index writes are
  counted once, not doubled in a transaction.

Each answer carries the counts in an `x-foundry-capacity` header (JSON: read and write units,
and the units per partition key, `table/<pk>` or `table/index/<pk>`), which the Rust test log
records beside each request; the meter also keeps totals per partition key and per second,
served (and reset with `?reset=1`) at `GET /_foundry/capacity` for the load scenarios.
"""

import base64
import collections
import io
import json
import math
import re
import threading
import time

HEADER = "x-foundry-capacity"
# What a Query or Scan is asked again with to see the items it read: its key condition and
# paging, not its filter or projection (DynamoDB bills what it read before those).
QUERY_KEEPS = ("TableName", "IndexName", "KeyConditionExpression", "Limit", "ExclusiveStartKey",
               "ScanIndexForward", "ConsistentRead", "Segment", "TotalSegments")
PATH = "/_foundry/capacity"


def number_size(text):
    """Bytes of a DynamoDB number: 1 per two significant digits, plus 1 (the documented rule;
    the sign and exponent are not priced, as the page does not price them)."""
    t = text.strip().lower()
    mantissa = t.lstrip("+-").split("e")[0].replace(".", "")
    digits = mantissa.strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def value_size(v):
    """Bytes of one attribute value (without its name)."""
    (kind, x), = v.items()
    if kind == "S":
        return len(x.encode())
    if kind == "N":
        return number_size(x)
    if kind == "B":
        return len(base64.b64decode(x))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in x)
    if kind == "NS":
        return sum(number_size(n) for n in x)
    if kind == "BS":
        return sum(len(base64.b64decode(b)) for b in x)
    if kind == "L":
        return 3 + sum(value_size(e) + 1 for e in x)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(e) + 1 for k, e in x.items())
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item):
    """Bytes of an item (0 for none)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


def write_units(size):
    return max(1, math.ceil(size / 1024))


def read_units(size, consistent):
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


class Schema:
    """A table's key attributes and its global secondary indexes' keys and projections."""

    def __init__(self, description):
        t = description["Table"]
        self.keys = [k["AttributeName"] for k in t["KeySchema"]]
        self.pk = self.keys[0]
        self.indexes = []
        for gsi in t.get("GlobalSecondaryIndexes", []):
            keys = [k["AttributeName"] for k in gsi["KeySchema"]]
            projection = gsi.get("Projection", {})
            self.indexes.append((gsi["IndexName"], keys, projection.get("ProjectionType", "ALL"),
                                 set(projection.get("NonKeyAttributes", []))))

    def key_of(self, item):
        return {k: item[k] for k in self.keys if k in item}

    def projected(self, index, item):
        """The item as the index holds it, or None when the item is not in the index."""
        _, keys, kind, extra = index
        if not item or any(k not in item for k in keys):
            return None
        if kind == "ALL":
            return item
        wanted = set(keys) | set(self.keys) | (extra if kind == "INCLUDE" else set())
        return {k: v for k, v in item.items() if k in wanted}


def pk_label(table, index_name, item, key_attr):
    value = (item or {}).get(key_attr)
    text = next(iter(value.values())) if isinstance(value, dict) and value else "?"
    return f"{table}/{index_name}/{text}" if index_name else f"{table}/{text}"


class Meter:
    """Counts the capacity of each DynamoDB request, calling the wrapped app for the items."""

    def __init__(self, app):
        self.app = app
        self.schemas = {}
        self.lock = threading.Lock()
        # (second, key) -> [read, write]; second is the wall clock's whole second.
        self.per_second = collections.defaultdict(lambda: [0.0, 0.0])
        self.per_key = collections.defaultdict(lambda: [0.0, 0.0])
        self.requests = collections.Counter()

    # -- calling moto ---------------------------------------------------------------------

    def call(self, environ, target, params):
        """Answers one internal request through the wrapped app: (status, body)."""
        body = json.dumps(params).encode()
        env = dict(environ)
        env["wsgi.input"] = io.BytesIO(body)
        env["CONTENT_LENGTH"] = str(len(body))
        env["HTTP_X_AMZ_TARGET"] = f"DynamoDB_20120810.{target}"
        status = []
        chunks = self.app(env, lambda s, h, exc_info=None: status.append(s))
        try:
            data = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return int(status[0].split()[0]), json.loads(data or b"{}")

    def schema(self, environ, table):
        if table not in self.schemas:
            status, answer = self.call(environ, "DescribeTable", {"TableName": table})
            if status != 200:
                return None
            self.schemas[table] = Schema(answer)
        return self.schemas[table]

    def get(self, environ, table, key):
        if not key:
            return None
        status, answer = self.call(environ, "GetItem", {"TableName": table, "Key": key, "ConsistentRead": True})
        return answer.get("Item") if status == 200 else None

    # -- counting -------------------------------------------------------------------------

    def after_write(self, environ, table, schema, key, before, factor, counts):
        after = self.get(environ, table, key)
        size = max(item_size(before), item_size(after))
        units = factor * write_units(size)
        label = pk_label(table, None, after or before or key, schema.pk)
        counts.append((label, 0.0, units))
        for index in schema.indexes:
            old, new = schema.projected(index, before), schema.projected(index, after)
            if old is None and new is None:
                continue
            name, keys = index[0], index[1]
            moved = old is not None and new is not None and any(old[k] != new[k] for k in keys)
            if old == new:
                continue
            if moved:
                counts.append((pk_label(table, name, old, keys[0]), 0.0, write_units(item_size(old))))
                counts.append((pk_label(table, name, new, keys[0]), 0.0, write_units(item_size(new))))
            else:
                held = new if new is not None else old
                counts.append((pk_label(table, name, held, keys[0]),
                               0.0, write_units(max(item_size(old), item_size(new)))))

    def read_query(self, environ, target, params, counts):
        """A Query or Scan: the items it reads before its filter, rounded once."""
        table = params.get("TableName")
        schema = self.schema(environ, table)
        if schema is None:
            return
        again = {k: v for k, v in params.items() if k in QUERY_KEEPS}
        # Keep only the placeholders the expressions kept use (moto refuses unused ones).
        expr = " ".join(str(again.get(k, "")) for k in ("KeyConditionExpression", "FilterExpression"))
        names = {k: v for k, v in params.get("ExpressionAttributeNames", {}).items()
                 if re.search(re.escape(k) + r"\b", expr)}
        values = {k: v for k, v in params.get("ExpressionAttributeValues", {}).items()
                  if re.search(re.escape(k) + r"\b", expr)}
        if names:
            again["ExpressionAttributeNames"] = names
        if values:
            again["ExpressionAttributeValues"] = values
        status, answer = self.call(environ, target, again)
        if status != 200:
            return
        items = answer.get("Items", [])
        index = params.get("IndexName")
        consistent = bool(params.get("ConsistentRead")) and not index
        units = read_units(sum(item_size(i) for i in items), consistent)
        key_attr = schema.pk
        if index:
            key_attr = next((i[1][0] for i in schema.indexes if i[0] == index), schema.pk)
        label = pk_label(table, index, items[0] if items else None, key_attr)
        if label.endswith("/?"):
            label = pk_label(table, index, values_key(params, key_attr), key_attr)
        counts.append((label, units, 0.0))

    def measure(self, environ, target, params, forward):
        """Runs `forward()` (the real request) and returns its answer and its counts."""
        counts = []
        table = params.get("TableName")
        if target == "GetItem":
            schema = self.schema(environ, table)
            item = self.get(environ, table, params.get("Key"))
            answer = forward()
            if schema:
                counts.append((pk_label(table, None, params.get("Key"), schema.pk), read_units(
                    item_size(item), bool(params.get("ConsistentRead"))), 0.0))
        elif target in ("PutItem", "UpdateItem", "DeleteItem"):
            key = params.get("Key") or {}
            schema = self.schema(environ, table)
            if target == "PutItem" and schema:
                key = schema.key_of(params.get("Item", {}))
            before = self.get(environ, table, key) if schema else None
            answer = forward()
            if schema:
                self.after_write(environ, table, schema, key, before, 1, counts)
        elif target in ("Query", "Scan"):
            answer = forward()
            self.read_query(environ, target, params, counts)
        elif target == "TransactWriteItems":
            staged = []
            for entry in params.get("TransactItems", []):
                (kind, part), = entry.items()
                t = part.get("TableName")
                schema = self.schema(environ, t)
                if schema is None:
                    continue
                key = schema.key_of(part["Item"]) if kind == "Put" else part.get("Key", {})
                staged.append((t, schema, key, self.get(environ, t, key)))
            answer = forward()
            for t, schema, key, before in staged:
                self.after_write(environ, t, schema, key, before, 2, counts)
        elif target == "TransactGetItems":
            for entry in params.get("TransactItems", []):
                part = entry.get("Get", {})
                t = part.get("TableName")
                schema = self.schema(environ, t)
                if schema:
                    item = self.get(environ, t, part.get("Key"))
                    counts.append((pk_label(t, None, part.get("Key"), schema.pk), 2 * read_units(item_size(item), True), 0.0))
            answer = forward()
        else:
            if target in ("CreateTable", "DeleteTable", "UpdateTable"):
                self.schemas.pop(table, None)
            answer = forward()
        self.record(target, counts)
        return answer, counts

    def record(self, target, counts):
        second = int(time.time())
        with self.lock:
            self.requests[target] += 1
            for label, r, w in counts:
                self.per_key[label][0] += r
                self.per_key[label][1] += w
                self.per_second[(second, label)][0] += r
                self.per_second[(second, label)][1] += w

    def report(self, reset):
        """The totals: per key, the busiest second per key, and requests by kind."""
        with self.lock:
            busiest = {}
            for (second, label), (r, w) in self.per_second.items():
                b = busiest.setdefault(label, [0.0, 0.0])
                b[0] = max(b[0], r)
                b[1] = max(b[1], w)
            doc = {
                "per_key": {k: {"read": r, "write": w} for k, (r, w) in self.per_key.items()},
                "busiest_second": {k: {"read": r, "write": w} for k, (r, w) in busiest.items()},
                "requests": dict(self.requests),
            }
            if reset:
                self.per_second.clear()
                self.per_key.clear()
                self.requests.clear()
        return doc


def values_key(params, key_attr):
    """The partition key a Query names (`#pk = :v` style), for labelling an empty answer."""
    names = {v: k for k, v in params.get("ExpressionAttributeNames", {}).items()}
    placeholder = names.get(key_attr, key_attr)
    expr = params.get("KeyConditionExpression", "")
    m = re.search(re.escape(placeholder) + r"\s*=\s*(:[A-Za-z0-9_]+)", expr)
    if not m:
        return None
    return {key_attr: params.get("ExpressionAttributeValues", {}).get(m.group(1))}


def header_value(counts):
    """The `x-foundry-capacity` header: totals and units per partition key."""
    read = sum(r for _, r, _ in counts)
    write = sum(w for _, _, w in counts)
    keys = {}
    for label, r, w in counts:
        k = keys.setdefault(label, [0.0, 0.0])
        k[0] += r
        k[1] += w
    return json.dumps({"read": read, "write": write, "keys": keys}, separators=(",", ":"))
