"""`labctl doctor` against two "nodes" behind a real sshd: every finding comes from a real
check, and a broken input shows up as an error finding with its fix, never as a crash."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from lab.cli.doctor.locks import OPERATOR_LOCK
from lab.cli.doctor.operator_checks import python_dependencies, python_imports
from lab.cli.doctor.preflight import (
    ACTIVE_FIREWALL_SCRIPT,
    Listening,
    existing_cluster_finding,
    firewall_finding,
    gpu_findings,
    listening_sockets,
    needed_ports,
    ports_finding,
    uid_finding,
    userns_finding,
)
from lab.config import LabConfig, Node, load_stack, parse_config, read_stack_values, stack_file
from lab.config.monitoring import NODE_EXPORTER_PORT
from tests.support.labctl import labctl, loopback_values, node, write_stack
from tests.support.network import free_port
from tests.support.sshd import AGENT, NOWHERE, SERVER, THIRD, Sshd


def _rows(out: str, check: str) -> list[str]:
    return [line for line in out.splitlines() if f"│ {check} " in line]


def _details(out: str, check: str) -> list[str]:
    """The detail cell of each `check` row, with the lines the table folded it onto joined."""
    details: list[list[str]] = []
    current: list[str] | None = None
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) != 5:
            current = None
        elif cells[1] == check:
            current = [cells[3]]
            details.append(current)
        elif current is not None and not cells[0] and not cells[1]:
            current.append(cells[3])  # the same row, folded
        else:
            current = None
    return [" ".join(words) for words in details]


def test_doctor_checks_the_operator_and_both_nodes(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "loop", loopback_values(sshd, tmp_path / "export"))
    result = labctl("doctor", "--stack", "loop", "--stacks-dir", tmp_path, "--bandwidth-mib", "32")
    assert "Traceback" not in result.err
    pulumi = _rows(result.out, "Pulumi CLI")
    if shutil.which("pulumi") is None:
        # No Pulumi CLI can be installed on the CI machines: an error finding with the install pointer.
        assert "error" in pulumi[0] and "pulumi.com/docs/install" in pulumi[0]
        assert result.code == 1
    assert (
        "ok" in _rows(result.out, "Python dependencies")[0] and "ok" in _rows(result.out, "Python imports")[0]
    )
    for check in ("SSH", "sudo", "OS"):
        rows = _rows(result.out, check)
        assert len(rows) == 2 and all("│ ok " in r for r in rows), (check, result.out)
    link = _rows(result.out, "bandwidth")
    assert len(link) == 1 and "node-a -> node-b" in link[0] and "Gbit/s" in link[0], result.out
    (speedup,) = _details(result.out, "DDP speed-up")
    assert "slowest link node-a -> node-b" in speedup and "on 2 ranks" in speedup
    assert "all-reduce" in speedup and "expected speed-up over one rank" in speedup
    assert "Gbit/s, row to column" not in result.out  # one link: its row says it all


def test_doctor_measures_every_pair_of_nodes_and_the_speed_up_of_the_whole_world(
    sshd: Sshd, tmp_path: Path
) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"].append(node("node-c", THIRD, "agent"))
    write_stack(tmp_path, "three", values)  # no batchSize: the default 1024 does not split over 3
    result = labctl(
        "doctor", "--stack", "three", "--stacks-dir", tmp_path, "--bandwidth-mib", "8", "--nodes-only"
    )
    assert "Traceback" not in result.err
    links = _rows(result.out, "bandwidth")
    pairs = ("node-a -> node-b", "node-a -> node-c", "node-b -> node-c")
    assert len(links) == 3 and all(any(p in row for row in links) for p in pairs), result.out
    assert all("│ ok " in row and "Gbit/s" in row for row in links)
    (speedup,) = _details(result.out, "DDP speed-up")
    assert "on 3 ranks, batch 1023" in speedup and "expected speed-up over one rank" in speedup
    (batch,) = _details(result.out, "batch")
    assert "default 1024 does not split evenly over 3 ranks" in batch and "trains with 1023" in batch
    matrix = result.out.split("Gbit/s, row to column", 1)[1].splitlines()
    header = next(line for line in matrix if "node-a" in line)
    assert all(name in header for name in ("node-a", "node-b", "node-c"))
    row_a = next(line for line in matrix if line.strip("│ ").startswith("node-a"))
    assert row_a.count(".") == 2  # two rates measured from node-a, a dash for itself


def test_doctor_reports_an_unreachable_node_and_goes_on(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"][1] = node("node-b", NOWHERE, "agent")
    write_stack(tmp_path, "half", values)
    result = labctl("doctor", "--stack", "half", "--stacks-dir", tmp_path, "--nodes-only")
    assert result.code == 1 and "Traceback" not in result.err
    ssh = _rows(result.out, "SSH")
    assert "│ ok " in ssh[0] and "error" in ssh[1] and "cannot log in over SSH" in ssh[1]
    assert _rows(result.out, "bandwidth") == []  # needs both nodes


def test_doctor_flags_a_gpu_node_without_a_driver(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"][0]["gpus"] = 1  # this machine has no nvidia-smi
    write_stack(tmp_path, "gpu", values)
    result = labctl("doctor", "--stack", "gpu", "--stacks-dir", tmp_path, "--no-bandwidth", "--nodes-only")
    gpu = _rows(result.out, "GPU driver")
    assert result.code == 1 and len(gpu) == 1
    assert _rows(result.out, "Pulumi CLI") == []  # --nodes-only leaves the operator's machine out
    assert "error" in gpu[0] and "nvidia-smi is missing" in gpu[0] and "driver" in gpu[0]


def test_doctor_flags_a_port_the_lab_needs_when_taken(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    with socket.socket() as taken:
        taken.bind((SERVER, 0))
        taken.listen()
        values["trainer"] |= {"hostNetwork": True, "port": taken.getsockname()[1]}
        write_stack(tmp_path, "busy", values)
        result = labctl(
            "doctor", "--stack", "busy", "--stacks-dir", tmp_path, "--no-bandwidth", "--nodes-only"
        )
    ports = _rows(result.out, "ports")
    port = values["trainer"]["port"]
    # Both "nodes" are this machine, so both see the port taken.
    assert len(ports) == 2 and all(f"{port}/tcp (DDP rendezvous" in p and "warning" in p for p in ports)


def test_doctor_reports_a_link_it_cannot_use(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    with socket.socket() as taken:
        taken.bind((AGENT, 0))
        taken.listen()
        values["trainer"]["port"] = taken.getsockname()[1]  # the receiver cannot listen there
        write_stack(tmp_path, "nolink", values)
        result = labctl(
            "doctor", "--stack", "nolink", "--stacks-dir", tmp_path, "--bandwidth-mib", "1", "--nodes-only"
        )
    link = _rows(result.out, "bandwidth")
    assert result.code == 1 and len(link) == 1 and "error" in link[0] and "cannot listen" in link[0]


def test_python_dependencies_names_what_differs(tmp_path: Path) -> None:
    assert python_dependencies().level.value == "ok"
    broken = tmp_path / "operator.lock"
    pinned = OPERATOR_LOCK.read_text().replace("rich==", "rich==0.0.1+")
    broken.write_text(pinned + "no-such-package-k8scifar==1.0\n")
    finding = python_dependencies(broken)
    assert finding.level.value == "error"
    assert "rich" in finding.detail and "no-such-package-k8scifar missing" in finding.detail
    assert "scripts/setup.sh" in finding.fix


def test_python_imports_names_the_module_that_fails() -> None:
    assert python_imports().level.value == "ok"
    finding = python_imports(("json", "no_such_module_k8scifar"))
    assert finding.level.value == "error" and "No module named 'no_such_module_k8scifar'" in finding.detail


def test_doctor_needs_a_stack_file(tmp_path: Path) -> None:
    result = labctl("doctor", "--stack", "absent", "--stacks-dir", tmp_path)
    assert result.code == 2 and "no such stack file" in result.err and "labctl init" in result.err


def _ss(*lines: str) -> list[Listening]:
    """What the facts script prints for `ss -Hlt{n,u}p` lines (`tcp|...` or `udp|...`)."""
    return listening_sockets("\n".join(f"listen_{line[:3]}={line[4:]}" for line in lines))


SSHD = 'LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:(("sshd",pid=812,fd=3))'
API = "LISTEN 0 4096 *:6443 *:*"  # another user's socket, seen without sudo: no process
VXLAN = "UNCONN 0 0 0.0.0.0:8472 0.0.0.0:*"
DNS = 'UNCONN 0 0 127.0.0.53%lo:53 0.0.0.0:* users:(("systemd-resolve",pid=600,fd=13))'
# Ubuntu's prometheus-node-exporter: comm is the first 15 characters of the program's name.
UBUNTU_EXPORTER = 'LISTEN 0 4096 *:9100 *:* users:(("prometheus-node",pid=1234,fd=3))'


def test_ports_finding_reads_the_nodes_listening_sockets() -> None:
    node = Node(name="n", address="10.0.0.1", user="u", role="server")
    needed = {(6443, "tcp"): "Kubernetes API", (8472, "udp"): "flannel VXLAN"}
    assert (
        ports_finding(node, {}, _ss(f"tcp|{SSHD}", f"tcp|{API}"), needed).detail
        == "already in use: 6443/tcp (Kubernetes API)"
    )
    assert ports_finding(node, {}, _ss(f"tcp|{SSHD}", f"udp|{VXLAN}"), needed).level.value == "warning"
    assert ports_finding(node, {}, _ss(f"tcp|{SSHD}", f"udp|{DNS}"), needed).level.value == "ok"
    assert "install iproute2" in ports_finding(node, {"ports": "unknown"}, [], needed).fix


def test_ports_finding_names_the_process_that_holds_a_port() -> None:
    node = Node(name="n", address="10.0.0.1", user="u", role="agent")
    lab = load_stack("example-cpu")
    needed = needed_ports(lab, lab.nodes[1])
    finding = ports_finding(node, {}, _ss(f"tcp|{SSHD}", f"tcp|{UBUNTU_EXPORTER}"), needed)
    assert finding.detail == (
        "already in use: 9100/tcp (node exporter, observability.nodeExporterPort)"
        " held by prometheus-node (pid 1234)"
    )
    assert "stack key" in finding.fix
    # A name its owner chose is shown as printable text only.
    hostile = 'LISTEN 0 1 *:9100 *:* users:(("\x1b[2Jx\x07",pid=7,fd=3))'
    assert "held by [2Jx (pid 7)" in ports_finding(node, {}, _ss(f"tcp|{hostile}"), needed).detail


def test_the_lab_takes_the_monitoring_ports_it_declares() -> None:
    """Every host port of the monitoring stack is one doctor checks: the node exporter's on every
    node, the ranks' metrics ports on the host network (`P + LOCAL_RANK`) where ranks run."""
    lab = load_stack("example-gpu")
    exporter = (lab.observability.node_exporter_port, "tcp")
    assert all(needed_ports(lab, n)[exporter].startswith("node exporter") for n in lab.nodes)
    values = read_stack_values(stack_file("example-gpu"))
    values["trainer"] = {**values["trainer"], "hostNetwork": True}
    values["observability"] = {"nodeExporterPort": 9101}
    moved = parse_config(values)
    gpu_node = next(n for n in moved.nodes if n.gpus)
    ports = needed_ports(moved, gpu_node)
    assert (9101, "tcp") in ports and (9100, "tcp") not in ports
    metrics = {p for (p, _), what in ports.items() if what.startswith("rank metrics")}
    first = moved.observability.metrics_port
    assert metrics == set(range(first, first + moved.world.ranks_per_pod))
    off = parse_config({**values, "observability": {"enabled": False}})
    assert not any("observability" in what for what in needed_ports(off, gpu_node).values())


