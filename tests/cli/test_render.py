"""`labctl render` and `labctl hosts`: the lab without the Pulumi CLI. Rendered objects pass the
official schema of the stack's Kubernetes release and kubectl's own reader, and hold no secret;
`hosts up|down` run the real playbooks through the runner `pulumi up` uses."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from pulumi.dynamic import CreateResult

from lab.bootstrap.resource import HostBootstrapProvider
from lab.cli.common.console import CliError
from lab.cli.hosts import kubeconfig_file, record_file, up
from lab.cli.render import manifests, release_secrets
from lab.cluster.program_run import FAKE_GENERATED_SECRET, FAKE_KUBECONFIG, FAKE_TOKEN, run_program
from lab.config import load_stack, read_stack_values, stack_file
from tests.support.labctl import Labctl, assert_one_line_error, labctl, node, write_stack
from tests.support.program import broken
from tests.support.sshd import NOWHERE, Sshd


@pytest.mark.parametrize("stack", ["example-gpu", "example-sweep"])
def test_render_writes_every_declared_object_for_kubectl(stack: str, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = labctl("render", "--stack", stack, out)
    assert result.code == 0, result.err
    files = sorted(out.iterdir())
    program = run_program(stack, read_stack_values(stack_file(stack)))
    # Grafana's admin Secret stays with Grafana's release, which is not rendered either.
    kept = release_secrets(program)
    assert [program.by_urn(urn).name for urn in kept] == ["grafana-admin"]
    declared = [r for r in program.kubernetes_objects() if r.urn not in kept]
    assert len(files) == len(declared) and f"wrote {len(files)} objects to {out}" in result.out
    assert "not rendered: the Helm release grafana" in result.out
    assert "with the Secret grafana-admin it reads; no dashboards" in result.out
    version = load_stack(stack).kubernetes_version
    objects = [yaml.safe_load(path.read_text()) for path in files]
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
    kinds = [obj["kind"] for obj in objects]
    # kubectl applies a folder in name order: the namespace before what lives in it, the
    # training run last.
    assert kinds[0] == "Namespace" and kinds[-1] == "StatefulSet"
    assert "Node" in kinds and not any(kind.endswith("Patch") or kind == "Secret" for kind in kinds)
    text = "".join(path.read_text() for path in files)
    # What the bootstrap hands the provider in place of the real secrets must not reach a file.
    assert FAKE_TOKEN not in text and FAKE_KUBECONFIG.splitlines()[-1] not in text
    assert FAKE_GENERATED_SECRET not in text
    kubectl = shutil.which("kubectl")
    if kubectl:
        # kubectl's own reader on every file, offline (`kubectl apply --dry-run=client` and
        # `create --dry-run=client` need an API server for discovery; `--local` does not).
        done = subprocess.run(
            [kubectl, "annotate", "--local", "-f", out, "-o", "name", "k8scifar.io/checked=1"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and len(done.stdout.splitlines()) == len(files), done.stderr
    else:
        print("kubectl is not installed: the files were checked against the schema only")


def test_render_refuses_a_secret_no_release_reads() -> None:
    program = broken("example-cpu")
    for release in program.helm_releases():
        release.dependencies = [d for d in release.dependencies if "Secret" not in d]
    with pytest.raises(CliError, match="declares Secret grafana-admin with a secret; secrets are never"):
        manifests(program)


def test_render_refuses_a_stack_without_kubernetes_and_a_used_folder(
    tmp_path: Path, labctl_in_process: Labctl
) -> None:
    assert_one_line_error(
        labctl_in_process("render", "--stack", "testbed", tmp_path / "new"), "skips the Kubernetes install"
    )
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "mine.yaml").write_text("kept\n")
    assert_one_line_error(
        labctl_in_process("render", "--stack", "example-cpu", tmp_path / "used"), "not an empty folder"
    )
    assert (tmp_path / "used" / "mine.yaml").read_text() == "kept\n"


def test_hosts_up_and_down_run_the_playbooks_and_name_unreachable_hosts(sshd: Sshd, tmp_path: Path) -> None:
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # No machine has these addresses (the test runs in the sshd's namespace): both fail at the first task.
    values = {
        "nodes": [node("node-a", NOWHERE, "server"), node("node-b", "192.0.2.4", "agent")],
        "ssh": {"keyPath": str(key), "port": 2, "hostKeyPolicy": "off"},
    }
    write_stack(tmp_path, "gone", values)
    # site.yml prepares every node at once; reset.yml starts with the agents, and stops there.
    for action, playbook, hosts in (
        ("up", "site.yml", ["node-a", "node-b"]),
        ("down", "reset.yml", ["node-b"]),
    ):
        result = labctl("hosts", action, "--stack", "gone", "--stacks-dir", tmp_path)
        assert result.code == 2 and "Traceback" not in result.err, result.err
        # The runner's progress, as `pulumi up` shows it: a line per host it could not reach,
        # then the end of the run in one line naming them and the full log.
        *progress, last = result.err.strip().splitlines()
        assert len(progress) == len(hosts), result.err
        for host, line in zip(hosts, sorted(line.strip() for line in progress), strict=True):
            assert line.startswith(f"unreachable {host} (root@192.0.2."), line
            assert "port 2): cannot log in over SSH" in line and "check the address" in line
        named = ", ".join(hosts)
        assert last.startswith(f"labctl: {playbook} stopped: {named} could not be reached, as said above"), (
            last
        )
        # The full log names the task each host failed at.
        log = Path(last.rsplit(" ", 1)[-1]).read_text()
        assert all(f"unreachable {host}: " in log for host in hosts), log
    assert not record_file("gone").exists()


def test_hosts_up_keeps_the_secrets_it_holds_private(monkeypatch: pytest.MonkeyPatch) -> None:
    """What Pulumi's state would hold (join secrets, the kubeconfig) stays in .lab/<stack>/, 0600
    in a 0700 folder, as docs/security.md says."""
    outs = {"token": {"k3s_token": "T"}, "kubeconfig": "apiVersion: v1\nkind: Config\n", "changed": {}}
    monkeypatch.setattr(HostBootstrapProvider, "create", lambda self, inputs: CreateResult("hosts-x", outs))
    up(load_stack("example-cpu"), "private-demo")
    for path in (record_file("private-demo"), kubeconfig_file("private-demo")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, path.parent
    assert kubeconfig_file("private-demo").read_text() == outs["kubeconfig"]
