"""Under the engine's mocks: a stack that names a cluster's kubeconfig touches no host, and the
kubeconfig stays a secret from the file to the provider and the export."""

from __future__ import annotations

import pytest

from lab.cluster.program_run import is_secret
from lab.config.loading import read_stack_values, stack_file
from tests.support.program import DYNAMIC_RESOURCE, ProgramRun, run_program

KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    given = tmp_path_factory.mktemp("cluster") / "kubeconfig"
    given.write_text(KUBECONFIG)
    values = read_stack_values(stack_file("example-cpu")) | {"kubeconfig": str(given)}
    return run_program("example-cpu", values)


def test_no_host_is_bootstrapped(program: ProgramRun) -> None:
    assert [r for r in program.resources if r.type == DYNAMIC_RESOURCE] == []
    assert program.kubernetes_objects(), "the lab's objects are declared into the given cluster"


def test_the_provider_takes_the_file_as_a_secret(program: ProgramRun) -> None:
    (provider,) = [r for r in program.resources if r.type == "pulumi:providers:kubernetes"]
    given = provider.inputs["kubeconfig"]
    assert is_secret(given) and given["value"] == KUBECONFIG
    assert program.outputs["kubeconfig"] == KUBECONFIG
    assert "kubeconfig" in program.secret_outputs
