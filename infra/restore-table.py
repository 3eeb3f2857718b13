#!/usr/bin/env python3
"""Step one of a point-in-time restore of the stack's table (docs/operations.md, "Restoring the
table"): export the table as it was at a moment to S3, and print the `sam deploy` that makes
CloudFormation replace the table with one made from that export.

    infra/restore-table.py --at 2026-12-06T09:30:00Z [--stack NAME] [--table NAME]
                           [--bucket BUCKET] [--prefix PREFIX] [--region REGION]

Run it with the deploy tools' Python (boto3 comes with the SAM CLI: .venv-deploy/bin/python).
`--at` is any moment in point-in-time recovery's window (the last 35 days, and not the last few
minutes). The table and bucket come from the stack's outputs (`TableName`,
`ArtifactBucketName`) unless given; the export goes under `restores/<time of the restore>`
(outside the bucket's `artifacts/` expiry), a folder of its own, so the export's data folder is
found unambiguously. The AWS endpoint follows the SDK's own settings (`AWS_ENDPOINT_URL`), which
is how the test command runs it against the emulator.

It changes nothing in the stack: the deploy it prints does (the old table is kept). Exit 1, with
the cause, when the export cannot be made or fails.
"""

import argparse
import datetime
import os
import sys
import time

import boto3
import botocore.exceptions

POLL_SECONDS = 10
# A DynamoDB export of a large table takes minutes to hours; give up (the export goes on, and
# `aws dynamodb describe-export` follows it) after this long.
WAIT_SECONDS = 6 * 3600


def moment(text):
    try:
        at = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--at: {text!r} is not an ISO 8601 time (2026-12-06T09:30:00Z)")
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"--at: {text!r} names no time zone (end it with Z for UTC)")
    return at


def stack_outputs(session, stack):
    described = session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def data_folder(s3, bucket, prefix):
    """The export's data folder under PREFIX: `<prefix>/AWSDynamoDB/<export id>/data/`."""
    folders = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/AWSDynamoDB/"):
        for obj in page.get("Contents", []):
            head, sep, _ = obj["Key"].partition("/data/")
            if sep:
                folders.add(head + "/data/")
    if len(folders) != 1:
        raise SystemExit(f"FAIL  expected one export's data under s3://{bucket}/{prefix}/AWSDynamoDB/, found "
                         f"{sorted(folders) or 'none'}: export again with a --prefix of its own")
    return folders.pop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at", required=True, type=moment, help="the moment to restore, ISO 8601 with a zone")
    p.add_argument("--stack", default="foundry-connect")
    p.add_argument("--table", help="default: the stack's TableName output")
    p.add_argument("--bucket", help="default: the stack's ArtifactBucketName output")
    p.add_argument("--prefix", help="default: restores/<now, UTC>")
    p.add_argument("--region")
    args = p.parse_args(argv)

    # AWS_REGION too (the Rust SDK's variable, which botocore reads only as AWS_DEFAULT_REGION).
    session = boto3.session.Session(region_name=args.region or os.environ.get("AWS_REGION"))
    errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
    try:
        outputs = {} if args.table and args.bucket else stack_outputs(session, args.stack)
    except errors as e:
        raise SystemExit(f"FAIL  reading stack {args.stack}'s outputs: {e} (or pass --table and --bucket)")
    table = args.table or outputs.get("TableName")
    bucket = args.bucket or outputs.get("ArtifactBucketName")
    if not table or not bucket:
        raise SystemExit(f"FAIL  stack {args.stack} names no TableName or ArtifactBucketName output: pass --table and --bucket")
    prefix = (args.prefix or "restores/" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")).strip("/")

    try:
        dynamodb, s3 = session.client("dynamodb"), session.client("s3")
        arn = dynamodb.describe_table(TableName=table)["Table"]["TableArn"]
        export = dynamodb.export_table_to_point_in_time(
            TableArn=arn, ExportTime=args.at, S3Bucket=bucket, S3Prefix=prefix, ExportFormat="DYNAMODB_JSON",
        )["ExportDescription"]
    except errors as e:
        raise SystemExit(f"FAIL  exporting {table} as of {args.at.isoformat()}: {e}")
    print(f"ok    export of {table} as of {args.at.isoformat()} started: {export['ExportArn']}", flush=True)
    waited = 0
    while export["ExportStatus"] == "IN_PROGRESS":
        if waited >= WAIT_SECONDS:
            raise SystemExit(f"FAIL  the export is still running after {WAIT_SECONDS // 3600} h: follow it with "
                             f"aws dynamodb describe-export --export-arn {export['ExportArn']}, then run this again "
                             f"with --prefix {prefix} to find its data")
        time.sleep(POLL_SECONDS)
        waited += POLL_SECONDS
        export = dynamodb.describe_export(ExportArn=export["ExportArn"])["ExportDescription"]
    if export["ExportStatus"] != "COMPLETED":
        raise SystemExit(f"FAIL  the export {export['ExportStatus']}: {export.get('FailureCode')} "
                         f"{export.get('FailureMessage')}")
    data = data_folder(s3, bucket, prefix)
    print(f"ok    exported {export.get('ItemCount', '?')} items to s3://{bucket}/{data}")
    print(f"RestoreExportBucket={bucket}")
    print(f"RestoreExportPrefix={data}")
    print("\nnext: put both in samconfig.toml's parameter_overrides (sam deploy --guided saved them empty, and a\n"
          "deploy that clears them makes another, empty table: infra/preflight refuses it), then sam deploy.\n"
          "CloudFormation makes a new table from the export, moves every function to it and keeps the old one.\n"
          "The same deploy on the command line (samconfig.toml must then be edited before any later deploy):\n"
          f"  sam deploy --parameter-overrides RestoreExportBucket={bucket} RestoreExportPrefix={data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
