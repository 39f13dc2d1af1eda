#!/usr/bin/env bash
# One command that prepares a fresh Linux machine for the lab and its tests, step by step with
# each step's time:
#   1. the Debian packages of scripts/apt-packages.txt (on Debian/Ubuntu: as root, or through
#      sudo for a user who may use it; skipped otherwise, they serve only the test machines);
#   2. a virtual environment in .venv with every pinned Python package: the operator's, the
#      trainer's and the test tools (requirements/dev.lock, each file checked against its hash),
#      owned by the user who ran it (SUDO_USER's when run through sudo);
#   3. upstream's programs for the tests that run the real Pulumi engine and Kubernetes, from the
#      pinned tools folder into a cache outside the checkout (lab/testbed/tools.py; nothing when
#      the cache is complete; one line saying how to get them where there is no tools folder).
# A package it installs starts no service and stays disabled: the tests and the test machines
# start their own sshd and apt-cacher-ng, and exportfs runs in a private namespace, so the
# machine runs the services it ran before. Packages already there are left as they are.
set -euo pipefail
cd "$(dirname "$0")/.."

STEP=0
STEPS=6
# What invoke-rc.d and deb-systemd-invoke ask before they start a service.
POLICY_RC_D=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
began_all=$SECONDS

# step TITLE COMMAND...: run COMMAND (in the foreground: sudo may ask for a password) as step
# TITLE, with a line every 30 s while it runs and its time at the end.
step() {
  local title=$1 began=$SECONDS status=0
  shift
  STEP=$((STEP + 1))
  echo "setup: [$STEP/$STEPS] $title ..."
  heartbeat "$began" &
  local beat=$!
  "$@" || status=$?
  kill "$beat"
  wait "$beat" 2>/dev/null || true
  if ((status)); then
    echo "setup:   failed after $((SECONDS - began)) s (exit status $status)" >&2
    exit "$status"
  fi
  echo "setup:   done in $((SECONDS - began)) s"
}

# heartbeat BEGAN: a line every 30 s until killed, its own sleep going with it.
heartbeat() {
  local nap
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while true; do
    sleep 30 &
    nap=$!
    wait "$nap"
    echo "setup:   ... still at it ($((SECONDS - $1)) s)"
  done
}

# Who runs the Debian steps: root itself, or sudo for a user who may use it.
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  as_root=(none)
fi
# Who owns .venv: the user who asked, also when they asked through sudo.
as_owner=()
if [[ $(id -u) -eq 0 && -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
  as_owner=(sudo -u "$SUDO_USER" --)
fi

mapfile -t packages < <(grep -v '^#' scripts/apt-packages.txt | grep .)
# installed: every package installed on the machine, one a line.
installed() {
  dpkg-query -W -f='${Status}\t${Package}\n' 2>/dev/null | grep '^install ok installed' | cut -f2
}
# newer BEFORE AFTER: the lines of file AFTER that are not in file BEFORE.
newer() {
  grep -vxF -f "$1" "$2" || true
}

install_packages() {
  local blocker=$POLICY_RC_D own_blocker="" status=0
  # invoke-rc.d and deb-systemd-invoke ask policy-rc.d before starting a service, and 101 is
  # "not allowed" (init-system-helpers' script/deb-systemd-invoke; sysv-rc's README.policy-rc.d).
  # One already there is the machine's own and stays.
  if [[ ! -e $blocker ]]; then
    own_blocker=$blocker
    "${as_root[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $blocker && chmod 755 $blocker" || return
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  [[ -z $own_blocker ]] || "${as_root[@]}" rm -f "$own_blocker"
  return "$status"
}

# The new packages' systemd units that their postinst enabled: disabled again, stopped too.
disable_services() {
  if ! command -v systemctl >/dev/null || [[ $(systemctl is-system-running 2>/dev/null) == offline ]]; then
    echo "setup:   no systemd running here: no service to disable"
    return
  fi
  local pkg unit
  for pkg in "$@"; do
    while read -r unit; do
      [[ $unit == *@.* ]] && continue  # a template has no instance to stop
      if [[ $(systemctl is-enabled "$unit" 2>/dev/null) == enabled ]] || systemctl -q is-active "$unit"; then
        "${as_root[@]}" systemctl disable --now -q "$unit" && echo "setup:   disabled $unit ($pkg)"
      fi
    done < <(dpkg-query -L "$pkg" | grep -E '^/(usr/)?lib/systemd/system/[^/]+\.(service|socket|target)$' | xargs -r -n1 basename)
  done
}

if ! command -v apt-get >/dev/null; then
  STEPS=4
  echo "setup: not Debian or Ubuntu; skipping scripts/apt-packages.txt (needed only for the test machines)"
elif [[ ${as_root[0]:-} == none ]]; then
  STEPS=4
  echo "setup: neither root nor sudo; skipping scripts/apt-packages.txt (needed only for the test machines)"
else
  before=$(mktemp)
  after=$(mktemp)
  # Only in this shell: a heartbeat subshell inherits the trap and, killed before it runs a
  # line, runs it too, removing the lists while this shell still reads them.
  trap '[[ $BASHPID != '"$$"' ]] || rm -f "$before" "$after"' EXIT
  installed >"$before"
  printf '%s\n' "${packages[@]}" >"$after"
  mapfile -t missing < <(newer "$before" "$after")
  step "apt-get update" "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  if ((${#missing[@]})); then
    step "Debian packages: ${missing[*]} (no service started)" install_packages "${missing[@]}"
    # Their dependencies too (rpcbind, nfs-common): only what this run installed.
    installed >"$after"
    mapfile -t new < <(newer "$before" "$after")
    disable_services "${new[@]}"
  else
    step "Debian packages: all ${#packages[@]} of scripts/apt-packages.txt are installed" true
  fi
fi

step "virtual environment .venv and pip 25.3" \
  sh -c "${as_owner[*]} python3 -m venv .venv && ${as_owner[*]} .venv/bin/pip install --quiet --upgrade pip==25.3"
step "Python packages of requirements/dev.lock (torch among them: several GB, minutes the first time)" \
  "${as_owner[@]}" .venv/bin/pip install --quiet --require-hashes -r requirements/dev.lock
step "this checkout into .venv (the labctl command)" \
  "${as_owner[@]}" .venv/bin/pip install --quiet --no-deps --no-build-isolation -e .
# Without a tools folder the rest of the lab still installs: the line says how to get them.
step "upstream's programs (Pulumi CLI, Kubernetes, kwok, Kueue) into their cache" \
  sh -c "${as_owner[*]} .venv/bin/python -m lab.testbed.tools install || true"
echo "setup: done in $((SECONDS - began_all)) s; activate with 'source .venv/bin/activate'"
