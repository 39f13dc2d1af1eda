#!/bin/sh
# Which host firewall filters what reaches this node, as one word:
#   ufw        ufw is active (the first line of `ufw status` reads "Status: active")
#   firewalld  firewalld is running (`firewall-cmd --state` prints "running")
#   other      neither, but an nftables input hook or iptables' INPUT chain drops by default
#   none       nothing filters what reaches the node
# The prereq role opens the lab's ports in ufw or firewalld (tasks/firewall.yml) and leaves any
# other firewall alone; `labctl doctor` reports the same word for a stack whose ranks use the
# host network, so both judge a node alike. Run as root: ufw and nft read their state as root only.
if command -v ufw >/dev/null && ufw status 2>/dev/null | head -n 1 | grep -q '^Status: active'; then
  echo ufw
elif command -v firewall-cmd >/dev/null && [ "$(firewall-cmd --state 2>/dev/null)" = running ]; then
  echo firewalld
elif command -v nft >/dev/null && nft list ruleset 2>/dev/null | grep 'hook input' | grep -q 'policy drop'; then
  echo other
elif command -v iptables >/dev/null && iptables -S INPUT 2>/dev/null | grep -qx -- '-P INPUT DROP'; then
  echo other
else
  echo none
fi
