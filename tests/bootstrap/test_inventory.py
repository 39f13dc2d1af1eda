"""The inventory generated from every stack file, read back by Ansible itself."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.bootstrap.inventory import (
    LEGACY_KNOWN_HOSTS,
    build_inventory,
    known_hosts_file,
    ssh_common_args,
    with_known_hosts,
)
from lab.config import ConfigError, HostKeyPolicy, Node, Ssh, load_stack, parse_config
from lab.remote.ssh import Remote
from tests.support.shipped import shipped_stacks

ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def _ansible_view(inventory: dict, tmp_path: Path) -> dict:
    """What `ansible-inventory --list` makes of the generated inventory."""
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    out = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(path), "--list"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("stack", shipped_stacks())
def test_inventory_from_every_stack(stack: str, tmp_path: Path) -> None:
    lab = load_stack(stack)
    known_hosts = tmp_path / "known_hosts"
    view = _ansible_view(build_inventory(lab, known_hosts), tmp_path)

    assert view["server"]["hosts"] == [lab.server.name]
    assert sorted(view.get("agent", {}).get("hosts", [])) == sorted(n.name for n in lab.agents)
    assert sorted(view.get("gpu", {}).get("hosts", [])) == sorted(n.name for n in lab.gpu_nodes)
    assert view["nfs_server"]["hosts"] == [lab.nfs_server.name]
    for node in lab.nodes:
        host = view["_meta"]["hostvars"][node.name]
        assert (host["ansible_host"], host["ansible_user"], host["ansible_port"]) == (
            node.address,
            node.user,
            lab.ssh.port,
        )
        assert (host["node_gpus"], host["node_interface"]) == (node.gpus, node.interface or "")
        assert host["ansible_ssh_private_key_file"] == lab.ssh.key_path
        assert host["lab_registry_endpoint"] == lab.registry_endpoint
        assert host["lab_distribution"] == lab.distribution.value
        assert host["lab_nfs_allowed_networks"] == lab.nfs_allowed_networks
        assert host["lab_trainer_uid"] == lab.trainer.uid
        assert host["ansible_ssh_common_args"] == ssh_common_args(lab.ssh.host_key_policy, known_hosts)


def test_skip_reasons_and_airgap_reach_the_roles(tmp_path: Path) -> None:
    binary, images = tmp_path / "k3s", tmp_path / "k3s-airgap-images-amd64.tar.zst"
    binary.write_bytes(b"\x7fELF")
    images.write_bytes(b"\x28\xb5\x2f\xfd")  # zstd's frame magic
    lab = parse_config(
        {
            "nodes": [{"name": "solo", "address": "10.0.0.5", "user": "u", "role": "server", "gpus": 1}],
            "skip": {"nfsServerStart": "no kernel NFS server in a container"},
            "airgap": {"k3sBinary": str(binary), "imagesTarball": str(images)},
        }
    )
    view = _ansible_view(build_inventory(lab, tmp_path / "known_hosts"), tmp_path)
    solo = view["_meta"]["hostvars"]["solo"]
    assert solo["lab_skip"] == {"nfsServerStart": "no kernel NFS server in a container"}
    assert solo["lab_airgap"] == {"k3s_binary": str(binary), "images_tarball": str(images)}
    assert view["gpu"]["hosts"] == ["solo"]
    assert solo["lab_nfs_allowed_networks"] == ["10.0.0.5/32"]


# A state folder as a checkout may sit in: spaces, quotes, a backslash, '%', '#', '$' and '~'.
AWKWARD = '/tmp/my labs/it\'s "q" \\ 100% #1 $HOME ~x'


def _ssh_reads(argv: list[str]) -> dict[str, str]:
    """What ssh itself makes of options (`ssh -G` prints the configuration it resolved)."""
    done = subprocess.run(["ssh", "-G", *argv, "node"], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


@pytest.mark.parametrize(
    ("policy", "checking", "known"),
    [
        (HostKeyPolicy.ACCEPT_NEW, "accept-new", f"{AWKWARD}/known_hosts"),
        (HostKeyPolicy.STRICT, "true", f"{AWKWARD}/known_hosts"),
        (HostKeyPolicy.OFF, "false", "/dev/null"),
    ],
)
def test_ssh_reads_the_host_key_policy_whatever_the_path(
    policy: HostKeyPolicy, checking: str, known: str
) -> None:
    """As Ansible's ssh plugin splits the options (shlex) and as testinfra does (through `sh -c`)."""
    args = ssh_common_args(policy, Path(AWKWARD) / "known_hosts")
    by_ansible = _ssh_reads(shlex.split(args))
    by_shell = subprocess.run(["sh", "-c", f"ssh -G {args} node"], capture_output=True, text=True, check=True)
    assert by_ansible["hostname"] == "node", f"the options split into a host name: {args}"
    assert by_ansible["userknownhostsfile"] == known
    assert by_ansible["stricthostkeychecking"] == checking
    assert f"userknownhostsfile {known}\n" in by_shell.stdout


def test_a_state_folder_ssh_cannot_take_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds '\$\{' or a control character.*K8SCIFAR_STATE_DIR"):
        known_hosts_file("demo", tmp_path / "${HOME}")
    assert not (tmp_path / "${HOME}" / "demo" / "known_hosts").exists()


def test_known_hosts_is_private_to_the_operator(tmp_path: Path) -> None:
    path = known_hosts_file("demo", tmp_path)
    assert path == tmp_path / "demo" / "known_hosts"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.write_text("10.0.0.1 ssh-ed25519 AAAA\n")
    path.chmod(0o644)
    assert known_hosts_file("demo", tmp_path).read_text() == "10.0.0.1 ssh-ed25519 AAAA\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_inventory_stored_before_the_policy_variable_still_checks_host_keys() -> None:
    """Pulumi states from before kept a Jinja reference to the known_hosts file, which Ansible no
    longer evaluates: destroying such a lab reads the policy back from the stored options."""
    legacy = f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={LEGACY_KNOWN_HOSTS}"
    stored = {"all": {"vars": {"ansible_ssh_common_args": legacy}}}
    filled = with_known_hosts(stored, Path(AWKWARD) / "known_hosts")
    args = _ssh_reads(shlex.split(filled["all"]["vars"]["ansible_ssh_common_args"]))
    assert (args["stricthostkeychecking"], args["userknownhostsfile"]) == ("true", f"{AWKWARD}/known_hosts")
    local = {"all": {"vars": {"ansible_connection": "local"}}}
    assert with_known_hosts(local, Path("/k/h")) == local


def test_labctl_reaches_ssh_with_whole_paths(tmp_path: Path) -> None:
    """lab/remote/ssh.py's own connections: the same options, and the key's path, whatever they hold."""
    key = tmp_path / "my keys" / "it's (lab) #1 $HOME ~x" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("a key\n")
    node = Node(name="n", address="10.0.0.1", user="lab", role="server")
    remote = Remote(node, Ssh(key_path=str(key)), Path(AWKWARD) / "known_hosts")
    resolved = subprocess.run(
        ["ssh", "-G", *remote.options(), "node"], capture_output=True, text=True, check=True
    )
    assert f"userknownhostsfile {AWKWARD}/known_hosts\n" in resolved.stdout
    assert f"identityfile {key}\n" in resolved.stdout and "hostname node\n" in resolved.stdout
