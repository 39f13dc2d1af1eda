"""Under the engine's mocks: the bootstrap's secrets are secret, and the provider hangs off it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bootstrap.resource import SECRET_OUTPUTS, cluster_identifier
from tests.support.program import DYNAMIC_RESOURCE, FAKE_KUBECONFIG, FAKE_TOKEN, ProgramRun, run_program
from tests.support.provider_host import PROVIDER_BEFORE_THE_MOVE


@pytest.fixture(scope="module")
def program() -> ProgramRun:
    return run_program("example-gpu")


def test_kubeconfig_export_is_secret(program: ProgramRun) -> None:
    assert program.outputs["kubeconfig"] == FAKE_KUBECONFIG
    assert "kubeconfig" in program.secret_outputs


def test_bootstrap_outputs_token_and_kubeconfig_as_secrets(program: ProgramRun) -> None:
    (bootstrap,) = [r for r in program.resources if r.type == DYNAMIC_RESOURCE]
    assert set(SECRET_OUTPUTS) == {"token", "kubeconfig"}
    assert set(bootstrap.secret_outputs) >= set(SECRET_OUTPUTS)
    # The token is made by the provider on create: it is never an input stored in plain text.
    assert FAKE_TOKEN not in json.dumps(bootstrap.inputs, default=str)


def test_kubernetes_objects_go_through_the_bootstrap_provider(program: ProgramRun) -> None:
    """Destroy removes Kubernetes objects before reset.yml runs: objects -> provider -> bootstrap."""
    (bootstrap,) = [r for r in program.resources if r.type == DYNAMIC_RESOURCE]
    (provider,) = [r for r in program.resources if r.type == "pulumi:providers:kubernetes"]
    assert bootstrap.urn in provider.dependencies
    objects = program.kubernetes_objects()
    assert objects, "the program declares no Kubernetes objects to check"
    assert all(r.provider.startswith(provider.urn) for r in objects)


def test_the_provider_keeps_one_identity_per_stack(program: ProgramRun) -> None:
    """A pending bootstrap update leaves the kubeconfig unknown in the preview; without a stable
    identifier pulumi-kubernetes would plan to replace the provider and every object under it."""
    (provider,) = [r for r in program.resources if r.type == "pulumi:providers:kubernetes"]
    assert provider.inputs["clusterIdentifier"] == cluster_identifier("example-gpu") == "k8scifar-example-gpu"


def test_the_secrecy_check_finds_a_plain_kubeconfig(tmp_path: Path) -> None:
    """The export check above can fail: a program exporting the kubeconfig as a plain output."""
    main = tmp_path / "__main__.py"
    main.write_text(
        "import pulumi\n"
        "from lab import config\n"
        "from lab.bootstrap.resource import HostBootstrap, bootstrap_inputs\n"
        "lab = config.from_pulumi()\n"
        "bootstrap = HostBootstrap('hosts', bootstrap_inputs(lab, pulumi.get_stack()))\n"
        "pulumi.export('kubeconfig', bootstrap.kubeconfig.apply(str))\n"
    )
    run = run_program("example-gpu", main=main)
    assert run.outputs["kubeconfig"] == FAKE_KUBECONFIG
    assert "kubeconfig" not in run.secret_outputs


def _loaded(pickled: str, cwd: Path) -> list[str]:
    """The provider's class and its answer to an unchanged diff, unpickled the way pulumi.dynamic
    does it, in a fresh Python."""
    script = (
        "import base64, sys, dill\n"
        "provider = dill.loads(base64.b64decode(sys.stdin.read()))\n"
        "same = {'content_hash': 'a', 'inventory': {'all': {'hosts': {}}}}\n"
        "print(type(provider).__name__, provider.diff('id', same, same).changes)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=pickled, capture_output=True, text=True, cwd=cwd, check=True
    )
    return done.stdout.split()


def test_the_engine_can_load_the_provider(program: ProgramRun, tmp_path: Path) -> None:
    """The provider host process unpickles `__provider` the way pulumi.dynamic does, in a fresh Python."""
    (bootstrap,) = [r for r in program.resources if r.type == DYNAMIC_RESOURCE]
    pickled = bootstrap.inputs["__provider"]["value"]  # the engine keeps it as a secret value
    assert _loaded(pickled, tmp_path) == ["HostBootstrapProvider", "False"]


def test_a_state_written_before_the_move_loads_its_provider(tmp_path: Path) -> None:
    """States written while the provider lived in lab/hosts.py name it there (lab/hosts.py)."""
    assert b"lab.hosts" in base64.b64decode(PROVIDER_BEFORE_THE_MOVE)
    assert _loaded(PROVIDER_BEFORE_THE_MOVE, tmp_path) == ["HostBootstrapProvider", "False"]
