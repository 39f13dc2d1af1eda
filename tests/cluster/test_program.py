"""The Pulumi program runs for every stack file, and every Kubernetes object it declares is valid."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kubernetes_validate
import pytest

from lab.config import load_stack
from tests.support.program import ProgramRun, kubernetes_object, recorded, run_program, validate_object
from tests.support.shipped import shipped_stacks

STACKS = shipped_stacks()


@pytest.fixture(scope="module", params=STACKS)
def program(request: pytest.FixtureRequest) -> ProgramRun:
    return recorded(request.param)


def test_program_runs_and_exports(program: ProgramRun) -> None:
    lab = load_stack(program.stack)
    assert program.outputs["registry"] == lab.registry_endpoint
    assert set(program.outputs["nodes"]) == {n.name for n in lab.nodes}


def test_every_kubernetes_object_validates(program: ProgramRun) -> None:
    version = load_stack(program.stack).kubernetes_version
    for resource in program.kubernetes_objects():
        try:
            validate_object(kubernetes_object(resource), version)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{program.stack}: {resource.kind} {resource.name}: {err.message} at {err.path}")


def test_a_malformed_object_fails_validation(tmp_path: Path) -> None:
    """The validation above must be able to fail: a program declaring a broken object is caught."""
    main = tmp_path / "__main__.py"
    main.write_text(
        "import pulumi_kubernetes as k8s\n"
        "k8s.core.v1.Service('broken', metadata={'name': 'broken'},\n"
        "    spec={'ports': [{'port': 'eighty'}], 'clusterIP': 'None'})\n"
    )
    run = run_program("example-cpu", main=main)
    (service,) = run.kubernetes_objects()
    with pytest.raises(kubernetes_validate.ValidationError, match="eighty"):
        validate_object(kubernetes_object(service), "1.33.5")
    service.inputs["spec"]["ports"][0]["port"] = 80
    validate_object(kubernetes_object(service), "1.33.5")


def test_strict_validation_rejects_unknown_fields(tmp_path: Path) -> None:
    main = tmp_path / "__main__.py"
    main.write_text(
        "import pulumi_kubernetes as k8s\n"
        "k8s.core.v1.ConfigMap('typo', metadata={'name': 'typo', 'lables': {'a': 'b'}})\n"
    )
    (config_map,) = run_program("example-cpu", main=main).kubernetes_objects()
    with pytest.raises(kubernetes_validate.ValidationError, match="lables"):
        validate_object(kubernetes_object(config_map), "1.33.5")


def test_bad_stack_configuration_stops_the_program() -> None:
    with pytest.raises(Exception, match=r"k8scifar:nodes\[0\]\.gpus"):
        run_program(
            "bad",
            {"nodes": [{"name": "a", "address": "10.0.0.1", "user": "u", "role": "server", "gpus": -2}]},
        )


def test_no_cluster_is_declared_where_kubernetes_is_not_installed() -> None:
    """The test machines skip the Kubernetes install: declaring objects there would send them
    through an empty kubeconfig to whatever cluster the operator's default kubeconfig names."""
    skipping = [s for s in STACKS if not load_stack(s).installs_kubernetes]
    assert skipping, "a shipped stack (testbed) skips the Kubernetes install"
    for stack in skipping:
        run = recorded(stack)
        assert [r.type for r in run.resources if r.type.startswith("kubernetes:")] == []
        assert "image" not in run.outputs and "kubeconfig" in run.outputs
    installing = recorded("example-cpu")
    assert any(r.type == "pulumi:providers:kubernetes" for r in installing.resources)
    assert "image" in installing.outputs


def test_the_program_runs_after_asyncio_run_left_the_thread_without_a_loop() -> None:
    """`asyncio.run` (the provider host's tests, any async helper) ends by unsetting the thread's
    event loop; the engine's mocks make their futures on it, so the program must still run."""
    asyncio.run(asyncio.sleep(0))
    run = run_program("example-cpu")
    assert any(r.type == "pulumi:providers:kubernetes" for r in run.resources)
