"""Every file the k3s, kubeadm and registry_mirror roles write for a daemon, for every stack, checked
against that daemon's own rules (tests/support/rules/*_rules.py, each citing its upstream source).

The files are rendered by Ansible itself (tests/support/daemon_files.py) from the inventory the bootstrap
generates; the checks are shown failing on the broken inputs they are for. What only a real
lab can show is listed in docs/validation.md.
"""

from __future__ import annotations

import configparser
import hashlib
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from lab.bootstrap.tokens import PLAYBOOK_VARIABLES
from lab.paths import ANSIBLE_DIR
from lab.testbed.kubelet_host import TESTBED_SETTINGS
from tests.support.daemon_files import KUBEADM_CA_HASH, ROLES, Rendered
from tests.support.local_play import render_template
from tests.support.rules.containerd_rules import cri_settings, hosts_toml_problems
from tests.support.rules.exports_rules import can_run, run_exportfs
from tests.support.rules.k3s_rules import k3s_config_problems, registries_problems
from tests.support.rules.kubeadm_rules import kubeadm_config_problems

sys.path.insert(0, str(ANSIBLE_DIR / "roles" / "kubeadm" / "filter_plugins"))
from containerd_config import CNI_BIN_DIR, kubeadm_containerd_edit

DATA = Path(__file__).parent / "data"


def _of(rendered: dict[str, Rendered], distribution: str) -> list[Rendered]:
    found = [r for r in rendered.values() if r.lab.distribution.value == distribution]
    assert found, f"no stack in stacks/ uses {distribution}: its files would go unchecked"
    return found


# k3s


def _k3s_secrets(r: Rendered) -> dict[str, str]:
    # k3s pkg/clientaccess/token.go hashCA: for a bundle of one certificate, sha256 of the file's bytes.
    return {"agent": r.tokens["k3s_agent_token"], "ca_hash": hashlib.sha256(r.ca_pem).hexdigest()}


def test_k3s_config_files_hold_only_flags_k3s_takes(daemon_files: dict[str, Rendered]) -> None:
    problems = {
        f"{r.stack}/{node.name}": p
        for r in _of(daemon_files, "k3s")
        for node in r.lab.nodes
        if (p := k3s_config_problems(r.file(node.name, "config.yaml"), node.role.value, _k3s_secrets(r)))
    }
    assert problems == {}


def test_k3s_agents_get_the_agent_secret_only(daemon_files: dict[str, Rendered]) -> None:
    for r in _of(daemon_files, "k3s"):
        for agent in r.lab.agents:
            assert r.tokens["k3s_token"] not in r.file(agent.name, "config.yaml"), (
                f"{r.stack}: server token on an agent"
            )


def test_k3s_nodes_are_not_labelled_at_registration(daemon_files: dict[str, Rendered]) -> None:
    """k3s applies node-label only when a node registers (docs/cli/agent.md): the program labels GPU nodes."""
    for r in _of(daemon_files, "k3s"):
        for node in r.lab.nodes:
            assert "node-label" not in yaml.safe_load(r.file(node.name, "config.yaml")), (
                f"{r.stack}/{node.name}"
            )


def test_the_k3s_config_check_finds_what_k3s_would_not_take() -> None:
    ca_hash, agent = "cd" * 32, "ef" * 32
    secrets = {"agent": agent, "ca_hash": ca_hash}
    server = 'token: "abcdef.0123456789abcdef"\nagent-token: "x"\nnode-name: a\nnode-ip: 10.0.0.1\n'
    assert any("normalize" in p for p in k3s_config_problems(server, "server", secrets))
    misspelt = 'token: "t"\nagent-token: "x"\nnode-name: a\nnode-ip: 10.0.0.1\nflannel-interface: eth0\n'
    assert k3s_config_problems(misspelt, "server", secrets) == [
        "flannel-interface: no `k3s server` flag of that name"
    ]
    agent_with_server_flag = (
        f'token: "K10{ca_hash}::node:{agent}"\nserver: https://10.0.0.1:6443\nnode-name: b\ntls-san: [x]\n'
    )
    assert k3s_config_problems(agent_with_server_flag, "agent", secrets) == [
        "tls-san: no `k3s agent` flag of that name"
    ]
    unpinned = f'token: "{agent}"\nserver: https://10.0.0.1:6443\nnode-name: b\n'
    assert any("pin" in p for p in k3s_config_problems(unpinned, "agent", secrets))
    values = (
        'token: "t"\nagent-token: "x"\nnode-name: A_1\nnode-ip: 10.0.0.300\n'
        'write-kubeconfig-mode: "644x"\ndisable: [traefk]\n'
    )
    assert len(k3s_config_problems(values, "server", secrets)) == 4


