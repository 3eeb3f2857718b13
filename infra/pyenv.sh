#!/usr/bin/env bash
# Creates (once) a Python virtual environment and installs a pinned requirements file into it.
# A stamp of the file's sha256 makes a second run instant while the pins are unchanged.
#
#   infra/pyenv.sh VENV_DIR REQUIREMENTS_FILE
#
# Needs Python >= 3.11 (the pinned tools do; macOS ships 3.9: install one from python.org or
# Homebrew and put it first on PATH, or set FOUNDRY_PYTHON to it). Works with Linux's
# `sha256sum` and macOS's `shasum -a 256`.
set -euo pipefail
venv=$1
req=$2
python=${FOUNDRY_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "pyenv.sh: $python not found: install Python 3.11 or newer (or set FOUNDRY_PYTHON)" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "pyenv.sh: $("$python" --version 2>&1) is too old: the pinned tools need Python 3.11 or newer (install one, put it first on PATH or set FOUNDRY_PYTHON)" >&2
  exit 1
fi
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    echo "pyenv.sh: neither sha256sum nor shasum found" >&2
    exit 1
  fi
}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256 "$req")
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # --no-compile: pip would byte-compile every module of every package (botocore, moto and the
  # SAM CLI hold thousands), on the cores the test command's build needs; Python compiles the
  # modules a program imports when it first imports them, and keeps them.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile -r "$req"
  echo "$want" > "$stamp"
fi
