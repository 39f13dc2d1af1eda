"""The kubeadm role's decisions, run by Ansible for real with kubeadm replaced by a recording stand-in.

`kubeadm init` writes admin.conf in an early phase: a re-run after a late failure must reset the
leftovers and init again (not skip init because admin.conf exists), and the failure must show
kubeadm's words with the join token taken out. A `kubeadm join` that failed leaves the CA and the
bootstrap kubeconfig, which the next join's preflight refuses (the stand-in applies kubeadm's
rule). containerd's configuration is backed up only when the machine had its own, never the
lab's from an earlier run. A node given GPUs after the install gets the nvidia runtime in
containerd although the lab's base configuration did not change.

An offline install adds only what the machine lacks and reset takes exactly that: an image
archive whose import failed is imported again and what every run imported is recorded; an
owner's kubeadm, kubelet or kubectl stops the install, and the operator's binaries are checked
before they replace the lab's own; an owner's /etc/default/kubelet stays; `kubeadm init` does not
start while containerd lacks an image it needs.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from lab.bootstrap.tokens import new_kubeadm_token
from lab.machine_settings import MachineSettings
from tests.support.local_play import run_tasks

DATA = Path(__file__).parent / "data"
# What the inventory and the machine_settings role give every task file: an online install on a
# node without a settings file of its own.
ONLINE = {"lab_airgap": {}, "machine_settings_found": MachineSettings().for_roles()}

# Records its arguments; `init` leaves admin.conf behind (the early kubeconfig phase) and fails
# late, printing the token the way kubeadm's join hint does, while $FAKE_DIR/fail exists.
FAKE_KUBEADM = """\
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  init)
    touch "$FAKE_DIR/admin.conf"
    if [ -f "$FAKE_DIR/fail" ]; then
      echo "[addons] error: unable to create CoreDNS; kubeadm join --token $(cat "$FAKE_DIR/token")" >&2
      exit 1
    fi ;;
  reset) rm -f "$FAKE_DIR/admin.conf" ;;
  config) cat "$FAKE_DIR/needed" ;;
esac
"""


def _init(work: Path, token: str, **more: Any) -> tuple[int, str]:
    variables = {
        **ONLINE,
        "lab_kubeadm_token": token,
        "kubeadm_config_file": str(work / "kubeadm.yaml"),
        "kubeadm_admin_kubeconfig": str(work / "admin.conf"),
        "kubeadm_init_done": str(work / "init-done"),
        "kubeadm_init_leftovers": [str(work / "admin.conf")],
        **more,
    }
    fakes = {"kubeadm": FAKE_KUBEADM, "ctr": FAKE_CTR}
    done = run_tasks("kubeadm", "init.yml", work / "ansible", variables, fakes, {"FAKE_DIR": str(work)})
    return done.returncode, done.stdout + done.stderr


def _calls(work: Path) -> list[str]:
    calls = work / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_rerun_after_a_late_init_failure_resets_and_inits_again(tmp_path: Path) -> None:
    token = new_kubeadm_token()
    (tmp_path / "token").write_text(token)
    (tmp_path / "fail").touch()

    rc, output = _init(tmp_path, token)
    assert rc != 0
    assert "unable to create CoreDNS" in output, "kubeadm's error must reach the operator"
    assert "<join token>" in output
    assert token not in output and token.split(".")[1] not in output
    assert (tmp_path / "admin.conf").exists() and not (tmp_path / "init-done").exists()

    (tmp_path / "fail").unlink()
    rc, output = _init(tmp_path, token)
    assert rc == 0, output
    config = str(tmp_path / "kubeadm.yaml")
    assert _calls(tmp_path) == [f"init --config {config}", "reset --force", f"init --config {config}"]
    assert (tmp_path / "init-done").exists()

    rc, output = _init(tmp_path, token)
    assert rc == 0, output
    assert len(_calls(tmp_path)) == 3, "a completed init is not run again"


# `join` applies kubeadm's join preflight to the files (cmd/kubeadm/app/preflight/checks.go,
# JoinNodeChecks: FileAvailable for kubelet.conf, bootstrap-kubelet.conf and the CA, in kubeadm's
# own words), then writes the CA and the bootstrap kubeconfig (the kubelet-start phase) and, unless
# $FAKE_DIR/fail exists, kubelet.conf once the kubelet bootstrapped, removing the bootstrap file.
# `reset` removes the files (cleanupnode.go).
FAKE_KUBEADM_JOIN = """\
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  join)
    refused=
    for f in kubelet.conf bootstrap-kubelet.conf ca.crt; do
      if [ -e "$FAKE_DIR/$f" ]; then
        echo "[ERROR FileAvailable-$f]: $FAKE_DIR/$f already exists" >&2
        refused=yes
      fi
    done
    [ -z "$refused" ] || { echo "[preflight] Some fatal errors occurred" >&2; exit 1; }
    touch "$FAKE_DIR/ca.crt" "$FAKE_DIR/bootstrap-kubelet.conf"
    if [ -f "$FAKE_DIR/fail" ]; then echo "timed out waiting for the kubelet to bootstrap" >&2; exit 1; fi
    touch "$FAKE_DIR/kubelet.conf"
    rm -f "$FAKE_DIR/bootstrap-kubelet.conf" ;;
  reset) rm -f "$FAKE_DIR/kubelet.conf" "$FAKE_DIR/bootstrap-kubelet.conf" "$FAKE_DIR/ca.crt" ;;
