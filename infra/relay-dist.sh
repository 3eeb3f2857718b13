#!/usr/bin/env bash
# Builds the relay's release archives into dist/ (or $FOUNDRY_DIST_DIR), cross-built here with
# zig as the linker, and checks them:
#
#   dist/relay-<version>-aarch64-apple-darwin.tar.gz     macOS, Apple silicon
#   dist/relay-<version>-x86_64-apple-darwin.tar.gz      macOS, Intel
#   dist/relay-<version>-universal2-apple-darwin.tar.gz  macOS, both in one file
#   dist/relay-<version>-x86_64-unknown-linux-musl.tar.gz   Linux, static
#   dist/relay-<version>-aarch64-unknown-linux-musl.tar.gz  Linux, static
#   dist/SHA256SUMS
#
#   ./infra/relay-dist.sh                  all of them (about 10 minutes on 2 cores)
#   ./infra/relay-dist.sh x86_64-unknown-linux-musl   only some targets
#
# macOS: there is no SDK here, so Security and CoreFoundation are linked against the stubs in
# infra/macos-stubs (the real frameworks load on the Mac). The minimum macOS is
# $MACOSX_DEPLOYMENT_TARGET (11.0). infra/check_macho.py then parses every Mach-O (lief): CPU
# types, minimum OS, only system libraries linked, a code signature on arm64 whose page hashes
# match the file (codeLimit, flags, CodeDirectory version), and 16 KiB arm64 slices in the
# universal file. Nothing here ran on a real Mac (docs/relay.md says what that leaves unverified).
#
# Signing with a Developer ID (optional; docs/relay.md, "Signed builds"): with
#   FOUNDRY_SIGN_P12=developer-id.p12 FOUNDRY_SIGN_P12_PASSWORD_FILE=pw.txt   (or FOUNDRY_SIGN_PEM=key-and-cert.pem)
# every macOS binary is signed by rcodesign (apple-codesign; $FOUNDRY_RCODESIGN or `rcodesign`
# on PATH) with the hardened runtime and a secure timestamp (Apple's server, which notarization
# requires; FOUNDRY_SIGN_TIMESTAMP_URL=none for an offline trial) before it is checked and packed, and checked as
# `--expect developer-id`; without them the builds keep the linker's ad-hoc signature. With
# FOUNDRY_NOTARY_API_KEY=key.json (`rcodesign encode-app-store-connect-api-key`) each signed
# binary is also submitted to Apple's notary service and waited for; a bare executable cannot
# be stapled, so Gatekeeper looks its ticket up online.
#
# Runs on Linux and on macOS (bash 3.2, BSD tools: `shasum -a 256` where there is no
# `sha256sum`, bsdtar's owner options); it needs rustup and Python >= 3.11 (infra/pyenv.sh), and
# installs the rest (zig, cargo-zigbuild, lief: infra/requirements-dist.txt) into a venv of its own.
#
# FOUNDRY_DIST_PREBUILT=DIR packs binaries built elsewhere instead of building them: DIR is laid
# out as cargo's target folder (DIR/<target>/release/relay, and
# DIR/universal2-apple-darwin/release/relay when both macOS targets are named). Nothing is
# built, rustup is not asked, and the pinned tools are installed only to check macOS binaries.
# The tests pack stand-in binaries this way (tests/tests/relay_dist_portable.rs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)
# $cache and `sha256` (sha256sum, or macOS's shasum -a 256).
. infra/tool-folders.sh

all=(aarch64-apple-darwin x86_64-apple-darwin x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
prebuilt=${FOUNDRY_DIST_PREBUILT:-}
macos=false
for t in "${targets[@]}"; do
  case $t in *-apple-darwin) macos=true ;; esac
done

if [ -z "$prebuilt" ] || $macos; then
  venv=$cache/dist-$(sha256 infra/requirements-dist.txt | cut -c1-16)
  infra/pyenv.sh "$venv" infra/requirements-dist.txt
  export PATH="$venv/bin:$PATH"
fi
[ -n "$prebuilt" ] || rustup target add "${targets[@]}" >/dev/null

# The release: one version for the stack, the local server and the relay (Cargo.toml's
# [workspace.package]; CHANGELOG.md).
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || { echo "no version in Cargo.toml's [workspace.package]" >&2; exit 2; }
out=${FOUNDRY_DIST_DIR:-$root/dist}
mkdir -p "$out"
export CARGO_TARGET_DIR=${prebuilt:-${FOUNDRY_DIST_TARGET_DIR:-$root/target/dist}}
export MACOSX_DEPLOYMENT_TARGET=11.0
stubs="-C link-arg=-F$root/infra/macos-stubs"
export CARGO_TARGET_AARCH64_APPLE_DARWIN_RUSTFLAGS="$stubs" CARGO_TARGET_X86_64_APPLE_DARWIN_RUSTFLAGS="$stubs"

