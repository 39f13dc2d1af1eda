"""The lab_state role's record of the paths the lab creates, and reset's removal of them, run by
Ansible for real on this machine in a temporary folder (dpkg-query answered by a stand-in).

A directory the lab made may since hold another tool's files (podman writing into a CNI directory
the lab created), and a package's state may since serve the owner (a package of theirs that
needs containerd): reset removes such paths only once empty, or once the package is gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.local_play import run_tasks

PACKAGE_STATE = """\
if [ "$3" = containerd ] && [ -e "$FAKE_DIR/containerd-installed" ]; then printf 'ii '; else printf 'un '; fi
"""


def _claim_then_reset(tmp_path: Path, containerd_installed: bool) -> dict[str, bool]:
    root = tmp_path / "node"
    claims = [
        str(root / "etc" / "kubernetes"),
        {"path": str(root / "etc" / "cni"), "shared": True},
        {"path": str(root / "var" / "lib" / "cni"), "shared": True},
        {"path": str(root / "var" / "lib" / "containerd"), "package": "containerd"},
    ]
    variables = {"lab_state_dir": str(tmp_path / "state"), "lab_state_claim": claims, "ansible_become": False}
    done = run_tasks("lab_state", "claim.yml", tmp_path / "claim", variables)
    assert done.returncode == 0, done.stdout[-3000:]

    # While the lab ran: the cluster wrote into all of them, podman into /etc/cni.
    for path in ("etc/kubernetes/admin.conf", "etc/cni/10-flannel.conflist", "var/lib/cni/cache",
                 "var/lib/containerd/blob"):  # fmt: skip
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("the cluster's\n")
    (root / "etc" / "cni" / "87-podman.conflist").write_text("podman's\n")
    (root / "etc" / "cni" / "10-flannel.conflist").unlink()  # the cluster's own entry, gone first
    (root / "var" / "lib" / "cni" / "cache").unlink()
    if containerd_installed:
        (tmp_path / "containerd-installed").touch()

    done = run_tasks(
        "lab_state", "reset.yml", tmp_path / "reset", {"lab_state_dir": str(tmp_path / "state")},
        {"dpkg-query": PACKAGE_STATE}, {"FAKE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    return {
        p: (root / p).exists() for p in ("etc/kubernetes", "etc/cni", "var/lib/cni", "var/lib/containerd")
    }


@pytest.mark.parametrize("containerd_installed", [False, True])
def test_reset_removes_what_the_lab_created_unless_another_still_uses_it(
    tmp_path: Path, containerd_installed: bool
) -> None:
    left = _claim_then_reset(tmp_path, containerd_installed)
    assert left == {
        "etc/kubernetes": False,
        "etc/cni": True,  # podman's configuration is in it
        "var/lib/cni": False,  # empty once the cluster's entries went
        "var/lib/containerd": containerd_installed,
    }
    assert not (tmp_path / "state").exists()
