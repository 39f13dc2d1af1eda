"""Under the engine's mocks: a stack that names a cluster's kubeconfig touches no host, and the
kubeconfig stays a secret from the file to the provider and the export."""

from __future__ import annotations

import base64

import pytest
import yaml

from lab.cluster.program_run import is_secret
from lab.config.loading import read_stack_values, stack_file
from tests.support.program import DYNAMIC_RESOURCE, ProgramRun, run_program

CA = b"-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n"
TOKEN = "given-cluster-token"
# The CA is a file beside the kubeconfig, named relative to it, as kubectl reads it.
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://192.0.2.1:6443", certificate-authority: ca.crt}}}}]
users: [{{name: u, user: {{token: {TOKEN}}}}}]
contexts: [{{name: given, context: {{cluster: c, user: u}}}}]
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    given = tmp_path_factory.mktemp("cluster") / "kubeconfig"
    given.write_text(KUBECONFIG)
    (given.parent / "ca.crt").write_bytes(CA)
    values = read_stack_values(stack_file("example-cpu")) | {"kubeconfig": str(given)}
    return run_program("example-cpu", values)


def test_no_host_is_bootstrapped(program: ProgramRun) -> None:
    assert [r for r in program.resources if r.type == DYNAMIC_RESOURCE] == []
    assert program.kubernetes_objects(), "the lab's objects are declared into the given cluster"


def test_the_provider_takes_the_file_as_a_secret(program: ProgramRun) -> None:
    """With its file references inlined: the provider, whose working folder is not the
    kubeconfig's, reads no file of its own."""
    (provider,) = [r for r in program.resources if r.type == "pulumi:providers:kubernetes"]
    given = provider.inputs["kubeconfig"]
    assert is_secret(given)
    (cluster,) = yaml.safe_load(given["value"])["clusters"]
    assert cluster["cluster"] == {
        "server": "https://192.0.2.1:6443",
        "certificate-authority-data": base64.b64encode(CA).decode(),
    }
    assert TOKEN in given["value"]
    assert program.outputs["kubeconfig"] == given["value"]
    assert "kubeconfig" in program.secret_outputs
