#!/usr/bin/env bash
# Runs the relay of an earlier release against this checkout's server: builds the relay from
# the release's commit (in a git worktree) and runs the full run of
# release_relay::an_older_relay_completes_a_full_run with it (two runs, one failing, a pause
# and a resume; the test checks each outcome). A release check outside the test command: it
# builds a second relay (docs/releasing.md, "Compatibility").
#
#   ./infra/release-check.sh 0.1.0            the commit CHANGELOG.md names for 0.1.0
#   ./infra/release-check.sh 0.1.0 <commit>   another commit
#
# The older relay is built in the shared target folder (only the workspace's crates are
# rebuilt), copied out, and this checkout's relay rebuilt after it.
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
(cd "$work/src" && CARGO_TARGET_DIR=$target cargo build --locked -p relay --bin relay)
cp "$target/debug/relay" "$work/relay-$version"
echo "built: $("$work/relay-$version" --version) from $commit"
cargo build --locked --workspace --bins
FOUNDRY_OLD_RELAY="$work/relay-$version" cargo nextest run --locked -p foundry-tests --test suite \
  --run-ignored only --no-capture -E 'test(=release_relay::an_older_relay_completes_a_full_run)'
