"""The trainer image's Dockerfile: pinned base and packages (the tests' own), non-root, entrypoint."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest

from lab.cli.doctor.locks import DEV_LOCK, TRAINER_LOCK, pins
from lab.config import Trainer
from tests.support.trainer_runs import ROOT

IMAGE = ROOT / "images" / "trainer"
# The image's user is the lab's default `trainer.uid`, which owns the export's folders.
UID = Trainer.model_fields["uid"].default


def _requirements(text: str) -> list[str]:
    """Requirement entries, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _locked_python() -> str:
    """The CPython minor release the locks are resolved for (scripts/lock.sh)."""
    found = re.search(r"--python-version (\d+\.\d+)", (ROOT / "scripts" / "lock.sh").read_text())
    assert found, "scripts/lock.sh names no --python-version"
    return found.group(1)


def image_problems(dockerfile: str, requirements: str, lock: str) -> list[str]:
    problems = []
    base = re.search(r"^FROM (\S+)", dockerfile, flags=re.MULTILINE)
    # An exact release tag for people to read, and the digest that is what gets pulled.
    pinned = base and re.fullmatch(r"[\w./-]+:(\d+\.\d+)\.\d+[\w.-]*@sha256:[0-9a-f]{64}", base.group(1))
    if not pinned:
        problems.append("the base image must be pinned to an exact version tag and its digest")
    elif pinned.group(1) != (locked := _locked_python()):
        # The locked wheels (cp311 and the like) install only on the Python they were resolved for.
        problems.append(f"the base image's Python {pinned.group(1)} is not the locks' {locked}")
    if not re.search(rf"^USER {UID}(:{UID})?$", dockerfile, flags=re.MULTILINE):
        problems.append(f"the image must run as uid {UID}")
    # Pods run as the stack's trainer.uid, not always 1000: HOME must be writable by any uid.
    home = re.search(r"^ENV HOME=(\S+)$", dockerfile, flags=re.MULTILINE)
    if not home or not re.search(
        rf"mkdir -m 1777 {re.escape(home.group(1))}$", dockerfile, flags=re.MULTILINE
    ):
        problems.append("HOME must be set and created sticky and world-writable (mkdir -m 1777)")
    if 'ENTRYPOINT ["python", "-m", "trainer"]' not in dockerfile:
        problems.append("the entrypoint must be python -m trainer")
    if not re.search(r"^COPY trainer/ ", dockerfile, flags=re.MULTILINE):
        problems.append("the trainer package must be copied from the context's trainer/")
    if "pip install --require-hashes" not in dockerfile:
        problems.append("pip must install with --require-hashes")
    image, locked = pins(requirements), pins(lock)
    entries = _requirements(requirements)
    problems += [f"{line!r} is not pinned with ==" for line in entries if "==" not in line]
    problems += [
        f"{line.split()[0]} has no --hash=sha256:" for line in entries if "--hash=sha256:" not in line
    ]
    problems += [
        f"{n}=={v} differs from {DEV_LOCK.name}" for n, v in image.items() if n in locked and locked[n] != v
    ]
    for package in ("torch", "torchvision"):
        if image.get(package) != version(package).split("+")[0]:
            problems.append(f"{package} in the image is not the version the tests run")
    return problems


def test_the_image_is_pinned_non_root_and_runs_the_trainer() -> None:
    problems = image_problems(
        (IMAGE / "Dockerfile").read_text(),
        TRAINER_LOCK.read_text(),
        DEV_LOCK.read_text(),
    )
    assert problems == []


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("python:3.11.16-slim-bookworm", "exact version tag and its digest"),  # a tag can be re-pushed
        ("python@sha256:" + "c4" * 32, "exact version tag and its digest"),  # no release for people
        ("python:3.12.11-slim-bookworm@sha256:" + "c4" * 32, "Python 3.12 is not the locks' 3.11"),
    ],
)
def test_a_base_by_tag_alone_or_of_another_python_is_refused(base: str, problem: str) -> None:
    dockerfile = re.sub(r"^FROM \S+", f"FROM {base}", (IMAGE / "Dockerfile").read_text(), flags=re.MULTILINE)
    problems = image_problems(dockerfile, TRAINER_LOCK.read_text(), DEV_LOCK.read_text())
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_image_check_catches_a_broken_dockerfile() -> None:
    broken = "FROM python:latest\nCOPY . /app\nENTRYPOINT python train.py\n"
    problems = image_problems(broken, "torch==2.0.0\nnumpy\n", "torch==2.14.1\n")
    # base, user, HOME, entrypoint, copy, hashes required, numpy unpinned, torch and numpy without
    # a hash, torch differs, torch and torchvision not the tested ones
    assert len(problems) == 12, problems


def test_the_ignore_file_keeps_only_what_the_dockerfile_copies() -> None:
    rules = (IMAGE / "Dockerfile.dockerignore").read_text().split()
    assert rules[rules.index("*") :][:3] == ["*", "!trainer/", "!images/trainer/requirements.txt"]
