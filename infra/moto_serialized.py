"""moto server with DynamoDB requests serialized.

moto answers DynamoDB requests from several threads at once without a lock around
conditional writes: two concurrent `UpdateItem`s with the same `ConditionExpression` can
both succeed (measured: about 5% of 8-way races on one item). Real DynamoDB serializes
writes per item, so the emulator must too, or the store's race tests would blame the store
for the emulator's race. This wrapper takes one process-wide lock around every DynamoDB
request (identified by its `X-Amz-Target: DynamoDB_*` header) and leaves every other
service (SQS, S3) concurrent.

`--no-serialize` turns the lock off, only to show that the claim race test catches an
emulator that lets two conditional writers win.

It also applies `moto_patches` (whole-table copies in every transaction, a folder listing in
every request and an RSA import in every user pool, replaced by what answers the same for less:
that module says how); `--as-moto-is` leaves moto's code as it is, to measure the difference.

It also refuses the Cognito app clients that Cognito documents as invalid and moto creates
anyway (`CognitoRules`): a build that asks for one fails the cloud tests as it would fail in
an account. `--cognito-as-moto` turns the rules off, only to show that the tests catch it.

It checks IAM (`moto_iam`): the cloud harness registers each function's statements from the
template and its own credentials, and a call the statements do not allow is refused as AWS
refuses it. `--no-iam` lets every call through, only to show that the tests catch it.

Both the IAM check and the capacity meter (`moto_capacity`) cost each DynamoDB request time of
their own; `--no-iam --no-meter` is what the cold-start benchmark runs on
(`infra/lambda-figures.sh`), so the durations it measures are the functions' and moto's, not
the checks'.

Usage: python moto_serialized.py --port-file PATH [--host 127.0.0.1] [--port 0] [--no-serialize]
                                 [--cognito-as-moto] [--as-moto-is] [--no-iam] [--no-meter]
"""

import argparse
import io
import json
import logging
import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

import moto_capacity
import moto_iam
import moto_patches
from aws_rules import cognito_client_id_problem, cognito_client_problem


class SerializeDynamoDB:
    """WSGI middleware: one DynamoDB request at a time, body included, its capacity counted
    (unless `meter` is False: then nothing is counted and no request pays for the counting)."""

    def __init__(self, app, meter=True):
        self.app = app
        self.lock = threading.Lock()
        self.meter = moto_capacity.Meter(app) if meter else None

    def __call__(self, environ, start_response):
        if self.meter and environ.get("PATH_INFO") == moto_capacity.PATH and environ.get("REQUEST_METHOD") == "GET":
            answer = json.dumps(self.meter.report("reset=1" in environ.get("QUERY_STRING", ""))).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
            return [answer]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB_"):
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = {}
        with self.lock:
            answered, data = [], []

            def forward():
                env = dict(environ)
                env["wsgi.input"] = io.BytesIO(body)
                result = self.app(env, lambda s, h, exc_info=None: answered.append((s, list(h))))
                try:
                    # Drain inside the lock: the write is only finished once the body is built.
                    data.append(b"".join(result))
                    return data[0]
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()

            try:
                if self.meter is None:
                    forward()
                    counts = []
                else:
                    _, counts = self.meter.measure(environ, target.split(".", 1)[-1], params, forward)
            except Exception as error:  # noqa: BLE001 - a meter fault must not change the answer
                print(f"capacity meter: {target}: {error!r}", file=sys.stderr, flush=True)
                counts = []
                if not data:
                    forward()
        status, headers = answered[0]
        headers.append((moto_capacity.HEADER, moto_capacity.header_value(counts)))
        start_response(status, headers)
        return [data[0]]


class CognitoRules:
    """WSGI middleware: Cognito's documented refusals of app clients, before moto sees them."""

    TARGETS = (
        "AWSCognitoIdentityProviderService.CreateUserPoolClient",
        "AWSCognitoIdentityProviderService.UpdateUserPoolClient",
    )
    # Calls naming an app client by its id: Cognito checks the id's form first.
    BY_ID = (
        "AWSCognitoIdentityProviderService.DescribeUserPoolClient",
        "AWSCognitoIdentityProviderService.DeleteUserPoolClient",
        "AWSCognitoIdentityProviderService.UpdateUserPoolClient",
    )

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target not in self.TARGETS and target not in self.BY_ID:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = {}
        problem = cognito_client_id_problem(params) if target in self.BY_ID else None
        if problem is None and target in self.TARGETS:
            problem = cognito_client_problem(params)
        if problem is None:
            return self.app(environ, start_response)
        answer = json.dumps({"__type": "InvalidParameterException", "message": problem}).encode()
        start_response("400 Bad Request", [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("Content-Length", str(len(answer))),
            ("x-amzn-ErrorType", "InvalidParameterException"),
        ])
        return [answer]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--no-serialize", action="store_true")
    parser.add_argument("--cognito-as-moto", action="store_true")
    parser.add_argument("--as-moto-is", action="store_true")
    parser.add_argument("--no-iam", action="store_true")
    parser.add_argument("--no-meter", action="store_true")
    args = parser.parse_args()

    if not args.as_moto_is:
        moto_patches.apply()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    if not args.no_serialize:
        app = SerializeDynamoDB(app, meter=not args.no_meter)
    if not args.cognito_as_moto:
        app = CognitoRules(app)
    if not args.no_iam:
        app = moto_iam.EnforceIam(app)
    server = make_server(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    port = server.server_address[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    # Rename so a reader never sees a half-written port.
    os.replace(args.port_file + ".tmp", args.port_file)
    mode = "unserialized (race demo only)" if args.no_serialize else "DynamoDB serialized"
    print(f"moto listening on {args.host}:{port}, {mode}", flush=True)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
