#!/usr/bin/env bash
# One command that prepares a fresh Linux machine for the lab and its tests:
# Debian packages the test machines need (when run as root on Debian/Ubuntu),
# then a virtual environment in .venv with every pinned Python package: the operator's, the
# trainer's and the test tools (requirements/dev.lock, each file checked against its hash).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2046  # one package per word is the point
  apt-get install -y -qq --no-install-recommends $(grep -v '^#' scripts/apt-packages.txt) >/dev/null
else
  echo "setup: not root on Debian/Ubuntu; skipping scripts/apt-packages.txt (needed only for the test machines)"
fi

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip==25.3
.venv/bin/pip install --quiet --require-hashes -r requirements/dev.lock
.venv/bin/pip install --quiet --no-deps --no-build-isolation -e .
echo "setup: done; activate with 'source .venv/bin/activate'"
