"""Checks infra/moto_capacity.py's counts against DynamoDB's documented billing rules, through
the wrapper's real WSGI stack (`moto_serialized.SerializeDynamoDB` over moto), on items whose
sizes are worked out by hand below; then checks that each of a set of plausible counting
mistakes (mutants of the meter) fails at least one expectation.

    python infra/moto_capacity_test.py          (moto's pinned environment: infra/requirements.txt)

Prints `moto_capacity_test: N expectations hold; M mutants each caught` and exits 0, or names
what differs and exits 1.
"""

import json
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app  # noqa: E402
from werkzeug.test import Client  # noqa: E402

import moto_capacity  # noqa: E402
import moto_serialized  # noqa: E402

AUTH = ("AWS4-HMAC-SHA256 Credential=test/20261206/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host;x-amz-target, Signature=0")


def s(v):
    return {"S": v}


class Dynamo:
    def __init__(self):
        app = moto_serialized.SerializeDynamoDB(DomainDispatcherApplication(create_backend_app))
        self.client = Client(app)
        self.table = f"cap-{uuid.uuid4().hex[:8]}"

    def call(self, target, params):
        answer = self.client.post("/", data=json.dumps(params), headers={
            "X-Amz-Target": f"DynamoDB_20120810.{target}",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": AUTH,
            "Host": "dynamodb.us-east-1.amazonaws.com",
        })
        counted = json.loads(answer.headers.get(moto_capacity.HEADER, "null") or "null")
        return answer.status_code, json.loads(answer.data or b"{}"), counted

    def report(self):
        answer = self.client.get(moto_capacity.PATH)
        return json.loads(answer.data)


def scenario(db):
    """Yields (what, expected, got) for each expectation."""
    t = db.table
    status, answer, _ = db.call("CreateTable", {
        "TableName": t,
        "AttributeDefinitions": [{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "gpk", "gsk")],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "GlobalSecondaryIndexes": [{
            "IndexName": "g1",
            "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"}, {"AttributeName": "gsk", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["st"]},
        }],
        "BillingMode": "PAY_PER_REQUEST",
    })
    assert status == 200, answer

    def units(target, params):
        status, answer, counted = db.call(target, {"TableName": t, **params})
        return status, answer, (counted["read"], counted["write"]) if counted else None

    key = lambda pk, sk: {"pk": s(pk), "sk": s(sk)}
    # Sizes: "pk"+"a" = 3, "sk"+"1" = 3, "blob"+1,500 = 1,504: 1,510 bytes, 2 write units.
    yield "a 1,510-byte put: 2 write units", (0, 2), units("PutItem", {"Item": {**key("a", "1"), "blob": s("x" * 1500)}})[2]
    yield "a strongly consistent get of it: 1 read unit", (1, 0), units("GetItem", {"Key": key("a", "1"), "ConsistentRead": True})[2]
    yield "an eventually consistent get: half a unit", (0.5, 0), units("GetItem", {"Key": key("a", "1")})[2]
    # 3 + 3 + 4 + 5,000 = 5,010 bytes: 5 write units, 2 strong read units (4 KB each).
    yield "a 5,010-byte put: 5 write units", (0, 5), units("PutItem", {"Item": {**key("a", "2"), "blob": s("x" * 5000)}})[2]
    yield "a strong get of 5,010 bytes: 2 units", (2, 0), units("GetItem", {"Key": key("a", "2"), "ConsistentRead": True})[2]
    yield "an eventual get of 5,010 bytes: 1 unit", (1, 0), units("GetItem", {"Key": key("a", "2")})[2]
    yield "a get of a missing item: the minimum", (1, 0), units("GetItem", {"Key": key("zz", "1"), "ConsistentRead": True})[2]
    # The update shrinks a 1,510-byte item to 11 bytes: billed by the larger, 2 units.
    yield "an update billed by the larger of before and after", (0, 2), units("UpdateItem", {
        "Key": key("a", "1"), "UpdateExpression": "SET blob = :v", "ExpressionAttributeValues": {":v": s("y")}})[2]
    status, _, got = units("PutItem", {"Item": key("a", "2"), "ConditionExpression": "attribute_not_exists(pk)"})
    yield "a refused conditional put pays for the 5,010-byte item", (400, (0, 5)), (status, got)
    # The query reads 11 + 5,010 bytes before its filter drops both: 2 strong units, 1 eventual.
    query = {"KeyConditionExpression": "pk = :p", "FilterExpression": "blob = :none",
             "ExpressionAttributeValues": {":p": s("a"), ":none": s("nothing")}}
    status, answer, got = units("Query", {**query, "ConsistentRead": True})
    yield "a strong query pays for what its filter dropped", (0, (2, 0)), (len(answer.get("Items", [])), got)
    yield "an eventual query: half", (1, 0), units("Query", query)[2]
    # 1 KB boundaries: 3 + 3 + 4 + 1,014 = 1,024 bytes is 1 unit; 1,025 is 2.
    yield "1,024 bytes: 1 write unit", (0, 1), units("PutItem", {"Item": {**key("e", "1"), "blob": s("x" * 1014)}})[2]
    yield "1,025 bytes: 2 write units", (0, 2), units("PutItem", {"Item": {**key("e", "1"), "blob": s("x" * 1015)}})[2]
    # The index: it holds gpk, gsk, pk, sk and st.
    d = {**key("d", "1"), "gpk": s("o1"), "gsk": s("1"), "st": s("queued"), "other": s("x")}
    yield "a put into the index: 1 table + 1 index write", (0, 2), units("PutItem", {"Item": d})[2]
    update = lambda expr, **v: units("UpdateItem", {"Key": key("d", "1"), "UpdateExpression": expr,
                                                    **({"ExpressionAttributeValues": v} if v else {})})[2]
    yield "an attribute the index does not project: no index write", (0, 1), update("SET other = :o", **{":o": s("y")})
    yield "a projected attribute: 1 index write", (0, 2), update("SET st = :s", **{":s": s("running")})
    yield "the index key moved: delete and put, 2 index writes", (0, 3), update("SET gpk = :g", **{":g": s("o2")})
    yield "the index key removed: 1 index delete", (0, 2), update("REMOVE gpk")
    yield "the index's partition o1 paid 3 writes in all", 3, db.report()["per_key"].get(f"{t}/g1/o1", {}).get("write")
    # A transaction: every item twice (the condition check too).
    status, answer, got = db.call("TransactWriteItems", {"TransactItems": [
        {"Put": {"TableName": t, "Item": key("t", "1")}},
        {"ConditionCheck": {"TableName": t, "Key": key("d", "1"), "ConditionExpression": "attribute_exists(pk)"}},
    ]})
    yield "a transaction of a put and a check: 4 write units", (200, 0, 4), (status, got and got["read"], got and got["write"])
    status, answer, got = db.call("TransactGetItems", {"TransactItems": [
        {"Get": {"TableName": t, "Key": key("a", "1")}}, {"Get": {"TableName": t, "Key": key("e", "1")}}]})
    yield "a transactional read of two small items: 4 read units", (200, 4, 0), (status, got and got["read"], got and got["write"])
    yield "a delete pays for the item it removes", (0, 2), units("DeleteItem", {"Key": key("e", "1")})[2]
    # Sizes of nested values, by the rules alone: pk 3, sk 3, m = 1 + 3 + ("ab" 2 + "xyz" 3 + 1)
    # = 10, l = 1 + 3 + (123.45: 5 digits, 4 bytes, + 1) + (true 1 + 1) = 11: 27 bytes.
    nested = {**key("m", "1"), "m": {"M": {"ab": s("xyz")}}, "l": {"L": [{"N": "123.45"}, {"BOOL": True}]}}
    yield "a map and a list: 27 bytes", 27, moto_capacity.item_size(nested)
    yield "numbers: leading and trailing zeros trimmed", (2, 3), (moto_capacity.number_size("000100"),
                                                                  moto_capacity.number_size("-12.30"))


