#!/usr/bin/env bash
# One command that runs every check of the project: linters, the type checker, then the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k config).
# --fast, first: the inner loop, leaving out the tests marked slow (real plays, trainer runs, the
# test machines, a package install); CI runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
select=()
if [[ "${1:-}" == "--fast" ]]; then
  shift
  select=(-m "not slow")
fi

ruff check .
ruff format --check .
# Types, as pyproject.toml's [tool.mypy] sets them (lab/, trainer/, __main__.py, benchmarks/).
mypy
# Only the files the repository ships: a stack file an operator added to stacks/ is theirs.
git ls-files -z -- '*.yml' '*.yaml' | xargs -0 yamllint --strict
ansible-lint --offline ansible/
pytest "${select[@]}" "$@"
