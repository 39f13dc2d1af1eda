"""How k3s and kubeadm read the join secrets the lab hands them, restated from their source.

Each function returns what the daemon would object to, or None when it takes the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# k8s.io/cluster-bootstrap token/api: BootstrapTokenPattern, the shape of a kubeadm bootstrap
# token; k3s's pkg/kubeadm NewBootstrapTokenString uses the same pattern.
BOOTSTRAP_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
# k3s pkg/clientaccess/token.go: tokenPrefix and caHashLength (a hex sha256).
K3S_PREFIX = "K10"
K3S_CA_HASH_LENGTH = 64
# The user k3s stores the agent token under (pkg/daemons/control/deps/deps.go genUsers/readTokens).
K3S_AGENT_USER = "node"
# pkg/util/token.go NormalizeToken's error, with which the k3s server exits.
NORMALIZE_ERROR = (
    "failed to normalize server token; must be in format K10<CA-HASH>::<USERNAME>:<PASSWORD> or <PASSWORD>"
)


@dataclass(frozen=True)
class K3sToken:
    """A token as k3s's parseToken splits it."""

    ca_hash: str
    username: str = ""
    password: str = ""
    bootstrap: str = ""


def parse_k3s_token(token: str) -> K3sToken | str:
    """k3s pkg/clientaccess/token.go parseToken: the parts of `token`, or k3s's error."""
    if not token:
        return "token must not be empty"
    if not token.startswith(K3S_PREFIX):
        # A bare secret or bootstrap token becomes a K10 token with an empty CA hash.
        token = K3S_PREFIX + ("::" if BOOTSTRAP_TOKEN.match(token) else ":::") + token
    ca_hash, separator, creds = token[len(K3S_PREFIX) :].partition("::")
    if not separator:
        ca_hash, creds = "", ca_hash
    elif ca_hash and len(ca_hash) != K3S_CA_HASH_LENGTH:
        return "invalid token CA hash length"
    if BOOTSTRAP_TOKEN.match(creds):
        return K3sToken(ca_hash, bootstrap=creds)
    username, separator, password = creds.partition(":")
    if not separator or not password:
        return "invalid token format"
    return K3sToken(ca_hash, username=username, password=password)


def k3s_server_token_problem(token: str) -> str | None:
    """k3s pkg/util/token.go NormalizeToken: the server's `token` must be `<password>` or
    `K10<CA-HASH>::<USERNAME>:<PASSWORD>`; a bootstrap-token shape has no password and is refused."""
    parsed = parse_k3s_token(token)
    if isinstance(parsed, str) or parsed.bootstrap:
        return NORMALIZE_ERROR
    return None


def k3s_agent_token_problem(token: str) -> str | None:
    """The `agent-token` a server is given: k3s stores it as the password of user "node"
    (deps.go getNodePass) and agents present it as K10<hash>::node:<token>, which must parse
    back to exactly that user and password."""
    parsed = parse_k3s_token(f"{K3S_PREFIX}::{K3S_AGENT_USER}:{token}")
    if isinstance(parsed, str):
        return parsed
    if parsed.username != K3S_AGENT_USER or parsed.password != token:
        return f"k3s would read node:<token> as user {parsed.username!r}"
    return None


def k3s_agent_join_problem(token: str, ca_hash: str, agent_token: str) -> str | None:
    """An agent's `token`: the secure form pinning the server CA (docs.k3s.io/cli/token, "Secure"),
    carrying the agent credentials the server knows, never the server token."""
    parsed = parse_k3s_token(token)
    if isinstance(parsed, str):
        return parsed
    if not token.startswith(K3S_PREFIX) or parsed.ca_hash != ca_hash:
        return "the agent token does not pin the server CA (K10<sha256 of the CA>::...)"
    if (parsed.username, parsed.password) != (K3S_AGENT_USER, agent_token):
        return "the agent token does not carry node:<agent-token>"
    return None


def kubeadm_token_problem(token: str) -> str | None:
    """kubeadm's bootstrap tokens must match BootstrapTokenPattern."""
    return None if BOOTSTRAP_TOKEN.match(token) else f"not a bootstrap token ({BOOTSTRAP_TOKEN.pattern})"