esac
"""


def _join(work: Path) -> tuple[int, str]:
    variables = {
        **ONLINE,
        "node_role": "agent",
        "node_address": "10.77.0.12",
        "lab_server_name": "node",
        "lab_server_address": "10.77.0.11",
        "lab_api_port": 6443,
        "lab_kubernetes_minor": 33,
        "lab_kubeadm_token": new_kubeadm_token(),
        "kubeadm_ca_hash": "0" * 64,
        "kubeadm_config_file": str(work / "kubeadm.yaml"),
        "kubeadm_kubelet_kubeconfig": str(work / "kubelet.conf"),
        "kubeadm_join_leftovers": [str(work / "bootstrap-kubelet.conf"), str(work / "ca.crt")],
    }
    done = run_tasks(
        "kubeadm",
        "worker.yml",
        work / "ansible",
        variables,
        {"kubeadm": FAKE_KUBEADM_JOIN},
        {"FAKE_DIR": str(work)},
    )
    return done.returncode, done.stdout + done.stderr


def test_a_rerun_after_a_failed_join_resets_and_joins_again(tmp_path: Path) -> None:
    (tmp_path / "fail").touch()
    rc, _output = _join(tmp_path)
    assert rc != 0
    assert (tmp_path / "ca.crt").exists() and (tmp_path / "bootstrap-kubelet.conf").exists()

    (tmp_path / "fail").unlink()
    rc, output = _join(tmp_path)
    assert rc == 0, output
    join = f"join --config {tmp_path / 'kubeadm.yaml'}"
    assert _calls(tmp_path) == [join, "reset --force", join]

    rc, output = _join(tmp_path)
    assert rc == 0, output
    assert len(_calls(tmp_path)) == 3, "a completed join is not run again"


def _backup(work: Path) -> str | None:
    variables = {
        "kubeadm_containerd_config": str(work / "config.toml"),
        "kubeadm_containerd_base": str(work / "config.toml.k8scifar-base"),
        "kubeadm_containerd_backup": str(work / "saved" / "config.toml.orig"),
    }
    done = run_tasks("kubeadm", "containerd_backup.yml", work / "ansible", variables)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = work / "saved" / "config.toml.orig"
    return saved.read_text() if saved.exists() else None


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes the backup owned by root; CI runs as root")
def test_only_the_machine_s_own_containerd_configuration_is_kept(tmp_path: Path) -> None:
    ubuntu, debian = tmp_path / "ubuntu", tmp_path / "debian"
    for machine in (ubuntu, debian):
        (machine / "saved").mkdir(parents=True)
    (debian / "config.toml").write_text("# the machine's own\n")

    # First run: Ubuntu's containerd ships no configuration, Debian's machine has one.
    assert _backup(ubuntu) is None
    assert _backup(debian) == "# the machine's own\n"

    # The lab writes its configuration; a second run must not take it for the machine's.
    for machine in (ubuntu, debian):
        (machine / "config.toml.k8scifar-base").write_text("# the lab's\n")
        (machine / "config.toml").write_text("# the lab's\n")
    assert _backup(ubuntu) is None
    assert _backup(debian) == "# the machine's own\n"


@contextmanager
def _served(folder: Path) -> Iterator[str]:
    """`folder` on a web server on loopback, as a release page serves its assets."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _flannel(work: Path, url: str, **pins: str) -> tuple[int, str]:
    variables = {
        **ONLINE,
        "kubeadm_flannel_manifest_url": url,
        "kubeadm_flannel_manifest": str(work / "kube-flannel.yml"),
        "kubeadm_admin_kubeconfig": str(work / "admin.conf"),
        "kubeadm_flannel_iface_argv": [],
        **pins,
    }
    fakes = {"kubectl": 'echo "$*" >> "$FAKE_DIR/calls"'}
    done = run_tasks("kubeadm", "flannel.yml", work / "ansible", variables, fakes, {"FAKE_DIR": str(work)})
    return done.returncode, done.stdout + done.stderr


