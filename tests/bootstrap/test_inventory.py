"""The inventory generated from every stack file, read back by Ansible itself."""

from __future__ import annotations

import copy
import json
import shlex
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from lab.bootstrap.inventory import (
    AGENT_GROUP,
    LEGACY_KNOWN_HOSTS,
    SERVER_GROUP,
    build_inventory,
    known_hosts_file,
    ssh_common_args,
    with_known_hosts,
)
from lab.config import ConfigError, HostKeyPolicy, Node, Ssh, load_stack, parse_config
from lab.paths import ANSIBLE_DIR, ROOT
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


def test_kubeadm_s_offline_files_reach_the_role_with_unset_tags_empty(tmp_path: Path) -> None:
    binary, images, plugins, manifest = (
        tmp_path / n for n in ("kubelet", "images.tar", "cni.tgz", "flannel.yml")
    )
    binary.write_bytes(b"\x7fELF")
    with tarfile.open(images, "w") as archive:
        archive.add(binary, "layer")
    plugins.write_bytes(b"\x1f\x8b")
    manifest.write_text("kind: DaemonSet\nmetadata: {name: kube-flannel-ds, namespace: kube-flannel}\n")
    for path in (binary, images, plugins, manifest):
        path.chmod(0o644)
    files = {
        "kubeadm": str(binary),
        "kubelet": str(binary),
        "kubectl": str(binary),
        "cniPlugins": str(plugins),
    }
    lab = parse_config(
        {
            "nodes": [{"name": "solo", "address": "10.0.0.5", "user": "u", "role": "server"}],
            "distribution": "kubeadm",
            "airgap": {
                "kubeadm": files
                | {"images": [str(images)], "flannelManifest": str(manifest), "etcdTag": "3.6.4-0"}
            },
        }
    )
    solo = _ansible_view(build_inventory(lab, tmp_path / "known_hosts"), tmp_path)["_meta"]["hostvars"][
        "solo"
    ]
    assert solo["lab_airgap"] == {
        "kubeadm": str(binary),
        "kubelet": str(binary),
        "kubectl": str(binary),
        "cni_plugins": str(plugins),
        "images": [str(images)],
        "flannel_manifest": str(manifest),
        "coredns_tag": "",
        "etcd_tag": "3.6.4-0",
    }
    assert solo["lab_flannel_daemonset"] == ["kube-flannel", "kube-flannel-ds"]


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


PLAYBOOKS = ("site.yml", "reset.yml", "remove_nodes.yml")
# Run in a process of its own: importing ansible patches sys.intern, which torch's compiler cannot
# take when trainer tests run later in the same test worker.
VIEW = """
import json, sys
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
views = {}
for case, (path, limit, patterns) in json.load(sys.stdin).items():
    manager = InventoryManager(loader=DataLoader(), sources=[path])
    if limit is not None:
        manager.subset(limit)
    views[case] = {
        p: sorted([h.name, h.vars.get("ansible_host")] for h in manager.get_hosts(p)) for p in patterns
    }
json.dump(views, sys.stdout)
"""


def _renamed(inventory: dict, old: str, new: str) -> dict:
    """`inventory` with host `old` called `new` in every group, as a stack naming it so would give."""
    renamed = copy.deepcopy(inventory)
    groups = [renamed["all"], *renamed["all"]["children"].values()]
    for group in groups:
        group["hosts"] = {new if name == old else name: v for name, v in group["hosts"].items()}
    return renamed


def _plays() -> dict[str, str]:
    """Each play of the playbooks, named `playbook: play`, and its host pattern."""
    return {
        f"{playbook}: {play['name']}": play["hosts"]
        for playbook in PLAYBOOKS
        for play in yaml.safe_load((ANSIBLE_DIR / "playbooks" / playbook).read_text())
        if "hosts" in play
    }


# (node renamed, new name): a node named as one of Ansible's groups or the lab's is the only host
# of the plays aimed at that group (InventoryManager._evaluate_patterns takes a host's name first).
TAKEN_FOR_A_GROUP = [("cpu-a", "all"), ("cpu-b", SERVER_GROUP), ("cpu-a", AGENT_GROUP)]
# (name, the address Ansible then reaches the node at): a node named `ungrouped` loses its
# variables to the built-in group, so Ansible would look up a machine of that name; one named
# `localhost` becomes the inventory's localhost, which Ansible's local tasks run on.
ANSIBLES_OWN = [("ungrouped", None), ("localhost", "192.168.50.12")]
# Names Ansible splits into several patterns when they are a --limit, as remove_nodes.yml is run.
SPLIT = ["cpu-b,cpu-a", "cpu-b:cpu-a"]


