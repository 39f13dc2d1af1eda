"""Inputs that used to pass the loader and fail later, or never: each is refused in one line that
names the key and the fix, before anything runs."""

from __future__ import annotations

import copy
import os
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from lab.config import (
    DERIVED_NAMESPACE_SUFFIXES,
    DNS_LABEL_MAX,
    MAX_NODE_GPUS,
    ConfigError,
    check_stack_name,
    parse_config,
    stack_file,
)

GOOD: dict[str, Any] = {
    "nodes": [
        {"name": "gpu-a", "address": "192.168.50.11", "user": "ubuntu", "role": "server", "gpus": 1},
        {"name": "gpu-b", "address": "192.168.50.12", "user": "ubuntu", "role": "agent", "gpus": 1},
    ]
}


def _set(path: str, value: Any, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """GOOD (or `values`) with the dotted `path` set to `value`; digits index lists."""
    out = copy.deepcopy(values or GOOD)
    *parents, last = path.split(".")
    target: Any = out
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    target[int(last) if last.isdigit() else last] = value
    return out


def _refused(values: dict[str, Any], key: str, *words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(values)
    (problem,) = [p for p in info.value.problems if p.startswith(f"{key}:")] or [str(info.value.problems)]
    assert "\n" not in problem
    for word in words:
        assert word in problem, (word, problem)


@pytest.mark.parametrize("name", ["lab", "my-lab_2", "a.b", "...", "x" * 100])
def test_stack_names_by_pulumis_rule(name: str) -> None:
    assert check_stack_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "..", ".", "a/b", "my lab", "lab;id", "x" * 101, "ü"])
def test_a_stack_name_that_is_no_name_or_a_folder_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        stack_file(name, tmp_path / "stacks")
    (problem,) = info.value.problems
    assert "1 to 100 letters, digits, '_', '.' and '-'" in problem and "other than . and .." in problem


@pytest.mark.parametrize(
    "path", ['/keys/"lab"', "/keys/a\\b", "/keys/%d/id", "/keys/${HOME}/id", "/keys/a\nb"]
)
def test_a_key_path_ssh_would_misread_is_refused(path: str) -> None:
    _refused(_set("ssh", {"keyPath": path}), "k8scifar:ssh.keyPath", "ssh reads specially", "move or link")


def test_key_paths_of_ordinary_characters_stay_usable() -> None:
    for path in ("~/.ssh/id_ed25519", "/home/me/my keys/it's (lab) #1/id_ed25519"):
        assert parse_config(_set("ssh", {"keyPath": path})).ssh.key_path == path


@pytest.fixture
def release(tmp_path: Path) -> dict[str, Path]:
    """An ELF binary and a tar archive (plain and zstd-framed), readable by all, as releases are."""
    files = {"binary": Path(sys.executable).resolve(), "tar": tmp_path / "images.tar"}
    with tarfile.open(files["tar"], "w") as archive:
        archive.add(__file__, "member")
    files["zst"] = tmp_path / "images.tar.zst"
    files["zst"].write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    for path in (files["tar"], files["zst"]):
        path.chmod(0o644)
    return files


def _airgap(binary: Path | str, images: Path | str) -> dict[str, Any]:
    return _set("airgap", {"k3sBinary": str(binary), "imagesTarball": str(images)})


def test_airgap_takes_a_binary_and_a_tarball(release: dict[str, Path]) -> None:
    for images in (release["tar"], release["zst"]):
        airgap = parse_config(_airgap(release["binary"], images)).airgap
        assert airgap is not None and airgap.images_tarball == str(images)


@pytest.mark.parametrize(
    ("binary", "why"),
    [
        ("/etc/shadow", "kept from other users"),
        ("/dev/null", "not a regular file"),
        ("/etc", "not a regular file"),
        ("/nonexistent/k3s", "does not exist"),
        (__file__, "not an executable (ELF) file"),
    ],
)
def test_airgap_refuses_what_is_not_a_release_file(binary: str, why: str, release: dict[str, Path]) -> None:
    _refused(_airgap(binary, release["tar"]), "k8scifar:airgap.k3sBinary", why, "k3s binary")


def test_airgap_refuses_a_private_file_a_pipe_and_a_text_as_tarball(
    release: dict[str, Path], tmp_path: Path
) -> None:
    private = tmp_path / "private.tar"
    private.write_bytes(release["tar"].read_bytes())
    private.chmod(0o600)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    key = "k8scifar:airgap.imagesTarball"
    _refused(_airgap(release["binary"], private), key, "mode 0600", "chmod a+r")
    _refused(_airgap(release["binary"], pipe), key, "not a regular file")
    _refused(_airgap(release["binary"], __file__), key, "not a tar archive")
    assert stat.S_ISFIFO(pipe.stat().st_mode), "the check must not have opened the pipe"


def test_airgap_is_for_k3s_alone(release: dict[str, Path]) -> None:
    values = _set("distribution", "kubeadm", _airgap(release["binary"], release["tar"]))
    _refused(values, "k8scifar:airgap", "only k3s")


def test_a_namespace_leaves_room_for_the_lab_namespaces_named_after_it() -> None:
    room = DNS_LABEL_MAX - max(map(len, DERIVED_NAMESPACE_SUFFIXES))
    assert parse_config(_set("namespace", "n" * room)).namespace == "n" * room
    _refused(
        _set("namespace", "n" * (room + 1)),
        "k8scifar:namespace",
        f"{max(DERIVED_NAMESPACE_SUFFIXES, key=len)} namespace",
        f"at most {room}",
    )


@pytest.mark.parametrize(
    ("gpus", "why"), [(True, "true is not a number"), (MAX_NODE_GPUS + 1, "less than or equal")]
)
def test_gpus_are_a_count_a_machine_can_hold(gpus: Any, why: str) -> None:
    _refused(_set("nodes.0.gpus", gpus), "k8scifar:nodes[0].gpus", why)


def test_gpus_up_to_what_one_system_holds() -> None:
    values = _set("nodes.0.gpus", MAX_NODE_GPUS, _set("trainer.replicas", 2))
    assert parse_config(values).nodes[0].gpus == MAX_NODE_GPUS


@pytest.mark.parametrize("uid", [1000, 999, 0, 65534])
def test_the_trainer_uid_is_no_system_first_or_nobody_account(uid: int) -> None:
    _refused(_set("trainer", {"uid": uid}), "k8scifar:trainer.uid")


def test_two_nodes_on_loopback_are_one_machine() -> None:
    values = _set("nodes.1.address", "127.0.0.2", _set("nodes.0.address", "127.0.0.1"))
    _refused(values, "k8scifar:nodes", "gpu-a, gpu-b have loopback addresses", "address of its own machine")


def test_a_kubeconfig_names_a_file_and_a_cluster_that_is_there(tmp_path: Path) -> None:
    given = tmp_path / "kubeconfig"
    given.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://192.0.2.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: lab, context: {cluster: c, user: u}}]\n"
    )
    assert not parse_config(_set("kubeconfig", str(given))).bootstraps_hosts
    assert parse_config(GOOD).bootstraps_hosts
    _refused(_set("kubeconfig", str(tmp_path / "absent")), "k8scifar:kubeconfig", "is not a file")
    skipped = _set("skip", {"kubernetesInstall": "no cluster here"}, _set("kubeconfig", str(given)))
    _refused(skipped, "k8scifar:kubeconfig", "remove one of them")
