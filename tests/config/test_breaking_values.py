"""Values that used to validate and then break the machines are refused before anything runs, in
one line naming the key and the fix: node addresses inside the cluster's own networks, digits
that are not ASCII, a metrics port on a port something else holds, a namespace something else
holds, allowed networks that together admit everyone."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path
from typing import Any

import pytest

from lab.config import ConfigError, parse_config
from lab.config.facts import HELD_PORTS
from lab.paths import ROOT

GPU: dict[str, Any] = {
    "nodes": [
        {"name": "gpu-a", "address": "192.168.50.11", "user": "ubuntu", "role": "server", "gpus": 2},
        {"name": "gpu-b", "address": "192.168.50.12", "user": "ubuntu", "role": "agent", "gpus": 2},
    ]
}


def _with(values: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            out.setdefault(section, {})[name] = value
        else:
            out[section] = value
    return out


def _node(i: int, **changes: Any) -> dict[str, Any]:
    return _with(GPU, nodes=[dict(n, **changes) if j == i else n for j, n in enumerate(GPU["nodes"])])


def _problem(values: dict[str, Any], key: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(values)
    found = [p for p in caught.value.problems if p.startswith(f"{key}:")]
    assert found, caught.value.problems
    assert "\n" not in found[0]
    return found[0]


@pytest.mark.parametrize(
    ("distribution", "address", "network"),
    [
        ("k3s", "10.42.0.7", "pod network 10.42.0.0/16"),
        ("k3s", "10.43.255.1", "Service network 10.43.0.0/16"),
        ("kubeadm", "10.244.1.20", "pod network 10.244.0.0/16"),
        ("kubeadm", "10.100.0.3", "Service network 10.96.0.0/12"),
    ],
)
def test_a_node_inside_the_clusters_own_networks_is_refused(
    distribution: str, address: str, network: str
) -> None:
    values = _node(1, address=address) | {"distribution": distribution}
    problem = _problem(values, "k8scifar:nodes[1].address")
    assert f"{address} is inside {distribution}'s {network}" in problem and "outside" in problem
    # The other distribution's networks are elsewhere.
    parse_config(values | {"distribution": "kubeadm" if distribution == "k3s" else "k3s"})


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("k8scifar:kubernetesVersion", _with(GPU, kubernetesVersion="1.٣٣.5")),
        ("k8scifar:kubernetesVersion", _with(GPU, kubernetesVersion="1.33.٥")),
        ("k8scifar:kubernetesVersion", _with(GPU, kubernetesVersion="1.3３.5")),
        ("k8scifar:trainer.epochs", _with(GPU, trainer__epochs="٣")),
        ("k8scifar:trainer.seed", _with(GPU, trainer__seed="１２")),
        ("k8scifar:ssh.port", _with(GPU, ssh__port="２２")),
        ("k8scifar:sweep.parameters.epochs", _with(GPU, sweep={"parameters": {"epochs": ["٣", 2]}})),
        (
            "k8scifar:sweep.parameters.learningRate",
            _with(GPU, sweep={"parameters": {"learningRate": ["٠.١"]}}),
        ),
    ],
)
def test_digits_that_are_not_ascii_are_refused(key: str, values: dict[str, Any]) -> None:
    _problem(values, key)


def test_ascii_numbers_written_as_text_still_read() -> None:
    cfg = parse_config(_with(GPU, kubernetesVersion="1.33.5", sweep={"parameters": {"epochs": ["3", 2]}}))
    assert cfg.sweep is not None and cfg.sweep.space()["parameters"]["epochs"] == [3, 2]


@pytest.mark.parametrize(
    ("changes", "collides"),
    [
        ({"observability__metricsPort": 29500}, "rank 0's rendezvous (trainer.port 29500)"),
        # Two ranks a pod serve on 29499 and 29500.
        ({"observability__metricsPort": 29499}, "trainer.port 29500"),
        ({"observability__metricsPort": 10249}, "kubelet"),
        ({"observability__metricsPort": 6443}, "Kubernetes API"),
        ({"observability__metricsPort": 2379}, "etcd"),
        ({"observability__metricsPort": 10247}, "kubelet health"),
        ({"observability__metricsPort": 2381}, "etcd metrics"),
        ({"observability__metricsPort": 9099}, "the node exporter"),
        ({"observability__metricsPort": 30500}, "registry NodePort"),
        ({"observability__metricsPort": 32767}, "the ephemeral ports 32768-60999"),
        ({"observability__metricsPort": 2048}, "NFS"),
        ({"observability__metricsPort": 2222, "ssh__port": 2223, "trainer__hostNetwork": True}, "SSH"),
    ],
)
def test_a_metrics_port_something_else_holds_is_refused(changes: dict[str, Any], collides: str) -> None:
    problem = _problem(_with(GPU, **changes), "k8scifar:observability.metricsPort")
    assert collides in problem and "such as the default 9464" in problem


def test_a_collision_is_laid_at_the_key_moved_from_its_default() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(GPU, observability__nodeExporterPort=29500))
    assert caught.value.problems == [
        "k8scifar:observability.nodeExporterPort: 29500 collides with rank 0's rendezvous"
        " (trainer.port 29500); choose a free port such as the default 9100"
    ]


def test_the_node_exporters_port_is_the_one_the_stack_gives() -> None:
    # 9099 (and 9100 for a second rank) are free once the lab's exporter moved off 9100.
    parse_config(_with(GPU, observability__nodeExporterPort=9200, observability__metricsPort=9099))
    moved = _with(GPU, observability__nodeExporterPort=9200, trainer__port=9200)
    assert "the node exporter" in _problem(moved, "k8scifar:trainer.port")


def test_the_metrics_ports_of_a_pods_ranks_count() -> None:
    # spread over one-GPU nodes: one rank a pod, so the next port is free.
    one = [dict(n, gpus=1) for n in GPU["nodes"]]
    parse_config(_with(GPU, nodes=one, observability={"metricsPort": 29499}))
    # Without the monitoring stack nothing serves metrics.
    parse_config(_with(GPU, observability={"enabled": False, "metricsPort": 29500}))


@pytest.mark.parametrize(
    ("namespace", "words"),
    [
        ("kube", "makes kube-build, for its image build, a namespace Kubernetes reserves"),
        ("kueue-system", "a namespace Kueue installs into"),
        ("k8scifar-gpu", "ends in -gpu, which the lab adds to its namespace for its NVIDIA device plugin"),
        ("k8scifar-monitoring", "ends in -monitoring"),
        ("lab-exporters", "ends in -exporters"),
        ("kube-flannel", "a namespace Kubernetes reserves"),
        ("default", "a namespace Kubernetes reserves"),
    ],
)
def test_a_namespace_something_else_holds_is_refused(namespace: str, words: str) -> None:
    assert words in _problem(_with(GPU, namespace=namespace), "k8scifar:namespace")


def test_the_kueue_namespace_fact_is_the_one_the_cluster_installs_into() -> None:
    from lab.cluster.gang import KUEUE_NAMESPACE as cluster_namespace
    from lab.config.facts import KUEUE_NAMESPACE

    assert cluster_namespace == KUEUE_NAMESPACE


@pytest.mark.parametrize(
    ("nodes", "networks", "wide", "words"),
    [
        (("10.0.0.1", "192.168.1.1"), ["0.0.0.0/1", "128.0.0.0/1"], True, "together admit every address"),
        (
            ("10.0.0.1", "192.168.1.1"),
            ["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/1"],
            True,
            "together admit every address",
        ),
        (
            ("192.168.50.11", "192.168.51.12"),
            ["192.168.50.0/24", "192.168.51.0/24"],
            False,
            "together make 192.168.50.0/23",
        ),
        (("10.1.0.1", "10.1.0.2"), ["10.0.0.0/8"], True, "holds k3s's pod network 10.42.0.0/16"),
    ],
)
def test_allowed_networks_that_together_admit_too_much_are_refused(
    nodes: tuple[str, str], networks: list[str], wide: bool, words: str
) -> None:
    values = _with(GPU, nodes=[dict(n, address=a) for n, a in zip(GPU["nodes"], nodes, strict=True)])
    values["nfs"] = {"allowedNetworks": networks, "allowWideNetworks": wide}
    with pytest.raises(ConfigError) as caught:
        parse_config(values)
    assert any(
        p.startswith("k8scifar:nfs.allowedNetworks: ") and words in p for p in caught.value.problems
    ), caught.value.problems


def test_allowed_networks_that_stay_narrow_still_load() -> None:
    values = _with(GPU, nfs={"allowedNetworks": ["192.168.50.11/32", "192.168.50.12/32"]})
    assert parse_config(values).nfs_allowed_networks == ["192.168.50.11/32", "192.168.50.12/32"]
    wide = _with(GPU, nfs={"allowedNetworks": ["192.168.0.0/16"], "allowWideNetworks": True})
    assert parse_config(wide).nfs_allowed_networks == ["192.168.0.0/16"]


def _sources() -> list[Path]:
    return sorted(p for folder in ("lab", "trainer") for p in (ROOT / folder).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            found.add(id(body[0].value))
    return found


def test_no_pattern_or_check_takes_unicode_digits_for_ascii_ones() -> None:
    r"""`\d` and `str.isdigit` take '٣' and '²' for digits; the lab and the trainer spell digits
    [0-9] and read numbers through trainer.inputs."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            pattern = (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and re.search(r"\\[dD]", node.value)
            )
            check = isinstance(node, ast.Attribute) and node.attr in {"isdigit", "isdecimal", "isnumeric"}
            if pattern or check:
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert found == []


