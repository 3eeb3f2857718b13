#!/usr/bin/env python3
"""Would deploying NEW over OLD make CloudFormation replace a stateful resource? (issue 60)

    replacements.py OLD.yaml NEW.yaml [--old-parameter K=V ...] [--parameter K=V ...]
                                          exit 1 naming each replacing change, 0 when none
    replacements.py --self-test NEW.yaml  the check on mutants of NEW, each of which it must catch

Each template is compared as CloudFormation would deploy it: with its parameters (the ones
given, the defaults for the rest), each `Fn::If` resolved by its condition and `AWS::NoValue`
left out. So the table's `ImportSourceSpecification` (set only by a restore, docs/operations.md)
is absent from an ordinary deploy, and a deploy that clears the restore values of a restored
stack is named: it would make another, empty table.

A replaced table, user pool, app client, bucket or queue is a new, empty one: the retain
policies keep the old resource, but the stack then runs on the new one, where every owner,
registered client, run and task is gone. A property change replaces a resource when the
property is create-only in the resource's schema (`createOnlyProperties`, and
`conditionalCreateOnlyProperties`, where the provider may replace: a table's `KeySchema`), read
from the CloudFormation resource schemas the pinned cfn-lint ships (its
`data/schemas/providers/us-east-1.json`), plus what the CloudFormation reference marks
"Replacement" beyond the schema (REFERENCE_REPLACING); a stateful resource removed or renamed (a
new logical id) is lost the same way. A user pool replaces nothing in place, but some of its
settings cannot be changed at all (IMMUTABLE): the update fails, and the only way to change them
is a new pool, where every owner signs up again; those are named too.

Needs cfn-lint (the deploy environment, infra/requirements-deploy.txt): its template decoder
reads the short-form intrinsic functions (`!Ref`, `!Sub`, ...).
"""

import copy
import json
import pathlib
import sys

import cfnlint
from cfnlint.decode import decode_str

STATEFUL = (
    "AWS::DynamoDB::Table",
    "AWS::Cognito::UserPool",
    "AWS::Cognito::UserPoolClient",
    "AWS::Cognito::UserPoolDomain",
    "AWS::S3::Bucket",
    "AWS::SQS::Queue",
)

# Properties the CloudFormation reference marks "Update requires: Replacement" that the resource
# schema does not list as create-only: a bucket's object lock
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucket.html).
# (A table's AttributeDefinitions replace it when an existing attribute's type is edited: see
# `attribute_types_changed`.)
REFERENCE_REPLACING = {
    "AWS::S3::Bucket": ["/properties/ObjectLockEnabled"],
}

# Settings an existing user pool cannot change: the reference gives them "No interruption" but
# says they "cannot be updated" / are "immutable once set", and Cognito refuses the update
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cognito-userpool.html;
# https://docs.aws.amazon.com/cognito/latest/developerguide/cognito-user-pool-updating.html).
IMMUTABLE = {
    "AWS::Cognito::UserPool": ["/properties/AliasAttributes", "/properties/UsernameAttributes",
                               "/properties/UsernameConfiguration"],
}


def schemas_dir():
    return pathlib.Path(cfnlint.__file__).parent / "data" / "schemas"


def replacing_properties(resource_type):
    """The property paths of `resource_type` whose change replaces the resource."""
    base = schemas_dir()
    providers = json.loads((base / "providers" / "us-east-1.json").read_text())
    ref = providers.get(resource_type)
    schema = ref if isinstance(ref, dict) else json.loads((base / "resources" / f"{ref}.json").read_text())
    paths = list(schema.get("createOnlyProperties", [])) + list(schema.get("conditionalCreateOnlyProperties", []))
    paths += REFERENCE_REPLACING.get(resource_type, [])
    return sorted(set(paths))


def load(text, name):
    template, problems = decode_str(text)
    if template is None:
        raise SystemExit(f"{name}: not a template ({problems})")
    return template


