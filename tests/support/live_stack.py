"""A stack derived from a shipped example for the real run: pointed at the control plane's
kubeconfig, its monitoring off (its Helm charts cannot be fetched here), brought up once with the
build's digest write played (tests/support/build_play.py), and destroyed at the end."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import controlplane
from lab.cluster.labels import label_selector
from lab.config import LabConfig, parse_config
from lab.config.loading import read_stack_values, stack_file
from lab.controlplane import netns
from tests.support.build_play import DigestWrite
from tests.support.pulumi_cli import PulumiProject, pulumi_project


@dataclass
class LiveStack:
    project: PulumiProject
    stack: str
    values: dict[str, Any]
    lab: LabConfig
    up: subprocess.CompletedProcess[str]
    digest: DigestWrite

    def pulumi(self, *args: str, **run: Any) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --stack STACK` in the stack's project (`run`: PulumiProject.run's options)."""
        return self.project.run(*args, f"--stack={self.stack}", **run)

    def configure(self, path: str, value: str | int) -> None:
        """`pulumi config set --path PATH VALUE`, as an operator changes one value; `values` and
        `lab` follow. The CLI stores a whole number as a number."""
        ok(self.pulumi("config", "set", "--path", path, str(value)))
        values = copy.deepcopy(self.values)
        *parents, key = path.split(".")
        place = values
        for parent in parents:
            place = place[parent]
        place[key] = value
        self.values, self.lab = values, parse_config(values)


def derived_values(
    plane: controlplane.ControlPlane,
    base: str,
    scheduling: dict[str, Any],
    provides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    values = read_stack_values(stack_file(base))
    values["kubeconfig"] = str(plane.layout.kubeconfig)
    values["scheduling"] = scheduling
    if provides is not None:
        values["provides"] = provides
    values["observability"] = {"enabled": False}
    return values


def brought_up(
    plane: controlplane.ControlPlane,
    folder: Path,
    stack: str,
    values: dict[str, Any],
    during: AbstractContextManager[object] | None = None,
) -> Iterator[LiveStack]:
    """The first `up` of `stack`, with `during` entered around it beside the digest write; the
    stack is destroyed when the caller is done with it."""
    project = pulumi_project(folder, prefix=netns.inside(plane.layout))
    lab = parse_config(values)
    project.write_stack(stack, values)
    project.init(stack)
    with DigestWrite(plane.layout, lab, folder) as play, during or contextlib.nullcontext():
        done = project.run("up", f"--stack={stack}", "--yes", "--skip-preview")
    live = LiveStack(project, stack, values, lab, done, play)
    yield live
    # Whatever a test left, the next module meets an empty cluster.
    ok(live.pulumi("destroy", "--yes", "--skip-preview"))


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """`done`, which must have succeeded; else the failure says what the engine reported (its
    diagnostics, which name each resource that failed and why) and the end of the rest."""
    diagnostics = done.stdout.partition("Diagnostics:")[2].partition("\nResources:")[0]
    assert done.returncode == 0, (
        f"{' '.join(done.args[-6:])} failed:\n{diagnostics[-6000:]}\n{done.stderr[-2000:]}"
    )
    return done


def pods_of(
    plane: controlplane.ControlPlane, namespace: str, selector: dict[str, str]
) -> list[dict[str, Any]]:
    query = label_selector(selector)
    found = controlplane.kubectl(plane.layout, "get", "pods", "-n", namespace, "-l", query, "-o", "json")
    return list(json.loads(found.stdout)["items"])


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def wait_for(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    """Until `done()`; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.5)


def live_object(plane: controlplane.ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object as the API server serves it (kubectl leaves out its managed fields unless asked)."""
    found = controlplane.kubectl(
        plane.layout, "get", kind, name, "-n", namespace, "-o", "json", "--show-managed-fields"
    )
    return dict(json.loads(found.stdout))
