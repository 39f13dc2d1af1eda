"""The lab_packages, prereq and nvidia roles' decisions about apt and the NVIDIA stack, run by Ansible
for real with apt-get, dpkg-query and nvidia-smi replaced by recording stand-ins (dpkg's version
comparison is the real one).

Each test is the situation a real node was found in: apt lists fresh by date but older than a
repository just added, a newer toolkit, a driver or GPU too old for the trainer image's CUDA.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.bootstrap.inventory import image_requirement_vars
from lab.config import facts
from lab.paths import ANSIBLE_DIR
from tests.support.local_play import kept_facts, run_tasks

ROLES = ANSIBLE_DIR / "roles"
PIN = "1.17.8-1"


def _run(
    role: str, tasks: str, work: Path, variables: dict[str, Any], fakes: dict[str, str], names: list[str]
) -> tuple[int, str, dict[str, Any]]:
    """`role`'s tasks/`tasks` on this machine; Ansible's exit status and output, and the facts in `names`."""
    done = run_tasks(
        role, tasks, work, {**image_requirement_vars(), **variables}, fakes, {"FAKE_DIR": str(work)}, names
    )
    return done.returncode, done.stdout + done.stderr, kept_facts(work)


# lab_packages: apt's lists


def _lists(tmp_path: Path, simulate_rc: int, refresh: bool) -> tuple[dict[str, Any], list[str]]:
    fake = f'echo "$*" >> "$FAKE_DIR/apt-get.calls"\nexit {simulate_rc}'
    variables = {"lab_packages_missing": ["kubelet=1.33.5-1.1"], "lab_packages_refresh": refresh}
    rc, output, facts = _run("lab_packages", "lists.yml", tmp_path, variables, {"apt-get": fake},
                             ["lab_packages_lists_valid_time"])  # fmt: skip
    assert rc == 0, output
    calls = tmp_path / "apt-get.calls"
    return facts, calls.read_text().splitlines() if calls.exists() else []


def test_apt_lists_are_refreshed_when_a_pinned_package_has_no_candidate(tmp_path: Path) -> None:
    """`apt-get install` exits 100 on "Unable to locate package" or "Version ... was not found"."""
    facts, calls = _lists(tmp_path, simulate_rc=100, refresh=False)
    assert calls == ["--simulate --quiet install kubelet=1.33.5-1.1"]
    assert int(facts["lab_packages_lists_valid_time"]) == 0


def test_apt_lists_are_trusted_for_their_age_when_apt_can_install(tmp_path: Path) -> None:
    facts, _ = _lists(tmp_path, simulate_rc=0, refresh=False)
    assert int(facts["lab_packages_lists_valid_time"]) == 3600


def test_apt_lists_are_refreshed_after_a_repository_changed(tmp_path: Path) -> None:
    facts, calls = _lists(tmp_path, simulate_rc=0, refresh=True)
    assert calls == [] and int(facts["lab_packages_lists_valid_time"]) == 0


def _tasks(role: str, name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / role / "tasks" / name).read_text())


def _blocks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for task in tasks for t in (_blocks(task["block"]) if "block" in task else [task])]


def test_the_install_uses_the_decided_list_age_and_callers_say_when_a_repository_changed() -> None:
    """deb822_repository does not refresh apt's lists (its module notes): every role that adds a
    repository tells lab_packages, which otherwise keeps lists up to an hour old."""
    (install,) = [t for t in _blocks(_tasks("lab_packages", "main.yml")) if "ansible.builtin.apt" in t]
    assert install["ansible.builtin.apt"]["cache_valid_time"] == "{{ lab_packages_lists_valid_time }}"
    # Both add their repository through apt_signed_source, which registers the source it writes.
    (repo,) = [t for t in _tasks("apt_signed_source", "main.yml") if "ansible.builtin.deb822_repository" in t]
    changed = f"{repo['register']} is changed"
    for role, tasks in (("kubeadm", "packages.yml"), ("nvidia", "main.yml")):
        found = _tasks(role, tasks)
        includes = [t.get("ansible.builtin.include_role", {}).get("name") for t in found]
        assert includes.count("apt_signed_source") == 1, role
        (packages,) = [
            t
            for t in found
            if t.get("ansible.builtin.include_role", {}) == {"name": "lab_packages"}  # its install, main.yml
        ]
        refresh = packages["vars"]["lab_packages_refresh"]
        assert refresh.startswith("{{") and refresh.endswith(f"{changed} }}}}"), (role, refresh)


def test_python3_debian_is_installed_before_any_repository_is_added() -> None:
    """deb822_repository imports `debian.deb822` on the node (ansible-core's deb822_repository.py,
    requirements: python3-debian); prereq runs first on every node (playbooks/site.yml)."""
    # Reset's task files run on nodes the install prepared.
    install_time = [
        tasks
        for role in ROLES.iterdir()
        for tasks in (role / "tasks").glob("*.yml")
        if tasks.name not in ("reset.yml", "remove.yml")
    ]
    users = [f"{t.parent.parent.name}/{t.name}" for t in install_time
             if "ansible.builtin.deb822_repository:" in t.read_text()]  # fmt: skip
    assert users == ["apt_signed_source/main.yml"]
    callers = sorted(
        f"{t.parent.parent.name}/{t.name}" for t in install_time if "name: apt_signed_source" in t.read_text()
    )
    assert callers == ["kubeadm/packages.yml", "nvidia/main.yml"]
    site = yaml.safe_load((ANSIBLE_DIR / "playbooks" / "site.yml").read_text())
    # The first play that installs anything (the one before only surveys the nodes) is prereq's.
    first = next(play for play in site if "roles" in play)
    assert first["hosts"] == "all" and first["roles"] == [{"role": "prereq"}]
    defaults = yaml.safe_load((ROLES / "prereq" / "defaults" / "main.yml").read_text())
    assert "python3-debian" in defaults["prereq_packages"]


# lab_packages: reset's marks, and apt's lock


def _marked_at_reset(tmp_path: Path, manual_record: list[str] | None) -> list[str]:
    """The packages reset hands to `apt-mark auto`: the lab added nfs-common (asked for by name),
    keyutils and libnfsidmap1 (its dependencies); since, the owner installed keyutils by hand."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "packages").write_text("nfs-common\nkeyutils\nlibnfsidmap1\n")
    if manual_record is not None:
        (state / "packages-manual").write_text("".join(f"{p}\n" for p in manual_record))
    fakes = {
        "dpkg-query": "printf 'ii nfs-common\\nii keyutils\\nii libnfsidmap1\\nii bash\\n'",
        "apt-mark": 'case "$1" in showmanual) printf "bash\\nkeyutils\\nnfs-common\\n";;\n'
        ' auto) shift; echo "$*" >> "$FAKE_DIR/auto"\n'
        '  for p; do echo "$p set to automatically installed."; done;;\n'
        "esac",
        "apt-get": "exit 0",  # nothing is unneeded: nothing is purged
    }
    rc, output, _ = _run("lab_packages", "reset.yml", tmp_path, {"lab_state_dir": str(state)}, fakes, [])
    assert rc == 0, output
    return (tmp_path / "auto").read_text().split()


