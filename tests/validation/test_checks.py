"""Each validation check holds on a healthy lab's output and fails, saying why, on a broken one."""

from __future__ import annotations

from typing import Any

import pytest

from lab.config import load_stack
from lab.config.world import World
from lab.remote.gpu_nodes import gpu_shortfalls
from lab.validation.suite import checks

EXPORT = "/srv/k8scifar"
ALLOWED = ["10.77.0.11/32", "10.77.0.12/32"]
ENDPOINT = "10.77.0.11:30500"


def test_export_limited_to_the_lab_holds() -> None:
    exports = f"# lab\n{EXPORT} 10.77.0.11/32(rw,sync) \\\n  10.77.0.12(rw,sync)\n/other *(ro)\n"
    assert checks.export_problems(exports, EXPORT, ALLOWED) == []


@pytest.mark.parametrize(
    ("exports", "problem"),
    [
        ("/other 10.77.0.11(rw)\n", "is not exported"),
        (f"# {EXPORT} 10.77.0.11(rw)\n", "is not exported"),
        (f"{EXPORT}\n", "exported to every host"),
        (f"{EXPORT} *(rw)\n", "not an address or CIDR"),
        (f"{EXPORT} 10.77.0.0/24(rw)\n", "outside"),
        (f"{EXPORT} 10.77.0.11(rw) 192.168.1.5(rw)\n", "192.168.1.5, outside"),
    ],
)
def test_export_check_fails_on_a_missing_or_open_export(exports: str, problem: str) -> None:
    problems = checks.export_problems(exports, EXPORT, ALLOWED)
    assert problems and problem in problems[0]


def test_k3s_mirror_check() -> None:
    good = f'mirrors:\n  "{ENDPOINT}":\n    endpoint: ["http://{ENDPOINT}"]\n'
    assert checks.k3s_mirror_problems(good, ENDPOINT) == []
    assert "no mirror" in checks.k3s_mirror_problems("mirrors: {}\n", ENDPOINT)[0]
    https = good.replace("http://", "https://")
    assert "does not list" in checks.k3s_mirror_problems(https, ENDPOINT)[0]
    assert "not valid YAML" in checks.k3s_mirror_problems("mirrors: [\n", ENDPOINT)[0]


def test_containerd_hosts_check() -> None:
    good = f'server = "http://{ENDPOINT}"\n[host."http://{ENDPOINT}"]\n  capabilities = ["pull"]\n'
    assert checks.containerd_hosts_problems(good, ENDPOINT) == []
    assert checks.containerd_hosts_problems('server = "https://docker.io"\n', ENDPOINT)


def test_sysctl_config_reads_files_in_order_and_the_last_value_wins() -> None:
    text = "# lab\nnet.ipv4.ip_forward = 0\n; old\n-net/ipv4/ip_forward=1\nkernel.x\n"
    assert checks.sysctl_config(text) == {"net.ipv4.ip_forward": "1"}
    assert checks.sysctl_problems(checks.sysctl_config("net.ipv4.ip_forward = 0\n"), checks.SYSCTLS)


def test_sysctl_check_names_wrong_and_absent_settings() -> None:
    assert checks.sysctl_problems({"net.ipv4.ip_forward": "1"}, checks.SYSCTLS) == []
    assert checks.sysctl_problems({"net.ipv4.ip_forward": "0"}, checks.SYSCTLS) == [
        "net.ipv4.ip_forward is 0, needs 1"
    ]
    assert checks.sysctl_problems({}, checks.SYSCTLS) == ["net.ipv4.ip_forward is absent, needs 1"]


