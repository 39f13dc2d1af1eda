"""The stack configuration: every shipped stack loads, and bad input is named before anything runs."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.config import (
    KNOWN_PATCHES,
    SWEEP_PARAMETERS,
    ConfigError,
    LabConfig,
    Trainer,
    load_stack,
    parse_config,
    read_stack_values,
)
from tests.support.shipped import shipped_stacks
from trainer.hyperparameters import HYPERPARAMETERS, Rule

GOOD: dict[str, Any] = {
    "distribution": "k3s",
    "nodes": [
        {"name": "gpu-a", "address": "192.168.50.11", "user": "ubuntu", "role": "server", "gpus": 1},
        {"name": "gpu-b", "address": "192.168.50.12", "user": "ubuntu", "role": "agent", "gpus": 1},
    ],
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """GOOD with one key replaced; `path` is dotted, list items by index, value None deletes."""
    values = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    target: Any = values
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    key: Any = int(last) if last.isdigit() else last
    if value is None:
        del target[key]
    else:
        target[key] = value
    return values


def test_every_shipped_stack_loads() -> None:
    stacks = shipped_stacks()
    assert {"example-gpu", "example-cpu"} <= set(stacks)
    for stack in stacks:
        assert isinstance(load_stack(stack), LabConfig)


def test_reference_lab_facts() -> None:
    lab = load_stack("example-gpu")
    assert [n.name for n in lab.nodes] == ["gpu-a", "gpu-b"]
    assert lab.server.name == "gpu-a" and [a.name for a in lab.agents] == ["gpu-b"]
    assert lab.has_gpus and lab.total_gpus == 2 and lab.backend == "nccl"
    assert lab.replicas == 2
    assert lab.registry_endpoint == "192.168.50.11:30500"
    assert lab.nfs_server.name == "gpu-a"
    cpu = load_stack("example-cpu")
    assert not cpu.has_gpus and cpu.backend == "gloo"


def test_defaults_a_user_expects() -> None:
    cfg = parse_config(GOOD)
    assert cfg.distribution.value == "k3s"
    assert cfg.ssh.host_key_policy.value == "accept-new"
    assert cfg.nfs.export_path == "/srv/k8scifar"
    assert cfg.nfs_allowed_networks == ["192.168.50.11/32", "192.168.50.12/32"]
    assert cfg.trainer.placement.value == "spread" and cfg.replicas == 2
    assert cfg.trainer.batch_size == HYPERPARAMETERS["batch_size"].common
    assert cfg.trainer.model.value == HYPERPARAMETERS["model"].common
    assert cfg.sweep is None and cfg.sweep_parallelism == 0


def test_the_trainer_keys_read_the_trainers_hyperparameter_table() -> None:
    """A `trainer` key that sets a hyperparameter takes its default, its bounds and the start of its
    description from trainer/hyperparameters.py, the table the trainer's flags read."""
    keys = {}
    for name, field in Trainer.model_fields.items():
        row = HYPERPARAMETERS.get(SWEEP_PARAMETERS.get(field.alias or "", name))
        if row is None:
            continue
        bounds = row.rule.bounds() if isinstance(row.rule, Rule) else {}
        limits = {key: getattr(item, key) for item in field.metadata for key in bounds if hasattr(item, key)}
        keys[name] = (field.default, limits, (field.description or "").startswith(row.description()))
        assert keys[name] == (row.common, bounds, True), name
    exposed = {"model", "epochs", "steps", "batch_size", "learning_rate", "seed", "compression"}
    assert set(keys) == exposed | {"target_accuracy", "checkpoint_keep"}


def test_sweep_size_and_parallelism() -> None:
    grid = {"parameters": {"learningRate": [0.1, 0.2, 0.4], "batchSize": [256, 512]}}
    cfg = parse_config(_with("sweep", grid))
    assert cfg.sweep is not None and cfg.sweep.size() == 6
    assert cfg.sweep_parallelism == 2  # one set per GPU
    assert cfg.sweep.space()["parameters"] == {"lr": [0.1, 0.2, 0.4], "batch_size": [256, 512]}
    rnd = {
        "strategy": "random",
        "samples": 5,
        "parameters": {"learningRate": {"min": 0.01, "max": 1, "log": True}},
    }
    assert parse_config(_with("sweep", rnd)).sweep.size() == 5  # type: ignore[union-attr]


