#!/usr/bin/python3
"""The firewall rules a Kubernetes node's network made: kept aside before the lab installs its
cluster (state: snapshot), removed by reset (state: absent), and nothing else.

Which rules are the cluster's, by where they sit and what they name, never by a word anywhere in
the line (an owner's rule commented "allow KUBE-API" stays):

- chains named KUBE-* (kube-proxy, the kubelet, k3s's network policy controller) or FLANNEL-*,
  and rules commented `flanneld ...` (flannel's trafficmngr/iptables);
- the per-container chains of the CNI plugins, named for the network they serve by their jump
  rule's comment: portmap's CNI-DN-<hash> is entered from CNI-HOSTPORT-DNAT by a rule commented
  `dnat name: "<network>" id: "<container>"`, the bridge plugin's masquerading chain CNI-<hash> by
  one commented `name: "<network>" id: "<container>"` (containernetworking/plugins
  plugins/meta/portmap/portmap_iptables.go, pkg/ip/ipmasq_linux.go, pkg/utils FormatComment).
  Those of the cluster's network (cbr0, the name flannel's CNI configuration gives it in k3s and
  kube-flannel.yml) are the cluster's; another network's (a podman network) are not;
- the chains the CNI plugins share between all networks (CNI-HOSTPORT-*, CNI-FORWARD, CNI-ADMIN)
  and the rules that enter them, only while no other network has a rule left: podman's port
  forwards go through the same CNI-HOSTPORT-DNAT.

A rule that was there before the install (the snapshot) is never removed, whatever it is.
Rules are compared as iptables-save prints them without counters. Each of iptables, ip6tables
and their legacy variants is read when present: k3s's bundled iptables may have chosen the other
backend than the machine's.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from dataclasses import dataclass

from ansible.module_utils.basic import AnsibleModule

TOOLS = ["iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy"]
CLUSTER_CHAINS = ("KUBE-", "FLANNEL-")
SHARED_CNI_CHAINS = {
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-SETMARK",
    "CNI-HOSTPORT-MASQ",
    "CNI-HOSTPORT-SNAT",
    "CNI-FORWARD",
    "CNI-ADMIN",
}
COUNTERS = re.compile(r" \[\d+:\d+\]$")
NETWORK = re.compile(r'(?:^|\s)name: "([^"]*)"')


@dataclass(frozen=True)
class Rule:
    line: str
    chain: str
    target: str
    comment: str

    @property
    def network(self) -> str | None:
        """The CNI network a rule's comment names, if any."""
        found = NETWORK.search(self.comment)
        return found.group(1) if found else None


def _rule(line: str) -> Rule:
    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: read what can be read
        words = line.split()
    chain = target = comment = ""
    for flag, value in itertools.pairwise(words):
        if flag == "-A":
            chain = value
        elif flag in ("-j", "-g"):
            target = value
        elif flag == "--comment":
            comment = value
    return Rule(line, chain, target, comment)


def normal(line: str) -> str:
    """A line of iptables-save's output without its counters."""
    return COUNTERS.sub("", line.rstrip("\n"))


def _per_container(chain: str) -> bool:
    return chain.startswith("CNI-") and chain not in SHARED_CNI_CHAINS


def _owners(rules: list[Rule]) -> dict[str, str]:
    """Per-container CNI chain -> the network its jump rule or its own rules name."""
    owners = {}
    for rule in rules:
        if rule.network is not None:
            for chain in (rule.target, rule.chain):
                if _per_container(chain):
                    owners.setdefault(chain, rule.network)
    return owners


