"""The offline images' archives: importable by name, deterministic, and holding what they run.

Most checks build from stand-in inputs (tests/support/image_inputs.py) in well under a second;
the kube-proxy image's real netfilter programs are checked in the slow tier, built from the Debian
tree they come from and run in a chroot of the unpacked image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from lab.testbed import tools
from lab.testbed.images import build, names
from lab.testbed.images.build import KUBE_PROGRAMS, Image
from lab.testbed.images.pause import SOURCE, compile_pause
from tests.support.image_inputs import fake_tools_bin, host_debian_root, netfilter_tree
from tests.support.oci_layout import LayoutError, missing_libraries, read_archive, run_in_chroot, unpack


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    return fake_tools_bin(folder / "bin"), host_debian_root(folder / "root")


@pytest.fixture(scope="module")
def built(inputs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> list[Image]:
    return build(*inputs, tmp_path_factory.mktemp("out"))


def by_name(images: list[Image]) -> dict[str, Image]:
    return {image.name: image for image in images}


def test_every_archive_is_an_oci_layout_that_names_its_image(built: list[Image], tmp_path: Path) -> None:
    assert len(built) == 9
    for index, image in enumerate(built):
        read = read_archive(image.archive, tmp_path / str(index))
        assert read.name == image.name
        assert read.entrypoint == list(image.entrypoint)
        assert (
            json.loads((tmp_path / str(index) / "index.json").read_text())["manifests"][0]["digest"]
            == image.digest
        )


def test_a_changed_blob_or_a_wrong_diff_id_is_caught(built: list[Image], tmp_path: Path) -> None:
    """The layout check fails on a broken archive: a layer's bytes changed, then a config lying."""
    source = by_name(built)[names.ETCD].archive
    for fault in ("blob", "diff_id"):
        scratch = tmp_path / fault
        with tarfile.open(source) as tar:
            tar.extractall(scratch, filter="data")
        index = json.loads((scratch / "index.json").read_text())
        manifest = json.loads((scratch / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_text())
        if fault == "blob":
            layer = scratch / "blobs/sha256" / manifest["layers"][-1]["digest"][7:]
            layer.write_bytes(layer.read_bytes()[:-1] + b"x")
        else:
            config_path = scratch / "blobs/sha256" / manifest["config"]["digest"][7:]
            config = json.loads(config_path.read_text())
            config["rootfs"]["diff_ids"][0] = "sha256:" + "0" * 64
            data = json.dumps(config).encode()
            # Keep the config's own digest right, so only the diffID is wrong.
            digest = hashlib.sha256(data).hexdigest()
            (scratch / "blobs/sha256" / digest).write_bytes(data)
            manifest["config"].update(digest=f"sha256:{digest}", size=len(data))
            body = json.dumps(manifest).encode()
            manifest_digest = hashlib.sha256(body).hexdigest()
            (scratch / "blobs/sha256" / manifest_digest).write_bytes(body)
            index["manifests"][0].update(digest=f"sha256:{manifest_digest}", size=len(body))
            (scratch / "index.json").write_text(json.dumps(index))
        broken = tmp_path / f"{fault}.tar"
        with tarfile.open(broken, "w") as tar:
            for child in sorted(scratch.iterdir()):
                tar.add(child, arcname=child.name)
        with pytest.raises(LayoutError, match="does not hash" if fault == "blob" else "diff_ids"):
            read_archive(broken, tmp_path / f"{fault}-read")


def test_the_kube_binary_is_one_layer_shared_by_the_four_kube_images(
    built: list[Image], tmp_path: Path
) -> None:
    layers = {}
    for name in KUBE_PROGRAMS:
        read = read_archive(by_name(built)[name].archive, tmp_path / name.replace("/", "_"))
        layers[name] = read.layers
        root = unpack(tmp_path / name.replace("/", "_"), read, tmp_path / f"root-{KUBE_PROGRAMS[name]}")
        program = root / "usr/local/bin" / KUBE_PROGRAMS[name]
        assert os.readlink(program) == "kube"
        assert (root / "usr/local/bin/kube").read_text().startswith("#!/bin/sh\necho kube")
    assert len({layer[1] for layer in layers.values()}) == 1  # base, kube, ...: the same digest
    assert len({layer[-1] for layer in layers.values()}) == 4  # each its own link


def test_the_same_inputs_give_the_same_digests_and_a_changed_input_does_not(
    inputs: tuple[Path, Path], built: list[Image], tmp_path: Path
) -> None:
    again = build(*inputs, tmp_path / "again")
    assert [(i.name, i.digest) for i in again] == [(i.name, i.digest) for i in built]
    for first, second in zip(built, again, strict=True):
        assert first.archive.read_bytes() == second.archive.read_bytes(), first.name
    other_bin = fake_tools_bin(tmp_path / "other-bin", marker="changed")
    changed = by_name(build(other_bin, inputs[1], tmp_path / "changed"))
    for image in built:
        same = changed[image.name].digest == image.digest
        assert same == (image.name == names.PAUSE_IMAGE), image.name  # pause alone has no tool in it


def test_a_second_build_with_the_same_inputs_is_the_recorded_one(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    first = build(*inputs, tmp_path)
    written = {image.archive: image.archive.stat().st_mtime_ns for image in first}
    started = time.monotonic()
    assert build(*inputs, tmp_path) == first
    assert time.monotonic() - started < 0.5
    assert {image.archive: image.archive.stat().st_mtime_ns for image in first} == written


def test_the_names_are_kubeadms_with_the_tags_the_cluster_configuration_sets(tmp_path: Path) -> None:
    """kubeadm, given CLUSTER_CONFIGURATION_TAGS, names every image built here but pause."""
    kubeadm = tools.bin_dir() / "kubeadm"
    config = tmp_path / "cluster.json"
    body = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        **names.CLUSTER_CONFIGURATION_TAGS,
    }
    config.write_text(json.dumps(body))
    listed = subprocess.run(
        [str(kubeadm), "config", "images", "list", "--config", str(config)], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    ours = {names.KUBE_APISERVER, names.KUBE_CONTROLLER_MANAGER, names.KUBE_SCHEDULER, names.KUBE_PROXY}
    assert set(listed.stdout.split()) == ours | {names.ETCD, names.COREDNS, names.KUBEADM_DEFAULT_PAUSE}
    defaults = subprocess.run(
        [str(kubeadm), "config", "images", "list", "--kubernetes-version", names.KUBERNETES_VERSION],
        capture_output=True,
        text=True,
    )
    assert set(defaults.stdout.split()) == ours | {
        names.KUBEADM_DEFAULT_ETCD,
        names.KUBEADM_DEFAULT_COREDNS,
        names.KUBEADM_DEFAULT_PAUSE,
    }


def pause_behaves(program: Path) -> None:
    """Run `program` as pause with a child that exits at once: it must reap that child (no zombie
    left) and exit 0 on SIGTERM. Raises AssertionError saying which failed."""
    shell = subprocess.Popen(["sh", "-c", f"sleep 0.2 & exec {program}"], stderr=subprocess.PIPE)
    try:
        time.sleep(0.1)
        children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split()
        assert len(children) == 1, children
        child = Path(f"/proc/{children[0]}/stat")
        deadline = time.monotonic() + 2
        while child.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not child.exists(), f"child {children[0]} not reaped: {child.read_text().split()[2]}"
        shell.send_signal(signal.SIGTERM)
        assert shell.wait(timeout=5) == 0, "pause did not exit 0 on SIGTERM"
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()


def test_pause_reaps_its_children_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    pause_behaves(compile_pause(tmp_path / "pause"))


@pytest.mark.parametrize(
    ("fault", "change"),
    [
        ("no reaping", ("while (waitpid(-1, NULL, WNOHANG) > 0)", "while (0)")),
        ("no exit 0", ("return 0;\n}\n", "return 5;\n}\n")),
    ],
)
def test_the_pause_check_fails_on_a_broken_pause(fault: str, change: tuple[str, str], tmp_path: Path) -> None:
    text = SOURCE.read_text()
    assert text.count(change[0]) == 1, fault
    source = tmp_path / "pause.c"
    source.write_text(text.replace(*change))
    with pytest.raises(AssertionError):
        pause_behaves(compile_pause(tmp_path / "pause", source))


def test_every_library_the_copied_programs_load_is_in_the_image(built: list[Image], tmp_path: Path) -> None:
    """From readelf's reading, not the builder's; and the check fails once a library is removed."""
    for name in (names.KUBE_PROXY, names.FLANNEL, names.FLANNEL_CNI_PLUGIN):
        scratch = tmp_path / name.replace("/", "_")
        root = unpack(scratch, read_archive(by_name(built)[name].archive, scratch), scratch / "rootfs")
        assert (root / "usr/bin/cp").is_file() == (name != names.KUBE_PROXY)
        assert missing_libraries(root) == [], name
    (root / "usr/lib/x86_64-linux-gnu/libacl.so.1").unlink()
    assert missing_libraries(root) == ["usr/bin/cp: libacl.so.1"]


def test_the_kube_proxy_image_runs_its_netfilter_programs(tmp_path: Path) -> None:
    """Built from the real Debian tree and tools; each program runs in a chroot of the image."""
    images = by_name(build(tools.bin_dir(), netfilter_tree(), tmp_path / "out"))
    scratch = tmp_path / "kube-proxy"
    root = unpack(scratch, read_archive(images[names.KUBE_PROXY].archive, scratch), scratch / "rootfs")
    assert missing_libraries(root) == []
    expected = {
        "/usr/sbin/iptables": "(nf_tables)",
        "/usr/sbin/iptables-save": "(nf_tables)",
        "/usr/sbin/iptables-restore": "(nf_tables)",
        "/usr/sbin/ip6tables": "(nf_tables)",
        "/usr/sbin/ip6tables-save": "(nf_tables)",
        "/usr/sbin/ip6tables-restore": "(nf_tables)",
        "/usr/sbin/iptables-legacy": "(legacy)",
        "/usr/sbin/nft": "nftables v",
        "/usr/sbin/conntrack": "conntrack v",
        "/usr/local/bin/kube-proxy": "Kubernetes v1.34.4",
    }
    for program, says in expected.items():
        done = run_in_chroot(root, program, "--version")
        assert done.returncode == 0 and says in done.stdout, (program, done.stdout, done.stderr)
    # Extensions are loaded by name at run time: a rule with match extensions needs them.
    rule = ["-A", "INPUT", "-p", "tcp", "--dport", "1", "-m", "comment", "--comment", "x", "-j", "ACCEPT"]
    assert run_in_chroot(root, "/usr/sbin/iptables", *rule).returncode == 0
    shutil.rmtree(root / "usr/lib/x86_64-linux-gnu/xtables")
    broken = run_in_chroot(root, "/usr/sbin/iptables", *rule)
    assert broken.returncode != 0, "iptables ran a comment match without its extension"
