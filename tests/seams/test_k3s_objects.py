"""Seam: the objects the program declares against the objects the k3s server deploys by itself.

pulumi-kubernetes creates a new object with a plain create since 4.29 (CHANGELOG 4.29.0, #2926):
an object that already exists fails the create with AlreadyExists, and the objects that depend on
it are never created. So on k3s no object of the program may be one the pinned k3s release
applies from its packaged manifests, given the `disable` list the k3s role writes into the
server's config.yaml (tests/support/k3s_packaged.py restates k3s's staging rule).

Both sides as this repository produces them: the server's config.yaml rendered by Ansible from the
role's template and defaults (tests/support/daemon_files.py), and every object the program declares for
the stack under the engine's mocks.
"""

from __future__ import annotations

import pytest
import yaml

from lab.config import Distribution, LabConfig, load_stack
from lab.paths import ANSIBLE_DIR
from tests.support.daemon_files import Rendered
from tests.support.k3s_packaged import CLUSTER_SCOPED, ObjectRef, deployed, packaged
from tests.support.program import Registered, name_of, recorded
from tests.support.shipped import shipped_stacks

K3S_STACKS = [s for s in shipped_stacks() if load_stack(s).distribution is Distribution.K3S]
K3S_DEFAULTS = ANSIBLE_DIR / "roles" / "k3s" / "defaults" / "main.yml"


def k3s_release(lab: LabConfig) -> str:
    """The k3s release the k3s role installs for `lab` (its defaults' `k3s_version`)."""
    defaults = yaml.safe_load(K3S_DEFAULTS.read_text())
    assert defaults["k3s_version"] == "v{{ lab_kubernetes_version }}+{{ k3s_release_suffix }}"
    return f"v{lab.kubernetes_version}+{defaults['k3s_release_suffix']}"


def ref(resource: Registered) -> ObjectRef:
    namespace = resource.inputs.get("metadata", {}).get("namespace") or CLUSTER_SCOPED
    return ObjectRef(resource.kind, namespace, name_of(resource))


def declared(stack: str) -> set[ObjectRef]:
    """Every Kubernetes object (built-in or custom) the program declares for `stack`."""
    run = recorded(stack)
    return {ref(r) for r in [*run.kubernetes_objects(), *run.custom_objects()]}


def clashes(ours: set[ObjectRef], theirs: dict[ObjectRef, str]) -> list[str]:
    return sorted(f"{r}: k3s applies it from {theirs[r]}" for r in ours if r in theirs)


@pytest.fixture(scope="module")
def disabled(daemon_files: dict[str, Rendered]) -> dict[str, list[str]]:
    """Each k3s stack's `disable:` list, from the server's config.yaml as the k3s role renders it."""
    return {
        stack: yaml.safe_load(files.file(files.lab.server.name, "config.yaml")).get("disable", [])
        for stack, files in daemon_files.items()
        if stack in K3S_STACKS
    }


def test_every_k3s_stack_pins_a_release_whose_packaged_objects_are_recorded() -> None:
    assert K3S_STACKS, "no shipped stack uses k3s: this seam would go unchecked"
    for stack in K3S_STACKS:
        release = k3s_release(load_stack(stack))
        assert packaged(release), f"{stack}: record what k3s {release} deploys in tests/seams/data"


def test_the_program_declares_no_object_the_k3s_server_deploys(disabled: dict[str, list[str]]) -> None:
    found = {
        stack: problems
        for stack in K3S_STACKS
        if (problems := clashes(declared(stack), deployed(k3s_release(load_stack(stack)), disabled[stack])))
    }
    assert found == {}


def test_gpu_labs_on_k3s_own_the_nvidia_runtime_class_and_k3s_stages_none(
    disabled: dict[str, list[str]],
) -> None:
    nvidia = ObjectRef("RuntimeClass", CLUSTER_SCOPED, "nvidia")
    gpu_stacks = [s for s in K3S_STACKS if load_stack(s).has_gpus]
    assert gpu_stacks, "no shipped k3s stack has GPUs: the RuntimeClass seam would go unchecked"
    for stack in gpu_stacks:
        assert nvidia in declared(stack)
        assert nvidia not in deployed(k3s_release(load_stack(stack)), disabled[stack])


def test_the_check_finds_the_runtime_class_k3s_ships_when_runtimes_is_not_disabled() -> None:
    """The defect this seam had: the role disabled traefik and servicelb only."""
    ours = declared("example-gpu")
    assert clashes(ours, deployed("v1.33.5+k3s1", ["traefik", "servicelb"])) == [
        "RuntimeClass nvidia: k3s applies it from runtimes.yaml"
    ]


def test_the_staging_rule_skips_by_name_extension_and_directory() -> None:
    metrics = ObjectRef("APIService", CLUSTER_SCOPED, "v1beta1.metrics.k8s.io")
    assert metrics in deployed("v1.33.5+k3s1", [])
    assert metrics not in deployed("v1.33.5+k3s1", ["metrics-server"])
    assert ObjectRef("StorageClass", CLUSTER_SCOPED, "local-path") not in deployed(
        "v1.33.5+k3s1", ["local-storage.yaml"]
    )
