"""The locks agree with pyproject.toml and with each other, and every file they name has a hash."""

from __future__ import annotations

import re
import tomllib

from lab.cli.doctor.locks import DEV_LOCK, OPERATOR_LOCK, TRAINER_LOCK, canonical, pins
from lab.paths import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def hashes(text: str) -> dict[str, set[str]]:
    """Each requirement's `--hash` values; a requirement without any maps to an empty set."""
    found: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if requirement := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line):
            current = canonical(requirement.group(1))
            found[current] = set()
        found_hashes = re.findall(r"--hash=(sha256:[0-9a-f]{64})", line)
        if found_hashes and current is not None:
            found[current].update(found_hashes)
    return found


def top_level(requirements: list[str]) -> dict[str, str]:
    return pins("\n".join(requirements))


def lock_problems(role: str, declared: dict[str, str], lock: str, dev: str) -> list[str]:
    """What is wrong with one role's lock: a declared pin it lacks or moves, a requirement without
    hashes, or a version or file set other than the development lock's."""
    locked, hashed, dev_pinned, dev_hashed = pins(lock), hashes(lock), pins(dev), hashes(dev)
    problems = [f"{role}: {n}=={v} is not in the lock" for n, v in declared.items() if locked.get(n) != v]
    problems += [f"{role}: {n} has no --hash" for n, found in hashed.items() if not found]
    problems += [
        f"{role}: {n}=={v} differs from {DEV_LOCK.name}"
        for n, v in locked.items()
        if dev_pinned.get(n) != v or dev_hashed.get(n) != hashed[n]
    ]
    return problems


def test_each_role_locks_its_declared_pins_with_the_development_locks_hashes() -> None:
    extras = PROJECT["optional-dependencies"]
    dev = DEV_LOCK.read_text()
    everything = top_level(PROJECT["dependencies"] + [r for reqs in extras.values() for r in reqs])
    roles = {
        "operator": (top_level(PROJECT["dependencies"]), OPERATOR_LOCK),
        "trainer": (top_level(extras["trainer"]), TRAINER_LOCK),
        "dev": (everything, DEV_LOCK),
    }
    problems = [
        problem
        for role, (declared, lock) in roles.items()
        for problem in lock_problems(role, declared, lock.read_text(), dev)
    ]
    assert problems == []


def test_the_operators_lock_has_none_of_the_trainers_packages() -> None:
    assert {"torch", "torchvision", "matplotlib", "numpy"} & set(pins(OPERATOR_LOCK.read_text())) == set()


def test_the_check_catches_a_moved_pin_a_missing_hash_and_a_drifted_role_lock() -> None:
    dev = "rich==15.0.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
    assert lock_problems("operator", {"rich": "15.0.0"}, dev, dev) == []
    moved = dev.replace("15.0.0", "14.0.0")
    assert lock_problems("operator", {"rich": "15.0.0"}, moved, dev) == [
        "operator: rich==15.0.0 is not in the lock",
        f"operator: rich==14.0.0 differs from {DEV_LOCK.name}",
    ]
    unhashed = "rich==15.0.0\n"
    assert lock_problems("operator", {}, unhashed, dev) == [
        "operator: rich has no --hash",
        f"operator: rich==15.0.0 differs from {DEV_LOCK.name}",
    ]
