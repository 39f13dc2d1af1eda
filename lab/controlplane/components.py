"""The control plane's programs and their command lines: etcd, the API server, the
controller-manager, the scheduler and kwok, each on the namespace's loopback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from lab.controlplane.layout import (
    APISERVER_PORT,
    CONTROLLER_MANAGER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    HOST,
    KWOK_PORT,
    POD_RANGE,
    SCHEDULER_PORT,
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_RANGE,
    Layout,
)
from lab.controlplane.nodes import KWOK_ANNOTATION
from lab.controlplane.pki import Pki

# Job pods complete after this long on kwok, not at once: time for a test to play what a real
# build pod writes before the Job's completion lets `pulumi up` read it.
JOB_POD_SECONDS = 5
# A Job pod with this annotation completes after the duration it names ("1h") instead: a build
# still running when the next `up` reads it. kwok computes a stage's delay again whenever the pod
# changes, so removing the annotation lets the pod complete JOB_POD_SECONDS later.
COMPLETE_AFTER_ANNOTATION = "controlplane.k8scifar/complete-after"
# kwok's own chaos stage fails a running pod with this label set to "true"
# (share/kwok/stage/pod/chaos/pod-container-running-failed.yaml); its weight makes kwok choose it
# over the completion stage above.
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]


def etcd(bin_dir: Path, layout: Layout) -> Component:
    client = f"http://{HOST}:{ETCD_CLIENT_PORT}"
    peer = f"http://{HOST}:{ETCD_PEER_PORT}"
    return Component(
        "etcd",
        [
            str(bin_dir / "etcd"),
            "--name=default",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            # Throw-away data: no fsync per write, which on a shared disk costs seconds per `up`.
            "--unsafe-no-fsync",
        ],
    )


def apiserver(bin_dir: Path, layout: Layout, pki: Pki, admission: Path) -> Component:
    return Component(
        "kube-apiserver",
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://{HOST}:{ETCD_CLIENT_PORT}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={APISERVER_PORT}",
            # No endpoints of its own for the `kubernetes` Service: nothing routes to it here.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={layout.state / 'apiserver'}",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.cert('ca')}",
            f"--service-account-key-file={pki.service_account_public}",
            f"--service-account-signing-key-file={pki.key('sa')}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC",
            f"--admission-control-config-file={admission}",
            # As k3s starts it (pkg/daemons/control/server.go): privileged pods are Pod Security's
            # to refuse, not the API server's.
            "--allow-privileged=true",
        ],
    )


def _kubeconfig_flags(layout: Layout) -> list[str]:
    config = str(layout.kubeconfig)
    return [
        f"--kubeconfig={config}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
    ]


def _controller_manager(bin_dir: Path, layout: Layout, pki: Pki) -> Component:
    return Component(
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            *_kubeconfig_flags(layout),
            f"--bind-address={HOST}",
            f"--secure-port={CONTROLLER_MANAGER_PORT}",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki.key('sa')}",
            f"--root-ca-file={pki.cert('ca')}",
            f"--cluster-cidr={POD_RANGE}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            # One kwok process renews every node's lease; on a loaded two-core machine a renewal
            # can come later than upstream's grace (50 s), and the node lifecycle controller would
            # then taint the nodes unreachable and evict the run under test. Nothing here tests it.
            "--node-monitor-grace-period=10m",
        ],
    )


def _scheduler(bin_dir: Path, layout: Layout) -> Component:
    return Component(
        "kube-scheduler",
        [
            str(bin_dir / "kube-scheduler"),
            *_kubeconfig_flags(layout),
            f"--bind-address={HOST}",
            f"--secure-port={SCHEDULER_PORT}",
            "--leader-elect=false",
        ],
    )


def _delayed_job_completion(stages: Path, layout: Layout) -> Path:
    """kwok's own pod-complete stage, held back by JOB_POD_SECONDS or the pod's
    COMPLETE_AFTER_ANNOTATION (a Stage's `spec.delay`, its `durationFrom` read with jq)."""
    stage = yaml.safe_load((stages / "pod" / "fast" / "pod-complete.yaml").read_text())
    stage["spec"]["delay"] = {
        "durationMilliseconds": JOB_POD_SECONDS * 1000,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{COMPLETE_AFTER_ANNOTATION}"]'},
    }
    path = layout.state / "pod-complete.yaml"
    path.write_text(yaml.safe_dump(stage))
    return path


def _kwok(bin_dir: Path, layout: Layout) -> Component:
    stages = bin_dir.parent / "share" / "kwok" / "stage"
    configs = [
        stages / "node" / "fast" / "node-initialize.yaml",
        stages / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
        stages / "pod" / "fast" / "pod-ready.yaml",
        _delayed_job_completion(stages, layout),
        stages / "pod" / "chaos" / "pod-container-running-failed.yaml",
        stages / "pod" / "fast" / "pod-delete.yaml",
    ]
    key, value = KWOK_ANNOTATION
    return Component(
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={layout.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            "--manage-nodes-with-label-selector=",
            f"--cidr={POD_RANGE}",
            f"--node-ip={HOST}",
            f"--server-address={HOST}:{KWOK_PORT}",
            *(f"--config={c}" for c in configs),
        ],
    )


def controllers(bin_dir: Path, layout: Layout, pki: Pki) -> list[Component]:
    """What runs once the API server is ready: the controllers, the scheduler and kwok."""
    return [_controller_manager(bin_dir, layout, pki), _scheduler(bin_dir, layout), _kwok(bin_dir, layout)]
