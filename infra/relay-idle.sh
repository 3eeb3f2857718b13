#!/usr/bin/env bash
# The relay's idle cost (docs/results.md, "The relay: cancel and idle"): the release relay against the
# release local server, one session shared to the demo project, nothing queued, the default
# 20 s poll. Prints the relay's resident memory (VmRSS, VmHWM) and CPU time (utime + stime)
# at 5 s and at the end, asserts the goals on a release build (under 16 MiB resident, under 1 s
# of CPU in the whole idle time) and, for a release run of 300 s, writes docs/relay-idle-figures.json, which
# docs/results.md quotes (`relay_e2e::the_relay_idle_figures_in_the_docs_are_the_script`).
#
#   ./infra/relay-idle.sh [seconds, default 300]
#   PROFILE=dev ./infra/relay-idle.sh 10      a quick check of the script on debug builds
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-300}
profile=${PROFILE:-release}
dir=${CARGO_TARGET_DIR:-target}/$([ "$profile" = dev ] && echo debug || echo "$profile")
cargo build --profile "$profile" --locked -p relay -p local
work=$(mktemp -d "${TMPDIR:-/tmp}/relay-idle.XXXXXX")
cleanup() {
  [ -n "${relay_pid:-}" ] && kill "$relay_pid" 2>/dev/null || true
  [ -n "${local_pid:-}" ] && kill "$local_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

FOUNDRY_DATA_DIR="$work/server" FOUNDRY_PORT=0 $dir/local > "$work/local.out" 2>&1 &
local_pid=$!
for _ in $(seq 1 100); do grep -q "Device token:" "$work/local.out" 2>/dev/null && break; sleep 0.1; done
field() { sed -n "s/^ *$1: *//p" "$work/local.out" | head -1; }
server=$(field "Relay server")
project=$(field "Project id")
field "Device token" > "$work/device-token"
cat > "$work/relay.toml" <<TOML
server_url = "$server"
device_token_file = "$work/device-token"
state_dir = "$work/state"

[[sessions]]
graph_session_id = "gs_0123456789abcdef0123456789abcdef"
name = "Idle"
slug = "idle"
version = "1"
projects = ["$project"]
command = ["true"]
TOML
$dir/relay --config "$work/relay.toml" run > "$work/relay.log" 2>&1 &
relay_pid=$!

# Reads the relay's memory and CPU time into rss_kb, hwm_kb and cpu_ms, and prints them as a
# row after "$1".
sample() {
  rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$relay_pid/status")
  hwm_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$relay_pid/status")
  cpu_ms=$(( $(awk '{print $14 + $15}' "/proc/$relay_pid/stat") * 1000 / $(getconf CLK_TCK) ))
  printf '| %s | %s kB | %s kB | %s ms |\n' "$1" "$rss_kb" "$hwm_kb" "$cpu_ms"
}
echo "relay $(stat -c %s $dir/relay) bytes; server $server; ${seconds} s idle"
echo "| after | VmRSS | VmHWM (peak) | CPU time |"
echo "|---|---|---|---|"
sleep 5
sample "5 s"
sleep "$((seconds - 5))"
sample "${seconds} s"
if [ "$profile" = release ] && [ "$seconds" = 300 ]; then
  printf '{\n  "cpu_ms": %s,\n  "hwm_kb": %s,\n  "relay_bytes": %s,\n  "rss_kb": %s,\n  "seconds": %s\n}\n' \
    "$cpu_ms" "$hwm_kb" "$(stat -c %s "$dir/relay")" "$rss_kb" "$seconds" > docs/relay-idle-figures.json
  echo "wrote docs/relay-idle-figures.json"
fi
# The goals are the release build's (a debug relay is about 18 MiB).
if [ "$profile" = release ]; then
  [ "$hwm_kb" -lt 16384 ] || { echo "goal missed: the relay's peak is $hwm_kb KiB (16 MiB at most)" >&2; exit 1; }
  [ "$cpu_ms" -lt 1000 ] || { echo "goal missed: $cpu_ms ms of CPU idle (under 1 s)" >&2; exit 1; }
fi