def failures():
    db = Dynamo()
    out, count = [], 0
    for what, expected, got in scenario(db):
        count += 1
        if expected != got:
            out.append(f"{what}: expected {expected}, got {got}")
    return count, out


def mutants():
    """(name, apply, undo): counting mistakes the expectations must catch."""
    m = moto_capacity
    originals = {"write_units": m.write_units, "read_units": m.read_units, "value_size": m.value_size,
                 "projected": m.Schema.projected, "after_write": m.Meter.after_write, "QUERY_KEEPS": m.QUERY_KEEPS}

    def restore():
        m.write_units, m.read_units, m.value_size = originals["write_units"], originals["read_units"], originals["value_size"]
        m.Schema.projected, m.Meter.after_write = originals["projected"], originals["after_write"]
        m.QUERY_KEEPS = originals["QUERY_KEEPS"]

    def floor_kb():
        m.write_units = lambda size: max(1, size // 1024)

    def always_strong():
        m.read_units = lambda size, consistent: originals["read_units"](size, True)

    def no_overhead():
        def flat(v):
            (kind, x), = v.items()
            if kind == "L":
                return sum(flat(e) for e in x)
            if kind == "M":
                return sum(len(k) + flat(e) for k, e in x.items())
            return originals["value_size"](v)
        m.value_size = flat

    def no_index():
        m.Schema.projected = lambda self, index, item: None

    def single_transactions():
        m.Meter.after_write = lambda self, env, t, schema, key, before, factor, counts: originals["after_write"](
            self, env, t, schema, key, before, 1, counts)

    def after_filter():
        m.QUERY_KEEPS = originals["QUERY_KEEPS"] + ("FilterExpression",)

    return [("write units rounded down", floor_kb), ("eventual reads at full price", always_strong),
            ("no list or map overhead", no_overhead), ("index writes not counted", no_index),
            ("transactions counted once", single_transactions), ("queries billed after the filter", after_filter)], restore


def main():
    count, bad = failures()
    if bad:
        print("moto_capacity_test: the meter differs from DynamoDB's rules:\n  " + "\n  ".join(bad))
        return 1
    variants, restore = mutants()
    for name, apply in variants:
        apply()
        try:
            _, caught = failures()
        finally:
            restore()
        if not caught:
            print(f"moto_capacity_test: the mutant '{name}' passed every expectation")
            return 1
    print(f"moto_capacity_test: {count} expectations hold; {len(variants)} mutants each caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
