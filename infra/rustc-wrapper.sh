#!/usr/bin/env bash
# The test command's RUSTC_WORKSPACE_WRAPPER: every workspace crate is compiled once, by
# clippy-driver (the lints; CLIPPY_ARGS carries -D warnings), and each library and binary the
# build compiles is documented by rustdoc beside it, with -D warnings.
#
# Why rustdoc runs here and not as `cargo doc`: `cargo doc` first checks every dependency again
# (its own "check" artifacts, which a build never shares) and then documents the workspace, so on
# a new machine it was the last thing the test command waited for (docs/history.md, issue 37).
# Here rustdoc reads the dependencies' metadata that the build has just made, from the same
# `--extern` and `-L` arguments cargo gives the compiler, so only the workspace's own crates are
# documented, each as soon as its dependencies are built. A rustdoc warning fails the crate's
# compile, and so the build, with the message in the build's output. Test harnesses (`--test`),
# build scripts and cargo's probes are only compiled.
#
#   cargo calls it as: rustc-wrapper.sh <rustc> <rustc arguments...>
#   FOUNDRY_CLIPPY_DRIVER   clippy-driver, run as a wrapper of <rustc> (unset: <rustc> alone)
#   FOUNDRY_RUSTDOC=0       compile only (no rustdoc)
set -uo pipefail
rustc=$1
shift
if [ -n "${FOUNDRY_CLIPPY_DRIVER:-}" ]; then
  compile=("$FOUNDRY_CLIPPY_DRIVER" "$rustc")
else
  compile=("$rustc")
fi

name="" kind="" out="" src="" document=${FOUNDRY_RUSTDOC:-1}
prev=""
for a in "$@"; do
  case "$prev" in
    --crate-name) name=$a ;;
    --crate-type) kind=$a ;;
    --out-dir) out=$a ;;
  esac
  case "$a" in
    --test | --print | --print=* | -) document=0 ;;
    *.rs) src=$a ;;
  esac
  prev=$a
done
case "$name" in build_script_*) document=0 ;; esac
case "$kind" in lib | rlib | bin) ;; *) document=0 ;; esac
[ -n "$src" ] && [ -n "$out" ] || document=0

if [ "$document" != 1 ]; then
  exec "${compile[@]}" "$@"
fi

# rustdoc takes the compiler's arguments but for what only a compile means: what to emit and
# where, codegen options, and the artifact notices cargo's pipelining reads (a second notice
# from rustdoc would be taken for the compiler's).
rustdoc=${RUSTDOC:-$(dirname "$rustc")/rustdoc}
[ -x "$rustdoc" ] || rustdoc=rustdoc
args=()
skip=0
for a in "$@"; do
  if [ "$skip" = 1 ]; then
    skip=0
    continue
  fi
  case "$a" in
    -C | --codegen | --out-dir | --emit | -o) skip=1 ;;
    -C* | --codegen=* | --emit=* | --out-dir=* | --diagnostic-width=*) ;;
    --json=*) json=${a#--json=}; [[ ",$json," == *,diagnostic-rendered-ansi,* ]] && args+=("--json=diagnostic-rendered-ansi") ;;
    *) args+=("$a") ;;
  esac
done
docs="${out%/deps}/doc-check/$name-$kind"
mkdir -p "$docs"
errors=$(mktemp "${TMPDIR:-/tmp}/rustdoc.XXXXXX")
"$rustdoc" "${args[@]}" -o "$docs" -D warnings 2> "$errors" &
doc_pid=$!
"${compile[@]}" "$@"
status=$?
wait "$doc_pid"
doc_status=$?
# The compiler's messages are out; rustdoc's follow, whole (never interleaved with them).
cat "$errors" >&2
rm -f "$errors"
[ "$status" -ne 0 ] && exit "$status"
exit "$doc_status"