def test_reset_leaves_the_packages_the_owner_installed_by_hand_to_the_owner(tmp_path: Path) -> None:
    assert sorted(_marked_at_reset(tmp_path, ["nfs-common"])) == ["libnfsidmap1", "nfs-common"]


def test_reset_of_a_lab_without_the_record_of_its_requests_marks_all_its_packages(tmp_path: Path) -> None:
    assert sorted(_marked_at_reset(tmp_path, None)) == ["keyutils", "libnfsidmap1", "nfs-common"]


def _all_tasks() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        found += [
            (f"{path.parent.parent.name}/{path.name}", t) for t in _blocks(yaml.safe_load(path.read_text()))
        ]
    return found


# What apt, the apt module and dpkg say when another process holds the lock: apt-get (apt 2.6),
# the apt module's LockFailedException, dpkg --set-selections (dpkg 1.21; dpkg 1.19's wording).
LOCK_HELD = [
    "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 281 (python3)",
    "Failed to lock apt for exclusive operation: Failed to lock directory /var/lib/apt/lists/",
    "dpkg: error: dpkg frontend lock was locked by another process with pid 281",
    "dpkg: error: dpkg frontend is locked by another process",
]
NOT_THE_LOCK = ["E: Unable to locate package kubelet", "dpkg: error: parsing file '/var/lib/dpkg/status'"]