def test_k3s_units_read_the_operator_s_environment_files(daemon_files: dict[str, Rendered]) -> None:
    """Proxy settings reach k3s through EnvironmentFile=; the leading '-' lets a missing file pass
    (systemd.exec(5), EnvironmentFile=)."""
    for r in _of(daemon_files, "k3s"):
        for node in r.lab.nodes:
            unit = configparser.ConfigParser(strict=False, interpolation=None)
            unit.optionxform = str  # type: ignore[assignment,method-assign]
            unit.read_string(r.file(node.name, "k3s.service"))
            files = [
                line
                for line in r.file(node.name, "k3s.service").splitlines()
                if line.startswith("EnvironmentFile=")
            ]
            assert files == ["EnvironmentFile=-/etc/default/%N", "EnvironmentFile=-/etc/sysconfig/%N"], (
                r.stack
            )
            assert "ExecStart" in unit["Service"]


def test_k3s_registry_mirrors_match_k3s_s_schema(daemon_files: dict[str, Rendered]) -> None:
    problems = {
        f"{r.stack}/{node.name}": p
        for r in _of(daemon_files, "k3s")
        for node in r.lab.nodes
        if (p := registries_problems(r.file(node.name, "registries.yaml"), {r.lab.registry_endpoint}))
    }
    assert problems == {}


def test_the_registries_check_finds_what_k3s_would_not_read() -> None:
    endpoint = "10.0.0.1:30500"
    assert registries_problems(
        f'mirrors:\n  "{endpoint}":\n    endpoints: ["http://{endpoint}"]\n', {endpoint}
    ) == [
        f"mirrors.{endpoint}.endpoints: no such mirror field",
        f"mirrors.{endpoint}.endpoint: a list of URLs",
    ]
    over_https = f'mirrors:\n  "{endpoint}":\n    endpoint: ["{endpoint}"]\n'
    assert registries_problems(over_https, {endpoint})
    default = f'mirrors:\n  "{endpoint}":\n    endpoint: ["https://{endpoint}/v2"]\n'
    assert any("default endpoint" in p for p in registries_problems(default, set()))


# kubeadm and containerd


def test_kubeadm_configurations_are_what_the_pinned_kubeadm_reads(daemon_files: dict[str, Rendered]) -> None:
    problems = {
        f"{r.stack}/{node.name}": p
        for r in _of(daemon_files, "kubeadm")
        for node in r.lab.nodes
        if (p := kubeadm_config_problems(r.file(node.name, "kubeadm.yaml"), r.lab.kubernetes_version))
    }
    assert problems == {}


def test_kubeadm_configurations_carry_the_lab_s_token_and_ca_hash(daemon_files: dict[str, Rendered]) -> None:
    for r in _of(daemon_files, "kubeadm"):
        init = next(
            d
            for d in yaml.safe_load_all(r.file(r.lab.server.name, "kubeadm.yaml"))
            if d["kind"] == "InitConfiguration"
        )
        assert [t["token"] for t in init["bootstrapTokens"]] == [r.tokens["kubeadm_token"]]
        for agent in r.lab.agents:
            (join,) = yaml.safe_load_all(r.file(agent.name, "kubeadm.yaml"))
            assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [f"sha256:{KUBEADM_CA_HASH}"]
            assert "node-labels" not in r.file(agent.name, "kubeadm.yaml"), (
                "labels follow the stack through the API"
            )


def test_the_kubeadm_check_finds_what_kubeadm_would_not_read() -> None:
    assert kubeadm_config_problems(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n", "1.29.15"
    ) == ["document 1: kubeadm 1.29.15 does not read kubeadm.k8s.io/v1beta4 InitConfiguration"]
    v1beta3_map = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n"
        "nodeRegistration:\n  kubeletExtraArgs:\n    node-ip: 10.0.0.2\n"
    )
    assert kubeadm_config_problems(v1beta3_map, "1.33.5")
    moved = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
        "kubernetesVersion: v1.33.5\npodSubnet: 10.244.0.0/16\n"
    )
    assert kubeadm_config_problems(moved, "1.33.5") == [
        "document 1 (ClusterConfiguration).podSubnet: no such field in kubeadm's types"
    ]
    k3s_token = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nbootstrapTokens:\n  - token: "
        + "a" * 64
        + "\n"
    )
    assert kubeadm_config_problems(k3s_token, "1.33.5")


def test_containerd_hosts_files_hold_only_what_containerd_reads(daemon_files: dict[str, Rendered]) -> None:
    problems = {
        f"{r.stack}/{node.name}": p
        for r in _of(daemon_files, "kubeadm")
        for node in r.lab.nodes
        if (p := hosts_toml_problems(r.file(node.name, "hosts.toml")))
    }
    assert problems == {}


