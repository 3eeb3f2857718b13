"""Before `sam build` and `sam deploy`: what would make the first deploy fail or strand you.

Run through `infra/preflight` (which finds the deploy tools' Python, with boto3). Each finding
is one line: `ok`, `warn` (the deploy works, something will hurt later) or `FAIL` (it would fail
or strand the stack), with the cause and the exact fix. Exits 1 when anything FAILs.

    infra/preflight [--stack NAME] [--region REGION] [--domain-prefix PREFIX]

Defaults come from samconfig.toml (`stack_name`, `region`, `parameter_overrides`). The AWS
endpoint follows the SDK's own settings (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`),
which is how the test command points it at moto and at recorded answers of AWS.

What it checks, and why (docs/deploy.md, "Preflight"):
- the toolchain: Python >= 3.11, a sha256 tool, the pinned SAM CLI first on PATH (an older one
  cannot find the workspace's binaries), make (sam build runs the Makefile), cargo-lambda,
  Rust >= 1.95 with the arm64 target;
- credentials and a region;
- the account's Lambda concurrency (new accounts often get 10: every tool call holds two);
- whether the Cognito domain prefix is free and allowed;
- the stack's state: ROLLBACK_COMPLETE and ROLLBACK_FAILED cannot be deployed over; each state
  gets the commands that clear it;
- for a deployed stack, that this checkout's template replaces none of its stateful resources
  (the table, the user pool and its clients, the bucket, the queues: infra/replacements.py), which
  would leave the stack on new, empty ones (docs/releasing.md).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_CONCURRENCY = 50
QUOTA_CODE = "L-B99A9384"

findings = []


def report(level, what, detail=""):
    findings.append(level)
    line = f"{level:<5} {what}"
    if detail:
        line += f": {detail}"
    print(line, flush=True)


def ok(what, detail=""):
    report("ok", what, detail)


def warn(what, detail):
    report("warn", what, detail)


def fail(what, detail):
    report("FAIL", what, detail)


def brief(e):
    """An exception on one short line (an emulator's HTML 404 is not a cause)."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:197] + "..."


def samconfig(path=None):
    """The keys preflight uses from samconfig.toml (a tiny reader: `key = "value"` lines)."""
    values = {}
    path = path or os.path.join(ROOT, "samconfig.toml")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return values
    for m in re.finditer(r'^\s*([a-z_]+)\s*=\s*"((?:[^"\\]|\\.)*)"', text, re.M):
        values.setdefault(m.group(1), m.group(2).replace('\\"', '"'))
    overrides = values.get("parameter_overrides", "")
    for m in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', overrides):
        values.setdefault("param:" + m.group(1), m.group(2).strip('"'))
    return values


def pinned(name):
    for line in open(os.path.join(ROOT, "infra/requirements-deploy.txt"), encoding="utf-8"):
        if line.strip().startswith(name + "=="):
            return line.strip().split("==", 1)[1]
    return None


def run(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return out.returncode, (out.stdout + out.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)


def version_tuple(text):
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def check_toolchain(host_python):
    code, out = run([host_python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    v = version_tuple(out) if code == 0 else None
    if v and v >= (3, 11):
        ok("python", f"{host_python} is {out}")
    else:
        fail("python", f"{host_python} is {out or 'missing'}; the pinned deploy tools need 3.11 or newer "
             "(macOS ships 3.9): install one (python.org, Homebrew) and put it first on PATH, or set FOUNDRY_PYTHON")
    if shutil.which("sha256sum") or shutil.which("shasum"):
        ok("sha256", shutil.which("sha256sum") or "shasum -a 256")
    else:
        fail("sha256", "neither sha256sum nor shasum is on PATH (infra/pyenv.sh needs one)")

    want = pinned("aws-sam-cli")
    sam = shutil.which("sam")
    if not sam:
        fail("sam", f'not on PATH: infra/pyenv.sh .venv-deploy infra/requirements-deploy.txt, then export PATH="{ROOT}/.venv-deploy/bin:$PATH"')
    else:
        code, out = run([sam, "--version"])
        got = version_tuple(out)
        if got and want and got == version_tuple(want):
            ok("sam", f"SAM CLI {want} at {sam}")
        else:
            fail("sam", f"{sam} is {out or 'unreadable'}, the pinned one is {want} (an older SAM CLI first on PATH "
                 f'cannot find the workspace\'s binaries): export PATH="{ROOT}/.venv-deploy/bin:$PATH"')
    # The steps after the deploy (the owner account, following the logs, the teardown) are AWS
    # CLI commands; the deploy itself needs only SAM's own Python.
    aws = shutil.which("aws")
    if aws:
        code, out = run([aws, "--version"])
        ok("aws cli", f"{out.split()[0] if code == 0 and out else 'aws'} at {aws}")
    else:
        fail("aws cli", "not on PATH: the owner account, the logs and the teardown are AWS CLI commands; install "
             "version 2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html)")
    # sam build runs the Makefile (template.yaml: BuildMethod makefile for every function).
    if shutil.which("make"):
        ok("make", shutil.which("make"))
    else:
        fail("make", "not on PATH: sam build runs the workspace's Makefile (Debian/Ubuntu: apt-get install make; "
             "macOS: xcode-select --install)")
    if shutil.which("cargo-lambda"):
        ok("cargo-lambda", shutil.which("cargo-lambda"))
    else:
        fail("cargo-lambda", f'not on PATH (it comes with the deploy tools): export PATH="{ROOT}/.venv-deploy/bin:$PATH"')
    code, out = run(["rustc", "--version"])
    v = version_tuple(out) if code == 0 else None
    if v and v >= (1, 95):
        ok("rust", out)
    else:
        fail("rust", f"{out or 'rustc not found'}: Rust 1.95 or newer is needed (rustup update stable)")
    code, out = run(["rustup", "target", "list", "--installed"])
    if code == 0 and "aarch64-unknown-linux-gnu" in out.split():
        ok("arm64 target", "aarch64-unknown-linux-gnu installed")
    elif code is None:
        warn("arm64 target", "rustup not found: make sure the aarch64-unknown-linux-gnu standard library is installed")
    else:
        fail("arm64 target", "the functions are arm64: rustup target add aarch64-unknown-linux-gnu")


def check_aws(args, cfg):
    try:
        import boto3
        import botocore.exceptions
    except ImportError:
        fail("boto3", "missing: run this through infra/preflight, which uses the deploy tools' Python")
        return
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or cfg.get("region")
    session = boto3.Session(region_name=region) if region else boto3.Session()
    region = session.region_name
    if not region:
        fail("region", "none set: pass --region, set AWS_REGION, or `aws configure set region eu-west-1`")
        return
    ok("region", region)
    errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
    try:
        ident = session.client("sts").get_caller_identity()
        ok("credentials", f"account {ident['Account']} as {ident['Arn']}")
    except errors as e:
        fail("credentials", f"{brief(e)}: run `aws configure` (or set AWS_PROFILE) with the account to deploy to")
        return

    try:
        limit = session.client("lambda").get_account_settings()["AccountLimit"]["ConcurrentExecutions"]
        if limit < MIN_CONCURRENCY:
            warn("lambda concurrency",
                 f"this account runs at most {limit} Lambda functions at once. Every tool call holds two (mcp and "
                 "the tool), a write adds the stream readers and notify, so a chat and a relay together can be "
                 "throttled (the chat sees 429s). Ask for more before you connect: aws service-quotas "
                 f"request-service-quota-increase --service-code lambda --quota-code {QUOTA_CODE} "
                 f"--desired-value 1000 --region {region} (new accounts are usually raised within a day)")
        else:
            ok("lambda concurrency", f"{limit} concurrent executions")
    except errors as e:
        warn("lambda concurrency", f"could not read it ({brief(e)}); Service Quotas → AWS Lambda → Concurrent executions")

    stack = args.stack or cfg.get("stack_name") or "foundry-connect"
    outputs, params, deployed = check_stack(session, stack, errors)
    if deployed:
        check_replacements(session, stack, errors, params, cfg)

    prefix = args.domain_prefix or cfg.get("param:AuthDomainPrefix")
    if not prefix:
        warn("domain prefix", "not known yet (sam deploy --guided asks for AuthDomainPrefix): pass --domain-prefix to check it")
    else:
        check_prefix(session, prefix, outputs.get("UserPoolId"), errors)
    check_protection(params, cfg, deployed)


def check_protection(params, cfg, deployed):
    """The table's deletion protection on the live stack and in samconfig.toml. A plain
    `sam deploy` takes its parameters from samconfig.toml, where `sam deploy --guided` saved the
    first deploy's `TableDeletionProtection="false"`: a one-off override turns protection on,
    and the next plain deploy (a rollback to an earlier commit, say) turns it off again. Only an
    override saved with `--save-params` lasts."""
    if not deployed:
        return
    live = params.get("TableDeletionProtection")
    saved = cfg.get("param:TableDeletionProtection")
    fix = ("sam deploy --parameter-overrides TableDeletionProtection=true (with your other overrides) "
           "--save-params: --save-params writes it to samconfig.toml, so every later sam deploy keeps it")
    if live == "false":
        warn("table deletion protection",
             f"off (the first deploy's default, so a failed create can roll back). Now that the stack exists, turn it on: {fix}")
    elif live == "true" and saved == "false":
        warn("table deletion protection",
             "on, but samconfig.toml says TableDeletionProtection=\"false\": the next plain sam deploy turns it off. "
             f"Save it: {fix}")
    elif live == "true":
        ok("table deletion protection", "on" + (", and samconfig.toml keeps it" if saved == "true" else ""))


def check_prefix(session, prefix, own_pool, errors):
    if not re.fullmatch(r"(?!.*(?:aws|amazon|cognito))[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", prefix):
        fail("domain prefix", f"{prefix!r}: lower-case letters, digits and hyphens (1-63), not starting or ending with "
             "a hyphen, without aws, amazon or cognito (Cognito refuses them)")
        return
    try:
        d = session.client("cognito-idp").describe_user_pool_domain(Domain=prefix).get("DomainDescription") or {}
    except errors as e:
        warn("domain prefix", f"could not look it up ({brief(e)})")
        return
    pool = d.get("UserPoolId")
    if not pool:
        ok("domain prefix", f"{prefix} is not used in this account (one taken by another account shows only when the "
           "stack creates it: then the create rolls back, and this check says how to retry)")
    elif pool == own_pool:
        ok("domain prefix", f"{prefix} is this stack's")
    else:
        fail("domain prefix", f"{prefix} already belongs to user pool {pool}: choose another AuthDomainPrefix "
             "(sam deploy --guided asks again)")


def stack_resources(cfn, stack, errors):
    try:
        return cfn.describe_stack_resources(StackName=stack).get("StackResources", [])
    except errors:
        return []


def check_stack(session, stack, errors):
    """The stack's state, with what to run; its outputs, parameters, and whether it is deployed."""
    cfn = session.client("cloudformation")
    try:
        s = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    except errors as e:
        if "does not exist" in str(e):
            ok("stack", f"{stack} does not exist yet: the first deploy creates it")
        else:
            fail("stack", f"could not read {stack}: {brief(e)}")
        return {}, {}, False
    status = s["StackStatus"]
    outputs = {o["OutputKey"]: o.get("OutputValue") for o in s.get("Outputs", [])}
    params = {p["ParameterKey"]: p.get("ParameterValue") for p in s.get("Parameters", [])}
    delete = f"aws cloudformation delete-stack --stack-name {stack}"
    wait_delete = f"aws cloudformation wait stack-delete-complete --stack-name {stack}"
    deployed = status in ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE")
    if deployed:
        ok("stack", f"{stack} is {status}: sam deploy updates it")
    elif status == "ROLLBACK_COMPLETE":
        fail("stack", f"{stack} is ROLLBACK_COMPLETE (its first create failed and was rolled back): it can only be "
             f"deleted, not updated. Read why in its events (aws cloudformation describe-stack-events --stack-name "
             f"{stack}), fix that, then: {delete} && {wait_delete}; then sam deploy again")
    elif status in ("ROLLBACK_FAILED", "DELETE_FAILED"):
        stuck = [r for r in stack_resources(cfn, stack, errors) if r.get("ResourceStatus") == "DELETE_FAILED"]
        ids = " ".join(r["LogicalResourceId"] for r in stuck)
        steps = []
        for r in stuck:
            if r.get("ResourceType") == "AWS::DynamoDB::Table" and r.get("PhysicalResourceId"):
                table = r["PhysicalResourceId"]
                steps.append(f"aws dynamodb update-table --table-name {table} --no-deletion-protection-enabled && "
                             f"aws dynamodb delete-table --table-name {table} (only if it holds nothing you need)")
        retain = f"{delete} --retain-resources {ids}" if ids else delete
        reasons = "; ".join(f"{r['LogicalResourceId']}: {r.get('ResourceStatusReason', '?')}" for r in stuck)
        fail("stack", f"{stack} is {status}{' (' + reasons + ')' if reasons else ''}: delete it keeping what could "
             f"not be deleted: {retain} && {wait_delete}" + ("; then remove the kept resources: " + "; ".join(steps) if steps else "")
             + "; then sam deploy again")
    elif status == "UPDATE_ROLLBACK_FAILED":
        fail("stack", f"{stack} is UPDATE_ROLLBACK_FAILED: fix the cause in its events, then aws cloudformation "
             f"continue-update-rollback --stack-name {stack} (add --resources-to-skip ID for a resource that cannot "
             f"roll back) && aws cloudformation wait stack-rollback-complete --stack-name {stack}")
    elif status.endswith("_IN_PROGRESS"):
        fail("stack", f"{stack} is {status}: wait for it (aws cloudformation describe-stacks --stack-name {stack})")
    else:
        warn("stack", f"{stack} is {status}")
    return outputs, params, deployed


def check_replacements(session, stack, errors, params, cfg):
    """Whether deploying this checkout's template over the deployed one replaces a stateful resource.
    Each as deployed: the stack's parameter values, and for the next deploy those again with
    samconfig.toml's overrides on top (`sam deploy` keeps every value it is not given), so a
    restored stack whose restore values would be cleared is named (docs/operations.md)."""
    try:
        body = session.client("cloudformation").get_template(StackName=stack, TemplateStage="Original")["TemplateBody"]
    except errors as e:
        warn("replacements", f"could not read the deployed template ({brief(e)}): compare it yourself with "
             "infra/replacements.py DEPLOYED.yaml template.yaml before deploying")
        return
    sys.path.insert(0, os.path.join(ROOT, "infra"))
    import replacements

    text = body if isinstance(body, str) else json.dumps(body)
    with open(os.path.join(ROOT, "template.yaml"), encoding="utf-8") as f:
        deployed = {k: v for k, v in params.items() if v is not None}
        following = dict(deployed, **{k.removeprefix("param:"): v for k, v in cfg.items() if k.startswith("param:")})
        found = replacements.replacements(replacements.load(text, "the deployed template"),
                                          replacements.load(f.read(), "template.yaml"), deployed, following)
    if found:
        fail("replacements", "deploying this template would replace (or fail to change) stateful resources of the "
             "stack, leaving it on new, empty ones: " + "; ".join(found) + ". Keep those properties as deployed (a new "
             "resource beside the old, moved over in two releases: docs/releasing.md)")
    else:
        ok("replacements", "this template replaces no table, user pool, app client, bucket or queue of the stack")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack")
    p.add_argument("--region")
    p.add_argument("--domain-prefix")
    p.add_argument("--config-file", help="the samconfig.toml sam deploy reads (default: the checkout's)")
    args = p.parse_args()
    cfg = samconfig(args.config_file)
    check_toolchain(os.environ.get("PREFLIGHT_HOST_PYTHON", "python3"))
    check_aws(args, cfg)
    failed = findings.count("FAIL")
    print(f"\n{failed} to fix, {findings.count('warn')} warnings" if failed else
          f"\nready to deploy ({findings.count('warn')} warnings): sam build && sam deploy --guided")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