def test_a_flannel_manifest_that_is_not_the_pinned_one_is_never_applied(tmp_path: Path) -> None:
    site = tmp_path / "release"
    site.mkdir()
    (site / "kube-flannel.yml").write_text("kind: DaemonSet  # what a moved tag or a proxy serves\n")
    with _served(site) as base:
        rc, output = _flannel(tmp_path, f"{base}/kube-flannel.yml")
    assert rc != 0 and "checksum" in output.lower(), output
    assert _calls(tmp_path) == [], "kubectl applied a manifest that is not the pinned one"
    assert not (tmp_path / "kube-flannel.yml").exists()


def test_the_pinned_flannel_manifest_is_applied_from_the_checked_copy(tmp_path: Path) -> None:
    site = tmp_path / "release"
    site.mkdir()
    manifest = site / "kube-flannel.yml"
    manifest.write_text("kind: DaemonSet\n")
    pinned = hashlib.sha256(manifest.read_bytes()).hexdigest()
    with _served(site) as base:
        rc, output = _flannel(tmp_path, f"{base}/kube-flannel.yml", kubeadm_flannel_manifest_sha256=pinned)
    assert rc == 0, output
    assert _calls(tmp_path) == [f"--kubeconfig {tmp_path}/admin.conf apply -f {tmp_path}/kube-flannel.yml"]


# containerd, kubeadm, nvidia-ctk and systemctl as the containerd tasks meet them: nvidia-ctk adds
# its runtime to the file it edits (as `runtime configure --runtime=containerd` does), systemctl
# reports containerd and the kubelet loaded and running and records what it is asked to do.
CONTAINERD_FAKES = {
    "containerd": 'cat "$FAKE_DIR/default.toml"',
    "kubeadm": "echo registry.k8s.io/pause:3.10",
    "nvidia-ctk": (
        'echo "$*" >> "$FAKE_DIR/calls"\n'
        'printf \'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\\n'
        '  BinaryName = "/usr/bin/nvidia-container-runtime"\\n\' >> "$FAKE_DIR/config.toml"'
    ),
    "systemctl": (
        'case "$1" in\n'
        "  show) printf 'LoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n' ;;\n"
        "  is-enabled) echo enabled ;;\n"
        '  *) echo "systemctl $*" >> "$FAKE_DIR/calls" ;;\n'
        "esac"
    ),
}


