"""The secrets nodes join the cluster with, drawn once per lab and kept as secret outputs.

k3s and kubeadm want different shapes:

- k3s: the server `token` is a plain secret (it also encrypts k3s's bootstrap data, so it never
  changes), and a separate `agent-token` is all an agent gets. A token in kubeadm's bootstrap
  shape would make the k3s server exit: k3s parses it as a bootstrap token, finds no
  username:password in it and refuses it (k3s pkg/util/token.go NormalizeToken,
  pkg/clientaccess/token.go parseToken). Agents join with the secure form
  `K10<sha256 of the server CA>::node:<agent token>`, composed on the nodes once the server's CA
  exists (roles/k3s), so an agent checks the CA before it hands over its secret.
- kubeadm: a bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}` (k8s.io/cluster-bootstrap token/api
  BootstrapTokenPattern), created from the kubeadm configuration file, never a command line.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

# Bytes of randomness in each k3s secret; hex keeps it free of ':' and of an upper-case "K10"
# prefix, either of which k3s would parse as token structure.
K3S_TOKEN_BYTES = 32
_BOOTSTRAP_ALPHABET = string.ascii_lowercase + string.digits
# The playbook variable that carries each token (all secret: passed through the runner's
# private variables file, used only in `no_log` tasks).
PLAYBOOK_VARIABLES = {
    "k3s_token": "lab_k3s_token",
    "k3s_agent_token": "lab_k3s_agent_token",
    "kubeadm_token": "lab_kubeadm_token",
}


def new_kubeadm_token() -> str:
    """A random bootstrap token in kubeadm's `[a-z0-9]{6}.[a-z0-9]{16}` shape."""

    def part(length: int) -> str:
        return "".join(secrets.choice(_BOOTSTRAP_ALPHABET) for _ in range(length))

    return f"{part(6)}.{part(16)}"


def new_tokens() -> dict[str, str]:
    """Fresh tokens for a new lab: k3s server and agent secrets, and a kubeadm bootstrap token."""
    return {
        "k3s_token": secrets.token_hex(K3S_TOKEN_BYTES),
        "k3s_agent_token": secrets.token_hex(K3S_TOKEN_BYTES),
        "kubeadm_token": new_kubeadm_token(),
    }


def kept_tokens(stored: Any) -> dict[str, str]:
    """The tokens an update keeps: the stored ones, or fresh ones for a lab made before they existed.

    Older labs stored one kubeadm-shaped string, which k3s never accepted and which kubeadm
    recreates when it is missing: replacing it loses nothing.
    """
    if isinstance(stored, dict) and set(stored) == set(PLAYBOOK_VARIABLES):
        return dict(stored)
    return new_tokens()


def playbook_secrets(tokens: dict[str, str]) -> dict[str, str]:
    """The secret variables site.yml gets for `tokens`."""
    return {PLAYBOOK_VARIABLES[name]: value for name, value in tokens.items()}


__all__ = ["PLAYBOOK_VARIABLES", "kept_tokens", "new_kubeadm_token", "new_tokens", "playbook_secrets"]
