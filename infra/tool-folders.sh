# Where the pinned tools live, for the scripts that install or use them (sourced, not run):
# `cache` is the folder ($FOUNDRY_CACHE_DIR, default ~/.cache/foundry-connect), and
# `venv_for NAME REQUIREMENTS` names the environment folder for a requirements file, by the hash
# of its pins and of the Python that installs them, so a changed pin or Python gets a new folder
# and a second run or a fresh clone reuses the old one. infra/test.sh and
# infra/lambda-figures.sh use the same folders through it.
# shellcheck shell=bash
cache=${FOUNDRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foundry-connect}
venv_for() {
  local name=$1 req=$2 key
  key=$( (cat "$req"; command -v python3; python3 -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
  echo "$cache/$name-$key"
}
