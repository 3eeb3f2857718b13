"""Checks infra/moto_patches.py against moto itself: the same transactions, run in moto as it is
and in moto with the patches, leave the same items and the same stream records, and every
transaction gets the same answer. A patch that does not roll back (`--broken`, run by the test
itself) must differ.

    python infra/moto_patches_test.py          (moto's pinned environment: infra/requirements.txt)

Each variant runs in its own process (the patches replace moto's code for the whole process),
on moto's in-process backend (`mock_aws`), and prints what it saw as JSON. Prints
`moto_patches_test: N transactions, the same in moto and patched; a patch without rollback differs`
and exits 0, or names the first difference and exits 1.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def s(v):
    return {"S": v}


def scenarios():
    """(table, transaction) pairs, run in order on two tables: `hr` (hash and range keys,
    a stream) and `h` (hash key only, a stream)."""
    put_hr = lambda pk, sk, **a: {"Put": {"TableName": "hr", "Item": {"pk": s(pk), "sk": s(sk), **a}}}
    put_h = lambda pk, **a: {"Put": {"TableName": "h", "Item": {"pk": s(pk), **a}}}
    absent = lambda table, key: {
        "ConditionCheck": {"TableName": table, "Key": key, "ConditionExpression": "attribute_not_exists(pk)"}
    }
    update = lambda table, key, v: {
        "Update": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET v = :v",
            "ExpressionAttributeValues": {":v": s(v)},
        }
    }
    return [
        # Succeeds: two new items, one per table.
        [put_hr("a", "1", v=s("one")), put_h("x", v=s("ex"))],
        # Fails on its last operation: the new partition, the new item and the update go.
        [put_hr("b", "1", v=s("new")), update("h", {"pk": s("x")}, "changed"), absent("hr", {"pk": s("a"), "sk": s("1")})],
        # Fails on its first: nothing was written yet.
        [absent("h", {"pk": s("x")}), put_h("y")],
        # Succeeds: updates an item in place, deletes another.
        [update("hr", {"pk": s("a"), "sk": s("1")}, "two"), {"Delete": {"TableName": "h", "Key": {"pk": s("x")}}}],
        # Fails: an update of an item in a partition that has others, and a delete.
        [
            put_hr("a", "2", v=s("sibling")),
            update("hr", {"pk": s("a"), "sk": s("1")}, "three"),
            {"Delete": {"TableName": "hr", "Key": {"pk": s("a"), "sk": s("1")}}},
        ],
        # Refused before anything is written: the same item twice.
        [put_h("z"), put_h("z", v=s("again"))],
        # Fails with a condition on a put that already wrote the item before it.
        [
            put_h("w", v=s("first")),
            {
                "Put": {
                    "TableName": "hr",
                    "Item": {"pk": s("a"), "sk": s("1")},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ],
    ]


def child(mode):
    # In-process moto only: an endpoint in the environment (the test command's moto server)
    # would take the requests past mock_aws.
    for name in [n for n in os.environ if n.startswith("AWS_ENDPOINT_URL")]:
        del os.environ[name]
    os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    import boto3
    from moto import mock_aws

    if mode in ("patched", "broken", "broken-sqs"):
        sys.path.insert(0, HERE)
        import moto_patches

        if mode == "broken":
            moto_patches._restore = lambda *a: None
            moto_patches._truncate_streams = lambda *a: None
        if mode == "broken-sqs":
            # A clock in seconds where moto counts milliseconds: every message reads as visible.
            import time

            moto_patches._sqs_now_millis = lambda dt=None: time.time()
        moto_patches.apply()

    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        stream = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        db.create_table(
            TableName="hr",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification=stream,
        )
        db.create_table(
            TableName="h",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification=stream,
        )
        # The stream records as moto keeps them (its streams API is not served in-process).
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        seen = []
        for tx in scenarios():
            try:
                db.transact_write_items(TransactItems=tx)
                answer = "ok"
            except db.exceptions.ClientError as e:
                answer = e.response["Error"]["Code"]
            state = {}
            for table in ("hr", "h"):
                items = sorted(db.scan(TableName=table)["Items"], key=lambda i: json.dumps(i, sort_keys=True))
                records = [r.to_json() for r in backend.tables[table].stream_shard.items]
                state[table] = {
                    "items": items,
                    "stream": [(r["eventName"], json.dumps(r["dynamodb"].get("Keys"), sort_keys=True)) for r in records],
                }
            seen.append({"answer": answer, "state": state})
        seen.append({"sqs": sqs_scenario(boto3)})
        print(json.dumps(seen))


def sqs_scenario(boto3):
    """What a queue answers over sends, receives, a visibility change and deletes: bodies and
    counts (message ids and receipt handles are random)."""
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "600"})["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)])
    sqs.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=900)
    counts = lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    got = []
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4, VisibilityTimeout=600).get("Messages", [])
    got.append(sorted(m["Body"] for m in first))
    for m in first[:1]:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    second = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600).get("Messages", [])
    got.append(sorted(m["Body"] for m in second))
    for m in second[:3]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    c = counts()
    got.append([c["ApproximateNumberOfMessages"], c["ApproximateNumberOfMessagesNotVisible"],
                c["ApproximateNumberOfMessagesDelayed"], c["MessageRetentionPeriod"]])
    return got


def run(mode):
    out = subprocess.run([sys.executable, __file__, "--child", mode], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"moto_patches_test: the {mode} run failed:\n{out.stderr}")
    return json.loads(out.stdout)


def first_difference(a, b):
    for n, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"transaction {n + 1}: moto {json.dumps(x)}\n  patched {json.dumps(y)}"
    return None if len(a) == len(b) else "a different number of transactions"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    as_is, patched, broken, broken_sqs = run("as-is"), run("patched"), run("broken"), run("broken-sqs")
    answers = [t["answer"] for t in as_is if "answer" in t]
    if answers.count("ok") < 2 or len(set(answers)) < 3:
        print(f"moto_patches_test: the transactions do not both succeed and fail: {answers}")
        return 1
    diff = first_difference(as_is, patched)
    if diff:
        print(f"moto_patches_test: the patched moto differs from moto:\n  {diff}")
        return 1
    if first_difference(as_is, broken) is None:
        print("moto_patches_test: a patch without rollback went unnoticed")
        return 1
    if first_difference(as_is, broken_sqs) is None:
        print("moto_patches_test: an SQS clock in the wrong unit went unnoticed")
        return 1
    print(
        f"moto_patches_test: {len(answers)} transactions ({', '.join(answers)}) and a queue's answers, the same in "
        "moto and patched; a patch without rollback differs, and so does an SQS clock in the wrong unit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
