"""IAM for the emulator: each function's calls checked against its own statements.

moto checks no IAM, so a function whose role lacks an action works in every test and fails on
AWS (issue 56: `remove_device` ends in a `TransactWriteItems` of two deletes, which AWS checks as
`dynamodb:DeleteItem`, and the owner API's role had no `DeleteItem`). The cloud harness
(`tests/src/cloud.rs`) runs every function with credentials of its own and registers that
function's statements from `template.yaml`, resolved to the emulator's ARNs, with
`POST /_foundry/iam`. Every request signed with registered credentials is then checked here
before moto sees it, as AWS's policy evaluation would check an identity-based policy:

- an action is allowed when an `Allow` statement names it (with `*` and `?` wildcards,
  case-insensitively) and one of the statement's resources matches every resource the request
  touches (wildcards in the ARN), and its conditions hold; there is no `Deny` in the template,
  and one here would win;
- DynamoDB: the table's ARN, or `<table>/index/<name>` for a `Query` or `Scan` of an index;
  `BatchGetItem`/`BatchWriteItem` check each table; a transaction's items are checked by their
  underlying actions (`Put` → `dynamodb:PutItem`, `Update` → `UpdateItem`, `Delete` →
  `DeleteItem`, `ConditionCheck` → `ConditionCheckItem`, `TransactGetItems`' `Get` →
  `GetItem`), as *Using IAM with DynamoDB transactions* documents; the condition
  `ForAllValues:StringLike` on `dynamodb:LeadingKeys` is evaluated on the partition key values
  the request names (a `Query`'s from its key condition's `:value`);
- Cognito (`cognito-idp:<Action>` on the user pool's ARN), SQS (`sqs:<Action>` on the queue's
  ARN, from `QueueUrl`), S3 (`s3:GetObject`/`PutObject`/`DeleteObject` on
  `arn:aws:s3:::<bucket>/<key>`, `s3:ListBucket` on the bucket);
- the calls the harness serves itself ask `POST /_foundry/iam/check`: Lambda Invoke
  (`lambda:InvokeFunction` on the function's ARN) and the WebSocket management API
  (`execute-api:ManageConnections` on `<api>/<stage>/<METHOD>/@connections/<id>`).

A request that is refused gets AWS's answer for its protocol: `AccessDeniedException` (HTTP 400,
JSON) for DynamoDB, Cognito and SQS, `AccessDenied` (HTTP 403, XML) for S3, with AWS's message
("User: ... is not authorized to perform: <action> on resource: <arn> because no identity-based
policy allows the <action> action"). Unsigned requests and the harness's own credentials are
not checked. `--no-iam` on moto_serialized.py turns the check off, to show the tests catch it.
"""

import fnmatch
import io
import json
import re
import threading
import urllib.parse

ACCOUNT = "123456789012"
REGION = "us-east-1"
REGISTER_PATH = "/_foundry/iam"

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def access_key(environ):
    """The access key id a request is signed with, or None."""
    m = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if m:
        return m.group(1)
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    cred = (query.get("X-Amz-Credential") or [""])[0]
    return cred.split("/", 1)[0] or None


def _matches(pattern, value):
    return fnmatch.fnmatchcase(value.lower(), pattern.lower()) if "*" in pattern or "?" in pattern else pattern.lower() == value.lower()


def _arn_matches(pattern, value):
    # ARNs are case-sensitive; actions are not.
    return fnmatch.fnmatchcase(value, pattern)


def _listify(v):
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _conditions_hold(condition, context):
    """The statement's `Condition` block against the request's context keys."""
    for operator, keys in (condition or {}).items():
        for key, wanted in keys.items():
            wanted = _listify(wanted)
            values = context.get(key)
            if operator == "ForAllValues:StringLike":
                # Every value the request has must match one pattern (no values: holds).
                if any(not any(fnmatch.fnmatchcase(v, w) for w in wanted) for v in values or []):
                    return False
            elif operator == "StringEquals":
                if values is None or not all(v in wanted for v in values):
                    return False
            elif operator == "StringLike":
                if values is None or not all(any(fnmatch.fnmatchcase(v, w) for w in wanted) for v in values):
                    return False
            else:
                # An operator this checker does not know: refuse, so the gap shows.
                return False
    return True


