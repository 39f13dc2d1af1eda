"""The stack file is data and the export is the lab's alone, on the test machines, through site.yml
and reset.yml as `pulumi up` and `pulumi destroy` run them.

An export path the lab did not make (an owner's `datasets/` and `runs/`, an empty directory that was
there before), one reached through a link or a world-writable directory, and a link planted in
the lab's own export: site.yml refuses each in one line before anything changes on either machine,
and no link is ever followed. A whole bootstrap and purge run with a lookup marker in every text
the stack hands Ansible (the key's path, the skip reasons): every task of both playbooks sees
them, and none runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lab import testbed
from lab.bootstrap.inventory import NODE_STATE_DIR
from lab.bootstrap.playbook import PlaybookError
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import LabConfig, parse_config
from lab.validation.suite.checks import EXPORT_FOLDERS, EXPORT_MARK
from tests.support import machine_state
from tests.support.lookup_marker import marker
from tests.support.machine_state import STACK

# The owner's work where an export path could point, as the issue found it taken over.
OWNERS = "/srv/owner-data"
PLANT_OWNERS = f"""
set -e
install -d -o 1000 -g 1000 -m 0750 {OWNERS}/datasets/imagenet {OWNERS}/runs/exp42
echo 'weeks of training' > {OWNERS}/runs/exp42/model.pt
chown 1000:1000 {OWNERS} {OWNERS}/runs/exp42/model.pt
"""
EMPTY_BEFORE = "/srv/was-here"
LINKED = "/srv/lab-link"
# What a planted link points at: root's private folder (as root's ~/.ssh would be).
TARGET = "/root/owner-keys"
MADE = "/srv/k8scifar-made"


def _values(lab: LabConfig, **changes: Any) -> dict[str, Any]:
    values = lab.model_dump(by_alias=True, exclude_none=True, mode="json")
    for key, value in changes.items():
        values[key] = {**values.get(key, {}), **value}
    return values


def _owner_and_mode(machines: testbed.Testbed, machine: testbed.Machine, *paths: str) -> str:
    return machine_state.root_shell(machines, machine, f"stat -c '%n %u %g %a' {' '.join(paths)}")


def _nothing_changed(machines: testbed.Testbed) -> None:
    for machine in machines.layout.machines:
        left = machine_state.root_shell(
            machines, machine, f"ls -d {NODE_STATE_DIR} /etc/sysctl.d/*k8scifar* 2>/dev/null; true"
        )
        assert left.strip() == "", f"site.yml changed {machine.name} before it refused: {left}"


def _refused(lab: LabConfig, export: str) -> str:
    """site.yml's one-line refusal for a stack exporting `export`."""
    cfg = parse_config(_values(lab, nfs={"exportPath": export}))
    with pytest.raises(PlaybookError) as refused:
        HostBootstrapProvider().create(bootstrap_inputs(cfg, STACK))
    (failure,) = refused.value.failures
    assert failure.host == lab.nfs_server.name and "\n" not in failure.message
    assert f"nfs.exportPath {export}:" in failure.message and "Nothing was changed" in failure.message
    return failure.message


@pytest.fixture
def server(machines: testbed.Testbed, lab: LabConfig) -> testbed.Machine:
    (found,) = [m for m in machines.layout.machines if m.name == lab.nfs_server.name]
    return found


@pytest.mark.parametrize(
    ("export", "plant", "paths"),
    [
        (
            OWNERS,
            PLANT_OWNERS,
            [OWNERS, f"{OWNERS}/datasets", f"{OWNERS}/runs", f"{OWNERS}/runs/exp42/model.pt"],
        ),
        (EMPTY_BEFORE, f"install -d -o 1000 -g 1000 -m 0700 {EMPTY_BEFORE}", [EMPTY_BEFORE]),
    ],
    ids=["an owner's datasets and runs", "an empty directory that was there before"],
)
def test_a_directory_the_lab_did_not_make_is_never_taken(
    machines: testbed.Testbed,
    server: testbed.Machine,
    lab: LabConfig,
    export: str,
    plant: str,
    paths: list[str],
) -> None:
    machine_state.root_shell(machines, server, plant)
    before = _owner_and_mode(machines, server, *paths)
    try:
        assert "already exists and the lab did not make it" in _refused(lab, export)
        _nothing_changed(machines)
        assert _owner_and_mode(machines, server, *paths) == before
        assert " 1000 1000 " in before, before
    finally:
        machine_state.root_shell(machines, server, f"rm -rf {export}")