def test_the_hosts_toml_check_finds_what_containerd_ignores() -> None:
    assert hosts_toml_problems(
        'server = "http://10.0.0.1:30500"\n[host."http://10.0.0.1:30500"]\n  insecure = true\n'
    ) == ["host.http://10.0.0.1:30500.insecure: containerd does not read this field"]
    assert hosts_toml_problems(
        'server = "10.0.0.1:30500"\n[host."http://10.0.0.1:30500"]\n'
    )  # https by default
    assert hosts_toml_problems('server = "http://10.0.0.1:30500"\n')  # no host table
    assert hosts_toml_problems("server = http://x\n")[0].startswith("not TOML")


# The real `containerd config default` of the containerd packages the supported node OSes install:
# Debian 12 (1.6.20~ds1-1+deb12u3), Debian 13 (1.7.24~ds1-6+deb13u1) and a 2.x build
# (Debian 2.1.9+ds1-5), each printed by the packaged binary.
CONTAINERD_DEFAULTS = sorted(DATA.glob("containerd-*-default.toml"))
KUBEADM_IMAGES = [
    "registry.k8s.io/kube-apiserver:v1.33.5",
    "registry.k8s.io/pause:3.10",
    "registry.k8s.io/etcd:3.5.21-0",
]


@pytest.mark.parametrize("default", CONTAINERD_DEFAULTS, ids=lambda p: p.name.split("-")[1])
def test_containerd_configuration_uses_kubeadm_s_sandbox_and_flannel_s_plugins(default: Path) -> None:
    before = cri_settings(default.read_text())
    after = cri_settings(kubeadm_containerd_edit(default.read_text(), KUBEADM_IMAGES))
    assert after == {
        "sandbox image": "registry.k8s.io/pause:3.10",
        "cni plugin dirs": [CNI_BIN_DIR],
        "registry hosts": "/etc/containerd/certs.d",
        "systemd cgroups": True,
        "restrict oom score adj": False,
    }
    assert before != after, "the check must see containerd's own defaults differ"


@pytest.mark.parametrize("default", CONTAINERD_DEFAULTS, ids=lambda p: p.name.split("-")[1])
def test_a_test_machine_s_containerd_runs_cgroupfs_and_keeps_oom_scores(default: Path) -> None:
    """A test machine's settings file (lab/machine_settings.py) reaches containerd: without
    cgroupfs its sandboxes land where the machine's systemd cannot manage them, without the OOM
    restriction runc fails every sandbox (docs/kubelets.md), and without its own pause every
    sandbox waits on kubeadm's, which an offline machine cannot pull."""
    roles = TESTBED_SETTINGS.for_roles()
    text = kubeadm_containerd_edit(
        default.read_text(),
        KUBEADM_IMAGES,
        roles["systemd_cgroup"],
        roles["restrict_oom_score_adj"],
        roles["sandbox_image"],
    )
    settings = cri_settings(text)
    assert (settings["systemd cgroups"], settings["restrict oom score adj"]) == (False, True)
    assert settings["sandbox image"] == roles["sandbox_image"] != "registry.k8s.io/pause:3.10"


def test_containerd_defaults_alone_would_break_kubeadm() -> None:
    """What the role used to leave: Debian's /usr/lib/cni and containerd's own pause image."""
    settings = {p.name: cri_settings(p.read_text()) for p in CONTAINERD_DEFAULTS}
    assert settings["containerd-1.7.24-default.toml"]["cni plugin dirs"] == ["/usr/lib/cni"]
    assert settings["containerd-1.6.20-default.toml"]["sandbox image"] == "registry.k8s.io/pause:3.6"


# NFS


# What the export must say to every allowed network (nfs_server role defaults), as etab spells it.
EXPORT_OPTIONS = {"rw", "sync", "root_squash", "no_subtree_check"}


def exports_problems(text: str, path: str, networks: list[str]) -> list[str]:
    """What Debian's exportfs says of `text`, and where what it understood differs from the lab's intent."""
    complaints, found = run_exportfs(text, [path])
    problems = [complaints] if complaints else []
    wanted = {(path, network) for network in networks}
    got = {(e.path, e.client) for e in found}
    problems += [f"exportfs exports {p!r} to {c}, not meant" for p, c in sorted(got - wanted)]
    problems += [f"exportfs does not export {p!r} to {c}" for p, c in sorted(wanted - got)]
    problems += [
        f"{e.client}: exportfs lacks {sorted(EXPORT_OPTIONS - e.options)}"
        for e in found
        if EXPORT_OPTIONS - e.options
    ]
    return problems