def _containerd(work: Path, gpus: int) -> list[str]:
    """The kubeadm role's containerd tasks on a node with `gpus` GPUs; the calls they made."""
    (work / "calls").unlink(missing_ok=True)
    variables = {
        **ONLINE,
        "kubeadm_containerd_config": str(work / "config.toml"),
        "kubeadm_containerd_base": str(work / "config.toml.k8scifar-base"),
        "kubeadm_containerd_backup": str(work / "config.toml.orig"),
        "lab_kubernetes_version": "1.33.5",
        "node_gpus": gpus,
    }
    done = run_tasks(
        "kubeadm", "containerd.yml", work / "ansible", variables, CONTAINERD_FAKES, {"FAKE_DIR": str(work)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return _calls(work)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the role writes containerd's files owned by root; CI runs as root"
)
def test_a_node_given_gpus_later_gets_the_nvidia_runtime(tmp_path: Path) -> None:
    """The lab's base configuration does not change when a node gets GPUs after the install, so
    the runtime is added because containerd's configuration lacks it, and containerd restarted."""
    (tmp_path / "default.toml").write_text((DATA / "containerd-1.7.24-default.toml").read_text())
    assert _containerd(tmp_path, 0) == ["systemctl restart containerd"]
    assert "nvidia" not in (tmp_path / "config.toml").read_text()
    assert _containerd(tmp_path, 0) == [], "an unchanged node is left alone"

    assert _containerd(tmp_path, 1) == [
        "runtime configure --runtime=containerd",
        "systemctl restart containerd",
    ]
    assert "nvidia-container-runtime" in (tmp_path / "config.toml").read_text()
    assert _containerd(tmp_path, 1) == [], "a node that has the runtime is left alone"


# An offline install's CNI plugins, images and unit files, and reset removing exactly what it added.
# `ctr` keeps containerd's k8s.io image references in $FAKE_DIR/images: `import` adds the ones its
# archive names (a line of the archive's member `refs`), `remove` takes its arguments out. The
# import of the archive copy named in $FAKE_DIR/fail-import fails, once.
FAKE_CTR = """\
echo "$*" >> "$FAKE_DIR/calls"
shift 2
case "$1 $2" in
  "images list") cat "$FAKE_DIR/images" ;;
  "images import")
    if [ -f "$FAKE_DIR/fail-import" ] && [ "$(cat "$FAKE_DIR/fail-import")" = "$(basename "$3")" ]; then
      rm "$FAKE_DIR/fail-import"; echo "ctr: failed to import $3: unexpected EOF" >&2; exit 1
    fi
    tar -xOf "$3" refs >> "$FAKE_DIR/images" ;;
  "images remove") shift 2; for ref in "$@"; do grep -vxF "$ref" "$FAKE_DIR/images" > "$FAKE_DIR/left"
    mv "$FAKE_DIR/left" "$FAKE_DIR/images"; done ;;
esac
"""
# dpkg-query finds containerd installed, so lab_packages asks apt for nothing.
AIRGAP_FAKES = {
    "ctr": FAKE_CTR,
    "systemctl": CONTAINERD_FAKES["systemctl"],
    "dpkg-query": "echo 'ii  containerd 1.7.24'",
}
MARK = "# Managed by the K8sCIFAR lab (stack test)\n"


def _airgap_vars(work: Path) -> dict[str, Any]:
    return {
        **ONLINE,
        "lab_airgap": {"images": [str(work / "images.tar")]},
        "lab_state_dir": str(work / "state"),
        "kubeadm_airgap_dir": str(work / "airgap"),
        "kubeadm_cni_bin_dir": str(work / "cni-bin"),
        "kubeadm_cni_record": str(work / "state" / "cni"),
        "kubeadm_images_record": str(work / "state" / "images"),
        "kubeadm_kubelet_unit": str(work / "kubelet.service"),
        "kubeadm_kubelet_dropin": str(work / "10-kubeadm.conf"),
        "kubeadm_kubelet_env": str(work / "kubelet.env"),
    }


def _tar(path: Path, members: dict[str, str], gzip: bool = False) -> None:
    with tarfile.open(path, "w:gz" if gzip else "w") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))


