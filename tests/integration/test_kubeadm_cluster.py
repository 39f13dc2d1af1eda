"""The lab's kubeadm role installs a real two-node Kubernetes on the test machines, offline, and
reset.yml takes it away again, through the runner `pulumi up` and `destroy` use.

Everything comes from files the stack names, as an operator of air-gapped machines gives them
(`k8scifar:airgap.kubeadm`, docs/hosts.md "Offline kubeadm"): kubeadm, the kubelet and kubectl
from the pinned tools (one `kube` program under three names), the CNI plugins packed as their
release is, and image archives made on this machine from the tools' programs
(lab/testbed/images). What the machines need that no user's node does comes from their own
settings file (lab/machine_settings.py, written by lab.testbed): cgroupfs, the host's swap, the
pause of the project's own, kube-proxy's conntrack table left alone and the machines' own pod
network (lab/testbed/pod_network.py, so no flannel). Then a pod on each machine reaches a
Service served from the other machine, found by its cluster name, the validation suite's checks
of the machines and of the cluster pass, and reset.yml leaves each machine as it was, file for file.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab import testbed
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import LabConfig, load_stack, parse_config
from lab.config.loading import read_stack_values, stack_file
from lab.testbed import pod_network, tools
from lab.testbed.images import build as build_images
from lab.testbed.images import names
from lab.validation.runner import run_suite, write_inventory
from lab.validation.suite import test_cluster, test_workload
from tests.support import machine_state
from tests.support.image_inputs import netfilter_tree
from tests.support.labctl import labctl
from tests.support.machine_state import STACK
from tests.support.tiers import costly

KUBERNETES = names.KUBERNETES_VERSION.removeprefix("v")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
ADMIN = "/etc/kubernetes/admin.conf"
NAMESPACE = "reach"
PROBE_TIMEOUT_S = 120
# The suite's checks of the cluster and of the lab's workload in it, by name.
CLUSTER = {name for name in vars(test_cluster) if name.startswith("test_")}
WORKLOAD = {name for name in vars(test_workload) if name.startswith("test_")}
TRAINING = "test_training_ranks_run_and_formed_their_group"
READY_TIMEOUT_S = 120
# A manifest a kubeadm stack must name (the flannel DaemonSet the role would point at the nodes'
# interfaces); on these machines, whose pod network is their own, the role applies none.
UNUSED_FLANNEL = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: kube-flannel}
"""


@pytest.fixture(scope="module")
def offline_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`airgap.kubeadm` as an operator writes it, every file made here from the pinned tools."""
    folder = tmp_path_factory.mktemp("offline")
    folder.chmod(0o755)  # the files must be readable by all, as a release's are
    bin_dir = tools.install_dir() / "bin"
    kube = (bin_dir / "kube").resolve()
    plugins = folder / "cni-plugins-linux-amd64.tgz"
    with tarfile.open(plugins, "w:gz") as archive:
        for name in CNI_PLUGINS:
            archive.add((bin_dir / name).resolve(), arcname=f"./{name}")
    images = build_images(bin_dir, netfilter_tree(), folder / "images")
    manifest = folder / "kube-flannel.yml"
    manifest.write_text(UNUSED_FLANNEL)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return {
        "kubeadm": str(kube),
        "kubelet": str(kube),
        "kubectl": str(kube),
        "cniPlugins": str(plugins),
        "images": [str(image.archive) for image in images],
        "flannelManifest": str(manifest),
        "corednsTag": names.COREDNS_TAG,
        "etcdTag": names.ETCD_TAG,
    }


@pytest.fixture(scope="module")
def stacks_dir(tmp_path_factory: pytest.TempPathFactory, offline_files: dict[str, Any]) -> Path:
    """The testbed stack with Kubernetes installed: kubeadm offline instead of the skipped k3s."""
    values = read_stack_values(stack_file(STACK))
    values["distribution"] = "kubeadm"
    values["kubernetesVersion"] = KUBERNETES
    values["airgap"] = {"kubeadm": offline_files}
    values["skip"] = {k: v for k, v in values["skip"].items() if k != "kubernetesInstall"}
    folder = tmp_path_factory.mktemp("stacks")
    config = {"config": {f"k8scifar:{key}": value for key, value in values.items()}}
    stack_file(STACK, folder).write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


@pytest.fixture(scope="module")
def kubeadm_lab(stacks_dir: Path) -> LabConfig:
    path = stack_file(STACK, stacks_dir)
    return parse_config(read_stack_values(path), source=str(path))


@pytest.fixture(scope="module")
def before_the_lab(machines: testbed.Testbed) -> Iterator[dict[str, machine_state.Inventory]]:
    """The owner's state, a podman network and its firewall rules among it, before the lab came."""
    found = {}
    for machine in machines.layout.machines:
        machine_state.root_shell(machines, machine, machine_state.PLANT + machine_state.OWNER_HAS_PODMAN)
        found[machine.name] = machine_state.inventory(machines, machine)
    yield found
    for machine in machines.layout.machines:
        machine_state.root_shell(machines, machine, machine_state.OWNER_DROPS_PODMAN)


