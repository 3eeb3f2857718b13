#!/usr/bin/env bash
# Local AWS endpoint for the tests: moto's server behind a wrapper that serializes DynamoDB
# requests (see moto_serialized.py for why).
#
#   infra/emulator.sh install        create .venv and install the pinned packages
#   infra/emulator.sh start DIR      start on a free 127.0.0.1 port; writes DIR/endpoint and DIR/pid
#   infra/emulator.sh stop DIR       stop what start started
#
# Used by infra/test.sh; useful on its own to poke at the emulator by hand.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
venv=${FOUNDRY_VENV:-$root/.venv}

install() {
  "$here/pyenv.sh" "$venv" "$here/requirements.txt"
}

start() {
  local dir=$1
  mkdir -p "$dir"
  rm -f "$dir/port" "$dir/endpoint"
  "$venv/bin/python" "$here/moto_serialized.py" --port-file "$dir/port" ${MOTO_FLAGS:-} >"$dir/moto.log" 2>&1 &
  echo $! > "$dir/pid"
  for _ in $(seq 1 300); do
    if [ -s "$dir/port" ]; then
      local endpoint="http://127.0.0.1:$(cat "$dir/port")"
      # Ready means it answers a DynamoDB request, not just that it bound the port.
      if curl -fsS -o /dev/null -X POST -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
          -H 'Content-Type: application/x-amz-json-1.0' \
          -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
          -d '{}' "$endpoint/"; then
        echo "$endpoint" > "$dir/endpoint"
        return 0
      fi
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "moto exited during start-up:" >&2
      cat "$dir/moto.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "moto did not become ready within 30 s" >&2
  cat "$dir/moto.log" >&2
  return 1
}

stop() {
  local dir=$1
  if [ -f "$dir/pid" ]; then
    local pid
    pid=$(cat "$dir/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/pid"
  fi
}

case "${1:-}" in
  install) install ;;
  start) start "${2:?state dir}" ;;
  stop) stop "${2:?state dir}" ;;
  *) echo "usage: $0 install | start DIR | stop DIR" >&2; exit 2 ;;
esac
