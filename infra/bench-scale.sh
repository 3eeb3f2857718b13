#!/usr/bin/env bash
# The load scenarios of issue 59 that take minutes (docs/scale.md): a desktop behind 5,000
# queued runs of another session, and a link with 10,000 queued tasks and a dead webhook
# receiver, each with another owner beside it. They run on moto with the capacity meter
# (infra/moto_capacity.py) and write what they measured to docs/scale-bench.json, whose rows
# docs/scale.md quotes (the test command's `scale::docs_quote_the_scale_benchmarks_figures`
# holds the page to the file: after a run, copy the new figures into the page).
#
#   ./infra/bench-scale.sh                    both scenarios, full size (about 10 minutes)
#   FOUNDRY_SCALE_QUICK=1 ./infra/bench-scale.sh
#                                             a tenth of the size, figures printed, not written
#
# Uses the emulator at AWS_ENDPOINT_URL when set (its figures lack the meter unless it is
# infra/emulator.sh's), otherwise starts one.
set -euo pipefail
cd "$(dirname "$0")/.."
state=$(mktemp -d "${TMPDIR:-/tmp}/foundry-scale.XXXXXX")
trap './infra/emulator.sh stop "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  ./infra/emulator.sh install >/dev/null
  ./infra/emulator.sh start "$state"
  AWS_ENDPOINT_URL=$(cat "$state/endpoint")
  export AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
fi
filter='test(=scale::a_desktop_behind_5000_queued_runs_of_another_session_gets_its_run_in_a_few_requests) | test(=events_cloud::a_link_with_10000_queued_tasks_and_a_dead_receiver_holds_up_no_other_owner)'
if cargo nextest --version >/dev/null 2>&1; then
  # One at a time: both write docs/scale-bench.json, and each alone has the emulator.
  cargo nextest run --locked -p foundry-tests --test suite --profile benchmark --test-threads 1 --run-ignored only \
    --no-capture -E "$filter"
else
  cargo test --locked -p foundry-tests --test suite -- --ignored --nocapture --test-threads 1 \
    scale::a_desktop_behind_5000 events_cloud::a_link_with_10000
fi
echo "figures: docs/scale-bench.json"
