#!/usr/bin/env bash
# The deployed Lambda build's figures (docs/results.md, "Lambda build, the default"), measured
# the way a deployer meets them, each goal asserted, the figures written to
# docs/lambda-build-figures.json and docs/cold-start-figures.json, which results.md quotes
# (`template::the_lambda_figures_in_the_docs_are_the_script`).
#
#   ./infra/lambda-figures.sh          both steps, about 20 minutes on 2 cores; nothing else should run
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
#    emulator with moto; init goal 30 ms), which writes docs/cold-start-figures.json. No arm64
#    machine is at hand and under qemu the init would measure the emulator, so the x86_64 build
#    stands in for the arm64 init (docs/results.md says so).
#
# The time is measured with nothing else running; the machines here are shared, so a run can
# come out slower than the code is (the CPU seconds, recorded beside the wall time, tell which).
#
# Needs: GNU time (/usr/bin/time), the pinned SAM CLI and cargo-lambda (infra/requirements-deploy.txt, made with
# infra/pyenv.sh; FOUNDRY_DEPLOY_VENV names the environment), crates already downloaded, moto at
# AWS_ENDPOINT_URL for step 2 (infra/emulator.sh start).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-all}
case $steps in all|build|init) ;; *) echo "lambda-figures.sh: say all, build or init, not \"$steps\"" >&2; exit 2 ;; esac
cache=${FOUNDRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foundry-connect}
venv=${FOUNDRY_DEPLOY_VENV:-$cache/deploy-lambda-figures}
infra/pyenv.sh "$venv" infra/requirements-deploy.txt
[ "$steps" = build ] || [ -n "${AWS_ENDPOINT_URL:-}" ] || { echo "lambda-figures.sh: AWS_ENDPOINT_URL is unset (infra/emulator.sh start)" >&2; exit 2; }
export PATH="$venv/bin:$PATH" SAM_CLI_TELEMETRY=0

if [ "$steps" != init ]; then
work=$(mktemp -d "${TMPDIR:-/tmp}/lambda-figures.XXXXXX")
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/clone"
cd "$work/clone"

# timed LABEL: runs `sam build` with a target directory of its own, leaving its wall seconds in
# $wall and the CPU seconds it used (user + system, its children's included) in $cpu: on a shared
# machine the wall time moves with the neighbours, the CPU time with the code.
timed() {
  CARGO_TARGET_DIR="$work/target" /usr/bin/time -f '%e %U %S' -o "$work/$1.time" sam build > "$work/$1.log" 2>&1 \
    || { tail -40 "$work/$1.log" >&2; echo "lambda-figures.sh: sam build ($1) failed" >&2; exit 1; }
  read -r wall user sys < "$work/$1.time"
  cpu=$(python3 -c "import sys; print(round(float(sys.argv[1]) + float(sys.argv[2])))" "$user" "$sys")
  wall=$(python3 -c "import sys; print(round(float(sys.argv[1]), 1))" "$wall")
  echo "sam build ($1): $wall s, $cpu s of CPU"
}
timed clean
clean=$wall
clean_cpu=$cpu
sizes=$(python3 - "$work/clone/.aws-sam/build" <<'PY'
import io, json, os, sys, zipfile
build = sys.argv[1]
out = {}
for name in sorted(os.listdir(build)):
    path = os.path.join(build, name, "bootstrap")
    if not os.path.isfile(path):
        continue
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "bootstrap")
    out[name] = {"bytes": os.path.getsize(path), "zipped": len(b.getvalue())}
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

python3 - "$clean" "$function_line" "$tool_line" "$sizes" "$(git rev-parse --short HEAD)" "$clean_cpu" <<'PY'
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
[ "$steps" != build ] || exit 0

# 2. Init, for this machine's build of the same profile.
# shellcheck disable=SC2046
cargo build --profile function --locked $(for f in functions/*/; do echo -p "$(basename "$f")"; done)
FOUNDRY_BIN_DIR=${CARGO_TARGET_DIR:-$root/target}/function FOUNDRY_COLD_START_FIGURES="$root/docs/cold-start-figures.json" \
  cargo test --locked -p foundry-tests --test suite cold_start:: -- --ignored --nocapture
