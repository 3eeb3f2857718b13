#!/usr/bin/env bash
# The deployed Lambda build's figures (docs/results.md, "Lambda build, the default"), measured
# the way a deployer meets them, each goal asserted, the figures written to
# docs/lambda-build-figures.json and docs/cold-start-figures.json, which results.md quotes
# (`cold_start::the_lambda_figures_in_the_docs_are_the_script`).
#
#   ./infra/lambda-figures.sh          both steps, about 25 minutes on 2 cores; nothing else should run
#   ./infra/lambda-figures.sh build    step 1 only
#   ./infra/lambda-figures.sh init     step 2 only
#
# 1. `sam build` in a fresh clone of HEAD with a new target directory (the clean build a
#    first deploy pays; goal 600 s), then `sam build` again after a one-line change of a
#    function's own crate and of a tool every function links (goal 120 s each). The arm64
#    `bootstrap` of each function is sized plain and zipped as SAM packages it (deflate; goal
#    5 MB). The clone and its target directory are removed at the end.
# 2. The same `function` profile built for this machine (x86_64) and the cold-start benchmark
#    (`tests/tests/cold_start.rs`: 20 fresh starts per function under the project's Lambda
#    emulator; init goal 30 ms), which writes docs/cold-start-figures.json. It runs on an
#    emulator of its own without the IAM check and the capacity meter (`--no-iam --no-meter`),
#    which add their own time to every DynamoDB call. No arm64 machine is at hand and under qemu
#    the init would measure the emulator, so the x86_64 build stands in for the arm64 init
#    (docs/results.md says so).
#
# Both steps measure HEAD: the working tree must have no changes but these figure files. A
# missed goal fails the script at the end, after both files are written.
#
# The time is measured with nothing else running; the machines here are shared, so a run can
# come out slower than the code is (the CPU seconds, recorded beside the wall time, tell which).
#
# Needs: GNU time (/usr/bin/time), Python 3.11, crates already downloaded; it installs the
# pinned SAM CLI and cargo-lambda (infra/requirements-deploy.txt) and moto
# (infra/requirements.txt) into the folders `infra/test.sh` uses (FOUNDRY_DEPLOY_VENV and
# FOUNDRY_MOTO_VENV name others).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-all}
case $steps in all|build|init) ;; *) echo "lambda-figures.sh: say all, build or init, not \"$steps\"" >&2; exit 2 ;; esac
changed=$(git status --porcelain --untracked-files=no | grep -v -e 'docs/lambda-build-figures.json$' -e 'docs/cold-start-figures.json$' || true)
if [ -n "$changed" ]; then
  echo "lambda-figures.sh: the figures are of HEAD; commit or stash these first:" >&2
  echo "$changed" >&2
  exit 2