def _node(name: str, ready: str = "True", gpus: int | None = None) -> dict[str, Any]:
    allocatable = {"cpu": "2"} | ({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": allocatable},
    }


def test_node_check() -> None:
    nodes = {"items": [_node("a"), _node("b")]}
    assert checks.node_problems(nodes, ["a", "b"]) == []
    broken = {"items": [_node("a", ready="False")]}
    assert checks.node_problems(broken, ["a", "b"]) == [
        "node a is not Ready",
        "node b has not joined the cluster",
    ]


def test_a_gpu_node_without_allocatable_gpus_is_one_line() -> None:
    lab = load_stack("example-gpu")  # gpu-a and gpu-b, one GPU each
    assert gpu_shortfalls(lab, {"items": [_node("gpu-a", gpus=1), _node("gpu-b", gpus=1)]}) == []
    lines = gpu_shortfalls(lab, {"items": [_node("gpu-a"), _node("gpu-b", gpus=2)]})
    assert lines == [
        "GPU node gpu-a reports no allocatable nvidia.com/gpu (the stack gives it 1): the NVIDIA device"
        " plugin there sees no GPU and GPU pods stay Pending; its log in namespace k8scifar-gpu says why"
        ' (see docs/troubleshooting.md, "GPU not detected")',
        "node gpu-b reports 2 allocatable nvidia.com/gpu, the stack gives it 1: set `gpus: 2` for it in"
        ' the stack file or fix the node (see docs/troubleshooting.md, "GPU not detected")',
    ]
    assert gpu_shortfalls(lab, {"items": [_node("gpu-b", gpus=1)]}) == [
        "GPU node gpu-a is not in the cluster; `labctl validate` says why"
    ]


def _pod(name: str, phase: str = "Running", ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_pod_check() -> None:
    assert checks.pod_problems({"items": [_pod("r-0"), _pod("r-1")]}, 2, "ranks") == []
    problems = checks.pod_problems({"items": [_pod("r-0"), _pod("r-1", "Pending", "False")]}, 2, "ranks")
    assert problems == ["ranks: 1 of 2 pods running and ready; not running: r-1 (Pending)"]
    assert checks.pod_problems({"items": [_pod("r-0", ready="False")]}, 1, "registry")


def test_the_training_check_counts_a_pod_per_node_of_several_ranks() -> None:
    """3 nodes x 2 GPUs: six ranks in three pods, all there when the three pods are Ready."""
    six = World(ranks=6, ranks_per_pod=2)
    trainers = [_pod(f"trainer-{i}") for i in range(3)]
    assert checks.training_pod_problems({"items": trainers}, six) == []
    assert checks.training_pod_problems({"items": trainers[:2]}, six) == [
        "training ranks (6 in 3 pods): 2 of 3 pods running and ready"
    ]


def _system_pod(name: str, phase: str = "Running", ready: str = "True", **labels: str) -> dict[str, Any]:
    pod = _pod(name, phase, ready)
    pod["metadata"]["labels"] = labels
    return pod


DNS = {"k8s-app": "kube-dns"}


def test_system_pod_check_holds_with_dns_and_ended_or_leaving_pods() -> None:
    leaving = _system_pod("coredns-old", "Running", "False", **DNS)
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T17:00:00Z"
    pods = [
        _system_pod("coredns-1", **DNS),
        _system_pod("kube-proxy-a"),
        _system_pod("helm-install-traefik-x", "Succeeded", "False"),
        _system_pod("coredns-evicted", "Failed", "False", **DNS),
        leaving,
    ]
    assert checks.system_pod_problems({"items": pods}) == []


NO_DNS = (
    "no cluster DNS: no pod labelled k8s-app=kube-dns runs ready in kube-system, so no Service name"
    " resolves in a pod (the ranks find rank 0 by its name)"
)


def test_system_pod_check_names_a_missing_dns_and_each_stuck_pod() -> None:
    pods = [
        _system_pod("kube-proxy-a"),
        _system_pod("kube-proxy-b", "Running", "False"),
        _system_pod("kube-apiserver-a", "Pending", "False"),
        _system_pod("not-dns", **{"k8s-app": "kube-proxy"}),
    ]
    assert checks.system_pod_problems({"items": pods}) == [
        NO_DNS,
        "kube-system pods not running and ready: kube-proxy-b (Running, not Ready), kube-apiserver-a"
        " (Pending)",
    ]
    assert checks.system_pod_problems({"items": []}) == [NO_DNS]


def test_a_dns_pod_that_ended_or_waits_is_no_dns() -> None:
    """CoreDNS scaled to nothing leaves at most an evicted pod; one that never starts is Pending."""
    evicted = _system_pod("coredns-e", "Failed", "False", **DNS)
    assert checks.system_pod_problems({"items": [evicted]}) == [NO_DNS]
    waiting = _system_pod("coredns-p", "Pending", "False", **DNS)
    assert checks.system_pod_problems({"items": [waiting]}) == [
        NO_DNS,
        "kube-system pods not running and ready: coredns-p (Pending)",
    ]


def test_claim_check() -> None:
    bound = {"metadata": {"name": "data"}, "status": {"phase": "Bound"}}
    pending = {"metadata": {"name": "runs"}, "status": {"phase": "Pending"}}
    assert checks.claim_problems({"items": [bound]}) == []
    assert checks.claim_problems({"items": [bound, pending]}) == ["claim runs is Pending, not Bound"]
    assert checks.claim_problems({"items": []}) == ["the lab's namespace has no PersistentVolumeClaims"]


@pytest.mark.parametrize(
    "logs",
    [
        "epoch   1/10  step     49  loss 1.2",
        "resumed from /runs/x/checkpoints/step-49.pt at epoch 2, step 49 (restart 1)",
        "done: test accuracy 91.00% (best 91.20%), loss 0.3, 12.0 s on 2 rank(s)",
        "run /runs/x is complete (best test accuracy 91.20%); waiting for SIGTERM",
    ],
)
def test_group_check_accepts_a_collective_step(logs: str) -> None:
    assert checks.group_problems(f"loading data\n{logs}\n") == []


def test_group_check_fails_before_any_step() -> None:
    assert checks.group_problems("loading data\nrank 1 could not rendezvous with rank 0\n")


def test_require_fails_with_every_problem_spelled_out() -> None:
    checks.require([])
    with pytest.raises(AssertionError, match=r"^a is wrong; b is wrong$"):
        checks.require(["a is wrong", "b is wrong"])


def test_every_nvidia_device_node_needs_its_dev_char_link() -> None:
    """`stat -c '%n %t %T'` prints the major and minor in hex: nvidia-uvm's 238 is `ee`."""
    devices = "/dev/nvidia0 c3 0\n/dev/nvidiactl c3 ff\n/dev/nvidia-uvm ee 0\n"
    assert checks.dev_char_problems(devices, "1:3\n195:0\n195:255\n238:0\n") == []
    assert checks.dev_char_problems(devices, "195:0\n195:255\n") == [
        "/dev/nvidia-uvm has no /dev/char/238:0 link"
    ]
