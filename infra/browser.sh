#!/usr/bin/env bash
# What the browser tests need: Debian's Chromium (Playwright's own browser download cannot work
# offline) and a virtualenv with Playwright and the MCP SDK, pinned in infra/python-browser.txt.
#
#   infra/browser.sh VENV_DIR      installs what is missing; prints nothing else on success
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:?venv dir}
if ! command -v chromium >/dev/null 2>&1; then
  echo "   chromium is missing: installing Debian's chromium package"
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
    echo "chromium is not installed and this user cannot install packages; run: apt-get install -y chromium" >&2
    exit 1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
"$here/pyenv.sh" "$venv" "$here/python-browser.txt"