# The archive's one file is owned by uid 0, gid 0, without names: GNU tar and macOS's bsdtar
# spell it differently. bsdtar would also pack the file's extended attributes (a copy keeps
# macOS's provenance and quarantine marks) and their AppleDouble `._relay` (COPYFILE_DISABLE).
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
  owner=(--owner=0 --group=0 --numeric-owner)
else
  owner=(--uid 0 --gid 0 --numeric-owner --no-xattrs)
fi

# Packs one binary as relay-<version>-<name>.tar.gz: the binary alone, named `relay`.
pack() {
  local bin=$1 name=$2 dir archive
  archive=$out/relay-$version-$name.tar.gz
  dir=$(mktemp -d)
  cp "$bin" "$dir/relay"
  chmod 755 "$dir/relay"
  COPYFILE_DISABLE=1 tar -C "$dir" "${owner[@]}" -czf "$archive" relay
  rm -rf "$dir"
  # wc pads its count with spaces on macOS; the arithmetic drops them.
  echo "packed $archive ($(( $(wc -c < "$archive") )) bytes)"
}

sign=()
if [ -n "${FOUNDRY_SIGN_P12:-}" ]; then
  sign=(--p12-file "$FOUNDRY_SIGN_P12")
  [ -n "${FOUNDRY_SIGN_P12_PASSWORD_FILE:-}" ] && sign+=(--p12-password-file "$FOUNDRY_SIGN_P12_PASSWORD_FILE")
elif [ -n "${FOUNDRY_SIGN_PEM:-}" ]; then
  sign=(--pem-file "$FOUNDRY_SIGN_PEM")
fi
rcodesign=${FOUNDRY_RCODESIGN:-rcodesign}
expect=adhoc
if [ ${#sign[@]} -gt 0 ]; then
  command -v "$rcodesign" >/dev/null || { echo "signing asked for, but $rcodesign is not installed (cargo install apple-codesign --locked --version 0.29.0)" >&2; exit 1; }
  expect=developer-id
fi

# Signs (when asked) a copy of one macOS binary; prints the path to pack.
signed() {
  local bin=$1 name=$2 dir
  if [ ${#sign[@]} -eq 0 ]; then
    echo "$bin"
    return
  fi
  dir=$(mktemp -d)
  "$rcodesign" sign "${sign[@]}" --code-signature-flags runtime --binary-identifier com.foundry-connect.relay \
    --timestamp-url "${FOUNDRY_SIGN_TIMESTAMP_URL:-http://timestamp.apple.com/ts01}" \
    "$bin" "$dir/relay" >&2
  if [ -n "${FOUNDRY_NOTARY_API_KEY:-}" ]; then
    (cd "$dir" && zip -q "relay-$name.zip" relay)
    "$rcodesign" notary-submit --api-key-file "$FOUNDRY_NOTARY_API_KEY" --wait "$dir/relay-$name.zip" >&2
  fi
  echo "$dir/relay"
}

macs=()
names=()
for t in "${targets[@]}"; do
  echo "== $t"
  [ -n "$prebuilt" ] || cargo zigbuild --release --locked -p relay --target "$t"
  case $t in
    *-apple-darwin) macs+=("$CARGO_TARGET_DIR/$t/release/relay"); names+=("$t") ;;
    *) pack "$CARGO_TARGET_DIR/$t/release/relay" "$t" ;;
  esac
done

if [ ${#macs[@]} -eq 2 ]; then
  # cargo-zigbuild's universal2 target reuses the two thin builds and joins them (as `lipo -create`).
  echo "== universal2-apple-darwin"
  [ -n "$prebuilt" ] || cargo zigbuild --release --locked -p relay --target universal2-apple-darwin
  macs+=("$CARGO_TARGET_DIR/universal2-apple-darwin/release/relay")
  names+=(universal2-apple-darwin)
fi

if [ ${#macs[@]} -gt 0 ]; then
  staged=()
  for i in "${!macs[@]}"; do
    staged+=("$(signed "${macs[$i]}" "${names[$i]}")")
  done
  echo "== checking the Mach-O files (--expect $expect)"
  # check_macho names the CPU types it expects from the path: stage under the target's name.
  checked=()
  for i in "${!staged[@]}"; do
    mkdir -p "$CARGO_TARGET_DIR/checked/${names[$i]}/release"
    cp "${staged[$i]}" "$CARGO_TARGET_DIR/checked/${names[$i]}/release/relay"
    checked+=("$CARGO_TARGET_DIR/checked/${names[$i]}/release/relay")
  done
  python infra/check_macho.py --min-macos "$MACOSX_DEPLOYMENT_TARGET" --expect "$expect" "${checked[@]}"
  for i in "${!checked[@]}"; do
    pack "${checked[$i]}" "${names[$i]}"
  done
fi

(cd "$out" && sha256 relay-"$version"-*.tar.gz > SHA256SUMS)
echo "== $out/SHA256SUMS"
cat "$out/SHA256SUMS"
echo "relay-dist: $(( $(date +%s) - started )) s"
