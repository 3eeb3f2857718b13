#!/usr/bin/env bash
# The hosts that call a tool only through their model — Claude Code, GitHub Copilot CLI, Gemini
# CLI, opencode — at their pins (infra/hosts-tui/package.json, with Node 22), each in a terminal
# against the local server, with a loopback stand-in for its vendor's model API
# (tests/tests/hosts_tui.rs, infra/hosts-tui/drive.py): with the bearer token, and through the
# host's own sign-in. Not part of the test command (each host is most of a minute): the goal is
# the whole run in under 10 minutes. Only when every run passes does it write
# docs/hosts-tui-figures.json, which docs/results.md quotes ("The hosts themselves").
#
#   ./infra/hosts-tui.sh                      all of them
#   ./infra/hosts-tui.sh claude_code          the tests whose names contain a word
#   FOUNDRY_UPDATE=1 ./infra/hosts-tui.sh     also rewrites tests/fixtures/hosts/<host>/<version>/
#
# Needs tmux (Debian's package; installed here when missing) and the npm registry.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/infra/tool-folders.sh"
mkdir -p "$cache"
started=$(date +%s)

if ! command -v tmux >/dev/null; then
  echo "== installing tmux (Debian)"
  apt-get install -y -qq tmux >/dev/null
fi
key=$(sha256sum infra/hosts-tui/package-lock.json | cut -c1-16)
tools="$cache/hosts-tui-$key"
if [ ! -f "$tools/node_modules/.complete" ]; then
  echo "== installing the hosts' pins (npm into $tools)"
  rm -rf "$tools" && mkdir -p "$tools"
  cp infra/hosts-tui/package.json infra/hosts-tui/package-lock.json "$tools/"
  # npm install, not npm ci: the lock npm writes on Linux leaves out opencode-ai's packages for
  # other platforms, which npm ci then counts as missing; install follows the lock for the rest.
  (cd "$tools" && npm install --silent --no-audit --no-fund --no-save)
  touch "$tools/node_modules/.complete"
fi
installed=$(date +%s)

figures=$(mktemp -d "${TMPDIR:-/tmp}/hosts-tui.XXXXXX")
trap 'rm -rf "$figures"' EXIT
filter='test(/^hosts_tui::/)'
[ "$#" -gt 0 ] && filter="test(/^hosts_tui::.*$1/)"
echo "== the hosts, each with the bearer token and through its own sign-in"
# The whole workspace's build (its features, so the test command's build serves), these tests only.
FOUNDRY_HOSTS_TUI="$tools" FOUNDRY_HOSTS_TUI_FIGURES="$figures" \
  cargo nextest run --workspace --locked --run-ignored only --test-threads 2 \
    --no-fail-fast -E "$filter"
ended=$(date +%s)

python3 - "$figures" "$((installed - started))" "$((ended - installed))" "$#" "$root/docs/hosts-tui-figures.json" <<'PY'
import json, pathlib, sys
folder, install_s, run_s, partial, out = sys.argv[1:]
runs = sorted((json.loads(p.read_text()) for p in pathlib.Path(folder).glob("*.json")),
              key=lambda r: (r["package"], r["mode"]))
for r in runs:  # a driver gives the stand-in's requests, or their count
    if isinstance(r.get("model_requests"), list):
        r["model_requests"] = len(r["model_requests"])
result = {"install_s": int(install_s), "run_s": int(run_s),
          "runs": [{k: r.get(k) for k in ("package", "version", "mode", "seconds", "model_requests", "refused")}
                   for r in runs]}
print(json.dumps(result, indent=2))
if partial != "0":
    sys.exit(0)  # a filtered run measures nothing for the docs
problems = []
if len(runs) != 8:
    problems.append(f"{len(runs)} runs passed, not 8")
if int(run_s) > 600:
    problems.append(f"the runs took {run_s} s, more than 10 minutes")
if problems:
    sys.exit("hosts-tui goals missed (nothing written): " + "; ".join(problems))
pathlib.Path(out).write_text(json.dumps(result, indent=2) + "\n")
print(f"wrote {out}")
PY