@pytest.fixture(scope="module")
@costly(
    "a real two-node cluster: on two cores its etcd and API server miss their liveness deadlines"
    " beside the control plane tier's (API server restarted, Kueue's pods late), so the two take turns",
    shares="controlplane",
)
def cluster(
    machines: testbed.Testbed, kubeadm_lab: LabConfig, before_the_lab: dict[str, machine_state.Inventory]
) -> dict[str, Any]:
    """site.yml's run, as `pulumi up` creates the bootstrap resource."""
    outs = HostBootstrapProvider().create(bootstrap_inputs(kubeadm_lab, STACK)).outs
    assert outs is not None
    return outs


def _kubectl(machines: testbed.Testbed, *args: str, stdin: str = "") -> str:
    server = machines.layout.machines[0]
    command = shlex.join(["kubectl", "--kubeconfig", ADMIN, *args])
    if stdin:
        command = f"{command} <<'MANIFEST'\n{stdin}MANIFEST\n"
    return machine_state.root_shell(machines, server, command)


def test_both_machines_are_ready_nodes_of_the_pinned_release(
    cluster: dict[str, Any], machines: testbed.Testbed, kubeadm_lab: LabConfig
) -> None:
    # A joined kubelet reports Ready once it has posted its status with the pod network in place.
    _kubectl(machines, "wait", "--for=condition=Ready", "node", "--all", f"--timeout={READY_TIMEOUT_S}s")
    nodes = json.loads(_kubectl(machines, "get", "nodes", "-o", "json"))["items"]
    found = {n["metadata"]["name"]: n for n in nodes}
    assert set(found) == {n.name for n in kubeadm_lab.nodes}
    for name, node in found.items():
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", f"{name} is not Ready"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == names.KUBERNETES_VERSION
    pods = json.loads(_kubectl(machines, "get", "pods", "-n", "kube-system", "-o", "json"))["items"]
    running = {s["image"] for p in pods for s in p["status"].get("containerStatuses", []) if s["ready"]}
    assert {names.ETCD, names.COREDNS, names.KUBE_APISERVER, names.KUBE_PROXY} <= running
    namespaces = _kubectl(machines, "get", "namespaces", "-o", "name").split()
    assert "namespace/kube-flannel" not in namespaces, (
        "flannel applied on machines with their own pod network"
    )


def _reach(server: str, client: str) -> str:
    """etcd serving on `server` behind a Service; a pod on `client` asks it for its health by the
    Service's cluster name (CoreDNS) through its virtual address (kube-proxy's rules)."""
    name = f"from-{client}"
    secure = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    serve = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"serve-{server}", "namespace": NAMESPACE, "labels": {"serves": server}},
        "spec": {
            "nodeName": server,
            "containers": [
                {
                    "name": "etcd",
                    "image": names.ETCD,
                    "command": [
                        "/usr/local/bin/etcd",
                        "--data-dir=/data/etcd",
                        "--listen-client-urls=http://0.0.0.0:2379",
                        "--advertise-client-urls=http://127.0.0.1:2379",
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": secure,
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"on-{server}", "namespace": NAMESPACE},
        "spec": {"selector": {"serves": server}, "ports": [{"port": 2379}]},
    }
    ask = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": client,
            "restartPolicy": "OnFailure",  # until the server's pod answers
            "containers": [
                {
                    "name": "ask",
                    "image": names.KUBE_PROXY,  # it holds kubectl: the one `kube` program
                    "command": [
                        "/usr/local/bin/kube",
                        "kubectl",
                        f"--server=http://on-{server}.{NAMESPACE}.svc.cluster.local:2379",
                        "get",
                        "--raw=/health",
                    ],
                    "securityContext": secure,
                }
            ],
        },
    }
    return "".join(f"---\n{json.dumps(doc)}\n" for doc in (serve, service, ask))


