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
#   --pair         pair again even when this desktop is already paired with this server
#
# Run again (to update or repair), it keeps a working pairing, and leaves a loaded login
# service that did not change alone, so a run in progress finishes (the running relay
# restarts into the new build between runs).
set -eu

SERVER="@SERVER@"
prefix="$HOME/.local"
name=""
service=yes
keep=--keep-pairing
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
    --name) name=${2:?--name needs a name}; shift 2 ;;
    --no-service) service=no; shift ;;
    --pair) keep=""; shift ;;
    *) echo "relay installer: unknown option $1" >&2; exit 2 ;;
  esac
done

die() { echo "relay installer: $*" >&2; exit 1; }

# The service file records the binary's path: a relative --prefix would be relative to
# wherever launchd or systemd starts it.
case $prefix in
  /*) ;;
  *) prefix=$(pwd)/$prefix ;;
esac

kernel=$(uname -s)
case $kernel in
  Darwin) os=apple-darwin ;;
  Linux) os=unknown-linux-musl ;;
  *) die "no relay build for $kernel; the relay runs on macOS and Linux" ;;
esac
machine=$(uname -m)
# A shell translated by Rosetta reports x86_64 on Apple silicon: installing the Intel build
# would run the relay, and every graph it starts, translated. The hardware tells the truth.
if [ "$kernel" = Darwin ] && [ "$machine" = x86_64 ] && [ "$(sysctl -n hw.optional.arm64 2>/dev/null)" = 1 ]; then
  echo "this shell runs under Rosetta; installing the Apple silicon build"
  machine=arm64
fi
case $machine in
  arm64 | aarch64) arch=aarch64 ;;
  x86_64 | amd64) arch=x86_64 ;;
  *) die "no relay build for the $machine architecture" ;;
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
# A file that arrived through a browser or AirDrop carries com.apple.quarantine, and
# Gatekeeper kills a quarantined ad-hoc signed binary at launch. Its checksum has passed.
if [ "$kernel" = Darwin ] && command -v xattr >/dev/null 2>&1; then
  xattr -d com.apple.quarantine "$prefix/bin/.relay.new" 2>/dev/null || true
fi
mv -f "$prefix/bin/.relay.new" "$prefix/bin/relay"
echo "installed $prefix/bin/relay"

# ~/.local/bin is not on a Mac's PATH (nor on some Linux shells'): say the exact line for the
# owner's shell, and use the full path below until it is added.
relay=relay
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *)
    relay=$prefix/bin/relay
    case $(basename "${SHELL:-sh}") in
      zsh) rc='~/.zprofile' line="export PATH=\"$prefix/bin:\$PATH\"" ;;
      bash) if [ "$kernel" = Darwin ]; then rc='~/.bash_profile'; else rc='~/.bashrc'; fi
        line="export PATH=\"$prefix/bin:\$PATH\"" ;;
      fish) rc='~/.config/fish/config.fish' line="fish_add_path $prefix/bin" ;;
      *) rc='~/.profile' line="export PATH=\"$prefix/bin:\$PATH\"" ;;
    esac
    echo "$prefix/bin is not on your PATH. To type just \`relay\`, add this line to $rc and open a new terminal:"
    echo
    echo "    $line"
    echo
    ;;
esac

# relay pair prints the account the desktop joined and asks before keeping it, on the
# terminal (this script's own input is the download); with no terminal it accepts with --yes.
set -- pair "$SERVER" --from-installer
[ -n "$keep" ] && set -- "$@" "$keep"
[ -n "$name" ] && set -- "$@" --name "$name"
if (exec </dev/tty) 2>/dev/null; then
  "$prefix/bin/relay" "$@" </dev/tty
else
  "$prefix/bin/relay" "$@" --yes
fi
if [ "$service" = yes ]; then
  "$prefix/bin/relay" install --exe "$prefix/bin/relay"
fi
echo "done. Share a graph with: $relay session add --name NAME --project PROJECT_ID -- COMMAND"
[ "$service" = yes ] || echo "then start it with: $relay run (or $relay install, to start it at every login)"
