"""The three parts of a lab the validation suite checks, which a run may name (`labctl validate
--only`), each by who makes it: the machines (the bootstrap's roles), Kubernetes on them (the
bootstrap, or the cluster's owner), and what `pulumi up` declares in that cluster. Kubernetes stands
before the program's objects do (after the bootstrap alone, or on a stack whose `pulumi up`
failed inside the cluster), so each part can be asked of alone."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Part(StrEnum):
    HOSTS = "hosts"
    CLUSTER = "cluster"
    WORKLOAD = "workload"


ALL = frozenset(Part)
# What each part checks, as `--only`'s help says it.
DESCRIPTIONS = {
    Part.HOSTS: "the machines, over SSH: OS, kernel settings, services, ports, GPUs, the export",
    Part.CLUSTER: "Kubernetes itself: its nodes, its own pods in kube-system, its DNS",
    Part.WORKLOAD: "what `pulumi up` declares in it: GPUs served, claims, registry, training ranks",
}
NO_PARTS = "parts: name at least one part (or None, for all)"
# Each part's module in lab/validation/suite.
MODULES = {Part.HOSTS: "test_host.py", Part.CLUSTER: "test_cluster.py", Part.WORKLOAD: "test_workload.py"}
# The module of the checks `--after-reset` runs instead of the lab's.
AFTER_RESET_MODULE = "test_reset.py"


def ordered(parts: Iterable[Part]) -> list[Part]:
    """`parts` in the order a lab is checked: hosts, cluster, workload."""
    given = set(parts)
    return [p for p in Part if p in given]


def parse_parts(text: str) -> frozenset[Part]:
    """`hosts,cluster` as the parts it names; ValueError naming the word that is not one."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in {p.value for p in Part}]
    if unknown or not words:
        raise ValueError(
            f"{', '.join(unknown) or repr(text)} is not a part to validate; name one or more of"
            f" {', '.join(p.value for p in Part)}, separated by commas (such as hosts,cluster)"
        )
    return frozenset(Part(w) for w in words)