@pytest.mark.parametrize(
    ("export", "system"),
    [
        ("//etc/k8s", "/etc"),
        ("//usr/local/lab", "/usr"),
        ("//var//lib/lab", "/var"),
        ("///root/lab", "/root"),
    ],
)
def test_an_export_path_spelled_with_a_double_slash_is_checked_as_linux_reads_it(
    export: str, system: str
) -> None:
    problem = _problem(_with(GPU, nfs={"exportPath": export}), "k8scifar:nfs.exportPath")
    assert f"system directory {system};" in problem


def test_an_export_path_is_kept_as_linux_reads_it() -> None:
    assert parse_config(_with(GPU, nfs={"exportPath": "//srv//k8scifar/"})).nfs.export_path == "/srv/k8scifar"


def test_an_export_path_with_a_name_longer_than_linux_takes_is_refused() -> None:
    problem = _problem(_with(GPU, nfs={"exportPath": "/srv/" + "a" * 5000}), "k8scifar:nfs.exportPath")
    assert "a folder name of 5000 bytes, longer than the 255 Linux takes" in problem
    assert len(problem) < 300
    parse_config(_with(GPU, nfs={"exportPath": "/srv/" + "a" * 255}))


def test_an_export_path_longer_than_nfs_exports_is_refused() -> None:
    folders = "/srv" + "".join("/" + letter * 250 for letter in "abcd")
    problem = _problem(_with(GPU, nfs={"exportPath": folders + "/" + "e" * 200}), "k8scifar:nfs.exportPath")
    assert f"is {len(folders) + 201} bytes long, longer than the 1024 an NFS export may be" in problem
    assert len(problem) < 300
    parse_config(_with(GPU, nfs={"exportPath": folders + "/" + "e" * (1024 - len(folders) - 1)}))


