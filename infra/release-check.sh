#!/usr/bin/env bash
# Runs an earlier release against this checkout, both ways: builds the relay and the local
# server from the release's commit (in a git worktree), then
#   - release_relay::an_older_relay_completes_a_full_run: that relay against this server;
#   - release_relay::this_relay_completes_a_full_run_against_an_older_server: this relay
#     against that server (started as a user starts it, driven over MCP as a chat drives it).
# Each is a full run (two runs, one failing, a pause and a resume) whose outcomes the test
# checks. A release check outside the test command: it builds a second copy of both
# (docs/releasing.md, "Compatibility").
#
#   ./infra/release-check.sh 0.1.0            the commit CHANGELOG.md names for 0.1.0
#   ./infra/release-check.sh 0.1.0 <commit>   another commit
#
# The older binaries are built in the shared target folder (only the workspace's crates are
# rebuilt) and copied out; this checkout's are linked again after them.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: $0 VERSION [COMMIT]}
commit=${2:-$(sed -n "s/^## $version (.*commit \([0-9a-f]\{7,40\}\).*/\1/p" CHANGELOG.md | head -1)}
if [ -z "$commit" ]; then
  echo "CHANGELOG.md names no commit for $version (\"## $version (<date>, commit <sha>)\"): pass one" >&2
  exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/foundry-release-check.XXXXXX")
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/src" "$commit" >/dev/null
target=${CARGO_TARGET_DIR:-$PWD/target}
(cd "$work/src" && CARGO_TARGET_DIR=$target cargo build --locked -p relay --bin relay -p local --bin local)
cp "$target/debug/relay" "$work/relay-$version"
cp "$target/debug/local" "$work/local-$version"
echo "built: $("$work/relay-$version" --version), $("$work/local-$version" --version) from $commit"
cargo build --locked --workspace --bins
FOUNDRY_OLD_RELAY="$work/relay-$version" FOUNDRY_OLD_LOCAL="$work/local-$version" \
  cargo nextest run --locked -p foundry-tests --test suite --run-ignored only --no-capture --test-threads 1 \
  -E 'test(=release_relay::an_older_relay_completes_a_full_run) | test(=release_relay::this_relay_completes_a_full_run_against_an_older_server)'