NODES_ONLY = ("--no-bandwidth", "--nodes-only")


def test_doctor_names_what_holds_the_node_exporters_port(sshd: Sshd, tmp_path: Path) -> None:
    """Ubuntu's prometheus-node-exporter on 9100 would make the lab's exporter crash-loop: doctor
    names the port, the process and the key that moves the lab's exporter elsewhere."""
    values = loopback_values(sshd, tmp_path / "export")
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind((SERVER, NODE_EXPORTER_PORT))
        taken.listen()
        write_stack(tmp_path, "exporter", values)
        busy = labctl(
            "doctor", "--stack", "exporter", "--stacks-dir", tmp_path, "--no-bandwidth", "--nodes-only"
        )
        write_stack(tmp_path, "moved", values | {"observability": {"nodeExporterPort": free_port()}})
        moved = labctl(
            "doctor", "--stack", "moved", "--stacks-dir", tmp_path, "--no-bandwidth", "--nodes-only"
        )
    assert "Traceback" not in busy.err + moved.err
    details = _details(busy.out, "ports")
    assert len(details) == 2, busy.out  # both "nodes" are this machine
    held = f"{NODE_EXPORTER_PORT}/tcp (node exporter, observability.nodeExporterPort) held by"
    assert all(held in d and f"(pid {os.getpid()})" in d for d in details), details
    assert all("needed ports free" in d for d in _details(moved.out, "ports")), moved.out