# (port, what holds it): the cluster's own programs (facts.HELD_PORTS), the lab's other ports,
# SSH and kube-proxy's NodePorts; the node exporter listens on every node's own network.
HELD = [
    (6443, "Kubernetes API"),
    (10250, "kubelet"),
    (2379, "etcd"),
    (2380, "etcd peers"),
    (10257, "controller-manager"),
    (10259, "scheduler"),
    (10256, "kube-proxy health"),
    (10249, "kube-proxy metrics"),
    (2049, "NFS"),
    (30500, "the registry NodePort (registry.port 30500)"),
    (29500, "rank 0's rendezvous (trainer.port 29500)"),
    (31000, "the NodePort range 30000-32767"),
]


@pytest.mark.parametrize(("port", "holder"), HELD, ids=[str(h[0]) for h in HELD])
def test_a_node_exporter_port_the_nodes_hold_is_refused_with_a_free_one(port: int, holder: str) -> None:
    values = _with(GPU, observability={"nodeExporterPort": port})
    with pytest.raises(ConfigError) as caught:
        parse_config(values)
    assert len(caught.value.problems) == 1, caught.value.problems
    [problem] = caught.value.problems
    assert problem == (
        f"k8scifar:observability.nodeExporterPort: {port} collides with {holder}; choose a free port"
        " such as the default 9100"
    )
    parse_config(_with(GPU, observability={"nodeExporterPort": 9100}))


