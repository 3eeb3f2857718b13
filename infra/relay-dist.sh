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
# types, minimum OS, only system libraries linked, and an ad-hoc code signature on arm64 whose
# page hashes match the file. Nothing here ran on a real Mac (docs/relay.md says what that
# leaves unverified).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)

cache=${FOUNDRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foundry-connect}
venv=$cache/dist-$(sha256sum infra/requirements-dist.txt | cut -c1-16)
infra/pyenv.sh "$venv" infra/requirements-dist.txt
export PATH="$venv/bin:$PATH"

all=(aarch64-apple-darwin x86_64-apple-darwin x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
rustup target add "${targets[@]}" >/dev/null

version=$(sed -n 's/^version = "\(.*\)"/\1/p' relay/Cargo.toml | head -1)
out=${FOUNDRY_DIST_DIR:-$root/dist}
mkdir -p "$out"
export CARGO_TARGET_DIR=${FOUNDRY_DIST_TARGET_DIR:-$root/target/dist}
export MACOSX_DEPLOYMENT_TARGET=11.0
stubs="-C link-arg=-F$root/infra/macos-stubs"
export CARGO_TARGET_AARCH64_APPLE_DARWIN_RUSTFLAGS="$stubs" CARGO_TARGET_X86_64_APPLE_DARWIN_RUSTFLAGS="$stubs"

# Packs one binary as relay-<version>-<name>.tar.gz: the binary alone, named `relay`.
pack() {
  local bin=$1 name=$2 dir
  dir=$(mktemp -d)
  cp "$bin" "$dir/relay"
  chmod 755 "$dir/relay"
  tar -C "$dir" --owner=0 --group=0 --numeric-owner -czf "$out/relay-$version-$name.tar.gz" relay
  rm -rf "$dir"
  echo "packed $out/relay-$version-$name.tar.gz ($(stat -c %s "$out/relay-$version-$name.tar.gz") bytes)"
}

macs=()
for t in "${targets[@]}"; do
  echo "== $t"
  cargo zigbuild --release --locked -p relay --target "$t"
  pack "$CARGO_TARGET_DIR/$t/release/relay" "$t"
  case $t in *-apple-darwin) macs+=("$CARGO_TARGET_DIR/$t/release/relay") ;; esac
done

if [ ${#macs[@]} -eq 2 ]; then
  # cargo-zigbuild's universal2 target reuses the two thin builds and joins them (as `lipo -create`).
  echo "== universal2-apple-darwin"
  cargo zigbuild --release --locked -p relay --target universal2-apple-darwin
  pack "$CARGO_TARGET_DIR/universal2-apple-darwin/release/relay" universal2-apple-darwin
  macs+=("$CARGO_TARGET_DIR/universal2-apple-darwin/release/relay")
fi

if [ ${#macs[@]} -gt 0 ]; then
  echo "== checking the Mach-O files"
  python infra/check_macho.py --min-macos "$MACOSX_DEPLOYMENT_TARGET" "${macs[@]}"
fi

(cd "$out" && sha256sum relay-"$version"-*.tar.gz > SHA256SUMS)
echo "== $out/SHA256SUMS"
cat "$out/SHA256SUMS"
echo "relay-dist: $(( $(date +%s) - started )) s"
