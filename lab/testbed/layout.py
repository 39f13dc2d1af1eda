"""Where a testbed lives: its machines' names and addresses, links, namespaces and files.

Everything the testbed creates is named here, so `down` can find and remove every piece from
the name alone, even when `up` failed half-way and wrote no record.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

# Root-only state (keys, machine trees) and caches kept between testbeds (base tree, packages).
STATE_ROOT = Path(os.environ.get("LAB_TESTBED_STATE", "/var/lib/k8scifar-testbed"))
CACHE_ROOT = Path(os.environ.get("LAB_TESTBED_CACHE", "/var/cache/k8scifar-testbed"))
NSPAWN_RUNTIME = Path("/run/systemd/nspawn")

DEFAULT_NAME = "lab"
DEFAULT_SUBNET = "10.77.0.0/24"
FIRST_HOST = 11  # machines take .11, .12, ...; the host side of the bridge takes .1
APT_PROXY_PORT = 3199  # not 3142: a system apt-cacher-ng may hold that on every address
USER = "lab"
# Machines of one testbed: their addresses and link names carry a one-digit index.
MAX_MACHINES = 9


@dataclass(frozen=True)
class Machine:
    """One test machine: a Debian tree booted by systemd-nspawn in its own network namespace."""

    name: str
    address: str
    prefix: int
    netns: str
    host_link: str  # veth end left on the bridge
    root: Path

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns


@dataclass(frozen=True)
class Layout:
    """The names and paths of testbed `name` with `count` machines on `subnet`."""

    name: str = DEFAULT_NAME
    count: int = 2
    subnet: str = DEFAULT_SUBNET

    def __post_init__(self) -> None:
        if not self.name.isalnum() or len(self.name) > 6:
            raise ValueError(f"testbed name {self.name!r} must be 1 to 6 letters or digits")
        if not 1 <= self.count <= MAX_MACHINES:
            raise ValueError(f"--count {self.count} must be between 1 and {MAX_MACHINES}")
        net = ipaddress.ip_network(self.subnet)
        if net.version != 4 or net.prefixlen > 24 or not net.is_private:
            raise ValueError(f"subnet {self.subnet} must be a private IPv4 network of /24 or larger")

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def gateway(self) -> str:
        """The host's address on the bridge: the apt proxy listens here."""
        return str(self.network.network_address + 1)

    @property
    def bridge(self) -> str:
        return f"k8c-{self.name}"

    @property
    def state(self) -> Path:
        return STATE_ROOT / self.name

    @property
    def key(self) -> Path:
        return self.state / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """The machines' host keys, pinned when their trees are made: fresh on every `up`, so
        they are kept here, never in a user's ~/.ssh/known_hosts."""
        return self.state / "known_hosts"

    @property
    def apt_proxy(self) -> str:
        return f"http://{self.gateway}:{APT_PROXY_PORT}"

    @property
    def machines(self) -> list[Machine]:
        return [self.machine(i) for i in range(1, self.count + 1)]

    def machine(self, index: int) -> Machine:
        return Machine(
            name=f"{self.name}-node{index}",
            address=str(self.network.network_address + FIRST_HOST - 1 + index),
            prefix=self.network.prefixlen,
            netns=f"k8c-{self.name}-{index}",
            host_link=f"k8c-{self.name}-{index}",
            root=self.state / "machines" / f"node{index}",
        )