def test_every_tcp_port_of_the_held_table_is_refused() -> None:
    for (port, protocol), holder in HELD_PORTS.items():
        if protocol == "tcp":
            problem = _problem(
                _with(GPU, observability={"nodeExporterPort": port}),
                "k8scifar:observability.nodeExporterPort",
            )
            assert holder in problem


def test_a_port_is_held_by_its_protocol() -> None:
    # flannel's VXLAN is UDP 8472: a TCP listener there takes nothing from it.
    assert HELD_PORTS[(8472, "udp")] == "flannel VXLAN"
    parse_config(_with(GPU, observability={"nodeExporterPort": 8472}))
    parse_config(_with(GPU, trainer={"port": 8472}))


def test_the_ssh_port_is_held_and_the_suggestion_is_free() -> None:
    # SSH moved onto the exporter's default: the suggestion is the next port nothing holds.
    values = _with(GPU, ssh={"port": 9100})
    problem = _problem(values, "k8scifar:observability.nodeExporterPort")
    assert problem == (
        "k8scifar:observability.nodeExporterPort: 9100 collides with SSH (ssh.port 9100); choose a free"
        " port such as 9101"
    )
    parse_config(_with(values, observability={"nodeExporterPort": 9101}))


@pytest.mark.parametrize(
    "changes",
    [
        {"ssh": {"port": 9100}, "observability": {"metricsPort": 9101}},
        {"trainer": {"port": 9100, "hostNetwork": True}, "observability": {"nodeExporterPort": 9465}},
        {"registry": {"port": 30000}, "observability": {"nodeExporterPort": 30000}},
    ],
)
def test_each_suggested_port_is_free(changes: dict[str, Any]) -> None:
    values = _with(GPU, **changes)
    with pytest.raises(ConfigError) as caught:
        parse_config(values)
    for problem in caught.value.problems:
        key, _, rest = problem.partition(": ")
        section, name = key.removeprefix("k8scifar:").split(".")
        suggested = int(re.findall(r"such as (?:the default )?(\d+)$", rest)[0])
        values = _with(values, **{section: {**values.get(section, {}), name: suggested}})
    parse_config(values)


def test_a_replica_count_beyond_the_lab_is_not_answered_with_a_batch_above_its_maximum() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(GPU, trainer={"replicas": 1_000_000_000, "batchSize": 512}))
    assert [p.split(":")[1] for p in caught.value.problems] == ["trainer.replicas"], caught.value.problems
    assert "1000000000" not in caught.value.problems[0].partition(" use ")[2]


@pytest.mark.parametrize(
    ("key_path", "said"),
    [
        ("", "is empty; point it at the private key"),
        ("  ", "is empty; point it at the private key"),
        (
            "~nosuchuser-k8scifar/.ssh/id",
            "the home of 'nosuchuser-k8scifar', a user this machine does not know",
        ),
        ("/dev/zero", "is not a regular file"),
        ("/tmp", "is not a regular file"),
    ],
)
def test_a_key_path_that_names_no_key_is_refused_naming_why(key_path: str, said: str) -> None:
    problem = _problem(_with(GPU, ssh={"keyPath": key_path}), "k8scifar:ssh.keyPath")
    assert said in problem and "ssh-keygen -t ed25519 -f ." not in problem, problem


def test_a_rendezvous_port_among_the_ephemeral_ones_is_still_taken() -> None:
    # The tests' loopback stacks take a free port the kernel hands out, which is an ephemeral one.
    assert parse_config(_with(GPU, trainer={"port": 44803})).trainer.port == 44803
