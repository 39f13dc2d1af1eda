#!/usr/bin/env bash
# Regenerate the locks from pyproject.toml: every package of each role's tree at an exact
# version, with the sha256 of each of its files on PyPI, so `pip install --require-hashes` installs
# the same bytes on any machine. Existing pins are kept (uv prefers the versions already in the
# output file); to move a version, change pyproject.toml or pass uv's --upgrade-package NAME.
# Needs PyPI's `uv` (`pip install uv`); reads PyPI only, never this machine's pip configuration.
set -euo pipefail
cd "$(dirname "$0")/.."

# The lab's machines: CPython 3.11 on x86-64 Linux (the trainer image is python:3.11 on Debian).
compile=(uv pip compile --quiet --generate-hashes --index-url https://pypi.org/simple
  --python-version 3.11 --python-platform x86_64-manylinux_2_28
  --custom-compile-command scripts/lock.sh "$@")

# Development: the operator's packages, the trainer's and the test tools in one environment.
"${compile[@]}" pyproject.toml --all-extras -o requirements/dev.lock
# The operator's (`pip install .`) and the trainer's, each at the versions of dev.lock. The
# trainer's lock lives in the image's build context, which holds only images/trainer/ and trainer/.
"${compile[@]}" pyproject.toml -c requirements/dev.lock -o requirements/operator.lock
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))
  ["project"]["optional-dependencies"]["trainer"]))' |
  "${compile[@]}" - -c requirements/dev.lock -o images/trainer/requirements.txt