def allowed(statements, action, resource, context):
    """Whether `statements` allow `action` on `resource` with `context`."""
    allow = False
    for st in statements:
        if not any(_matches(a, action) for a in _listify(st.get("Action"))):
            continue
        if not any(_arn_matches(r, resource) for r in _listify(st.get("Resource"))):
            continue
        if not _conditions_hold(st.get("Condition"), context):
            continue
        if st.get("Effect") == "Deny":
            return False
        if st.get("Effect") == "Allow":
            allow = True
    return allow


def _table_arn(name):
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def _key_values(key, pk_names=("pk",)):
    """Partition key values (strings) of a DynamoDB key or item."""
    out = []
    for name in pk_names:
        v = (key or {}).get(name)
        if isinstance(v, dict) and "S" in v:
            out.append(v["S"])
    return out


_TRANSACT = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}


def _query_leading_keys(params):
    """A Query's partition key value, from `pk = :v` in its key condition."""
    expr = params.get("KeyConditionExpression") or ""
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", expr):
        attr = names.get(left, left)
        if attr == "pk" and isinstance(values.get(right), dict) and "S" in values[right]:
            return [values[right]["S"]]
    return []


def dynamodb_checks(action, params):
    """[(iam action, resource arn, context)] for one DynamoDB request."""
    checks = []
    if action in ("TransactWriteItems", "TransactGetItems"):
        for entry in params.get("TransactItems") or []:
            for op_name, op in entry.items():
                underlying = _TRANSACT.get(op_name)
                if underlying is None or not isinstance(op, dict):
                    continue
                key = op.get("Key") or op.get("Item")
                checks.append(
                    (f"dynamodb:{underlying}", _table_arn(op.get("TableName", "")), {"dynamodb:LeadingKeys": _key_values(key)})
                )
        return checks
    if action in ("BatchGetItem", "BatchWriteItem"):
        for table, req in (params.get("RequestItems") or {}).items():
            keys = []
            if isinstance(req, dict):
                keys = [k for k in req.get("Keys") or []]
            elif isinstance(req, list):
                for w in req:
                    for kind, body in w.items():
                        keys.append(body.get("Key") or body.get("Item"))
            leading = [v for k in keys for v in _key_values(k)]
            checks.append((f"dynamodb:{action}", _table_arn(table), {"dynamodb:LeadingKeys": leading}))
        return checks
    table = params.get("TableName", "")
    arn = _table_arn(table)
    if params.get("IndexName"):
        arn = f"{arn}/index/{params['IndexName']}"
    if action == "Query":
        context = {"dynamodb:LeadingKeys": _query_leading_keys(params)}
    elif action == "Scan":
        # A scan names no partition: the key is absent, and a ForAllValues condition on an
        # absent key holds, on AWS as here (the documented ForAllValues pitfall).
        context = {}
    else:
        context = {"dynamodb:LeadingKeys": _key_values(params.get("Key") or params.get("Item"))}
    checks.append((f"dynamodb:{action}", arn, context))
    return checks


def _queue_arn(url):
    name = url.rstrip("/").rsplit("/", 1)[-1] if url else ""
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def checks_for(environ, body):
    """[(action, resource, context)] a request needs, or None for one this checker does not
    know (let through: the harness's own calls, moto's own endpoints)."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    try:
        params = json.loads(body or b"{}") if target else {}
    except ValueError:
        params = {}
    if target.startswith("DynamoDB_"):
        return dynamodb_checks(target.split(".", 1)[1], params)
    if target.startswith("AWSCognitoIdentityProviderService."):
        pool = params.get("UserPoolId", "*")
        return [(f"cognito-idp:{target.split('.', 1)[1]}", f"arn:aws:cognito-idp:{REGION}:{ACCOUNT}:userpool/{pool}", {})]
    if target.startswith("AmazonSQS."):
        # A batch call is authorized as its single action (SQS's API reference).
        action = target.split(".", 1)[1]
        action = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
                  "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}.get(action, action)
        return [(f"sqs:{action}", _queue_arn(params.get("QueueUrl", "")), {})]
    if target:
        return None
    return s3_checks(environ)


def s3_checks(environ):
    """S3's REST calls, path-style (`/<bucket>/<key>`) or virtual-hosted."""
    host = environ.get("HTTP_HOST", "")
    path = urllib.parse.unquote(environ.get("PATH_INFO", ""))
    method = environ.get("REQUEST_METHOD", "GET")
    bucket, key = "", ""
    m = re.match(r"^([a-z0-9.-]+)\.s3[.-]", host)
    if m:
        bucket, key = m.group(1), path.lstrip("/")
    else:
        parts = path.lstrip("/").split("/", 1)
        bucket = parts[0]
        key = parts[1] if len(parts) > 1 else ""
    if not bucket:
        return None
    if key:
        action = {"GET": "GetObject", "HEAD": "GetObject", "PUT": "PutObject", "POST": "PutObject", "DELETE": "DeleteObject"}.get(method)
        return [(f"s3:{action}", f"arn:aws:s3:::{bucket}/{key}", {})] if action else None
    if method in ("GET", "HEAD"):
        return [("s3:ListBucket", f"arn:aws:s3:::{bucket}", {})]
    return None


