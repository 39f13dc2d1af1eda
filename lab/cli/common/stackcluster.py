"""The cluster a stack names with `k8scifar:kubeconfig`, asked through lab.kubeapi and the official
client: what `labctl` reads there, where a lab it bootstrapped is asked with the server's own
kubectl over SSH (lab.remote.server_cluster). The cluster's machines are its owner's: nothing here
logs in to one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s_client

from lab import kubeapi
from lab.cli.common.console import CliError
from lab.config import LabConfig
from lab.remote.gpu_nodes import gpu_shortfalls

# An API server that answers at all answers a list within this; longer is a cluster in trouble.
TIMEOUT_SECONDS = 15


class ClusterUnreachable(CliError):
    """The stack's cluster did not answer, or refused its kubeconfig's credentials."""


class Forbidden(ClusterUnreachable):
    """The cluster knows the kubeconfig's user and denies it one read (403)."""


def client(cfg: LabConfig) -> k8s_client.ApiClient:
    """The official client for the stack's kubeconfig, read and checked as `pulumi up` reads it."""
    assert cfg.kubeconfig is not None
    # Checked with the stack already (lab.config.checks); read again here, as every reader does,
    # so a file changed since is refused too.
    return client_for(
        Path(cfg.kubeconfig), cfg.kubeconfig_context, cfg.allow_kubeconfig_commands, "k8scifar:kubeconfig"
    )


def client_for(path: Path, context: str | None, allow_commands: bool, named: str) -> k8s_client.ApiClient:
    """The official client for the kubeconfig at `path`, by lab.kubeapi's rules; CliError, one line
    that starts with `named` (the key or flag that gave the file), where they refuse it."""
    try:
        given = kubeapi.read(path, context=context, allow_commands=allow_commands)
        return kubeapi.api_client(given)
    except kubeapi.KubeconfigRefused as err:
        raise CliError(f"{named}: {err}") from None


def server(api: k8s_client.ApiClient) -> str:
    return str(api.configuration.host)


def read(api: k8s_client.ApiClient, path: str) -> bytes | None:
    """What the API server answers at `path`, or None where it has none (404: an API the cluster
    does not serve, an object that is not there). ClusterUnreachable, one line, for no answer or
    a refusal."""
    try:
        reply = api.call_api(
            path,
            "GET",
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=TIMEOUT_SECONDS,
        )
        return bytes(reply.data)
    except k8s_client.ApiException as err:
        if err.status == 404:
            return None
        # The reason only: the body may quote the request.
        fix = (
            "renew the kubeconfig's credentials (`kubectl get nodes` with it says the same)"
            if err.status == 401
            else "give the kubeconfig's user read access there (get and list)"
        )
        refused = Forbidden if err.status == 403 else ClusterUnreachable
        raise refused(
            f"the API server {server(api)} answered {err.status} {err.reason} to GET {path}; {fix}"
        ) from None
    # urllib3's HTTPError: refused, reset, timed out or a TLS failure (its reason names which).
    except (urllib3.exceptions.HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise ClusterUnreachable(
            f"the API server {server(api)} does not answer ({type(reason).__name__}); check that the"
            " cluster runs and that this machine reaches the kubeconfig's server"
        ) from None


def get(api: k8s_client.ApiClient, path: str) -> dict[str, Any] | None:
    """The JSON object the API server answers at `path`, or None where it has none (as `read`)."""
    data = read(api, path)
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        raise ClusterUnreachable(f"the API server {server(api)} answered GET {path} with no JSON") from None
    if not isinstance(found, dict):
        raise ClusterUnreachable(f"the API server {server(api)} answered GET {path} with no JSON object")
    return found


def items(api: k8s_client.ApiClient, path: str) -> dict[str, Any]:
    """The list at `path`, as `kubectl get -o json` prints it: {"items": [...]}, empty for an API
    the cluster does not serve."""
    return get(api, path) or {"items": []}


def gpu_lines(cfg: LabConfig) -> list[str]:
    """One line per node whose allocatable GPUs are not the stack's, as the cluster's API lists the
    nodes (lab.remote.gpu_nodes words them); none on CPU labs."""
    if not cfg.has_gpus:
        return []
    with client(cfg) as api:
        return gpu_shortfalls(cfg, items(api, "/api/v1/nodes"))
