#!/usr/bin/env bash
# One command that runs every check of the project: linters, then the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k config).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

ruff check .
ruff format --check .
yamllint --strict .
ansible-lint --offline ansible/
pytest "$@"