def test_no_link_or_world_writable_directory_on_the_way(
    machines: testbed.Testbed, server: testbed.Machine, lab: LabConfig
) -> None:
    machine_state.root_shell(machines, server, f"install -d -m 0700 {TARGET} && ln -s {TARGET} {LINKED}")
    before = _owner_and_mode(machines, server, TARGET)
    try:
        assert f"{LINKED} is a symbolic link" in _refused(lab, f"{LINKED}/k8scifar")
        # /tmp/k8s, where anyone could have planted a link before the lab came.
        assert "/tmp is writable by every user" in _refused(lab, "/tmp/k8s")
        _nothing_changed(machines)
        assert _owner_and_mode(machines, server, TARGET) == before
        assert (
            machine_state.root_shell(machines, server, f"ls -A {TARGET} /tmp | grep -c k8s; true").strip()
            == "0"
        )
    finally:
        machine_state.root_shell(machines, server, f"rm -rf {LINKED} {TARGET}")


def _marked_lab(lab: LabConfig, markers: Path, keys: Path) -> LabConfig:
    """The test machines' stack with a lookup marker in every text the stack hands Ansible."""
    key = keys / marker(markers, "keyPath").lstrip("/") / "id_ed25519"
    key.parent.mkdir(parents=True)
    shutil.copy(lab.ssh.key_path, key)
    key.chmod(0o600)
    skip = {step: f"{reason} {marker(markers, step)}" for step, reason in lab.skip.items()}
    values = _values(lab, ssh={"keyPath": str(key)}, nfs={"exportPath": MADE, "purgeOnDestroy": True})
    return parse_config(values | {"skip": skip})


def test_a_whole_run_evaluates_no_value_and_follows_no_link(
    machines: testbed.Testbed, server: testbed.Machine, lab: LabConfig, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = _marked_lab(lab, markers, tmp_path / "keys")
    provider = HostBootstrapProvider()
    inputs = bootstrap_inputs(cfg, STACK)
    outs = provider.create(inputs).outs
    try:
        found = _owner_and_mode(
            machines, server, MADE, f"{MADE}/{EXPORT_MARK}", *(f"{MADE}/{f}" for f in EXPORT_FOLDERS)
        )
        uid = cfg.trainer.uid
        assert found.splitlines() == [
            f"{MADE} 0 0 755",
            f"{MADE}/{EXPORT_MARK} 0 0 644",
            *(f"{MADE}/{folder} {uid} {uid} 775" for folder in EXPORT_FOLDERS),
        ], found

        # Whoever writes as the trainer's uid replaces the lab's `runs` with a link to root's keys.
        machine_state.root_shell(
            machines,
            server,
            f"install -d -m 0700 {TARGET} && rm -rf {MADE}/runs && ln -s {TARGET} {MADE}/runs",
        )
        before = _owner_and_mode(machines, server, TARGET)
        with pytest.raises(PlaybookError) as refused:
            provider.update("hosts-testbed", outs, inputs)
        assert f"{MADE}/runs is a symbolic link, not the lab's folder" in str(refused.value)
        assert _owner_and_mode(machines, server, TARGET) == before
    finally:
        # purgeOnDestroy: the lab's folders and mark go; the planted link stays, its target untouched.
        provider.delete("hosts-testbed", outs)
    left = machine_state.root_shell(machines, server, f"ls -A {MADE}; stat -c '%n %u %a' {TARGET}")
    machine_state.root_shell(machines, server, f"rm -rf {MADE} {TARGET}")
    assert left.splitlines() == ["runs", f"{TARGET} 0 700"], left
    assert sorted(p.name for p in markers.iterdir()) == [], (
        "a stack value ran as code on the operator's machine"
    )
