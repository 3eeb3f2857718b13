#!/usr/bin/env bash
# Signs macOS Mach-O files the way infra/relay-dist.sh does with a Developer ID, but with a
# certificate made here (rcodesign generate-self-signed-certificate), and checks the result:
#
#   ./infra/relay-sign-test.sh                 the macOS builds relay-dist.sh left in target/dist
#   ./infra/relay-sign-test.sh FILE...         others (names must say aarch64, x86_64 or universal2)
#
# For each file: sign a copy (hardened runtime, identifier com.foundry-connect.relay), then
# `rcodesign verify` must pass and infra/check_macho.py --expect developer-id must find nothing;
# the unsigned (ad-hoc) original must fail the developer-id check; and a signed copy with one
# code byte changed must fail both. Needs rcodesign ($FOUNDRY_RCODESIGN, or on PATH:
# `cargo install apple-codesign --locked --version 0.29.0`, about 20 minutes on 2 cores) — which
# is why this is not part of the test command. A self-made certificate proves the signing path,
# not Gatekeeper's trust: only Apple's Developer ID chain and notarization earn that.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rcodesign=${FOUNDRY_RCODESIGN:-rcodesign}
command -v "$rcodesign" >/dev/null || { echo "rcodesign not found: cargo install apple-codesign --locked --version 0.29.0" >&2; exit 1; }
cache=${FOUNDRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foundry-connect}
venv=$cache/dist-$(sha256sum infra/requirements-dist.txt | cut -c1-16)
infra/pyenv.sh "$venv" infra/requirements-dist.txt
python=$venv/bin/python

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for t in aarch64-apple-darwin x86_64-apple-darwin universal2-apple-darwin; do
    f=target/dist/$t/release/relay
    [ -f "$f" ] && files+=("$f")
  done
fi
[ ${#files[@]} -gt 0 ] || { echo "nothing to sign: run ./infra/relay-dist.sh first, or name files" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$rcodesign" generate-self-signed-certificate --person-name "foundry-connect test signer" \
  --team-id FCTEST0001 --pem-unified-file "$work/identity.pem" >/dev/null
failed=0
say() { printf '%-6s %s\n' "$1" "$2"; [ "$1" = ok ] || failed=1; }
for f in "${files[@]}"; do
  name=$(echo "$f" | grep -oE '(aarch64|x86_64|universal2)-apple-darwin' || basename "$f")
  dir=$work/$name/release
  mkdir -p "$dir"
  # No time-stamp server here (Apple's is out of reach offline); relay-dist.sh keeps the default,
  # which notarization requires.
  "$rcodesign" sign --pem-file "$work/identity.pem" --code-signature-flags runtime --timestamp-url none \
    --binary-identifier com.foundry-connect.relay "$f" "$dir/relay" >"$work/sign.log" 2>&1 ||
    { cat "$work/sign.log"; say FAIL "$name: signing failed"; continue; }
  if "$rcodesign" verify "$dir/relay" >"$work/verify.log" 2>&1; then say ok "$name: rcodesign verify"; else cat "$work/verify.log"; say FAIL "$name: rcodesign verify"; fi
  if "$python" infra/check_macho.py --min-macos 11.0 --expect developer-id "$dir/relay" >"$work/check.log" 2>&1; then
    say ok "$name: check_macho --expect developer-id ($(grep -o 'flags 0x[0-9a-f]* ([^)]*)' "$work/check.log" | head -1))"
  else
    cat "$work/check.log"; say FAIL "$name: check_macho --expect developer-id"
  fi
  mkdir -p "$work/orig/$name/release"
  cp "$f" "$work/orig/$name/release/relay"
  if "$python" infra/check_macho.py --min-macos 11.0 --expect developer-id "$work/orig/$name/release/relay" >/dev/null 2>&1; then
    say FAIL "$name: the unsigned original passed as developer-id"
  else
    say ok "$name: the ad-hoc original is refused as developer-id"
  fi
  case $name in
    universal2*|aarch64*)
      mkdir -p "$work/broken/$name/release"
      cp "$dir/relay" "$work/broken/$name/release/relay"
      # One byte of the first arm64 slice's code, after signing.
      "$python" - "$work/broken/$name/release/relay" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
if struct.unpack_from(">I", d, 0)[0] == 0xCAFEBABE:
    n = struct.unpack_from(">I", d, 4)[0]
    arches = [struct.unpack_from(">iiIII", d, 8 + 20 * i) for i in range(n)]
    base = next(a[2] for a in arches if a[0] == 0x0100000C)
else:
    base = 0
d[base + 0x4000 + 17] ^= 0xFF
open(sys.argv[1], "wb").write(d)
PY
      if "$rcodesign" verify "$work/broken/$name/release/relay" >/dev/null 2>&1; then say FAIL "$name: a changed byte passed rcodesign verify"; else say ok "$name: a changed byte fails rcodesign verify"; fi
      if "$python" infra/check_macho.py --min-macos 11.0 --expect developer-id "$work/broken/$name/release/relay" >/dev/null 2>&1; then
        say FAIL "$name: a changed byte passed check_macho"
      else
        say ok "$name: a changed byte fails check_macho"
      fi
      ;;
  esac
done
[ "$failed" -eq 0 ] && echo "relay-sign-test: all passed" || { echo "relay-sign-test: failures above" >&2; exit 1; }
