"""A machine's own settings file (lab/machine_settings.py): what the test machines need for a
kubelet (docs/kubelets.md) reaches kubeadm's configuration, the kubelet's and containerd's only
through it, a user's node without one keeps the lab's defaults, and a file the schema does not
know stops the play in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.machine_settings import MACHINE_SETTINGS_FILE, MachineSettings, read, render
from lab.paths import ANSIBLE_DIR
from lab.testbed.images import names
from lab.testbed.kubelet_host import TESTBED_SETTINGS, write_machine_settings
from tests.support.local_play import LOCAL, run_play
from tests.support.rules.kubeadm_rules import kubeadm_config_problems

KUBEADM = ANSIBLE_DIR / "roles" / "kubeadm"


def test_the_testbed_writes_what_docs_kubelets_md_found() -> None:
    settings = read(render(TESTBED_SETTINGS)).for_roles()
    assert settings == {
        "kubelet": {
            "oomScoreAdj": 0,
            "maxOpenFiles": 20000,
            "protectKernelDefaults": True,
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
        },
        "systemd_cgroup": False,
        "restrict_oom_score_adj": True,
        "sandbox_image": names.PAUSE_IMAGE,
        "kube_proxy": {"conntrack": {"maxPerCore": 0}},
        "own_pod_network": True,
        "shared_swap": True,
        "ignore_preflight_errors": ["Swap", "ImagePull"],
    }


def test_the_testbed_puts_the_file_in_the_machine_s_tree(tmp_path: Path) -> None:
    path = write_machine_settings(tmp_path)
    assert path == tmp_path / MACHINE_SETTINGS_FILE.lstrip("/")
    assert read(path.read_text()) == TESTBED_SETTINGS
    assert path.stat().st_mode & 0o777 == 0o644


def test_no_file_leaves_the_lab_s_defaults() -> None:
    assert MachineSettings().for_roles() == {
        "kubelet": {},
        "systemd_cgroup": True,
        "restrict_oom_score_adj": False,
        "sandbox_image": "",
        "kube_proxy": {},
        "own_pod_network": False,
        "shared_swap": False,
        "ignore_preflight_errors": [],
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "kubelet: {cgroupDriver: cgroupfs}\n",
            ["kubelet.cgroupDriver is no key of the file", "it takes cgroupDriver"],
        ),
        ("cgroupDriver: cgroupf\n", ["cgroupDriver input should be 'systemd' or 'cgroupfs'"]),
        ("kubelet: {maxOpenFiles: '20000'}\n", ["kubelet.maxOpenFiles input should be a valid integer"]),
        ("sharedSwap: [yes]\n", ["sharedSwap input should be a valid boolean"]),
        ("- a list\n", ["the file input should be a valid dictionary"]),
        ("a: [\n", ["is not YAML"]),
    ],
)
def test_a_file_the_schema_does_not_know_is_refused_in_one_line(text: str, words: list[str]) -> None:
    with pytest.raises(ValueError, match=MACHINE_SETTINGS_FILE) as info:
        read(text)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


PLAY = """\
- name: Read the machine's settings and render what kubeadm reads
  hosts: all
  gather_facts: false
  vars_files: ["{defaults}"]
  tasks:
    - name: Read the settings as the kubeadm role does
      ansible.builtin.include_role:
        name: machine_settings

    - name: Render kubeadm's configuration and the kubelet patch
      ansible.builtin.template:
        src: "{kubeadm}/templates/{{{{ item }}}}.j2"
        dest: "{{{{ lab_test_out }}}}/{{{{ item }}}}"
        mode: "0600"
      loop: [kubeadm.yaml, kubelet-patch.yaml]

    - name: Write the settings the roles apply
      ansible.builtin.copy:
        content: "{{{{ machine_settings_found | to_json }}}}"
        dest: "{{{{ lab_test_out }}}}/settings.json"
        mode: "0600"
