#!/usr/bin/env bash
# Freezes this release's contract into tests/fixtures/releases/<version>/ (docs/releasing.md,
# "Cutting a release"): the template, the MCP tool list, the relay API requests the real relay
# makes in a full run (release_relay::freeze_this_releases_relay_requests), and what each store
# writes (release_store::freeze_this_releases_stored_data: DynamoDB items, the SQLite file as
# SQL, the scenario's ids). A frozen folder is never edited: the script refuses one that exists.
#
#   ./infra/freeze-release.sh          the version in Cargo.toml's [workspace.package]
#
# Uses the emulator at AWS_ENDPOINT_URL when set, otherwise starts one. Then write the folder's
# README.md (what was frozen, from which commit) and the CHANGELOG entry.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
dir=tests/fixtures/releases/$version
if [ -e "$dir" ]; then
  echo "$dir exists: a frozen release is never edited (cut a new version)" >&2
  exit 1
fi
state=$(mktemp -d "${TMPDIR:-/tmp}/foundry-freeze.XXXXXX")
trap './infra/emulator.sh stop "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  ./infra/emulator.sh install >/dev/null
  ./infra/emulator.sh start "$state"
  AWS_ENDPOINT_URL=$(cat "$state/endpoint")
  export AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
fi
cargo build --locked --workspace --bins
mkdir -p "$dir"
cp template.yaml "$dir/template.yaml"
cp tests/golden/tools_list.json "$dir/tools_list.json"
cargo nextest run --locked -p foundry-tests --test suite --run-ignored only --no-capture --test-threads 1 \
  -E 'test(=release_relay::freeze_this_releases_relay_requests) | test(=release_store::freeze_this_releases_stored_data)'
echo "frozen: $dir (now write its README.md and the CHANGELOG entry, naming commit $(git rev-parse --short HEAD))"
