"""Hand a finished run's GPUs back: rank 0 scales its own StatefulSet to zero through the API.

Standard library only (urllib, ssl): the pod's service-account token and the cluster's CA are
mounted at the standard place, and the pod's service account may do one thing, patch the `scale`
subresource of this one StatefulSet (a Role with `resourceNames`). The StatefulSet's name is the
pod's name without its `-<ordinal>`, which is how the StatefulSet controller names its pods.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from trainer import contract
from trainer.errors import TrainerError

# Where the kubelet mounts the service account's token, the cluster CA and the namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The API server's address the kubelet gives every pod, and the variable that replaces the mount point.
HOST_VARIABLE, PORT_VARIABLE = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
ACCOUNT_DIR_VARIABLE = "LAB_SERVICE_ACCOUNT_DIR"
# The request's field manager. The API server records a scale to zero under no manager at all,
# which is how the program tells a run its rank 0 handed back (lab/cluster/training.py handed_back).
FIELD_MANAGER = "k8scifar-trainer"
TIMEOUT_SECONDS = 30


class HandOffError(TrainerError):
    """The scale-down could not be made; the message says why in one line."""


@dataclass(frozen=True)
class ApiServer:
    url: str
    token: str
    ca_file: Path
    namespace: str

    @classmethod
    def in_cluster(cls, env: Mapping[str, str]) -> ApiServer:
        """The API server as a pod sees it (ACCOUNT_DIR_VARIABLE replaces the mount point)."""
        host, port = env.get(HOST_VARIABLE, ""), env.get(PORT_VARIABLE, "")
        if not host or not port:
            raise HandOffError(f"{HOST_VARIABLE}/PORT are not set: not running in a pod")
        account = Path(env.get(ACCOUNT_DIR_VARIABLE, str(SERVICE_ACCOUNT_DIR)))
        try:
            token = (account / "token").read_text().strip()
            namespace = (account / "namespace").read_text().strip()
        except OSError as err:
            raise HandOffError(f"no service-account token under {account} ({err.strerror})") from None
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token, account / "ca.crt", namespace)


def statefulset_of(pod_name: str) -> str:
    match = re.fullmatch(r"(.+)-[0-9]+", pod_name)
    if match is None:
        raise HandOffError(f"POD_NAME={pod_name!r} is not a StatefulSet pod's name (<name>-<ordinal>)")
    return match.group(1)


def scale_request(api: ApiServer, statefulset: str, replicas: int = 0) -> urllib.request.Request:
    """A merge patch of the StatefulSet's scale subresource to `replicas`."""
    path = (
        f"/apis/apps/v1/namespaces/{quote(api.namespace)}/statefulsets/{quote(statefulset)}/scale"
        f"?fieldManager={FIELD_MANAGER}"
    )
    return urllib.request.Request(
        api.url + path,
        data=json.dumps({"spec": {"replicas": replicas}}).encode(),
        method="PATCH",
        headers={
            "Authorization": f"Bearer {api.token}",
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
    )


def release(env: Mapping[str, str] = os.environ) -> str:
    """Scale this pod's StatefulSet to zero; returns what was done, raises HandOffError otherwise."""
    statefulset = statefulset_of(env.get(contract.POD_NAME, ""))
    api = ApiServer.in_cluster(env)
    request = scale_request(api, statefulset)
    try:
        context = ssl.create_default_context(cafile=str(api.ca_file))
        with urllib.request.urlopen(request, context=context, timeout=TIMEOUT_SECONDS) as response:
            response.read()
    except urllib.error.HTTPError as err:
        raise HandOffError(
            f"the API server refused to scale statefulset {api.namespace}/{statefulset} to 0:"
            f" HTTP {err.code} {err.reason}"
        ) from None
    except (urllib.error.URLError, OSError, ssl.SSLError) as err:
        reason = getattr(err, "reason", err)
        raise HandOffError(f"could not reach the API server at {api.url}: {reason}") from None
    return f"statefulset {api.namespace}/{statefulset} scaled to 0: its GPUs are free"