@pytest.fixture(scope="module")
def exportfs() -> None:
    if why := can_run():
        pytest.skip(why)


@pytest.mark.usefixtures("exportfs")
def test_exports_lines_are_what_exportfs_reads(daemon_files: dict[str, Rendered]) -> None:
    problems = {
        r.stack: p
        for r in daemon_files.values()
        if (
            p := exports_problems(
                r.file(r.lab.nfs_server.name, "k8scifar.exports"),
                r.lab.nfs.export_path,
                r.lab.nfs_allowed_networks,
            )
        )
    }
    assert problems == {}


@pytest.mark.usefixtures("exportfs")
def test_the_exports_check_finds_what_exportfs_would_not_take(tmp_path: Path) -> None:
    networks, spaced = ["10.0.0.1/32", "10.0.0.2/32"], "/srv/k8s cifar"
    variables = {"lab_nfs_export_path": spaced, "lab_nfs_allowed_networks": networks}
    good = render_template(tmp_path, ROLES / "nfs_server" / "templates" / "k8scifar.exports.j2",
                           [ROLES / "nfs_server" / "defaults" / "main.yml"], variables)  # fmt: skip
    assert exports_problems(good, spaced, networks) == []
    # Unquoted, the path ends at the space and the rest is taken for a client (exports(5)).
    assert exports_problems(good.replace('"', ""), "/srv/k8s cifar", networks)
    assert any(
        "unknown keyword" in p
        for p in exports_problems(good.replace("sync,", "synch,"), "/srv/k8s cifar", networks)
    )
    squashing_nothing = good.replace("root_squash", "no_root_squash")
    assert any(
        "lacks ['root_squash']" in p for p in exports_problems(squashing_nothing, "/srv/k8s cifar", networks)
    )


# Command lines the roles run


def test_kubeadm_token_list_reaches_kubeadm_with_its_quotes(daemon_files: dict[str, Rendered]) -> None:
    """client-go util/jsonpath parser.go: inside {...} a bare backslash is "unrecognized character
    in action"; {"\\n"} must arrive with its quotes, which shlex splitting of a command line strips."""
    for r in _of(daemon_files, "kubeadm"):
        argv = r.commands(r.lab.server.name)["kubeadm_token_list_argv"]
        assert argv[-2:] == ["-o", 'jsonpath={.token}{"\\n"}']
    assert shlex.split('kubeadm token list -o jsonpath={.token}{"\\n"}')[-1] == "jsonpath={.token}{\\n}"


def test_flannel_is_pointed_at_each_node_s_interface(daemon_files: dict[str, Rendered]) -> None:
    for r in _of(daemon_files, "kubeadm"):
        argv = r.commands(r.lab.server.name)["kubeadm_flannel_iface_argv"]
        interfaces = {n.interface for n in r.lab.nodes if n.interface}
        if not interfaces:
            assert argv == [], f"{r.stack}: no interface named, flannel keeps the default route's"
            continue
        (setting,) = [a for a in argv if a.startswith("FLANNELD_IFACE_REGEX=")]
        pattern = re.compile(setting.partition("=")[2])
        assert all(pattern.fullmatch(name) for name in interfaces), r.stack
        assert not pattern.fullmatch("docker0") and not pattern.fullmatch("lo"), r.stack


COMMAND_MODULES = {"command", "shell", "ansible.builtin.command", "ansible.builtin.shell"}


def secrets_on_command_lines(task_file: str) -> list[str]:
    """Tasks of `task_file` (YAML) that put a join secret on a command line, where `ps` shows it."""
    found = []
    for task in yaml.safe_load(task_file) or []:
        for module in COMMAND_MODULES & set(task):
            line = yaml.safe_dump(task[module]) + yaml.safe_dump(task.get("args", {}))
            found += [f"{task['name']}: {v}" for v in PLAYBOOK_VARIABLES.values() if v in line]
    return found


def test_no_join_secret_is_put_on_a_command_line() -> None:
    task_files = sorted(
        p
        for role in ("k3s", "kubeadm", "registry_mirror")
        for p in (ANSIBLE_DIR / "roles" / role / "tasks").glob("*.yml")
    )
    assert {
        str(p.name): found for p in task_files if (found := secrets_on_command_lines(p.read_text()))
    } == {}
    old = (
        "- name: Recreate the join token\n"
        "  ansible.builtin.command: kubeadm token create {{ lab_kubeadm_token }} --ttl 24h\n"
    )
    assert secrets_on_command_lines(old) == ["Recreate the join token: lab_kubeadm_token"]