def test_an_offline_install_adds_only_what_is_missing_and_reset_takes_exactly_that(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "airgap").mkdir()
    _tar(
        tmp_path / "airgap" / "cni-plugins.tgz",
        {"./bridge": "lab's bridge", "./loopback": "lab's loopback"},
        gzip=True,
    )
    _tar(tmp_path / "images.tar", {"refs": "registry.k8s.io/pause:3.10\nregistry.k8s.io/etcd:3.6.4-0\n"})
    (tmp_path / "cni-bin").mkdir()
    (tmp_path / "cni-bin" / "bridge").write_text("owner's bridge")
    (tmp_path / "images").write_text("docker.io/owner/tool:1\n")
    variables, env = _airgap_vars(tmp_path), {"FAKE_DIR": str(tmp_path)}
    for tasks in ("airgap_cni.yml", "airgap_images.yml"):
        done = run_tasks("kubeadm", tasks, tmp_path / tasks, variables, AIRGAP_FAKES, env)
        assert done.returncode == 0, done.stdout + done.stderr

    assert (tmp_path / "cni-bin" / "bridge").read_text() == "owner's bridge", "an owner's plugin stays"
    assert (tmp_path / "cni-bin" / "loopback").read_text() == "lab's loopback"
    assert (tmp_path / "state" / "cni").read_text().split() == [str(tmp_path / "cni-bin" / "loopback")]
    assert (tmp_path / "state" / "images").read_text().split() == [
        "registry.k8s.io/etcd:3.6.4-0",
        "registry.k8s.io/pause:3.10",
    ]

    (tmp_path / "kubelet.service").write_text(MARK + "[Service]\n")
    (tmp_path / "10-kubeadm.conf").write_text(MARK + "[Service]\n")
    (tmp_path / "kubelet.env").write_text("KUBELET_EXTRA_ARGS=--owner's\n")
    (tmp_path / "calls").unlink()
    done = run_tasks("kubeadm", "airgap_reset.yml", tmp_path / "reset", variables, AIRGAP_FAKES, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "images").read_text().split() == ["docker.io/owner/tool:1"]
    assert sorted(p.name for p in (tmp_path / "cni-bin").iterdir()) == ["bridge"]
    assert not (tmp_path / "kubelet.service").exists() and not (tmp_path / "10-kubeadm.conf").exists()
    assert (tmp_path / "kubelet.env").exists(), "a file without the lab's mark is not the lab's"
    assert "systemctl daemon-reload" in _calls(tmp_path)