fi
commit=$(git rev-parse --short HEAD)
# The folders infra/test.sh installs the pinned tools in: $cache and venv_for.
. "$root/infra/tool-folders.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/lambda-figures.XXXXXX")
cleanup() {
  [ -f "$work/moto/pid" ] && FOUNDRY_VENV="${moto_venv:-}" infra/emulator.sh stop "$work/moto" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
missed=0

if [ "$steps" != init ]; then
  venv=${FOUNDRY_DEPLOY_VENV:-$(venv_for deploy infra/requirements-deploy.txt)}
  infra/pyenv.sh "$venv" infra/requirements-deploy.txt
  git clone -q "$root" "$work/clone"
  cd "$work/clone"

  # timed LABEL: runs `sam build` with a target directory of its own, leaving its wall seconds
  # in $wall and the CPU seconds it used (user + system, its children's included) in $cpu: on a
  # shared machine the wall time moves with the neighbours, the CPU time with the code.
  timed() {
    PATH="$venv/bin:$PATH" SAM_CLI_TELEMETRY=0 CARGO_TARGET_DIR="$work/target" \
      /usr/bin/time -f '%e %U %S' -o "$work/$1.time" sam build > "$work/$1.log" 2>&1 \
      || { tail -40 "$work/$1.log" >&2; echo "lambda-figures.sh: sam build ($1) failed" >&2; exit 1; }
    read -r wall user sys < "$work/$1.time"
    cpu=$(python3 -c "import sys; print(round(float(sys.argv[1]) + float(sys.argv[2])))" "$user" "$sys")
    wall=$(python3 -c "import sys; print(round(float(sys.argv[1]), 1))" "$wall")
    echo "sam build ($1): $wall s, $cpu s of CPU"
  }
  timed clean
  clean=$wall
  clean_cpu=$cpu
  sizes=$(PYTHONPATH="$root/infra" python3 - "$work/clone/.aws-sam/build" <<'PY'
import json, os, sys
from zipped_size import zipped_size
build = sys.argv[1]
out = {}
for name in sorted(os.listdir(build)):
    path = os.path.join(build, name, "bootstrap")
    if os.path.isfile(path):
        out[name] = {"bytes": os.path.getsize(path), "zipped": zipped_size(path)}
print(json.dumps(out))
PY
  )
  # A line of a function's own crate, then a line of a tool every function links.
  echo "// a one-line change (infra/lambda-figures.sh)" >> functions/get_graph_run/src/main.rs
  timed function-line
  function_line=$wall
  echo "// a one-line change (infra/lambda-figures.sh)" >> shared/tools/src/get_graph_run.rs
  timed tool-line
  tool_line=$wall
  cd "$root"
  rm -rf "$work/clone" "$work/target"

  python3 - "$clean" "$function_line" "$tool_line" "$sizes" "$commit" "$clean_cpu" <<'PY' || missed=1
import json, sys
clean, function_line, tool_line = (float(v) for v in sys.argv[1:4])
sizes = json.loads(sys.argv[4])
figures = {"clean_build_s": clean, "clean_build_cpu_s": int(sys.argv[6]), "commit": sys.argv[5],
           "function_line_s": function_line, "arm64": sizes, "tool_line_s": tool_line}
with open("docs/lambda-build-figures.json", "w") as f:
    json.dump(figures, f, indent=2, sort_keys=True)
    f.write("\n")
print("wrote docs/lambda-build-figures.json")
missed = []
if clean > 600:
    missed.append(f"clean build {clean} s (goal 600 s)")
for label, s in (("function line", function_line), ("tool line", tool_line)):
    if s > 120:
        missed.append(f"{label} rebuild {s} s (goal 120 s)")
if len(sizes) != 17:
    missed.append(f"{len(sizes)} functions built, 17 expected")
missed += [f"{n}: {v['zipped']} bytes zipped (goal 5,000,000)" for n, v in sizes.items() if v["zipped"] > 5_000_000]
if missed:
    sys.exit("goal missed: " + "; ".join(missed))
PY
fi

if [ "$steps" != build ]; then
  # 2. Init, for this machine's build of the same profile, on an emulator of its own.
  moto_venv=${FOUNDRY_MOTO_VENV:-$(venv_for moto infra/requirements.txt)}
  infra/pyenv.sh "$moto_venv" infra/requirements.txt
  MOTO_FLAGS="--no-iam --no-meter" FOUNDRY_VENV="$moto_venv" infra/emulator.sh start "$work/moto"
  # shellcheck disable=SC2046
  cargo build --profile function --locked $(for f in functions/*/; do echo -p "$(basename "$f")"; done)
  target=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  AWS_ENDPOINT_URL=$(cat "$work/moto/endpoint") AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
    FOUNDRY_BIN_DIR="$target/function" FOUNDRY_COLD_START_FIGURES="$root/docs/cold-start-figures.json" \
    FOUNDRY_FIGURES_COMMIT="$commit" \
    cargo test --locked -p foundry-tests --test suite cold_start::cold_start_of_every_function -- --ignored --nocapture \
    || missed=1
fi
[ "$missed" = 0 ] || { echo "lambda-figures.sh: a goal was missed (above); the figures are written" >&2; exit 1; }