"""


def _render(
    work: Path, settings: str | None, role: str = "server", airgap: dict[str, Any] | None = None
) -> tuple[int, str, dict[str, Any]]:
    """(exit status, output, {file name: text}) of the play on one node whose settings file holds
    `settings` (None: no file)."""
    work.mkdir(parents=True, exist_ok=True)
    settings_file = work / "machine-settings.yaml"
    if settings is not None:
        settings_file.write_text(settings)
        settings_file.chmod(0o644)
    out = work / "out"
    out.mkdir(exist_ok=True)
    variables = {
        "lab_stack": "test",
        "lab_test_out": str(out),
        "lab_machine_settings_file": str(settings_file),
        "lab_airgap": airgap or {},
        "node_role": role,
        "node_address": "10.77.0.11",
        "lab_server_name": "node",
        "lab_server_address": "10.77.0.11",
        "lab_api_port": 6443,
        "lab_kubernetes_version": "1.34.4",
        "lab_kubernetes_minor": 34,
        "lab_pod_network": "10.244.0.0/16",
        "lab_service_network": "10.96.0.0/12",
        "lab_kubeadm_token": "abcdef.0123456789abcdef",
        "kubeadm_ca_hash": "0" * 64,
        "lab_flannel_daemonset": ["kube-flannel", "kube-flannel-ds"],
        "lab_state_dir": str(work / "state"),
    }
    play = PLAY.format(defaults=KUBEADM / "defaults" / "main.yml", kubeadm=KUBEADM)
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    done = run_play(work, play, inventory, variables)
    files = {p.name: p.read_text() for p in out.iterdir()}
    return done.returncode, done.stdout + done.stderr, files


def _documents(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(files["kubeadm.yaml"])}


def test_a_test_machine_s_settings_reach_kubeadm_and_the_kubelet(tmp_path: Path) -> None:
    rc, output, files = _render(tmp_path / "server", render(TESTBED_SETTINGS))
    assert rc == 0, output
    assert kubeadm_config_problems(files["kubeadm.yaml"], "1.34.4") == []
    documents = _documents(files)
    init = documents["InitConfiguration"]
    assert init["nodeRegistration"]["ignorePreflightErrors"] == ["Swap", "ImagePull"]
    assert documents["KubeProxyConfiguration"]["conntrack"] == {"maxPerCore": 0}
    assert init["patches"] == {"directory": "/etc/kubernetes/k8scifar-patches"}
    patch = yaml.safe_load(files["kubelet-patch.yaml"])
    assert patch == TESTBED_SETTINGS.for_roles()["kubelet"]
    assert patch["cgroupDriver"] == "cgroupfs" and patch["failSwapOn"] is False

    rc, output, files = _render(tmp_path / "agent", render(TESTBED_SETTINGS), role="agent")
    assert rc == 0, output
    assert kubeadm_config_problems(files["kubeadm.yaml"], "1.34.4") == []
    join = _documents(files)["JoinConfiguration"]
    assert join["nodeRegistration"]["ignorePreflightErrors"] == ["Swap", "ImagePull"]
    assert join["patches"] == {"directory": "/etc/kubernetes/k8scifar-patches"}


def test_a_user_s_node_without_the_file_gets_the_lab_s_defaults(tmp_path: Path) -> None:
    rc, output, files = _render(tmp_path, None)
    assert rc == 0, output
    documents = _documents(files)
    assert "ignorePreflightErrors" not in documents["InitConfiguration"]["nodeRegistration"]
    assert "patches" not in documents["InitConfiguration"]
    assert "KubeProxyConfiguration" not in documents, "kube-proxy sizes its conntrack table itself"
    assert documents["KubeletConfiguration"]["cgroupDriver"] == "systemd"
    assert json.loads(files["settings.json"]) == MachineSettings().for_roles()
    cluster = documents["ClusterConfiguration"]
    assert "dns" not in cluster and "etcd" not in cluster, "kubeadm's own image tags"


def test_an_offline_install_s_image_tags_reach_the_cluster_configuration(tmp_path: Path) -> None:
    rc, output, files = _render(tmp_path, None, airgap={"coredns_tag": "v1.12.1", "etcd_tag": "3.6.4-0"})
    assert rc == 0, output
    assert kubeadm_config_problems(files["kubeadm.yaml"], "1.34.4") == []
    cluster = _documents(files)["ClusterConfiguration"]
    assert cluster["dns"] == {"imageTag": "v1.12.1"}
    assert cluster["etcd"] == {"local": {"imageTag": "3.6.4-0"}}
    assert "imageRepository" not in cluster, "the images stay registry.k8s.io's"


def test_a_wrong_or_foreign_settings_file_stops_the_play(tmp_path: Path) -> None:
    rc, output, _files = _render(tmp_path / "unknown", "kubelet: {cgroupDriver: cgroupfs}\n")
    assert rc != 0
    assert "kubelet.cgroupDriver is no key of the file" in output

    rc, output, _files = _render(tmp_path / "writable", render(TESTBED_SETTINGS))
    assert rc == 0, output
    os.chmod(tmp_path / "writable" / "machine-settings.yaml", 0o666)
    rc, output, _files = _render(tmp_path / "writable", None)
    assert rc != 0
    assert "writable by root alone" in output
