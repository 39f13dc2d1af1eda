"""The right a finished run needs to free its GPUs: scale its own StatefulSet, nothing else.

Rank 0 scales the training StatefulSet to zero when the run is complete (`trainer/pod/handoff.py`).
Its pods run as the ServiceAccount declared here, bound to a Role that allows `patch` on the
`scale` subresource of that one StatefulSet (`resourceNames`), so a compromised rank can change
the replica count of the run it belongs to and can neither read nor touch anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_kubernetes as k8s

from lab.cluster.scope import Scope

# Kubernetes RBAC names a subresource as <resource>/<subresource>
# (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources).
SCALE_RESOURCE = "statefulsets/scale"


@dataclass(frozen=True)
class ReleaseRights:
    service_account: k8s.core.v1.ServiceAccount
    role: k8s.rbac.v1.Role
    binding: k8s.rbac.v1.RoleBinding

    @property
    def resources(self) -> list[k8s.core.v1.ServiceAccount | k8s.rbac.v1.Role | k8s.rbac.v1.RoleBinding]:
        return [self.service_account, self.role, self.binding]


def declare_release_rights(scope: Scope, statefulset: str, app: str, component: str) -> ReleaseRights:
    name = f"{statefulset}-release"
    account = k8s.core.v1.ServiceAccount(
        "trainer-release", metadata=scope.metadata(statefulset, app, component), opts=scope.opts()
    )
    role = k8s.rbac.v1.Role(
        "trainer-release",
        metadata=scope.metadata(name, app, component),
        rules=[
            {
                "apiGroups": ["apps"],
                "resources": [SCALE_RESOURCE],
                "resourceNames": [statefulset],
                "verbs": ["patch"],
            }
        ],
        opts=scope.opts(),
    )
    binding = k8s.rbac.v1.RoleBinding(
        "trainer-release",
        metadata=scope.metadata(name, app, component),
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.metadata.name},
        subjects=[{"kind": "ServiceAccount", "name": account.metadata.name, "namespace": scope.namespace}],
        opts=scope.opts(),
    )
    return ReleaseRights(account, role, binding)