@pytest.fixture(scope="module")
def ansible_views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[list[str | None]]]]:
    """What ansible-core's InventoryManager makes of the example stack's inventory and of it with
    a node renamed: per case, each pattern's hosts as [name, ansible_host]."""
    folder = tmp_path_factory.mktemp("inventories")
    honest = build_inventory(load_stack("example-cpu"), None)
    plays = sorted(set(_plays().values()))
    cases: dict[str, tuple[dict, str | None, list[str]]] = {"honest": (honest, None, [*plays, "localhost"])}
    for old, name in TAKEN_FOR_A_GROUP:
        cases[name] = (_renamed(honest, old, name), None, plays)
    for name, _ in ANSIBLES_OWN:
        cases[name] = (_renamed(honest, "cpu-b", name), None, [name])
    for name in SPLIT:
        cases[name] = (_renamed(honest, "cpu-b", name), name, ["all"])
    request = {}
    for number, (case, (inventory, limit, patterns)) in enumerate(cases.items()):
        path = folder / f"{number}.yml"
        path.write_text(yaml.safe_dump(inventory))
        request[case] = (str(path), limit, patterns)
    done = subprocess.run(
        [sys.executable, "-c", VIEW], input=json.dumps(request), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def _names(hosts: list[list[str | None]]) -> list[str | None]:
    return [name for name, _ in hosts]


@pytest.mark.parametrize(("old", "name"), TAKEN_FOR_A_GROUP, ids=[t[1] for t in TAKEN_FOR_A_GROUP])
def test_a_node_named_as_a_group_takes_over_its_plays_and_is_refused(
    old: str, name: str, ansible_views: dict[str, dict[str, list[list[str | None]]]]
) -> None:
    honest, renamed = ansible_views["honest"], ansible_views[name]
    wrong = {}
    for play, pattern in _plays().items():
        meant = sorted(name if h == old else h for h in _names(honest[pattern]))
        if _names(renamed[pattern]) != meant:
            wrong[play] = (meant, _names(renamed[pattern]))
    # The play that refuses a foreign cluster and the server's or agents' plays lose their nodes.
    assert wrong and all(got == [name] for _, got in wrong.values()), wrong
    if name == "all":
        assert any(play.startswith("site.yml: Refuse a cluster") for play in wrong), sorted(wrong)
    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.example-cpu.yaml").read_text())["config"]
    nodes = [dict(n, name=name) if n["name"] == old else n for n in values["k8scifar:nodes"]]
    with pytest.raises(ConfigError, match=rf"nodes\[\d\]\.name: '{name}' is .*such as {name}-1"):
        parse_config({"nodes": nodes})


@pytest.mark.parametrize(("name", "reached"), ANSIBLES_OWN, ids=[o[0] for o in ANSIBLES_OWN])
def test_a_node_named_as_ansible_names_its_own_is_taken_for_it_and_refused(
    name: str, reached: str | None, ansible_views: dict[str, dict[str, list[list[str | None]]]]
) -> None:
    # `localhost` is the controller, made up when asked for, until a node bears the name.
    assert ansible_views["honest"]["localhost"] == [["localhost", None]]
    assert ansible_views[name][name] == [[name, reached]]
    lab = load_stack("example-cpu")
    assert lab.nodes[1].address == "192.168.50.12"
    with pytest.raises(ConfigError, match=rf"nodes\[1\]\.name: '{name}' is Ansible's"):
        parse_config({"nodes": [lab.nodes[0].model_dump(), dict(lab.nodes[1].model_dump(), name=name)]})


@pytest.mark.parametrize("name", SPLIT)
def test_a_node_name_ansible_splits_reaches_another_node(
    name: str, ansible_views: dict[str, dict[str, list[list[str | None]]]]
) -> None:
    # As a --limit, the leaving node's name splits into the server's.
    assert _names(ansible_views[name]["all"]) == ["cpu-a"]


@pytest.mark.parametrize(
    "name", ["cpu-b,cpu-a", "cpu-b:cpu-a", "cpu-*", "!cpu-a", "&cpu", "~cpu", "cpu-b.lab", "cpu[1]"]
)
def test_a_node_name_holding_ansible_pattern_syntax_is_refused(name: str) -> None:
    lab = load_stack("example-cpu")
    with pytest.raises(ConfigError, match=r"nodes\[1\]\.name: "):
        parse_config({"nodes": [lab.nodes[0].model_dump(), dict(lab.nodes[1].model_dump(), name=name)]})