def test_gpu_finding_holds_the_driver_and_gpus_to_the_image_s_cuda() -> None:
    """nvidia-smi --query-gpu=driver_version,compute_cap lines, one per GPU (lab/config/facts.py:
    CUDA 13.0 needs the 580 series, and its wheels run on compute capability 7.5 to 12.0)."""
    node = Node(name="g", address="10.0.0.1", user="u", role="server", gpus=2)

    def finding(gpu_info: str) -> tuple[str, str]:
        (found,) = gpu_findings(node, {"gpus": "2", "gpu_info": gpu_info})
        return found.level.value, found.detail

    assert finding("580.95.05, 8.6;580.95.05, 12.0;") == ("ok", "2 GPU(s), driver 580.95.05")
    level, detail = finding("570.172.08, 8.0;570.172.08, 8.0;")
    assert level == "error" and "570.172.08 is older than the 580 series" in detail
    level, detail = finding("580.95.05, 8.6;580.95.05, 7.0;")
    assert level == "error" and "compute capability 7.0 is outside 7.5 to 12.0" in detail


def test_userns_finding_reports_the_apparmor_restriction() -> None:
    node = Node(name="n", address="10.0.0.1", user="u", role="server")
    noble = userns_finding(node, {"apparmor": "Y", "userns_restricted": "1"})
    assert noble.level.value == "ok" and "apparmor_restrict_unprivileged_userns=1" in noble.detail
    assert "k8scifar-buildkit" in noble.detail
    assert "not restricted" in userns_finding(node, {"apparmor": "Y", "userns_restricted": "absent"}).detail
    off = userns_finding(node, {"apparmor": "absent", "userns_restricted": "absent"})
    assert off.level.value == "warning" and "kubelet refuses the image build pod" in off.detail


