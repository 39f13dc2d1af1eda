"""Each fact two layers share is written once: the trainer's names in trainer/contract.py, the
cluster's ports and networks in lab/config/facts.py, which the roles receive through the inventory.

The first scan reads every string literal of lab/ and trainer/ (the syntax tree's constants, so
docstrings and messages that mention a name in a sentence do not count) and fails on one equal to
a value of the contract, outside the contract itself and the few places listed below. The second
fails on a port or network of lab/config/facts.py written in an Ansible role.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from lab import config
from lab.config.facts import API_PORT
from trainer import contract
from trainer.records import runfolders

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("lab", "trainer")

# (file, value): why the literal there is not the contract's fact.
ALLOWED = {
    # runfolders.py travels alone to the NFS server's python3, so it cannot import the contract;
    # test_run_folder_names_match_the_contract holds its copy equal.
    ("trainer/records/runfolders.py", contract.STATUS_FILE),
    ("trainer/records/runfolders.py", contract.SUMMARY_FILE),
    ("trainer/records/runfolders.py", contract.METRICS_FILE),
    ("trainer/records/runfolders.py", contract.CHECKPOINTS_DIR),
    # The runs share's folder on the NFS export, not the pods' mount point.
    ("lab/cli/common/runsource.py", contract.RUNS_MOUNT),
    # "none" and "latest" meaning something else: no gang scheduler, no stack, no GPU fact, an empty cell, no
    # OpenTelemetry exporter, the status document's newest-epoch key, torch's per-image losses.
    ("lab/config/checks.py", contract.NO_COMPRESSION),
    ("lab/config/loading.py", contract.NO_COMPRESSION),
    ("lab/config/workload.py", contract.NO_COMPRESSION),
    ("lab/config/reference.py", contract.NO_COMPRESSION),
    ("lab/cli/doctor/preflight.py", contract.NO_COMPRESSION),
    ("lab/cli/status/__init__.py", contract.NO_COMPRESSION),
    ("lab/cli/status/__init__.py", contract.LATEST_CHECKPOINT),
    ("lab/cluster/registry.py", contract.NO_COMPRESSION),
    ("trainer/numerics.py", contract.NO_COMPRESSION),
}


def _values() -> dict[str, str]:
    """Each string constant of the contract, by value (tuples are made of these)."""
    return {
        value: name for name, value in vars(contract).items() if name.isupper() and isinstance(value, str)
    }


def literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, value) of each string literal in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def repeats(root: Path) -> list[str]:
    """`file:line: value (contract.NAME)` for each contract value written outside the contract."""
    values = _values()
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative == "trainer/contract.py":
                continue
            for line, value in literals(path.read_text()):
                if value in values and (relative, value) not in ALLOWED:
                    found.append(f"{relative}:{line}: {value!r} (contract.{values[value]})")
    return found


def test_no_shared_name_is_written_twice() -> None:
    found = repeats(ROOT)
    assert not found, "import these from trainer/contract.py:\n" + "\n".join(found)


def test_the_scan_finds_a_reintroduced_literal(tmp_path: Path) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "pods.py").write_text('ENV = [{"name": "MASTER_ADDR", "value": "x"}]\n')
    assert repeats(tmp_path) == ["lab/pods.py:1: 'MASTER_ADDR' (contract.MASTER_ADDR)"]


def test_run_folder_names_match_the_contract() -> None:
    assert runfolders.RUN_FILES == contract.RUN_FILES
    assert {contract.CHECKPOINTS_DIR} == runfolders.SKIPPED


def _network_facts() -> set[str]:
    """The ports and networks lab/config/facts.py hands the roles, as they would be written in YAML."""
    ports = {
        API_PORT,
        config.KUBELET_PORT,
        config.VXLAN_PORT,
        config.NFS_PORT_NUMBER,
        *config.EPHEMERAL_PORTS,
    }
    ports.add(config.Registry().port)
    networks = {network for pair in config.CLUSTER_NETWORKS.values() for network in pair}
    return {str(port) for port in ports} | networks


def role_repeats(roles: Path) -> list[str]:
    """`file:line: value` for each of lab/config/facts.py's ports and networks written in a role."""
    facts = _network_facts()
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(f) for f in sorted(facts)) + r")(?![\w.])")
    found = []
    for path in sorted(p for p in roles.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(roles)}:{number}: {m.group(1)}" for m in pattern.finditer(line)]
    return found


def test_the_roles_take_ports_and_networks_from_the_inventory() -> None:
    found = role_repeats(ROOT / "ansible" / "roles")
    assert not found, "read these from the inventory's lab_* variables:\n" + "\n".join(found)


def test_the_role_scan_finds_a_reintroduced_port(tmp_path: Path) -> None:
    (tmp_path / "k3s" / "defaults").mkdir(parents=True)
    (tmp_path / "k3s" / "defaults" / "main.yml").write_text("k3s_api_port: 6443\nk3s_other: 164430\n")
    (tmp_path / "prereq.yml").write_text("networks: [10.42.0.0/16]\n")
    assert role_repeats(tmp_path) == ["k3s/defaults/main.yml:1: 6443", "prereq.yml:1: 10.42.0.0/16"]
