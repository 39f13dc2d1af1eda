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


# YAML, and no manifest of flannel's.
A_YAML_FILE = Path(__file__).parents[2] / "stacks" / "Pulumi.example-cpu.yaml"


@pytest.fixture
def kubeadm_release(release: dict[str, Path], tmp_path: Path) -> dict[str, Any]:
    """kubeadm's offline files as the stack names them: ELF binaries, a gzip tar of plugins, a
    plain tar of images and a manifest with flannel's DaemonSet, readable by all."""
    plugins = tmp_path / "cni-plugins-linux-amd64-v1.6.2.tgz"
    with tarfile.open(plugins, "w:gz") as archive:
        archive.add(__file__, "./bridge")
    manifest = tmp_path / "kube-flannel.yml"
    manifest.write_text(
        "kind: Namespace\napiVersion: v1\nmetadata: {name: kube-flannel}\n---\n"
        "kind: DaemonSet\napiVersion: apps/v1\nmetadata: {name: kube-flannel-ds, namespace: kube-flannel}\n"
    )
    for path in (plugins, manifest):
        path.chmod(0o644)
    binary = str(release["binary"])
    return {
        "kubeadm": binary,
        "kubelet": binary,
        "kubectl": binary,
        "cniPlugins": str(plugins),
        "images": [str(release["tar"])],
        "flannelManifest": str(manifest),
    }


def _kubeadm_airgap(files: dict[str, Any], version: str = "1.34.4") -> dict[str, Any]:
    values = _set("distribution", "kubeadm", _set("kubernetesVersion", version))
    return _set("airgap", {"kubeadm": files}, values)


def test_airgap_takes_kubeadm_s_files_and_image_tags(kubeadm_release: dict[str, Any]) -> None:
    files = kubeadm_release | {"corednsTag": "v1.12.0", "etcdTag": "3.5.21-0"}
    airgap = parse_config(_kubeadm_airgap(files)).airgap
    assert airgap is not None and airgap.kubeadm is not None
    assert airgap.kubeadm.images == kubeadm_release["images"]
    assert (airgap.kubeadm.coredns_tag, airgap.kubeadm.etcd_tag) == ("v1.12.0", "3.5.21-0")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("kubelet", __file__, ["not an executable (ELF) file", "kubelet binary", "dl.k8s.io"]),
        ("kubectl", "/nonexistent/kubectl", ["does not exist", "kubectl binary"]),
        ("cniPlugins", __file__, ["not a gzip tar archive", "cni-plugins-linux-<arch>"]),
        ("images", [], ["at least 1 item"]),
        ("flannelManifest", str(A_YAML_FILE), ["no DaemonSet kube-flannel/kube-flannel-ds"]),
        ("flannelManifest", sys.executable, ["not a YAML file", "kube-flannel.yml"]),
        (
            "corednsTag",
            "registry.k8s.io/coredns/coredns:v1.12.0",
            ["not an image tag", "without the image's name"],
        ),
        ("etcdTag", "-3.5", ["not an image tag"]),
    ],
)
def test_airgap_refuses_what_is_not_one_of_kubeadm_s_files(
    key: str, value: Any, words: list[str], kubeadm_release: dict[str, Any]
) -> None:
    _refused(_kubeadm_airgap(kubeadm_release | {key: value}), f"k8scifar:airgap.kubeadm.{key}", *words)


def test_airgap_refuses_a_compressed_image_archive(
    kubeadm_release: dict[str, Any], release: dict[str, Path]
) -> None:
    files = kubeadm_release | {"images": [kubeadm_release["images"][0], str(release["zst"])]}
    _refused(
        _kubeadm_airgap(files), "k8scifar:airgap.kubeadm.images", "not a plain tar archive", "docker save"
    )


def test_airgap_keys_of_one_distribution_are_refused_on_the_other(
    release: dict[str, Path], kubeadm_release: dict[str, Any]
) -> None:
    k3s_files = {"k3sBinary": str(release["binary"]), "imagesTarball": str(release["tar"])}
    kubeadm = _set("airgap", k3s_files, _kubeadm_airgap(kubeadm_release))
    _refused(
        kubeadm,
        "k8scifar:airgap.k3sBinary",
        "is k3s's",
        "installs kubeadm",
        "remove k3sBinary and imagesTarball",
    )
    k3s = _set("airgap", {"kubeadm": kubeadm_release}, GOOD)
    _refused(k3s, "k8scifar:airgap.kubeadm", "installs k3s", "or set distribution: kubeadm")
    _refused(_set("airgap", {"k3sBinary": str(release["binary"])}), "k8scifar:airgap", "add imagesTarball")
    _refused(_set("airgap", {}, _kubeadm_airgap(kubeadm_release)), "k8scifar:airgap", "under airgap.kubeadm")


def test_an_offline_kubeadm_needs_a_release_without_crictl(kubeadm_release: dict[str, Any]) -> None:
    _refused(
        _kubeadm_airgap(kubeadm_release, "1.31.14"),
        "k8scifar:airgap.kubeadm",
        "needs crictl",
        "1.32 or later",
    )
    assert parse_config(_kubeadm_airgap(kubeadm_release, "1.32.13")).airgap is not None


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