def test_existing_cluster_finding_reads_the_nodes_survey() -> None:
    """The lines the node's existing-cluster script prints (the testbed test runs the script itself)."""
    node = Node(name="n", address="10.0.0.1", user="u", role="agent")
    found = "k3s|foreign|/usr/local/bin/k3s /var/lib/rancher/k3s|uninstall it (k3s-uninstall.sh)\n"
    finding = existing_cluster_finding(node, 0, found + "kubeadm|ours\n")
    assert finding.level.value == "error"
    assert finding.detail == (
        "k3s not installed by this lab (/usr/local/bin/k3s /var/lib/rancher/k3s):"
        " site.yml refuses to take it over"
    )
    assert finding.fix == "uninstall it (k3s-uninstall.sh)"
    assert existing_cluster_finding(node, 0, "k3s|ours\n").detail == "k3s installed by this lab"
    assert existing_cluster_finding(node, 0, "").level.value == "ok"
    assert existing_cluster_finding(node, 1, "").level.value == "warning"


def test_doctor_finds_a_missing_interface_and_two_nodes_on_one_machine(sshd: Sshd, tmp_path: Path) -> None:
    """The test sshd's two addresses are one machine whose only interface is `lo`."""
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"][0]["interface"] = "lo"
    values["nodes"][1]["interface"] = "eth9"
    write_stack(tmp_path, "one", values)
    result = labctl("doctor", "--stack", "one", "--stacks-dir", tmp_path, "--nodes-only", "--no-bandwidth")
    assert result.code == 1 and "Traceback" not in result.err
    interface = _rows(result.out, "interface")
    assert len(interface) == 2 and "│ ok " in interface[0] and "lo exists" in interface[0], result.out
    assert "error" in interface[1] and "eth9 does not exist here (it has lo)" in interface[1]
    machine = _rows(result.out, "machine")
    assert (
        len(machine) == 1 and machine[0].startswith("│ node-b") and "the same machine as node-a" in machine[0]
    )
    uid = _rows(result.out, "trainer uid")
    assert len(uid) == 2 and all("│ ok " in row and "10001 is no account here" in row for row in uid)


