"""What `labctl status` suggests can be typed as it is: for a stack outside stacks/ (the one
`labctl try --keep` leaves) it keeps `--stacks-dir`, and it never sends a stack that installs no
Kubernetes to `pulumi up`."""

from __future__ import annotations

from pathlib import Path

from tests.support.labctl import assert_one_line_error, labctl, loopback_values, write_stack
from tests.support.sshd import Sshd

NO_KUBERNETES = {"kubernetesInstall": "test machines that cannot run Kubernetes"}


def test_status_on_a_stack_without_kubernetes_points_at_the_local_runs(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    write_stack(tmp_path, "try", values | {"skip": NO_KUBERNETES})
    result = labctl("status", "--stack", "try", "--stacks-dir", tmp_path)
    assert_one_line_error(
        result, "no training run under node-a:", "skips the Kubernetes install", "--runs-dir"
    )
    assert "pulumi up" not in result.err and "no cluster" not in result.err


def test_status_hints_keep_the_stacks_folder(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "kept", loopback_values(sshd, tmp_path / "export"))
    result = labctl("status", "--stack", "kept", "--stacks-dir", tmp_path)
    # `pulumi up` reads stack files from stacks/ only: outside it, labctl's own command is the way.
    assert_one_line_error(
        result, "no cluster on node-a", f"`labctl hosts up --stack kept --stacks-dir {tmp_path}`"
    )
    assert "pulumi up" not in result.err
