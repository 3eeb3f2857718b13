#!/usr/bin/env bash
# Bumps the MCP hosts the tests run (tests/tests/hosts_real.rs, hosts_cloud.rs, and the hosts that
# need a model: hosts_tui.rs, run by infra/hosts-tui.sh) to their newest
# versions on npm, and records what the new versions send beside what the old ones sent:
#
#   ./infra/hosts-bump.sh             bump, regenerate the locks, run the hosts' tests with
#                                     FOUNDRY_UPDATE=1, show the recorded requests' diff
#   ./infra/hosts-bump.sh --dry-run   print the newest versions and the files a bump would change;
#                                     change nothing
#
# For each host: `npm view <package> version`; its pin in infra/<folder>/package.json and its
# spelling in docs/hosts.md's snippets (`mcp-remote@<version>`, `…/inspector@<version>`) are
# rewritten, the folder's lock regenerated (`npm install --package-lock-only`); infra/test.sh
# then installs the new pins into a folder of their own (keyed by the lock's hash) and the tests
# write tests/fixtures/hosts/<host>/<new version>/ (the tests read the version from the pins).
# The old version's folder stays: remove it once the diff is read. docs/results.md's section
# "The hosts themselves" names the versions; its check fails until they are updated there too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dry=false
case "${1:-}" in
  --dry-run) dry=true ;;
  "") ;;
  -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac

# package, the folder under infra/ that pins it, its fixtures' folder under tests/fixtures/hosts/
hosts=(
  "mcp-remote hosts mcp-remote"
  "@openai/codex hosts codex"
  "@modelcontextprotocol/inspector conformance inspector-cli"
  "@anthropic-ai/claude-code hosts-tui claude-code"
  "@github/copilot hosts-tui copilot-cli"
  "@google/gemini-cli hosts-tui gemini-cli"
  "opencode-ai hosts-tui opencode"
)

# pinned FOLDER PACKAGE: the version infra/FOLDER/package.json pins.
pinned() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["dependencies"][sys.argv[2]])' \
    "infra/$1/package.json" "$2"
}

# replace FILE OLD NEW: every OLD in FILE becomes NEW (literal text).
replace() {
  python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path, encoding="utf-8").read()
if old not in text:
    sys.exit(f"{path}: {old!r} not found")
open(path, "w", encoding="utf-8").write(text.replace(old, new))
PY
}

changed_folders=()
bumped=()
for host in "${hosts[@]}"; do
  read -r package folder fixtures <<< "$host"
  current=$(pinned "$folder" "$package")
  newest=$(npm view "$package" version)
  if [ "$current" = "$newest" ]; then
    echo "$package $current: the newest"
    continue
  fi
  echo "$package $current -> $newest"
  echo "   infra/$folder/package.json: \"$package\": \"$current\" -> \"$newest\" (and its lock)"
  grep -q "$package@$current" docs/hosts.md && echo "   docs/hosts.md: $package@$current -> $package@$newest"
  echo "   recorded into tests/fixtures/hosts/$fixtures/$newest/ (beside $current/)"
  bumped+=("$fixtures $current $newest")
  $dry && continue
  replace "infra/$folder/package.json" "\"$package\": \"$current\"" "\"$package\": \"$newest\""
  if grep -q "$package@$current" docs/hosts.md; then
    replace docs/hosts.md "$package@$current" "$package@$newest"
  fi
  case " ${changed_folders[*]-} " in *" $folder "*) ;; *) changed_folders+=("$folder") ;; esac
done

if [ "${#bumped[@]}" -eq 0 ]; then
  echo "every host is at its newest version"
  exit 0
fi
if $dry; then
  echo "(dry run: nothing changed)"
  exit 0
fi

for folder in "${changed_folders[@]}"; do
  echo "== npm install --package-lock-only in infra/$folder"
  (cd "infra/$folder" && npm install --package-lock-only --no-audit --no-fund)
done

echo "== the hosts' tests with FOUNDRY_UPDATE=1 (infra/test.sh installs the new pins)"
status=0
# (FOUNDRY_UPDATE is refused under CI=true: CI compares, it never rewrites.)
env -u CI FOUNDRY_UPDATE=1 ./infra/test.sh hosts_ || status=$?
echo "== the hosts that need a model, with FOUNDRY_UPDATE=1 (infra/hosts-tui.sh)"
env -u CI FOUNDRY_UPDATE=1 ./infra/hosts-tui.sh || status=$?

echo "== what changed"
git diff --stat
git status --short tests/fixtures/hosts
for b in "${bumped[@]}"; do
  read -r fixtures current newest <<< "$b"
  old="tests/fixtures/hosts/$fixtures/$current" new="tests/fixtures/hosts/$fixtures/$newest"
  for f in "$old"/*.json; do
    echo "== $fixtures $current -> $newest: $(basename "$f")"
    diff -u "$f" "$new/$(basename "$f")" || true
  done
done
echo "Now: docs/results.md's \"The hosts themselves\" names the new versions; remove the old folders once read."
exit "$status"