def test_uid_finding_names_the_account_that_has_the_trainer_uid() -> None:
    node = Node(name="n", address="10.0.0.1", user="u", role="server")
    taken = uid_finding(node, {"uid_owner": "alice"}, 10001)
    assert taken.level.value == "error" and "trainer.uid 10001 is the account 'alice' here" in taken.detail
    assert uid_finding(node, {"uid_owner": ""}, 10001).level.value == "ok"


def test_doctor_checks_the_firewall_of_nodes_whose_ranks_use_the_host_network(
    sshd: Sshd, tmp_path: Path
) -> None:
    """This machine has no ufw, firewalld, nftables or iptables rules of its own: with hostNetwork
    each node is an error naming the ports and the fix; without it there is nothing to check."""
    values = loopback_values(sshd, tmp_path / "export")
    write_stack(tmp_path, "pods", values)
    values["trainer"]["hostNetwork"] = True
    write_stack(tmp_path, "host", values)
    common = ("--stacks-dir", tmp_path, "--no-bandwidth", "--nodes-only")
    assert _rows(labctl("doctor", "--stack", "pods", *common).out, "firewall") == []
    result = labctl("doctor", "--stack", "host", *common)
    rows = _rows(result.out, "firewall")
    assert len(rows) == 2 and "Traceback" not in result.err, result.out
    # Whatever this machine has, the finding follows the prereq role's own probe of it.
    active = subprocess.run(
        ["sh", str(ACTIVE_FIREWALL_SCRIPT)], capture_output=True, text=True, check=True
    ).stdout.strip()
    level = {"ufw": "ok", "firewalld": "ok", "other": "warning", "none": "error"}[active]
    assert all(f"│ {level.ljust(7)} │" in row for row in rows), (active, rows)
    if active == "none":
        assert result.code == 1
        for row in rows:
            assert "│ no host firewall: trainer.hostNetwork opens " in row
            assert "│ `sudo ufw allow OpenSSH && sudo ufw enable` (" in row


