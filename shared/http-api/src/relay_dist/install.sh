#!/bin/sh
# Installs the foundry-connect desktop relay: downloads the build for this machine from the
# server that served this script, checks its SHA-256 against the server's SHA256SUMS, installs
# it, pairs it with your account (you approve it in the panel) and starts it at every login.
#
#   curl -fsSL SERVER/relay/install.sh | sh
#   curl -fsSL SERVER/relay/install.sh | sh -s -- [--prefix DIR] [--name NAME] [--no-service]
#
#   --prefix DIR   install DIR/bin/relay (default: ~/.local)
#   --name NAME    the desktop's name in the panel (default: the host name)
#   --no-service   do not install the login service (run `relay run` yourself)
set -eu

SERVER="@SERVER@"
prefix="$HOME/.local"
name=""
service=yes
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
    --name) name=${2:?--name needs a name}; shift 2 ;;
    --no-service) service=no; shift ;;
    *) echo "relay installer: unknown option $1" >&2; exit 2 ;;
  esac
done

die() { echo "relay installer: $*" >&2; exit 1; }

case $(uname -s) in
  Darwin) os=apple-darwin ;;
  Linux) os=unknown-linux-musl ;;
  *) die "no relay build for $(uname -s); the relay runs on macOS and Linux" ;;
esac
case $(uname -m) in
  arm64 | aarch64) arch=aarch64 ;;
  x86_64 | amd64) arch=x86_64 ;;
  *) die "no relay build for the $(uname -m) architecture" ;;
esac
target=$arch-$os

fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL "$1" -o "$2"
  elif command -v wget >/dev/null 2>&1; then
    wget -q "$1" -O "$2"
  else
    die "needs curl or wget"
  fi
}
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    shasum -a 256 "$1" | cut -d' ' -f1
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

fetch "$SERVER/relay/download/SHA256SUMS" "$tmp/SHA256SUMS" ||
  die "this server has no relay builds to download yet (its operator publishes them: docs/relay.md, \"Publishing the builds\")"
archive=$(awk -v t="-$target.tar.gz" 'substr($2, length($2) - length(t) + 1) == t { print $2; exit }' "$tmp/SHA256SUMS")
[ -n "$archive" ] || die "this server has no relay build for $target"
# Only names of the builds' own shape reach a path: letters, digits, '.', '_' and '-'.
case $archive in *[!A-Za-z0-9._-]*) die "unexpected file name in SHA256SUMS: $archive" ;; esac
case $archive in relay-*.tar.gz) ;; *) die "unexpected file name in SHA256SUMS: $archive" ;; esac
want=$(awk -v f="$archive" '$2 == f { print $1; exit }' "$tmp/SHA256SUMS")

echo "downloading $archive"
fetch "$SERVER/relay/download/$archive" "$tmp/$archive" || die "downloading $archive failed"
got=$(sha256 "$tmp/$archive")
[ "$got" = "$want" ] || die "checksum mismatch for $archive: SHA256SUMS says $want, the download is $got. Nothing was installed."

mkdir -p "$tmp/x"
tar -xzf "$tmp/$archive" -C "$tmp/x" relay || die "$archive does not hold the relay"
mkdir -p "$prefix/bin"
cp "$tmp/x/relay" "$prefix/bin/.relay.new"
chmod 755 "$prefix/bin/.relay.new"
mv -f "$prefix/bin/.relay.new" "$prefix/bin/relay"
echo "installed $prefix/bin/relay"
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "note: $prefix/bin is not on your PATH" ;; esac

# relay pair prints the account the desktop joined and asks before keeping it, on the
# terminal (this script's own input is the download); with no terminal it accepts with --yes.
set -- pair "$SERVER"
[ -n "$name" ] && set -- "$@" --name "$name"
if (exec </dev/tty) 2>/dev/null; then
  "$prefix/bin/relay" "$@" </dev/tty
else
  "$prefix/bin/relay" "$@" --yes
fi
if [ "$service" = yes ]; then
  "$prefix/bin/relay" install
fi
echo "done. Share a graph with: $prefix/bin/relay session add --name NAME --project PROJECT_ID -- COMMAND"
