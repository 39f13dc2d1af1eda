"""The testbed's private network: a bridge on the host and one namespace per machine joined by a veth.

Only addresses inside the testbed's own subnet are configured, and machines get no default
route: the only place they can reach beyond each other is the apt proxy on the bridge.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.testbed.commands import run
from lab.testbed.layout import Layout, Machine

GUEST_LINK = "eth0"


def create(layout: Layout) -> None:
    """The bridge with the host's address, then each machine's namespace and link."""
    run(["ip", "link", "add", layout.bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{layout.gateway}/{layout.network.prefixlen}", "dev", layout.bridge])
    run(["ip", "link", "set", layout.bridge, "up"])
    for machine in layout.machines:
        _attach(layout, machine)


def _attach(layout: Layout, machine: Machine) -> None:
    peer = f"{machine.host_link}p"
    run(["ip", "netns", "add", machine.netns])
    run(["ip", "link", "add", machine.host_link, "type", "veth", "peer", "name", peer])
    run(["ip", "link", "set", machine.host_link, "master", layout.bridge, "up"])
    run(["ip", "link", "set", peer, "netns", machine.netns])
    inside = ["ip", "-n", machine.netns]
    run([*inside, "link", "set", peer, "name", GUEST_LINK])
    run([*inside, "addr", "add", f"{machine.address}/{machine.prefix}", "dev", GUEST_LINK])
    run([*inside, "link", "set", "lo", "up"])
    run([*inside, "link", "set", GUEST_LINK, "up"])


def set_link(machine: Machine, up: bool) -> None:
    """Cut or restore a machine's only link (fault injection); its namespace keeps its state."""
    run(["ip", "link", "set", machine.host_link, "up" if up else "down"])


def namespace_pids(netns: str) -> list[int]:
    proc = run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def own_namespaces(layout: Layout) -> list[str]:
    """This testbed's namespaces, whatever count it was created with."""
    prefix = f"k8c-{layout.name}-"
    return sorted(p.name for p in Path("/run/netns").glob(f"{prefix}*"))


def own_links(layout: Layout) -> list[str]:
    """This testbed's bridge and veth ends left in the root namespace."""
    links = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    prefix = f"k8c-{layout.name}-"
    names = [link["ifname"] for link in links]
    return sorted(n for n in names if n == layout.bridge or n.startswith(prefix))


def remove(layout: Layout) -> None:
    """Delete the namespaces (their veth ends go with them), then the leftover links and bridge."""
    for netns in own_namespaces(layout):
        run(["ip", "netns", "delete", netns])
    for link in own_links(layout):
        run(["ip", "link", "delete", link], check=False)