# What each tool prints, as the script reads it: `ufw status` ("Status: active" or "Status:
# inactive" first), `firewall-cmd --state` ("running", or "not running" with exit 252), `nft list
# ruleset` (a base chain's "type filter hook input priority filter; policy drop;") and
# `iptables -S INPUT` (the chain's policy first, "-P INPUT DROP").
UFW_ACTIVE = "Status: active\n\nTo                         Action      From\n22/tcp   ALLOW   Anywhere\n"
NFT_DROP = (
    "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n"
    "\t\tct state established,related accept\n\t}\n\tchain output {\n\t\ttype filter hook output"
    " priority filter; policy accept;\n\t}\n}\n"
)
NFT_ACCEPT = NFT_DROP.replace("policy drop", "policy accept")
TOOLS = {
    "ufw active": ({"ufw": UFW_ACTIVE, "nft": NFT_DROP}, "ufw"),
    "ufw inactive, firewalld running": (
        {"ufw": "Status: inactive\n", "firewall-cmd": "running\n"},
        "firewalld",
    ),
    "firewalld stopped, nftables dropping": ({"firewall-cmd": "not running\n", "nft": NFT_DROP}, "other"),
    "nftables accepting, iptables dropping": (
        {"nft": NFT_ACCEPT, "iptables": "-P INPUT DROP\n-A INPUT -i lo -j ACCEPT\n"},
        "other",
    ),
    "iptables accepting": ({"iptables": "-P INPUT ACCEPT\n"}, "none"),
    "nothing installed": ({}, "none"),
}


@pytest.mark.parametrize("case", TOOLS)
def test_the_firewall_probe_reads_each_tools_own_answer(case: str, tmp_path: Path) -> None:
    """The script the prereq role and doctor share, run by sh against stand-ins of the tools."""
    answers, word = TOOLS[case]
    for tool, text in answers.items():
        stand_in = tmp_path / tool
        (tmp_path / f"{tool}.out").write_text(text)
        code = 252 if text == "not running\n" else 0
        stand_in.write_text(f"#!/bin/sh\ncat '{tmp_path / f'{tool}.out'}'\nexit {code}\n")
        stand_in.chmod(0o755)
    # Only the stand-ins and the shell's own tools: the machine's real firewall stays out of it.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("head", "grep", "cat"):
        (tools / name).symlink_to(shutil.which(name) or f"/usr/bin/{name}")
    env = {"PATH": f"{tmp_path}:{tools}"}
    done = subprocess.run(
        [shutil.which("sh") or "/bin/sh", str(ACTIVE_FIREWALL_SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.strip() == word, done.stderr


def test_firewall_finding_names_what_guards_the_host_network_ports() -> None:
    lab = LabConfig.model_validate(
        {
            "nodes": [
                {"name": "a", "address": "10.0.0.1", "user": "u", "role": "server"},
                {"name": "b", "address": "10.0.0.2", "user": "u", "role": "agent"},
            ],
            "nfs": {"exportPath": "/srv/k8scifar"},
            "trainer": {"hostNetwork": True, "port": 29500},
        }
    )
    node = lab.nodes[0]
    ufw = firewall_finding(lab, node, 0, "ufw")
    assert ufw.level.value == "ok" and "29500/tcp and 32768-60999/tcp) to 10.0.0.2 only" in ufw.detail
    assert firewall_finding(lab, node, 0, "firewalld").level.value == "ok"
    other = firewall_finding(lab, node, 0, "other")
    assert (
        other.level.value == "warning"
        and "admit 29500/tcp and 32768-60999/tcp from 10.0.0.2 only" in other.fix
    )
    none = firewall_finding(lab, node, 0, "none")
    assert none.level.value == "error"
    assert none.detail == (
        "no host firewall: trainer.hostNetwork opens 29500/tcp and 32768-60999/tcp on 10.0.0.1 to every"
        " host that reaches it (torchrun unpickles what its rendezvous store holds)"
    )
    assert none.fix == (
        "`sudo ufw allow OpenSSH && sudo ufw enable` (`pulumi up` then admits 10.0.0.2 only),"
        " or trainer.hostNetwork: false"
    )
    assert firewall_finding(lab, node, 1, "").level.value == "warning"