def _table_cluster_lines(lines: list[str], network: str, spare: set[str]) -> set[str]:
    """The lines of one table (chain declarations and rules) that are the cluster's."""
    rules = [_rule(line) for line in lines if line.startswith("-A ")]
    owners = _owners(rules)
    theirs = {c for c in owners if owners[c] == network} | {
        r.chain for r in rules if r.chain.startswith(CLUSTER_CHAINS)
    }
    declared = {line[1:].split()[0]: line for line in lines if line.startswith(":")}
    theirs |= {c for c in declared if c.startswith(CLUSTER_CHAINS)}

    def clusters(rule: Rule) -> bool:
        return (
            rule.chain in theirs
            or rule.target in theirs
            or rule.network == network
            or rule.comment.startswith("flanneld")
        )

    gone = {r.line for r in rules if clusters(r) and r.line not in spare}
    left = [r for r in rules if r.line not in gone]
    others = [
        r
        for r in left
        if r.network not in (None, network) or _per_container(r.chain) or _per_container(r.target)
    ]
    if not others:
        gone |= {
            r.line
            for r in left
            if (r.chain in SHARED_CNI_CHAINS or r.target in SHARED_CNI_CHAINS) and r.line not in spare
        }
        theirs |= SHARED_CNI_CHAINS
    used = {name for r in rules if r.line not in gone for name in (r.chain, r.target)}
    unused = {chain for chain in declared if chain in theirs and chain not in used}
    gone |= {declared[chain] for chain in unused if declared[chain] not in spare}
    return gone


def remove_cluster_rules(saved: str, network: str, spare: set[str]) -> str:
    """iptables-save output without its comments and the cluster's rules and chains.

    spare: lines (without counters) that stay whatever they are.
    """
    out: list[str] = []
    table: list[str] = []
    for line in saved.splitlines():
        if line.startswith("#"):
            continue
        table.append(line)
        if line == "COMMIT":
            gone = _table_cluster_lines([normal(t) for t in table], network, spare)
            out += [kept for kept in table if normal(kept) not in gone]
            table = []
    return "".join(f"{line}\n" for line in out + table)


def _tools(module: AnsibleModule) -> list[tuple[str, str, str]]:
    """(name, save, restore) of each iptables variant here, one per backend and family."""
    found, seen = [], set()
    for name in TOOLS:
        save, restore = module.get_bin_path(f"{name}-save"), module.get_bin_path(f"{name}-restore")
        if not (save and restore):
            continue
        key = (os.path.realpath(save), name.startswith("ip6"))
        if key not in seen:
            seen.add(key)
            found.append((name, save, restore))
    return found


def _save(module: AnsibleModule, save: str) -> str | None:
    rc, out, _err = module.run_command([save])
    return out if rc == 0 else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["snapshot", "absent"], "required": True},
            "record": {"type": "path", "required": True},
            "network": {"type": "str", "required": True},
        },
        supports_check_mode=False,
    )
    state, record, network = (module.params[k] for k in ("state", "record", "network"))
    tools = _tools(module)
    if state == "snapshot":
        if os.path.exists(record):
            module.exit_json(changed=False)
        lines = []
        for name, save, _restore in tools:
            saved = _save(module, save) or ""
            lines += [f"{name} {normal(line)}" for line in saved.splitlines() if line[:1] in (":", "-")]
        with open(record, "w", encoding="utf-8") as out:
            os.chmod(record, 0o600)
            out.write("".join(f"{line}\n" for line in lines))
        module.exit_json(changed=True)

    before: list[str] = []
    if os.path.exists(record):
        with open(record, encoding="utf-8") as found:
            before = [line.rstrip("\n") for line in found]
    changed = []
    for name, save, restore in tools:
        saved = _save(module, save)
        if not saved:
            continue
        # Records of an earlier release name the tool `iptables`/`ip6tables` for the default backend.
        tools_named = (name, name.split("-")[0])
        spare = {rule for tool, _, rule in (b.partition(" ") for b in before) if tool in tools_named}
        kept = remove_cluster_rules(saved, network, spare)
        if [line for line in saved.splitlines() if not line.startswith("#")] != kept.splitlines():
            rc, _out, err = module.run_command([restore], data=kept, binary_data=True)
            if rc != 0:
                module.fail_json(msg=f"{restore} refused the rules without the cluster's: {err}")
            changed.append(name)
    module.exit_json(changed=bool(changed), restored=changed)


if __name__ == "__main__":
    main()