BAD = [
    # (what, values, the key the message must name, a word of the problem)
    ("no nodes", _with("nodes", []), "k8scifar:nodes", "at least 1"),
    ("nodes missing", _with("nodes", None), "k8scifar:nodes", "missing"),
    ("duplicate node names", _with("nodes.1.name", "gpu-a"), "k8scifar:nodes", "two nodes are named 'gpu-a'"),
    ("duplicate addresses", _with("nodes.1.address", "192.168.50.11"), "k8scifar:nodes", "share the address"),
    ("no server", _with("nodes.0.role", "agent"), "k8scifar:nodes", "exactly one node must be the server"),
    ("two servers", _with("nodes.1.role", "server"), "k8scifar:nodes", "2 nodes have role server"),
    ("unknown role", _with("nodes.1.role", "worker"), "k8scifar:nodes[1].role", "'worker'"),
    ("bad address", _with("nodes.0.address", "192.168.50.300"), "k8scifar:nodes[0].address", "not an IP"),
    ("hostname address", _with("nodes.0.address", "gpu-a.lan"), "k8scifar:nodes[0].address", "not an IP"),
    ("negative gpus", _with("nodes.0.gpus", -1), "k8scifar:nodes[0].gpus", "greater than or equal to 0"),
    ("node name not a DNS label", _with("nodes.0.name", "GPU_A"), "k8scifar:nodes[0].name", "DNS label"),
    ("node without user", _with("nodes.0.user", None), "k8scifar:nodes[0].user", "missing"),
    ("bad interface", _with("nodes.0.interface", "eth 0"), "k8scifar:nodes[0].interface", "interface name"),
    ("unknown distribution", _with("distribution", "microk8s"), "k8scifar:distribution", "'microk8s'"),
    ("unknown top-level key", _with("replicas", 2), "k8scifar:replicas", "unknown key"),
    ("typo in trainer key", _with("trainer.replica", 2), "k8scifar:trainer.replica", "unknown key"),
    (
        "bad CIDR",
        _with("nfs.allowedNetworks", ["192.168.50.0/33"]),
        "k8scifar:nfs.allowedNetworks",
        "not a CIDR",
    ),
    (
        "CIDR with host bits",
        _with("nfs.allowedNetworks", ["192.168.50.1/24"]),
        "k8scifar:nfs.allowedNetworks",
        "not a CIDR",
    ),
    ("export to the world", _with("nfs.allowedNetworks", []), "k8scifar:nfs.allowedNetworks", "is empty"),
    (
        "CIDR that leaves a node out",
        _with("nfs.allowedNetworks", ["192.168.50.12/32"]),
        "k8scifar:nfs.allowedNetworks",
        "gpu-a",
    ),
    ("NFS server not a node", _with("nfs.server", "nas"), "k8scifar:nfs.server", "'nas' is not a node"),
    ("relative export path", _with("nfs.exportPath", "srv/lab"), "k8scifar:nfs.exportPath", "absolute"),
    ("registry port outside NodePorts", _with("registry.port", 5000), "k8scifar:registry.port", "30000"),
    (
        "unsupported Kubernetes",
        _with("kubernetesVersion", "1.19.0"),
        "k8scifar:kubernetesVersion",
        "1.25 to 1.37",
    ),
    (
        "malformed Kubernetes version",
        _with("kubernetesVersion", "latest"),
        "k8scifar:kubernetesVersion",
        "1.34.4",
    ),
    ("too many spread replicas", _with("trainer.replicas", 3), "k8scifar:trainer.replicas", "at most 2"),
    (
        "too many packed GPU replicas without Kueue",
        {**_with("trainer", {"placement": "pack", "replicas": 2}), "scheduling": {"gang": "none"}},
        "k8scifar:trainer.replicas",
        "largest holds 1 GPUs",
    ),
    (
        "zero replicas",
        _with("trainer.replicas", 0),
        "k8scifar:trainer.replicas",
        "greater than or equal to 1",
    ),
    ("unknown placement", _with("trainer.placement", "random"), "k8scifar:trainer.placement", "'random'"),
    ("unknown backend", _with("trainer.backend", "mpi"), "k8scifar:trainer.backend", "'mpi'"),
    (
        "negative learning rate",
        _with("trainer.learningRate", -0.1),
        "k8scifar:trainer.learningRate",
        "must be a finite number in (0, 100]",
    ),
    (
        "batch size as text",
        _with("trainer.batchSize", "big"),
        "k8scifar:trainer.batchSize",
        "an integer in [1",
    ),
    (
        "target accuracy above 1",
        _with("trainer.targetAccuracy", 94),
        "k8scifar:trainer.targetAccuracy",
        "must be a finite number in (0, 1], got 94",
    ),
    (
        "nccl without GPUs",
        _with("nodes", [dict(n, gpus=0) for n in GOOD["nodes"]]) | {"trainer": {"backend": "nccl"}},
        "k8scifar:trainer.backend",
        "nccl needs GPUs",
    ),
    (
        "airgap file missing",
        _with("airgap", {"k3sBinary": "/nonexistent/k3s", "imagesTarball": __file__}),
        "k8scifar:airgap.k3sBinary",
        "does not exist",
    ),
    (
        "unknown sweep parameter",
        _with("sweep", {"parameters": {"dropout": [0.1]}}),
        "k8scifar:sweep.parameters",
        "unknown parameter 'dropout'",
    ),
    (
        "sweep parameter without values",
        _with("sweep", {"parameters": {"learningRate": []}}),
        "k8scifar:sweep.parameters",
        "no values",
    ),
    (
        "grid over a range",
        _with("sweep", {"parameters": {"learningRate": {"min": 0.1, "max": 1}}}),
        "k8scifar:sweep.parameters",
        "cannot enumerate",
    ),
    (
        "random without samples",
        _with("sweep", {"strategy": "random", "parameters": {"learningRate": [0.1]}}),
        "k8scifar:sweep.samples",
        "number of sets",
    ),
    (
        "sweep wider than the GPUs",
        _with("sweep", {"parallelism": 3, "parameters": {"learningRate": [0.1]}}),
        "k8scifar:sweep.parallelism",
        "exceeds the 2 GPUs",
    ),
    (
        "inverted range",
        _with(
            "sweep",
            {"strategy": "random", "samples": 2, "parameters": {"learningRate": {"min": 1, "max": 0.1}}},
        ),
        "k8scifar:sweep.parameters",
        "min must be below max",
    ),
    (
        "unknown sweep model",
        _with("sweep", {"parameters": {"model": ["vit"]}}),
        "k8scifar:sweep.parameters.model",
        "'vit'",
    ),
]


