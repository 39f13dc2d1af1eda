"""What single cluster objects say: the trainer's command line and environment, version-dependent
fields, how a code change rolls the run, what travels in ConfigMaps, and the stack's exports."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from lab.cluster.build_context import CONTEXT_DIRS, DOCKERFILE, build_context
from lab.cluster.program_run import is_secret, unwrap_secrets
from lab.config import load_stack, read_stack_values, stack_file
from lab.config.monitoring import GRAFANA_PASSWORD_OUTPUT
from lab.paths import ROOT
from tests.support.program import (
    ProgramRun,
    Registered,
    containers,
    env_of,
    fake_digest,
    name_of,
    pod_spec,
    recorded,
    run_program,
)
from tests.support.rules.cluster_rules import objects_named, one
from trainer.hyperparameters import HYPERPARAMETERS
from trainer.sweep import sweep_file

# The tests below hold each object to what the trainer and the nodes expect of it.


def _workload(run: ProgramRun, component: str) -> Registered:
    found = one(run, component)
    assert found is not None, f"{run.stack}: no single {component} workload"
    return found


def _trainer(run: ProgramRun, component: str = "training") -> dict[str, Any]:
    return pod_spec(_workload(run, component))["containers"][0]


def _with(stack: str, **changes: Any) -> dict[str, Any]:
    values = read_stack_values(stack_file(stack))
    values.update(changes)
    return values


def test_training_command_line_follows_the_stack() -> None:
    run = recorded("example-kubeadm")
    container = _trainer(run)
    name = run.outputs["run"]
    # What the stack file leaves out is the trainer's own default, from its table.
    default = {name: str(row.common) for name, row in HYPERPARAMETERS.items()}
    assert container["args"] == [
        "launch", "--max-restarts", "3", "--",
        "train", "--data", "/data", "--require-cifar10", "--runs", "/runs", "--run-name", name,
        "--model", default["model"], "--epochs", "4", "--batch-size", "512", "--lr", "0.2",
        "--seed", default["seed"], "--backend", "gloo", "--compression", "bf16",
        "--target-accuracy", default["target_accuracy"], "--checkpoint-keep", default["checkpoint_keep"],
        "--on-complete", "release", "--ready-file", "/run/k8scifar/training", "--metrics-port", "9464",
    ]  # fmt: skip
    assert "--lr" not in _trainer(recorded("example-cpu"))["args"]  # the model's own recipe
    probe = container["readinessProbe"]["exec"]["command"]
    assert probe == ["python", "-m", "trainer", "probe", "--ready", "/run/k8scifar/training"]


def test_dataset_job_downloads_onto_the_writable_dataset_volume() -> None:
    job = _workload(recorded("example-cpu"), "dataset")
    container = _trainer(recorded("example-cpu"), "dataset")
    assert container["args"] == ["data", "download", "--dir", "/data"]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert pod_spec(job)["volumes"][0]["persistentVolumeClaim"] == {"claimName": "datasets"}


def test_pod_network_ranks_name_the_pod_interface() -> None:
    spec = pod_spec(_workload(recorded("example-gpu"), "training"))
    env = env_of(spec["containers"][0])
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "hostNetwork" not in spec and "NODE_NAME" not in env


def test_host_network_ranks_pick_their_node_interface() -> None:
    spec = pod_spec(_workload(recorded("example-kubeadm"), "training"))
    env = env_of(spec["containers"][0])
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["LAB_SOCKET_IFNAMES"] == "box-a=eno1,box-b=enp5s0"
    assert "NCCL_SOCKET_IFNAME" not in env


@pytest.mark.parametrize(("version", "has_rank"), [("1.27.16", False), ("1.28.15", True)])
def test_rank_comes_from_the_pod_index_label_where_the_cluster_sets_it(version: str, has_rank: bool) -> None:
    run = run_program("example-cpu", _with("example-cpu", kubernetesVersion=version))
    env = env_of(_trainer(run))
    label = {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}
    assert (env.get("RANK") == label) is has_rank
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the fallback, always


def _buildkit(build: Registered) -> dict:
    return next(c for c in containers(build) if c["name"] == "buildkit")


def test_buildkit_apparmor_setting_matches_the_cluster_version() -> None:
    old = _workload(recorded("example-kubeadm"), "build")  # 1.29: annotation
    new = _workload(recorded("example-cpu"), "build")  # 1.33: field
    annotation = "container.apparmor.security.beta.kubernetes.io/buildkit"
    assert old.inputs["spec"]["template"]["metadata"]["annotations"] == {
        annotation: "localhost/k8scifar-buildkit"
    }
    assert "appArmorProfile" not in _buildkit(old)["securityContext"]
    assert "annotations" not in new.inputs["spec"]["template"]["metadata"]
    assert _buildkit(new)["securityContext"]["appArmorProfile"] == {
        "type": "Localhost",
        "localhostProfile": "k8scifar-buildkit",
    }


def test_build_job_extracts_the_shipped_context_and_pushes_into_the_cluster() -> None:
    run = recorded("example-cpu")
    build = _workload(run, "build")
    unpack, buildkit, record = containers(build)
    context_map = objects_named(run, "ConfigMap")[f"trainer-context-{build_context().tag}"]
    archive = base64.b64decode(context_map.inputs["binaryData"]["context.tar.gz"])
    assert archive == build_context().archive
    assert context_map.inputs["immutable"] is True
    assert unpack["command"][:2] == ["tar", "-xzf"]
    args = " ".join(buildkit["args"])
    assert "--local dockerfile=/workspace/images/trainer --opt filename=Dockerfile" in args
    assert f"name=registry.k8scifar.svc.cluster.local:5000/k8scifar/trainer:{build_context().tag}" in args
    assert "--metadata-file /result/metadata.json" in args
    pushed = f"registry.k8scifar.svc.cluster.local:5000/k8scifar/trainer:{build_context().tag}"
    assert f"--output type=image,name={pushed},push=true," in args
    # The recorder reads the file BuildKit writes, for the name it pushes, in the image the build
    # starts from (by digest): never the image just pushed, which a node would pull by tag.
    assert record["args"] == [
        "k8scifar-build",
        f"trainer-image-{build_context().tag}",
        "/result/metadata.json",
        pushed,
    ]
    assert record["image"] == build_context().base_image
    assert re.search(r"^FROM " + re.escape(record["image"]) + "$", (ROOT / DOCKERFILE).read_text(), re.M)
    assert build.create_timeout  # a multi-GB base image outlasts the default wait


def test_sweep_ships_the_trainers_own_expansion_and_writes_a_folder_per_index() -> None:
    run = recorded("example-sweep")
    job = next(r for r in run.of_kind("Job") if r.name == "sweep")
    sweep_map = objects_named(run, "ConfigMap")[name_of(job)]
    space = load_stack("example-sweep").sweep.space()  # type: ignore[union-attr]
    assert json.loads(sweep_map.inputs["data"]["sweep.json"]) == json.loads(json.dumps(sweep_file(space)))
    container = pod_spec(job)["containers"][0]
    args = container["args"]
    # The trainer appends the completion index: runs/<sweep>/<index>/.
    assert args[args.index("--runs") + 1] == "/runs"
    assert args[args.index("--run-name") + 1] == name_of(job)
    assert args[-3:] == ["exit", "--sweep", "/sweep/sweep.json"]
    assert env_of(container)["WORLD_SIZE"] == "1"
    assert run.outputs["sweepResults"].endswith(f"/runs/{name_of(job)}")
    assert "sweepResults" not in recorded("example-gpu").outputs


def test_network_policy_opens_the_collective_ports_between_ranks_only() -> None:
    policies = {name_of(p): p.inputs["spec"] for p in recorded("example-gpu").of_kind("NetworkPolicy")}
    ranks = policies["trainer-collectives"]
    assert ranks["ingress"][0]["ports"] == [
        {"protocol": "TCP", "port": 29500},
        {"protocol": "TCP", "port": 32768, "endPort": 60999},
    ]
    assert ranks["ingress"][0]["from"] == [{"podSelector": ranks["podSelector"]}]
    assert {"protocol": "UDP", "port": 53} in ranks["egress"][1]["ports"]  # DNS for MASTER_ADDR


def test_exports_say_where_everything_is() -> None:
    run = recorded("example-kubeadm")
    name = run.outputs["run"]
    digest = fake_digest(f"cifar-build/trainer-image-{build_context().tag}")
    assert run.outputs["image"] == f"10.30.0.21:31500/k8scifar/trainer@{digest}"
    assert run.outputs["results"] == f"10.30.0.21:/export/lab/runs/{name}"
    assert run.outputs["follow"] == "kubectl -n cifar logs -f trainer-0"


@pytest.mark.parametrize("stack", ["example-kubeadm", "example-sweep"])
def test_the_cluster_registers_what_its_objects_say_and_the_stack_exports_it(stack: str) -> None:
    run = recorded(stack)
    cluster = next(r for r in run.resources if r.type == "k8scifar:cluster:Cluster")
    registered = run.component_outputs[cluster.urn]
    assert unwrap_secrets(registered) == {name: run.outputs[name] for name in registered}, (
        "exports are the registered outputs"
    )
    # Grafana's admin password is registered, and exported, as a secret.
    assert is_secret(registered[GRAFANA_PASSWORD_OUTPUT]) and GRAFANA_PASSWORD_OUTPUT in run.secret_outputs
    assert registered["image"].startswith(f"{load_stack(stack).registry_endpoint}/k8scifar/trainer@sha256:")
    ranks = run.one("StatefulSet")
    assert registered["run"] == ranks.inputs["metadata"]["annotations"]["k8scifar/run"]
    nfs = next(v for v in run.of_kind("PersistentVolume") if name_of(v).endswith("-runs")).inputs["spec"][
        "nfs"
    ]
    assert registered["results"] == f"{nfs['server']}:{nfs['path']}/{registered['run']}"
    assert (
        registered["follow"]
        == f"kubectl -n {ranks.inputs['metadata']['namespace']} logs -f {name_of(ranks)}-0"
    )
    sweeps = [job for job in run.of_kind("Job") if job.name == "sweep"]
    assert ("sweepResults" in registered) == bool(sweeps)
    if sweeps:
        assert registered["sweepResults"] == f"{nfs['server']}:{nfs['path']}/{name_of(sweeps[0])}"


def _program_on_tree(tmp_path: Path, tree: Path) -> Path:
    main = tmp_path / "main.py"
    main.write_text(
        "from pathlib import Path\n"
        "import pulumi_kubernetes as k8s\n"
        "from lab import config\n"
        "from lab.cluster.build_context import build_context\n"
        "from lab.cluster.component import Cluster\n"
        f"context = build_context(Path({str(tree)!r}))\n"
        "Cluster('lab', config.from_pulumi(), k8s.Provider('lab'), context=context, kubeconfig='')\n"
    )
    return main


def _declared(run: ProgramRun) -> tuple[str, str, dict[str, Any]]:
    build = _workload(run, "build")
    sts = _workload(run, "training")
    return name_of(build), _trainer(run)["image"], sts.inputs["spec"]


def test_unchanged_code_declares_the_same_build_and_changed_code_rolls_the_run(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    for top in CONTEXT_DIRS:
        shutil.copytree(ROOT / top, tree / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    main = _program_on_tree(tmp_path, tree)
    first = _declared(run_program("example-cpu", main=main))
    assert _declared(run_program("example-cpu", main=main)) == first  # nothing to build or roll
    (tree / "trainer" / "changed.py").write_text("x = 1\n")
    run = run_program("example-cpu", main=main)
    second = _declared(run)
    assert second[0] != first[0] and second[1] != first[1]  # a new build Job, a new image
    assert second[2]["template"] != first[2]["template"]  # new image and run name
    sts = _workload(run, "training")
    assert "spec.template" in sts.replace_on_changes and sts.delete_before_replace


def _run_name(**trainer: Any) -> str:
    values = read_stack_values(stack_file("example-cpu"))
    return run_program("example-cpu", _with("example-cpu", trainer={**values["trainer"], **trainer})).outputs[
        "run"
    ]


def test_a_setting_that_changes_results_is_a_new_run_and_retention_is_not() -> None:
    base = recorded("example-cpu").outputs["run"]
    assert _run_name() == base
    assert _run_name(seed=7) != base
    assert _run_name(compression="fp16") != base
    assert _run_name(checkpointKeep=9) == base


def test_up_returns_once_every_rank_trains_and_fails_within_minutes_otherwise() -> None:
    run = recorded("example-gpu")
    sts = _workload(run, "training")
    # pulumi-kubernetes waits until spec.replicas equals status.readyReplicas (and the revisions
    # agree), and fails the update when that takes longer than the custom timeout
    # (https://www.pulumi.com/registry/packages/kubernetes/api-docs/apps/v1/statefulset).
    assert sts.create_timeout == sts.update_timeout == "15m"
    container = pod_spec(sts)["containers"][0]
    # A crashed rank's last log lines become the termination message in its status.
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    signals = next(m for m in container["volumeMounts"] if m["name"] == "signals")
    ready_file = container["args"][container["args"].index("--ready-file") + 1]
    assert ready_file.startswith(signals["mountPath"] + "/")
    assert container["readinessProbe"]["exec"]["command"][-1] == ready_file
    volume = next(v for v in pod_spec(sts)["volumes"] if v["name"] == "signals")
    assert volume["emptyDir"]["medium"] == "Memory"  # the signal dies with the pod
    assert run.outputs["wait"] == "labctl wait --stack example-gpu"


def test_the_program_leaves_a_finished_runs_replica_count_alone() -> None:
    """Rank 0 scales the StatefulSet to zero; the program declares zero for that run, never through
    ignoreChanges (tests/seams/test_run_replicas.py), while new inputs still replace the whole set
    (a new run) and the replica count alone changes in place."""
    sts = _workload(recorded("example-gpu"), "training")
    assert sts.ignore_changes == []
    spec_fields = {f"spec.{key}" for key in sts.inputs["spec"]}
    assert set(sts.replace_on_changes) == spec_fields - {"spec.replicas"} and sts.delete_before_replace
    assert sts.inputs["metadata"]["annotations"]["k8scifar/run"] == recorded("example-gpu").outputs["run"]
    assert "--on-complete" in (args := _trainer(recorded("example-gpu"))["args"])
    assert args[args.index("--on-complete") + 1] == "release"


def test_ranks_may_reach_the_api_server_to_hand_back_their_gpus() -> None:
    policies = {name_of(p): p.inputs["spec"] for p in recorded("example-gpu").of_kind("NetworkPolicy")}
    egress = policies["trainer-collectives"]["egress"]
    server = load_stack("example-gpu").server.address
    assert {
        "to": [{"ipBlock": {"cidr": f"{server}/32"}}],
        "ports": [{"protocol": "TCP", "port": 6443}],
    } in egress
