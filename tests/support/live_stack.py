"""A stack derived from a shipped example for the real run: pointed at the control plane's
kubeconfig, its monitoring off (its Helm charts cannot be fetched here), brought up once with the
build's digest write played (tests/support/build_play.py), and destroyed at the end."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import controlplane
from lab.config import LabConfig, parse_config
from lab.config.loading import read_stack_values, stack_file
from lab.controlplane import netns
from tests.support.build_play import DigestWrite
from tests.support.pulumi_cli import PulumiProject, pulumi_project


@dataclass(frozen=True)
class LiveStack:
    project: PulumiProject
    stack: str
    lab: LabConfig
    up: subprocess.CompletedProcess[str]
    digest: DigestWrite

    def pulumi(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --stack STACK` in the stack's project."""
        return self.project.run(*args, f"--stack={self.stack}")


def derived_values(plane: controlplane.ControlPlane, base: str, scheduling: dict[str, Any]) -> dict[str, Any]:
    values = read_stack_values(stack_file(base))
    values["kubeconfig"] = str(plane.layout.kubeconfig)
    values["scheduling"] = scheduling
    values["observability"] = {"enabled": False}
    return values


def brought_up(
    plane: controlplane.ControlPlane, folder: Path, stack: str, values: dict[str, Any]
) -> Iterator[LiveStack]:
    """The first `up` of `stack`; the stack is destroyed when the caller is done with it."""
    project = pulumi_project(folder, prefix=netns.inside(plane.layout))
    lab = parse_config(values)
    project.write_stack(stack, values)
    project.init(stack)
    with DigestWrite(plane.layout, lab, folder) as play:
        done = project.run("up", f"--stack={stack}", "--yes", "--skip-preview")
    live = LiveStack(project, stack, lab, done, play)
    yield live
    # Whatever a test left, the next module meets an empty cluster.
    live.pulumi("destroy", "--yes", "--skip-preview")


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-2000:])
    return done


def pods_of(
    plane: controlplane.ControlPlane, namespace: str, selector: dict[str, str]
) -> list[dict[str, Any]]:
    query = ",".join(f"{k}={v}" for k, v in selector.items())
    found = controlplane.kubectl(plane.layout, "get", "pods", "-n", namespace, "-l", query, "-o", "json")
    return list(json.loads(found.stdout)["items"])


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