def _sweep(parameters: dict[str, Any], **more: Any) -> dict[str, Any]:
    return _with("sweep", {"parameters": parameters, **more})


def _node(index: int, **fields: Any) -> dict[str, Any]:
    nodes = copy.deepcopy(GOOD["nodes"])
    nodes[index].update(fields)
    return _with("nodes", nodes)


# Inputs that would damage a host or break the lab late; each was accepted before these rules.
UNSAFE = [
    # The export is chowned to the trainer's uid and deleted by purgeOnDestroy.
    ("export /etc", _with("nfs.exportPath", "/etc"), "k8scifar:nfs.exportPath", "system directory /etc"),
    ("export /usr/local", _with("nfs.exportPath", "/usr/local/lab"), "k8scifar:nfs.exportPath", "/usr"),
    ("export under /var", _with("nfs.exportPath", "/var/lib/k8scifar"), "k8scifar:nfs.exportPath", "/var"),
    ("export /root", _with("nfs.exportPath", "/root/lab"), "k8scifar:nfs.exportPath", "/root"),
    ("export /boot", _with("nfs.exportPath", "/boot"), "k8scifar:nfs.exportPath", "/boot"),
    ("export /srv itself", _with("nfs.exportPath", "/srv"), "k8scifar:nfs.exportPath", "top-level"),
    ("export /home", _with("nfs.exportPath", "/home/"), "k8scifar:nfs.exportPath", "top-level"),
    ("export a home", _with("nfs.exportPath", "/home/alice"), "k8scifar:nfs.exportPath", "home or mount"),
    ("export a disk", _with("nfs.exportPath", "/mnt/data"), "k8scifar:nfs.exportPath", "/mnt/data/k8scifar"),
    (
        "export with a space",
        _with("nfs.exportPath", "/srv/k8s lab"),
        "k8scifar:nfs.exportPath",
        "exports line",
    ),
    ("export with a '#'", _with("nfs.exportPath", "/srv/lab#1"), "k8scifar:nfs.exportPath", "exports line"),
    # A read-write export reaches only the lab's own machines.
    (
        "export to 0.0.0.0/0",
        _with("nfs.allowedNetworks", ["0.0.0.0/0"]),
        "k8scifar:nfs.allowedNetworks",
        "every",
    ),
    (
        "export to ::/0",
        _with("nfs.allowedNetworks", ["::/0"]),
        "k8scifar:nfs.allowedNetworks",
        "every address",
    ),
    (
        "export to a /16",
        _with("nfs.allowedNetworks", ["192.168.0.0/16"]),
        "k8scifar:nfs.allowedNetworks",
        "allowWideNetworks: true",
    ),
    (
        "export to a network without nodes",
        _with("nfs.allowedNetworks", ["192.168.50.0/24", "10.0.0.0/24"]),
        "k8scifar:nfs.allowedNetworks",
        "10.0.0.0/24 holds no node",
    ),
    # Node addresses: IPv4 that the other node can reach, one spelling each.
    ("IPv6 node", _node(1, address="fd00::12"), "k8scifar:nodes[1].address", "IPv4 node addresses only"),
    (
        "IPv4 written as IPv6",
        _node(1, address="::ffff:192.168.50.11"),
        "k8scifar:nodes[1].address",
        "write it as 192.168.50.11",
    ),
    ("zone-qualified", _node(1, address="fe80::1%eth0"), "k8scifar:nodes[1].address", "zone-qualified"),
    ("unspecified", _node(0, address="0.0.0.0"), "k8scifar:nodes[0].address", "unspecified"),
    ("broadcast", _node(0, address="255.255.255.255"), "k8scifar:nodes[0].address", "broadcast"),
    ("multicast", _node(0, address="224.0.0.251"), "k8scifar:nodes[0].address", "multicast"),
    ("loopback beside a LAN node", _node(0, address="127.0.0.1"), "k8scifar:nodes", "gpu-a has a loopback"),
    ("link-local", _node(0, address="169.254.10.1"), "k8scifar:nodes[0].address", "link-local"),
    # `ssh user@address`: a user that starts with '-' is an option, one with a space two words.
    ("ssh option as user", _node(0, user="-oProxyCommand=sh"), "k8scifar:nodes[0].user", "POSIX user name"),
    ("user with a space", _node(0, user="lab admin"), "k8scifar:nodes[0].user", "POSIX user name"),
    ("user too long", _node(0, user="u" * 33), "k8scifar:nodes[0].user", "at most 32"),
    # The rendezvous port and the namespace must not be the cluster's own.
    ("port of the API server", _with("trainer.port", 6443), "k8scifar:trainer.port", "Kubernetes API"),
    ("port of the kubelet", _with("trainer.port", 10250), "k8scifar:trainer.port", "kubelet"),
    ("port of kube-proxy", _with("trainer.port", 10256), "k8scifar:trainer.port", "kube-proxy health"),
    ("port of etcd", _with("trainer.port", 2379), "k8scifar:trainer.port", "etcd"),
    ("port of the registry", _with("trainer.port", 30500), "k8scifar:trainer.port", "registry NodePort"),
    (
        "hostNetwork port among NodePorts",
        _with("trainer", {"hostNetwork": True, "port": 31000}),
        "k8scifar:trainer.port",
        "NodePort range 30000-32767",
    ),
    (
        "hostNetwork port of SSH",
        _with("trainer", {"hostNetwork": True, "port": 2222}) | {"ssh": {"port": 2222}},
        "k8scifar:trainer.port",
        "SSH",
    ),
    ("namespace kube-system", _with("namespace", "kube-system"), "k8scifar:namespace", "reserves"),
    ("namespace default", _with("namespace", "default"), "k8scifar:namespace", "reserves"),
    ("namespace kube-lab", _with("namespace", "kube-lab"), "k8scifar:namespace", "reserves"),
    # Kubernetes releases.
    (
        "version with a leading zero",
        _with("kubernetesVersion", "1.033.5"),
        "k8scifar:kubernetesVersion",
        "1.34.4",
    ),
    (
        "unreleased patch",
        _with("kubernetesVersion", "1.33.99"),
        "k8scifar:kubernetesVersion",
        "raise KNOWN_PATCHES in lab/config/facts.py",
    ),
    # What the ranks and the dataset allow.
    ("batch the ranks cannot split", _with("trainer.batchSize", 1023), "k8scifar:trainer.batchSize", "1022"),
    ("batch above the dataset", _with("trainer.batchSize", 65536), "k8scifar:trainer.batchSize", "50000"),
    ("seed above torch's range", _with("trainer.seed", 2**64), "k8scifar:trainer.seed", "4294967295"),
    ("uid above 2^31-1", _with("trainer.uid", 2**31), "k8scifar:trainer.uid", "2147483647"),
    ("learning rate true", _with("trainer.learningRate", True), "k8scifar:trainer.learningRate", "got True"),
    ("batch size true", _with("trainer.batchSize", True), "k8scifar:trainer.batchSize", "got True"),
    # Sweep values are held to the trainer's own rules (trainer.hyperparameters).
    ("sweep batch size 0", _sweep({"batchSize": [256, 0]}), "k8scifar:sweep.parameters.batchSize", "item 2"),
    (
        "sweep negative lr",
        _sweep({"learningRate": [-0.1]}),
        "k8scifar:sweep.parameters.learningRate",
        "(0, 100]",
    ),
    (
        "sweep NaN lr",
        _sweep({"learningRate": [math.nan]}),
        "k8scifar:sweep.parameters.learningRate",
        "finite",
    ),
    (
        "sweep infinite lr",
        _sweep({"learningRate": [math.inf]}),
        "k8scifar:sweep.parameters.learningRate",
        "inf",
    ),
    ("sweep epochs as text", _sweep({"epochs": ["ten"]}), "k8scifar:sweep.parameters.epochs", "integer"),
    (
        "sweep momentum true",
        _sweep({"momentum": [True]}),
        "k8scifar:sweep.parameters",
        "momentum: item 1 is true",
    ),
    (
        "sweep negative weight decay range",
        _sweep({"weightDecay": {"min": -1e-3, "max": 1e-3}}, strategy="random", samples=4),
        "k8scifar:sweep.parameters.weightDecay",
        "min must be a finite number in [0, 1)",
    ),
    (
        "sweep beyond an Indexed Job",
        _sweep({"learningRate": [0.1] * 400, "momentum": [0.5] * 400}),
        "k8scifar:sweep.parameters",
        "160000 sets, more than the 100000 completions",
    ),
    (
        "sweep beyond a ConfigMap",
        _sweep({"learningRate": [0.1] * 50, "batchSize": [512] * 50, "momentum": [0.5] * 10}),
        "k8scifar:sweep",
        "more than the 1048576 a ConfigMap holds",
    ),
]


