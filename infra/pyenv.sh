#!/usr/bin/env bash
# Creates (once) a Python virtual environment and installs a pinned requirements file into it.
# A stamp of the file's sha256 makes a second run instant while the pins are unchanged.
#
#   infra/pyenv.sh VENV_DIR REQUIREMENTS_FILE
set -euo pipefail
venv=$1
req=$2
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi
