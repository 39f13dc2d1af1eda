#!/usr/bin/env bash
# One command that runs every check of the project: linters, the type checker, then the test suite
# by its tiers (tests/README.md). Extra arguments go to both pytest runs (e.g. scripts/test.sh -k config).
# --fast, first: the inner loop, the fast tier alone.
# The fast tier runs in parallel, a worker per core (pytest-xdist); the slow tier (real plays,
# trainer runs, the sshd, an install, and the integration tier) runs after it on two workers:
# tests that share something machine-wide (the integration tier's test machines, the sshd) take
# turns, one xdist group per thing (tests/support/tiers.py), so the integration tier runs on one
# worker while the rest of the slow tier runs beside it on the other. The exit status is non-zero
# when either run fails, and the output ends with the last run's summary line; just before it, each
# run writes its 25 slowest phases and its time per test folder (tests/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
fast=false
if [[ "${1:-}" == "--fast" ]]; then
  shift
  fast=true
fi

ruff check .
ruff format --check .
# Types, as pyproject.toml's [tool.mypy] sets them (lab/, trainer/, __main__.py, benchmarks/).
mypy
# Only the files the repository ships: a stack file an operator added to stacks/ is theirs.
git ls-files -z -- '*.yml' '*.yaml' | xargs -0 yamllint --strict
ansible-lint --offline ansible/

# pytest's exit status 5 means it selected no test (a -k or path that names only one tier's
# tests): the other run's status stands then.
statuses=()
run_tier() {
  local status=0
  pytest "$@" || status=$?
  statuses+=("$status")
}
run_tier -n auto -m "not slow" "$@"
if [[ "$fast" == false ]]; then
  run_tier -n 2 --dist loadgroup -m slow "$@"
fi
result=5
for status in "${statuses[@]}"; do
  if [[ "$status" != 0 && "$status" != 5 ]]; then
    exit "$status"
  fi
  if [[ "$status" == 0 ]]; then
    result=0
  fi
done
exit "$result"