@pytest.mark.parametrize(("what", "values", "key", "problem"), UNSAFE, ids=[u[0] for u in UNSAFE])
def test_unsafe_input_is_refused_in_one_line(what: str, values: dict, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(values, source="test")
    problems = info.value.problems
    assert len(problems) == 1, f"{what}: one problem expected, got {problems}"
    assert "\n" not in problems[0]
    assert problems[0].startswith(f"{key}:"), f"{what}: {problems[0]!r} does not name {key}"
    assert problem in problems[0], f"{what}: {problem!r} not in {problems[0]!r}"


@pytest.mark.parametrize(("what", "values", "key", "problem"), BAD, ids=[b[0] for b in BAD])
def test_bad_configuration_names_key_and_problem(what: str, values: dict, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(values, source="test")
    message = str(info.value)
    lines = [line for line in message.splitlines()[1:] if line.startswith(f"  - {key}:")]
    assert lines, f"{what}: no problem names {key}:\n{message}"
    assert any(problem in line for line in lines), f"{what}: {problem!r} not in\n{message}"
    assert "Traceback" not in message and "pydantic" not in message


def test_every_problem_is_reported_at_once() -> None:
    values = _with("nodes.0.gpus", -1) | {"registry": {"port": 80}}
    with pytest.raises(ConfigError) as info:
        parse_config(values)
    assert len(info.value.problems) == 2


def test_missing_stack_file_lists_existing_stacks(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.one.yaml").write_text(yaml.safe_dump({"config": {"k8scifar:nodes": GOOD["nodes"]}}))
    with pytest.raises(ConfigError, match=r"no such stack file; existing stacks: one"):
        load_stack("two", tmp_path)
    assert load_stack("one", tmp_path).server.name == "gpu-a"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("config: [unclosed", "not valid YAML"),
        ("encryptionsalt: x\n", "has no `config:` mapping"),
        ("config:\n  nodes: []\n", "nodes: keys must be written k8scifar:NAME"),
    ],
)
def test_unreadable_stack_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        read_stack_values(path)


def test_skip_steps_carry_their_reason() -> None:
    cfg = parse_config(GOOD | {"skip": {"nfsServerStart": "the kernel has no NFS server"}})
    assert [(s.value, why) for s, why in cfg.skip.items()] == [
        ("nfsServerStart", "the kernel has no NFS server")
    ]
    with pytest.raises(ConfigError, match=r"k8scifar:skip.*(nfsStart|Input should be)"):
        parse_config(GOOD | {"skip": {"nfsStart": "typo"}})
    with pytest.raises(ConfigError, match=r"k8scifar:skip\.nfsServerStart: String should have at least 1"):
        parse_config(GOOD | {"skip": {"nfsServerStart": ""}})


def test_what_the_unsafe_rules_still_accept() -> None:
    wide = parse_config(_with("nfs", {"allowedNetworks": ["192.168.0.0/16"], "allowWideNetworks": True}))
    assert wide.nfs_allowed_networks == ["192.168.0.0/16"]
    with pytest.raises(ConfigError, match="is every address"):
        parse_config(_with("nfs", {"allowedNetworks": ["0.0.0.0/0"], "allowWideNetworks": True}))
    # One node alone may sit on loopback: no other node needs to reach it.
    alone = [dict(GOOD["nodes"][0], address="127.0.0.1")]
    assert parse_config(_with("nodes", alone) | {"trainer": {"batchSize": 512}}).server.address == "127.0.0.1"
    assert (
        parse_config(_with("nfs.exportPath", "/home/alice/k8scifar")).nfs.export_path
        == "/home/alice/k8scifar"
    )
    assert parse_config(_with("trainer", {"hostNetwork": True, "port": 29400})).trainer.port == 29400
    assert parse_config(_with("kubernetesVersion", "v1.33.8")).kubernetes_version == "1.33.8"


def test_yaml_text_numbers_reach_the_sweep_as_numbers() -> None:
    # YAML 1.1 reads an unquoted 1e-3 as text; the trainer's rule reads it as the number it is.
    cfg = parse_config(_sweep({"learningRate": ["1e-3", 0.5], "batchSize": ["512"]}))
    assert cfg.sweep is not None
    assert cfg.sweep.space()["parameters"] == {"lr": [0.001, 0.5], "batch_size": [512]}
    assert cfg.sweep.size() == 2


def test_unset_epochs_train_the_models_recipe() -> None:
    from lab.cluster.pods import train_args

    resnet = parse_config(_with("trainer.model", "resnet9"))
    assert resnet.trainer.epochs is None
    assert "--epochs" not in train_args(resnet, "/runs", "r", on_complete="exit")
    fixed = parse_config(_with("trainer", {"model": "resnet9", "epochs": 5}))
    args = train_args(fixed, "/runs", "r", on_complete="exit")
    assert args[args.index("--epochs") + 1] == "5"


def test_known_patches_cover_the_schemas_objects_are_validated_against() -> None:
    """Every minor the loader accepts has a kubernetes-validate schema, and every schema a minor."""
    from kubernetes_validate.utils import all_versions

    schema_minors = {int(version.split(".")[1]) for version in all_versions()}
    assert set(KNOWN_PATCHES) == schema_minors


def test_a_step_budget_reaches_the_trainer_and_names_a_new_run() -> None:
    """`steps` beside `epochs`: airbench94's 476 steps end partway through the tenth epoch."""
    from lab.cluster.pods import train_args
    from lab.cluster.training import run_name

    steps = parse_config(_with("trainer", {"steps": 476}))
    assert steps.trainer.steps == 476 and steps.trainer.epochs is None
    args = train_args(steps, "/runs", "r", on_complete="exit")
    assert args[args.index("--steps") + 1] == "476" and "--epochs" not in args
    unset = parse_config(GOOD)
    assert unset.trainer.steps is None
    assert "--steps" not in train_args(unset, "/runs", "r", on_complete="exit")
    assert run_name(steps, "tag") != run_name(unset, "tag"), "another budget is another run"


@pytest.mark.parametrize(
    ("trainer", "problem"),
    [
        ({"steps": 476, "epochs": 10}, "epochs (10) and steps (476) both set how long to train: keep one"),
        ({"steps": 0}, "must be an integer in [1, 50000000]"),
        ({"steps": True}, "got True"),
        ({"steps": "many"}, "integer"),
    ],
)
def test_a_step_budget_outside_its_rule_is_refused(trainer: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with("trainer", trainer))
    assert any(p.startswith("k8scifar:trainer") and problem in p for p in info.value.problems), info.value