def test_an_import_that_failed_is_retried_and_reset_takes_what_every_run_imported(tmp_path: Path) -> None:
    """The list of what containerd held is taken before the lab's first import only: images a
    failed run imported are the lab's on the next run, and the archive that failed is imported
    again although its copy did not change."""
    (tmp_path / "state").mkdir()
    (tmp_path / "airgap").mkdir()
    archives = [tmp_path / "control-plane.tar", tmp_path / "network.tar"]
    _tar(archives[0], {"refs": "registry.k8s.io/pause:3.10\nregistry.k8s.io/etcd:3.6.4-0\n"})
    _tar(archives[1], {"refs": "ghcr.io/flannel-io/flannel:v0.27.4\n"})
    (tmp_path / "images").write_text("docker.io/owner/tool:1\n")
    (tmp_path / "fail-import").write_text("images-1.tar")
    variables = {**_airgap_vars(tmp_path), "lab_airgap": {"images": [str(a) for a in archives]}}
    env = {"FAKE_DIR": str(tmp_path)}
    record = tmp_path / "state" / "images"

    done = run_tasks("kubeadm", "airgap_images.yml", tmp_path / "first", variables, AIRGAP_FAKES, env)
    assert done.returncode != 0
    assert record.read_text().split() == ["registry.k8s.io/etcd:3.6.4-0", "registry.k8s.io/pause:3.10"]
    assert "ctr could not import" in done.stdout and "unexpected EOF" in done.stdout, done.stdout

    done = run_tasks("kubeadm", "airgap_images.yml", tmp_path / "again", variables, AIRGAP_FAKES, env)
    assert done.returncode == 0, done.stdout + done.stderr
    imports = [Path(call.split()[-1]).name for call in _calls(tmp_path) if " import " in call]
    assert imports == ["images-0.tar", "images-1.tar", "images-1.tar"], "the failed archive again, only"
    assert record.read_text().split() == [
        "ghcr.io/flannel-io/flannel:v0.27.4",
        "registry.k8s.io/etcd:3.6.4-0",
        "registry.k8s.io/pause:3.10",
    ]

    done = run_tasks("kubeadm", "airgap_images.yml", tmp_path / "third", variables, AIRGAP_FAKES, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len([call for call in _calls(tmp_path) if " import " in call]) == 3, "an imported archive stays"

    done = run_tasks("kubeadm", "airgap_reset.yml", tmp_path / "reset", variables, AIRGAP_FAKES, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "images").read_text().split() == ["docker.io/owner/tool:1"]
    assert not record.exists() and not (tmp_path / "state" / "kubeadm-images-before").exists()
    assert not (tmp_path / "airgap").exists()


BINARIES = ("kubeadm", "kubelet", "kubectl")


def _release_binaries(folder: Path, release: str) -> dict[str, str]:
    """kubeadm, the kubelet and kubectl as stand-ins answering for `release` as the real ones do."""
    folder.mkdir(parents=True, exist_ok=True)
    answers = {
        "kubeadm": release,
        "kubelet": f"Kubernetes {release}",
        "kubectl": f"Client Version: {release}",
    }
    for name, answer in answers.items():
        (folder / name).write_text(f"#!/bin/sh\necho '{answer}'\n")
        (folder / name).chmod(0o755)
    return {name: str(folder / name) for name in answers}


def _offline_vars(work: Path) -> dict[str, Any]:
    """An offline install whose binaries, unit files and CNI plugins go below `work`."""
    for folder in ("state", "usr-bin"):
        (work / folder).mkdir(exist_ok=True)
    _tar(work / "cni-plugins.tgz", {"./loopback": "lab's loopback"}, gzip=True)
    _tar(work / "images.tar", {"refs": "registry.k8s.io/pause:3.10\n"})
    variables = _airgap_vars(work)
    return {
        **variables,
        "lab_kubernetes_version": "1.33.5",
        "lab_airgap": {
            **variables["lab_airgap"],
            **_release_binaries(work / "operator", "v1.33.5"),
            "cni_plugins": str(work / "cni-plugins.tgz"),
        },
        "kubeadm_binaries": {name: str(work / "usr-bin" / name) for name in BINARIES},
        "kubeadm_kubelet_dropin_dir": str(work / "kubelet.service.d"),
    }


def _offline_install(work: Path, variables: dict[str, Any]) -> tuple[int, str]:
    """What site.yml runs of the offline install's files: the look at the binaries already there,
    the claim of the paths the install creates (tasks/record.yml), then tasks/airgap.yml."""
    env = {"FAKE_DIR": str(work)}
    done = run_tasks("kubeadm", "airgap_check.yml", work / "check", variables, AIRGAP_FAKES, env)
    if done.returncode == 0:
        claim = [
            *variables["kubeadm_binaries"].values(),
            variables["kubeadm_kubelet_unit"],
            variables["kubeadm_kubelet_dropin_dir"],
            variables["kubeadm_kubelet_env"],
        ]
        claimed = run_tasks("lab_state", "claim.yml", work / "claim", {**variables, "lab_state_claim": claim})
        assert claimed.returncode == 0, claimed.stdout + claimed.stderr
        done = run_tasks("kubeadm", "airgap.yml", work / "install", variables, AIRGAP_FAKES, env)
    return done.returncode, done.stdout + done.stderr


def test_an_offline_install_refuses_an_owner_s_kubectl_and_changes_nothing(tmp_path: Path) -> None:
    variables = _offline_vars(tmp_path)
    kubectl = tmp_path / "usr-bin" / "kubectl"
    kubectl.write_text("the owner's kubectl, from pkgs.k8s.io\n")

    rc, output = _offline_install(tmp_path, variables)
    assert rc != 0
    assert f"{kubectl} is already there and not the lab's" in output, output
    assert "remove the owner's package" in output and "use the packaged install" in output
    assert kubectl.read_text() == "the owner's kubectl, from pkgs.k8s.io\n"
    assert [path.name for path in kubectl.parent.iterdir()] == ["kubectl"]
    assert not (tmp_path / "state" / "created").exists(), "nothing is claimed before the refusal"
    assert not (tmp_path / "kubelet.service").exists() and not (tmp_path / "airgap").exists()


def test_a_rerun_keeps_the_lab_s_binaries_and_checks_new_ones_before_they_replace_them(
    tmp_path: Path,
) -> None:
    variables = _offline_vars(tmp_path)
    operator = Path(variables["lab_airgap"]["kubelet"]).parent
    installed = tmp_path / "usr-bin"

    rc, output = _offline_install(tmp_path, variables)
    assert rc == 0, output
    for name in BINARIES:
        assert (installed / name).read_text() == (operator / name).read_text()
    assert (tmp_path / "kubelet.env").read_text().startswith(MARK.rstrip("\n"))

    rc, output = _offline_install(tmp_path, variables)
    assert rc == 0, f"the lab's own binaries are not the owner's:\n{output}"

    other = _release_binaries(tmp_path / "other", "v1.32.9")
    rc, output = _offline_install(tmp_path, {**variables, "lab_airgap": {**variables["lab_airgap"], **other}})
    assert rc != 0
    for name in BINARIES:
        assert (installed / name).read_text() == (operator / name).read_text(), f"{name} was replaced"
    assert f"{other['kubeadm']} is v1.32.9, and the stack runs Kubernetes v1.33.5" in output, output


def test_an_owner_s_kubelet_environment_file_survives_install_and_reset(tmp_path: Path) -> None:
    variables = _offline_vars(tmp_path)
    kubelet_env = tmp_path / "kubelet.env"
    kubelet_env.write_text("KUBELET_EXTRA_ARGS=--node-ip=10.77.0.11\n")

    rc, output = _offline_install(tmp_path, variables)
    assert rc == 0, output
    assert kubelet_env.read_text() == "KUBELET_EXTRA_ARGS=--node-ip=10.77.0.11\n"
    assert (tmp_path / "kubelet.service").read_text().startswith(MARK.rstrip("\n"))

    env = {"FAKE_DIR": str(tmp_path)}
    done = run_tasks("kubeadm", "airgap_reset.yml", tmp_path / "reset", variables, AIRGAP_FAKES, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert kubelet_env.read_text() == "KUBELET_EXTRA_ARGS=--node-ip=10.77.0.11\n"
    assert not (tmp_path / "kubelet.service").exists()


# What `kubeadm config images list` prints for the configuration of Kubernetes v1.33.5.
CONTROL_PLANE_IMAGES = [
    "registry.k8s.io/kube-apiserver:v1.33.5",
    "registry.k8s.io/kube-controller-manager:v1.33.5",
    "registry.k8s.io/kube-scheduler:v1.33.5",
    "registry.k8s.io/kube-proxy:v1.33.5",
    "registry.k8s.io/coredns/coredns:v1.12.0",
    "registry.k8s.io/pause:3.10",
    "registry.k8s.io/etcd:3.5.21-0",
]


OWN_PAUSE = "registry.example/own/pause:1"


def _but(*names: str) -> list[str]:
    return [image for image in CONTROL_PLANE_IMAGES if not any(f"/{name}:" in image for name in names)]


@pytest.mark.parametrize(
    ("sandbox_image", "held", "missing"),
    [
        # The machine's own pause: kubeadm's is not needed, the scheduler is.
        (OWN_PAUSE, _but("kube-scheduler", "pause"), "registry.k8s.io/kube-scheduler:v1.33.5"),
        ("", _but("pause", "etcd"), "registry.k8s.io/pause:3.10, registry.k8s.io/etcd:3.5.21-0"),
        (OWN_PAUSE, _but("pause"), None),
    ],
)
def test_an_offline_init_names_every_image_containerd_lacks_before_it_runs(
    tmp_path: Path, sandbox_image: str, held: list[str], missing: str | None
) -> None:
    (tmp_path / "needed").write_text("\n".join(CONTROL_PLANE_IMAGES) + "\n")
    (tmp_path / "images").write_text("docker.io/owner/tool:1\n" + "\n".join(held) + "\n")
    settings = {**ONLINE["machine_settings_found"], "sandbox_image": sandbox_image}
    offline = {"images": [str(tmp_path / "images.tar")]}
    rc, output = _init(tmp_path, new_kubeadm_token(), lab_airgap=offline, machine_settings_found=settings)

    init = f"init --config {tmp_path / 'kubeadm.yaml'}"
    if missing is None:
        assert rc == 0, output
        assert init in _calls(tmp_path)
    else:
        assert rc != 0
        assert f"containerd's k8s.io namespace lacks {missing}, which kubeadm init needs" in output, output
        assert init not in _calls(tmp_path), "kubeadm init ran without its images"
