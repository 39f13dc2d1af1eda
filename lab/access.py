"""How the program reaches its cluster: the one the host bootstrap makes from the machines, or
one that is already there, named by the stack's `kubeconfig` (no host is touched then)."""

from __future__ import annotations

from pathlib import Path

import pulumi

from lab import kubeapi
from lab.bootstrap.resource import HostBootstrap, bootstrap_inputs
from lab.config import LabConfig


def kubeconfig(lab: LabConfig, stack: str) -> pulumi.Output[str]:
    """The cluster's kubeconfig, as a secret: kept out of logs and encrypted in the state."""
    if lab.bootstraps_hosts:
        # Ansible turns the machines into a cluster and hands back its kubeconfig.
        return pulumi.Output.secret(HostBootstrap("hosts", bootstrap_inputs(lab, stack)).kubeconfig)
    assert lab.kubeconfig is not None
    # Checked with the stack (lab.config.checks); inlined, so the provider reads no file of its own.
    given = kubeapi.read(
        Path(lab.kubeconfig), context=lab.kubeconfig_context, allow_commands=lab.allow_kubeconfig_commands
    )
    return pulumi.Output.secret(given.text())
