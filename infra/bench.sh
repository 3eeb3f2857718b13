#!/usr/bin/env bash
# The side-by-side benchmark (issue 14): the local server, release build with auth on, against
# the seed-004 reconstruction in ../shared/bench, on the same data (10,000 tasks over 500
# links), list and claim at 1 and 4 connections; then the DynamoDB request counts of the same
# calls on moto (the conformance suite's asserted counts, printed).
#
#   ./infra/bench.sh [seconds per cell, default 10] [path to the bench folder, default ../shared/bench]
#   PIN_CORES=1 ./infra/bench.sh     the load client on core 1, the local server on core 0 (taskset;
#                                    the reconstruction then shares the client's core: compare
#                                    the local server's cells only)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
bench="${2:-../shared/bench}"
[ -f "$bench/seed004_server.py" ] || { echo "no seed004_server.py in $bench" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed for the reconstruction" >&2; exit 2; }
# The `server` profile: release at opt-level 3 (Cargo.toml; the Lambda release profile is tuned
# for size, which a long-lived server does not need).
cargo build --profile server --locked -p local -p sim
# The tables go to the terminal and to docs/bench-figures.md, the data of docs/pictures/peer.svg
# (python3 infra/pictures.py redraws it; copy the figures into docs/results.md's tables).
figures=$(mktemp "${TMPDIR:-/tmp}/foundry-figures.XXXXXX")
if [ "${PIN_CORES:-}" = 1 ]; then
  pinned="$(mktemp -d "${TMPDIR:-/tmp}/foundry-pin.XXXXXX")/local"
  printf '#!/bin/sh\nexec taskset -c 0 %s "$@"\n' "$PWD/target/server/local" > "$pinned"
  chmod +x "$pinned"
  taskset -c 1 ./target/server/peer_bench "$pinned" "$bench" "$secs" | tee "$figures"
else
  ./target/server/peer_bench ./target/server/local "$bench" "$secs" | tee "$figures"
fi
{ echo "Written by ./infra/bench.sh: the tables sim/src/bin/peer_bench.rs prints (the run of $(date -u +%Y-%m-%d), $(nproc)-core machine$([ "${PIN_CORES:-}" = 1 ] && echo ', cores pinned')). infra/pictures.py draws docs/pictures/peer.svg from it."; echo; cat "$figures"; } > docs/bench-figures.md
rm -f "$figures"
echo
echo "DynamoDB requests per call on moto (the conformance suite's asserted counts):"
state=$(mktemp -d "${TMPDIR:-/tmp}/foundry-bench.XXXXXX")
trap './infra/emulator.sh stop "$state" || true; rm -rf "$state"' EXIT
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  ./infra/emulator.sh install >/dev/null
  ./infra/emulator.sh start "$state"
  AWS_ENDPOINT_URL=$(cat "$state/endpoint")
  export AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
fi
cargo test --workspace --locked --test suite -- conformance::dynamodb::request_counts_on_the_common_path --nocapture 2>&1 \
  | grep -E "\[dynamodb\] (list_open_tasks|claim|get_task):"