def test_a_pod_on_each_machine_reaches_a_service_on_the_other_by_name(
    cluster: dict[str, Any], machines: testbed.Testbed, kubeadm_lab: LabConfig
) -> None:
    first, second = (n.name for n in kubeadm_lab.nodes)
    _kubectl(machines, "create", "namespace", NAMESPACE)
    _kubectl(machines, "apply", "-f", "-", stdin=_reach(first, second) + _reach(second, first))
    for client in (first, second):
        _kubectl(
            machines, "wait", "-n", NAMESPACE, "--for=jsonpath={.status.phase}=Succeeded",
            f"pod/from-{client}", f"--timeout={PROBE_TIMEOUT_S}s",
        )  # fmt: skip
        answer = json.loads(_kubectl(machines, "logs", "-n", NAMESPACE, f"pod/from-{client}"))
        assert answer["health"] == "true", f"the pod on {client} got {answer}"
    pods = json.loads(_kubectl(machines, "get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    # Where each pod ran, as its node reported it: the node's address, an address of its pod /24.
    by_address = {m.address: m for m in machines.layout.machines}
    for pod in pods:
        machine = by_address[pod["status"]["hostIP"]]
        assert pod["spec"]["nodeName"] == machine.name
        subnet = pod_network.pod_subnet(machines.layout, machine)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in subnet, pod["metadata"]["name"]


def test_validation_passes_the_hosts_and_cluster_and_finds_no_workload(
    cluster: dict[str, Any], kubeadm_lab: LabConfig, stacks_dir: Path
) -> None:
    """The whole suite, as `labctl validate` runs it: every check of the machines and of the
    cluster passes; the workload's checks run against this cluster and each names what `pulumi up`
    has not declared here, but those no GPU can apply to."""
    outcomes = run_suite(STACK, write_inventory(kubeadm_lab, STACK), stacks_dir=stacks_dir)
    failed = [str(o) for o in outcomes if o.status in {"failed", "error"} and o.check not in WORKLOAD]
    assert not failed, "\n".join(failed)
    # Checks in the cluster run once, through kubectl on the server (the suite's conftest).
    server = kubeadm_lab.server.name
    on_server = {o.check: (o.status, o.detail) for o in outcomes if o.host == server}
    assert {check: on_server[check] for check in CLUSTER} == {
        "test_configured_nodes_are_ready": ("passed", ""),
        "test_system_pods_run": ("passed", ""),
    }
    no_gpu = ("skipped", "no node of this lab has a GPU configured")
    no_claims = "the lab's namespace has no PersistentVolumeClaims"
    assert {check: on_server[check] for check in WORKLOAD - {TRAINING}} == {
        "test_gpus_are_allocatable_as_configured": no_gpu,
        "test_device_plugin_runs_on_every_gpu_node": no_gpu,
        "test_gpu_smoke_pod_runs_nvidia_smi": no_gpu,
        "test_claims_are_bound": ("failed", no_claims),
        "test_registry_answers": ("failed", "registry: 0 of 1 pods running and ready"),
    }
    assert on_server[TRAINING][0] == "failed"
    # Every host check that skips cannot apply to these machines, and says why.
    reasons = {o.detail for o in outcomes if o.status == "skipped" and o.check not in CLUSTER | WORKLOAD}
    assert reasons and all(reasons), "the machines' clock, NFS server and GPUs skip with a reason"
    assert not any("kubernetesInstall" in reason for reason in reasons), reasons


def test_the_bootstraps_kubeconfig_serves_init_and_validate_through_the_api(
    cluster: dict[str, Any], kubeadm_lab: LabConfig, tmp_path: Path
) -> None:
    """The kubeconfig the bootstrap hands `pulumi up` reaches the cluster from the operator's
    machine, and an operator who names it as an existing cluster's (`labctl init --kubeconfig`,
    then `labctl validate`) gets the nodes as the API server reports them and the cluster's checks
    through that API, no machine logged in to."""
    given = tmp_path / "kubeconfig"
    given.touch(mode=0o600)
    given.write_text(cluster["kubeconfig"])
    stacks = tmp_path / "stacks"
    where = ("--stack", "given", "--stacks-dir", str(stacks))
    done = labctl("init", *where, "--kubeconfig", given)
    assert done.code == 0, (done.out, done.err)
    found = load_stack("given", stacks)
    assert [(n.name, n.address, n.role) for n in found.nodes] == [
        (n.name, n.address, n.role) for n in kubeadm_lab.nodes
    ]
    assert found.kubernetes_version == KUBERNETES
    done = labctl("validate", *where, "--only", "cluster")
    assert done.code == 0, (done.out, done.err)
    assert "PASS  configured nodes are ready: cluster" in done.out
    assert "PASS  system pods run: cluster" in done.out


def test_the_cluster_left_what_reset_has_to_remove(
    cluster: dict[str, Any], machines: testbed.Testbed
) -> None:
    """What kubeadm reset leaves to the lab's reset, there for real: or the comparison below
    would hold on machines the cluster never touched."""
    for machine in machines.layout.machines:
        state = machine_state.inventory(machines, machine)
        paths = state.sections["cluster paths"]
        assert any(p.startswith("/var/lib/containerd/io.containerd.content.v1.content/blobs/") for p in paths)
        assert any(p.startswith("/var/log/pods/") for p in paths)
        assert any(p.endswith("/kubepods") for p in paths), "the kubelet's cgroupfs pod cgroups"
        assert any(line.split()[2] == "overlay" for line in state.sections["mounts"])
        assert any(":KUBE-SERVICES" in line for line in state.sections["firewall"]), "kube-proxy's rules"


def test_reset_leaves_the_machines_as_they_were(
    cluster: dict[str, Any],
    machines: testbed.Testbed,
    kubeadm_lab: LabConfig,
    before_the_lab: dict[str, machine_state.Inventory],
) -> None:
    HostBootstrapProvider().delete("hosts-testbed", cluster)
    problems = []
    for machine in machines.layout.machines:
        after = machine_state.inventory(machines, machine)
        changes = before_the_lab[machine.name].changes(after, ignore=machine_state.REWRITTEN_BY_RESET)
        problems += [f"{machine.name}: {change}" for change in changes]
    assert problems == [], "\n".join(problems)