def test_every_task_that_takes_the_dpkg_lock_waits_for_it() -> None:
    """unattended-upgrades holds the dpkg lock for minutes on a first boot (Ubuntu 24.04). The apt
    module waits lock_timeout seconds (default 60, ansible-core modules/apt.py), except while it
    installs its own python3-apt; dpkg --set-selections (dpkg_selections) fails at once. Every such
    task waits, and is tried again while the lock is what failed, for lab_packages_lock_timeout."""
    defaults = yaml.safe_load((ROLES / "lab_packages" / "defaults" / "main.yml").read_text())
    assert defaults["lab_packages_lock_timeout"] >= 600
    busy = re.compile(defaults["lab_packages_lock_busy"])
    assert all(busy.search(message) for message in LOCK_HELD)
    assert not any(busy.search(message) for message in NOT_THE_LOCK)

    takers = [
        (where, t)
        for where, t in _all_tasks()
        if {"ansible.builtin.apt", "ansible.builtin.dpkg_selections"} & set(t)
    ]
    assert sorted(where for where, _ in takers) == [
        "lab_packages/main.yml",
        "lab_packages/reset.yml",
        "lab_packages/selections.yml",
    ], "apt and dpkg are driven by the lab_packages role alone"
    for where, task in takers:
        if "ansible.builtin.apt" in task:
            assert task["ansible.builtin.apt"].get("lock_timeout") == "{{ lab_packages_lock_timeout }}", where
        assert "lab_packages_lock_timeout" in str(task["retries"]), where
        assert task["until"].endswith(f"{task['register']}.msg is not search(lab_packages_lock_busy)"), where


# nvidia: the machine's own toolkit release (its own toolkit source: tests/roles/test_apt_sources.py)


def _toolkit(tmp_path: Path, installed: str | None) -> list[str]:
    dpkg_query = (
        f'echo "ii  {installed}"' if installed else 'echo "dpkg-query: no packages found" >&2; exit 1'
    )
    rc, output, facts = _run(
        "nvidia", "toolkit_facts.yml", tmp_path, {}, {"dpkg-query": dpkg_query}, ["nvidia_toolkit_install"]
    )
    assert rc == 0, output
    return facts["nvidia_toolkit_install"]


@pytest.mark.parametrize(
    ("installed", "pinned"),
    [(None, True), ("1.17.3-1", True), (PIN, False), ("1.17.10-1", False)],
)
def test_a_toolkit_at_or_above_the_pin_is_kept(tmp_path: Path, installed: str | None, pinned: bool) -> None:
    """dpkg --compare-versions decides (1.17.10 is above 1.17.8, which a string comparison gets wrong)."""
    install = _toolkit(tmp_path, installed)
    assert all(p.endswith(f"={PIN}") for p in install) is pinned
    assert install[0].split("=")[0] == "nvidia-container-toolkit"


# nvidia: driver and GPUs


def _driver(tmp_path: Path, smi: str, gpus: int = 1) -> tuple[int, str, dict[str, Any]]:
    return _run("nvidia", "driver.yml", tmp_path, {"node_gpus": gpus, "nvidia_driver_install": False},
                {"nvidia-smi": smi}, ["nvidia_gpu_count", "nvidia_driver_version"])  # fmt: skip


def _stopped_because(output: str) -> str:
    found = re.findall(r'"msg": "(node node[^"]*)"', output)
    return found[0] if found else output[-2000:]


def test_a_driver_and_gpus_the_image_runs_on_pass(tmp_path: Path) -> None:
    rc, output, facts = _driver(tmp_path, "printf '580.95.05, 8.6\\n580.95.05, 12.0\\n'", gpus=2)
    assert rc == 0, output
    assert int(facts["nvidia_gpu_count"]) == 2 and facts["nvidia_driver_version"] == "580.95.05"


@pytest.mark.parametrize(
    ("smi", "reason"),
    [
        ("echo '570.172.08, 8.0'", "older than the 580 series"),  # Ubuntu's old fallback, 570-server
        ("echo '535.247.01, 8.6'", "older than the 580 series"),  # Debian 12's nvidia-driver
        ("echo '580.95.05, 7.0'", "compute capability 7.0 is outside 7.5 to 12.0"),  # Volta
        ("echo 'NVIDIA-SMI has failed' >&2; exit 9", "`nvidia-smi` failed"),
    ],
)
def test_an_unfit_driver_or_gpu_stops_the_play_naming_why(tmp_path: Path, smi: str, reason: str) -> None:
    rc, output, _ = _driver(tmp_path, smi)
    assert rc != 0 and reason in _stopped_because(output), output[-3000:]


def test_the_fallback_driver_is_of_a_series_the_image_runs_on() -> None:
    """Ubuntu packages nvidia-driver-<series>-server; Debian 12's nvidia-driver is 535: no fallback there."""
    defaults = (ROLES / "nvidia" / "defaults" / "main.yml").read_text()
    package = yaml.safe_load(defaults)["nvidia_driver_package"]
    ubuntu = re.search(r"'(nvidia-driver-(\d+)[\w-]*)' if ansible_facts.distribution == 'Ubuntu'", package)
    assert ubuntu and int(ubuntu.group(2)) >= facts.MIN_DRIVER_MAJOR, package
    assert package.endswith("else '' }}"), "Debian packages no driver of the series the image needs"