def at(properties, path):
    """The value at a `/properties/A/B` path, or None."""
    node = properties
    for part in path.split("/")[2:]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def plain(value):
    """The decoded value as plain JSON (cfn-lint's nodes carry positions)."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


NO_VALUE = object()


def effective(template, parameters=None):
    """TEMPLATE (plain JSON) as deployed with PARAMETERS over its defaults: every `Fn::If`
    resolved, a `Ref` to a parameter replaced by its value, `Ref: AWS::NoValue` left out. A
    condition it cannot evaluate is an error."""
    values = {k: str((v or {}).get("Default", "")) for k, v in (template.get("Parameters") or {}).items()}
    values.update(parameters or {})
    conditions = template.get("Conditions") or {}

    def operand(node):
        if isinstance(node, dict) and len(node) == 1:
            (fn, arg), = node.items()
            if fn == "Ref":
                return values.get(arg, arg)
            if fn == "Condition":
                return holds(arg)
            if fn == "Fn::Equals":
                return str(operand(arg[0])) == str(operand(arg[1]))
            if fn == "Fn::Not":
                return not operand(arg[0])
            if fn == "Fn::And":
                return all(operand(a) for a in arg)
            if fn == "Fn::Or":
                return any(operand(a) for a in arg)
            raise SystemExit(f"cannot evaluate {fn} in a condition")
        return node

    def holds(name):
        if name not in conditions:
            raise SystemExit(f"no condition {name!r} in the template")
        return bool(operand(conditions[name]))

    def walk(node):
        if isinstance(node, dict):
            if node == {"Ref": "AWS::NoValue"}:
                return NO_VALUE
            if len(node) == 1 and node.get("Ref") in values:
                return values[node["Ref"]]
            if len(node) == 1 and "Fn::If" in node:
                name, yes, no = node["Fn::If"]
                return walk(yes if holds(name) else no)
            kept = {k: walk(v) for k, v in node.items()}
            return {k: v for k, v in kept.items() if v is not NO_VALUE}
        if isinstance(node, list):
            return [v for v in map(walk, node) if v is not NO_VALUE]
        return node

    return walk(template)


def replacements(old, new, old_parameters=None, new_parameters=None):
    """One sentence per change of NEW that replaces (or drops) a stateful resource of OLD, each
    as deployed with its parameters (see `effective`)."""
    found = []
    old = effective(plain(old), old_parameters)
    new = effective(plain(new), new_parameters)
    old_resources = old.get("Resources", {}) or {}
    new_resources = new.get("Resources", {}) or {}
    for logical, was in old_resources.items():
        kind = was.get("Type")
        if kind not in STATEFUL:
            continue
        now = new_resources.get(logical)
        if now is None:
            found.append(f"{logical} ({kind}) is gone: the stack would forget it (a renamed logical id is a new, empty resource)")
            continue
        if now.get("Type") != kind:
            found.append(f"{logical}: its type changes from {kind} to {now.get('Type')}: replaced")
            continue
        was_props, now_props = was.get("Properties", {}) or {}, now.get("Properties", {}) or {}
        for path in replacing_properties(kind):
            a, b = plain(at(was_props, path)), plain(at(now_props, path))
            if a != b:
                prop = path.removeprefix("/properties/")
                found.append(f"{logical} ({kind}): changing {prop} replaces it ({a!r} -> {b!r})")
        for path in IMMUTABLE.get(kind, []):
            a, b = plain(at(was_props, path)), plain(at(now_props, path))
            if a != b:
                prop = path.removeprefix("/properties/")
                found.append(f"{logical} ({kind}): {prop} cannot be changed on an existing pool: the update "
                             f"fails, and a new pool loses every owner ({a!r} -> {b!r})")
        if kind == "AWS::DynamoDB::Table":
            for name in attribute_types_changed(was_props, now_props):
                found.append(f"{logical} ({kind}): changing AttributeDefinitions ({name}'s type) replaces it")
    return found


def attribute_types_changed(was, now):
    """The attributes whose declared type NEW edits (adding or dropping one replaces nothing)."""
    types = lambda p: {d.get("AttributeName"): d.get("AttributeType") for d in plain(p.get("AttributeDefinitions") or [])}
    a, b = types(was), types(now)
    return sorted(k for k in a if k in b and a[k] != b[k])


def self_test(template_path):
    text = pathlib.Path(template_path).read_text()
    base = load(text, template_path)
    assert replacements(base, base) == [], "the template against itself"

    def mutant(edit):
        t = copy.deepcopy(plain(base))
        edit(t)
        return replacements(base, t)

    def set_key(t):
        t["Resources"]["Table"]["Properties"]["KeySchema"][1]["AttributeName"] = "sk2"

    def username_attrs(t):
        t["Resources"]["UserPool"]["Properties"]["UsernameAttributes"] = ["phone_number"]

    def client_secret(t):
        clients = [k for k, r in t["Resources"].items() if r.get("Type") == "AWS::Cognito::UserPoolClient"]
        t["Resources"][clients[0]]["Properties"]["GenerateSecret"] = True

    def queue_fifo(t):
        queues = [k for k, r in t["Resources"].items() if r.get("Type") == "AWS::SQS::Queue"]
        t["Resources"][queues[0]]["Properties"]["FifoQueue"] = True

    def bucket_named(t):
        buckets = [k for k, r in t["Resources"].items() if r.get("Type") == "AWS::S3::Bucket"]
        t["Resources"][buckets[0]].setdefault("Properties", {})["BucketName"] = "fixed-name"

    def attr_type(t):
        for d in t["Resources"]["Table"]["Properties"]["AttributeDefinitions"]:
            if d["AttributeName"] == "pk":
                d["AttributeType"] = "N"

    def table_renamed(t):
        t["Resources"]["Table2"] = t["Resources"].pop("Table")

    cases = {
        "a table key changed": (set_key, "changing KeySchema replaces it"),
        "the user pool's sign-in names changed": (username_attrs, "UsernameAttributes cannot be changed"),
        "a key attribute's type changed": (attr_type, "changing AttributeDefinitions (pk's type) replaces it"),
        "an app client given a secret": (client_secret, "changing GenerateSecret replaces it"),
        "a queue made FIFO": (queue_fifo, "changing FifoQueue replaces it"),
        "a bucket given a name": (bucket_named, "changing BucketName replaces it"),
        "the table's logical id renamed": (table_renamed, "Table (AWS::DynamoDB::Table) is gone"),
    }
    for name, (edit, expect) in cases.items():
        said = mutant(edit)
        if not any(expect in line for line in said):
            print(f"NOT caught: {name}: {said}")
            return 1
    # The restore values: absent from an ordinary deploy; setting them replaces the table (the
    # restore's point); clearing them on a restored stack would make another, empty one.
    restored = {"RestoreExportBucket": "b", "RestoreExportPrefix": "restores/1/AWSDynamoDB/x/data/"}
    if replacements(base, base, restored, restored):
        print("NOT right: a restored stack deployed again with its restore values replaces something")
        return 1
    for name, later in {"cleared": {}, "changed": dict(restored, RestoreExportPrefix="restores/2/")}.items():
        said = replacements(base, base, restored, later)
        if not any("changing ImportSourceSpecification replaces it" in line for line in said):
            print(f"NOT caught: the restore values {name} on a restored stack: {said}")
            return 1
    print(f"{len(cases) + 2} mutations caught: " + ", ".join(cases) + ", the restore values cleared, and changed")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    paths, given = [], {"--old-parameter": {}, "--parameter": {}}
    args = iter(argv[1:])
    for arg in args:
        if arg in given:
            key, eq, value = next(args, "").partition("=")
            if not eq:
                print(f"{arg} takes KEY=VALUE", file=sys.stderr)
                return 2
            given[arg][key] = value
        else:
            paths.append(arg)
    if len(paths) != 2:
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    old = load(pathlib.Path(paths[0]).read_text(), paths[0])
    new = load(pathlib.Path(paths[1]).read_text(), paths[1])
    found = replacements(old, new, given["--old-parameter"], given["--parameter"])
    for line in found:
        print(line)
    if not found:
        print(f"no stateful resource of {paths[0]} is replaced by {paths[1]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
