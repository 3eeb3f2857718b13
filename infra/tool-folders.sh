# Where the pinned tools live, for the scripts that install or use them (sourced, not run):
# `cache` is the folder ($FOUNDRY_CACHE_DIR, default ~/.cache/foundry-connect), and
# `venv_for NAME REQUIREMENTS` names the environment folder for a requirements file, by the hash
# of its pins and of the Python that installs them, so a changed pin or Python gets a new folder
# and a second run or a fresh clone reuses the old one. infra/test.sh and
# infra/lambda-figures.sh use the same folders through it (the Python is infra/pyenv.sh's:
# $FOUNDRY_PYTHON, default python3). `sha256 FILE...` (or `-`, standard input) prints
# sha256sum's lines, `<hash>  <name>`, on Linux and on macOS, which has `shasum -a 256` instead;
# infra/relay-dist.sh writes SHA256SUMS with it.
# shellcheck shell=bash
cache=${FOUNDRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foundry-connect}
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$@"
  else
    shasum -a 256 "$@"
  fi
}
venv_for() {
  local name=$1 req=$2 python=${FOUNDRY_PYTHON:-python3} key
  key=$( (cat "$req"; command -v "$python"; "$python" -c 'import sys; print(sys.version)') | sha256 - | cut -c1-16)
  echo "$cache/$name-$key"
}