def denied_answer(environ, start_response, who, action, resource):
    """AWS's refusal for the request's protocol."""
    message = (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{who}-role/{who} is not authorized to perform: {action} "
        f"on resource: {resource} because no identity-based policy allows the {action} action"
    )
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if not target:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>AccessDenied</Code><Message>{message}</Message><RequestId>fc-iam</RequestId></Error>"
        ).encode()
        start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body]
    if target.startswith("DynamoDB_"):
        kind, content_type = "com.amazon.coral.service#AccessDeniedException", "application/x-amz-json-1.0"
        payload = {"__type": kind, "Message": message}
    else:
        kind, content_type = "AccessDeniedException", "application/x-amz-json-1.1"
        payload = {"__type": kind, "message": message}
    body = json.dumps(payload).encode()
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("x-amzn-ErrorType", "AccessDeniedException")]
    if target.startswith("AmazonSQS."):
        headers.append(("x-amzn-query-error", "AccessDenied;Sender"))
    start_response("400 Bad Request", headers)
    return [body]


class EnforceIam:
    """WSGI middleware: registered credentials' calls checked against their statements."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.identities = {}  # access key -> (name, statements)
        self.refusals = []  # (name, action, resource), for the harness to read

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == REGISTER_PATH:
            return self.register(environ, start_response)
        if path == REGISTER_PATH + "/check":
            return self.check(environ, start_response)
        key = access_key(environ)
        with self.lock:
            identity = self.identities.get(key) if key else None
        if identity is None:
            return self.app(environ, start_response)
        name, statements = identity
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        for action, resource, context in checks_for(environ, body) or []:
            if not allowed(statements, action, resource, context):
                with self.lock:
                    self.refusals.append({"function": name, "action": action, "resource": resource})
                return denied_answer(environ, start_response, name, action, resource)
        return self.app(environ, start_response)

    def check(self, environ, start_response):
        """`POST {access_key, action, resource}` → `{known, allowed}`: the same evaluation for
        the calls the cloud harness serves itself (Lambda Invoke, the WebSocket management
        API), so the rules live in one place. A refusal is recorded like the others."""
        length = int(environ.get("CONTENT_LENGTH") or 0)
        try:
            ask = json.loads(environ["wsgi.input"].read(length) or b"{}")
            key, action, resource = ask["access_key"], ask["action"], ask["resource"]
        except (ValueError, KeyError, TypeError) as e:
            body = json.dumps({"error": f"a check is {{access_key, action, resource}}: {e}"}).encode()
            start_response("400 Bad Request", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        with self.lock:
            identity = self.identities.get(key)
        answer = {"known": identity is not None, "allowed": True}
        if identity is not None and not allowed(identity[1], action, resource, {}):
            answer["allowed"] = False
            with self.lock:
                self.refusals.append({"function": identity[0], "action": action, "resource": resource})
        body = json.dumps(answer).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def register(self, environ, start_response):
        method = environ.get("REQUEST_METHOD")
        if method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
                with self.lock:
                    self.identities[spec["access_key"]] = (spec["name"], spec["statements"])
                answer, status = {"registered": spec["access_key"]}, "200 OK"
            except (ValueError, KeyError, TypeError) as e:
                answer, status = {"error": f"a registration is {{access_key, name, statements}}: {e}"}, "400 Bad Request"
        else:
            with self.lock:
                answer, status = {"refusals": list(self.refusals)}, "200 OK"
        body = json.dumps(answer).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
