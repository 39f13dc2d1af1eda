"""The part of the image build a kwok node cannot run, played by the test: the digest write; and
how a build ends on a real node, chosen by the test: failed, or still running.

On a real node the build pod's last container records the digest BuildKit pushed in a ConfigMap
(lab/cluster/digest_record.py), with the build's own ServiceAccount token; `pulumi up` reads that
ConfigMap once the Job completes. kwok runs no container, so this writes it the same way: as that
ServiceAccount, to the name the build's Role allows, while `up` waits for the Job.

kwok completes a Job's pod a few seconds after it runs; `BuildPods` marks each build pod as it
appears for one of the control plane's other pod stages (lab/controlplane/components.py): failed
as a broken build would, or held running as a long one is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from lab.cluster import digest_record
from lab.cluster.image import ACCOUNT
from lab.cluster.namespace import build_namespace
from lab.config import LabConfig
from lab.controlplane import kubeconfig, kubectl
from lab.controlplane.components import COMPLETE_AFTER_ANNOTATION, FAIL_LABEL
from lab.controlplane.layout import Layout

PLAYED_DIGEST = "sha256:" + "5e" * 32
# Longer than any test runs: a held build pod completes only once released.
HELD_FOR = "1h"
POLL_SECONDS = 0.2
FAILED = {"labels": {FAIL_LABEL: "true"}}
HELD = {"annotations": {COMPLETE_AFTER_ANNOTATION: HELD_FOR}}


@dataclass
class Player:
    """A part played in a thread while a command runs, until it is done or `stop` is set."""

    stop: threading.Event = field(default_factory=threading.Event, init=False)
    thread: threading.Thread | None = field(default=None, init=False)

    def _play(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.thread = threading.Thread(target=self._play, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)


@dataclass
class DigestWrite(Player):
    """The write, played in a thread until it succeeds or `stop` is set; `result` says how it went."""

    layout: Layout
    lab: LabConfig
    folder: Path
    result: list[str] = field(default_factory=list)

    def _role_allows(self, namespace: str) -> str | None:
        """The ConfigMap name the build's Role lets it update: the digest's, once the Role exists."""
        found = kubectl(self.layout, "get", "role", ACCOUNT, "-n", namespace, "-o", "json", check=False)
        if found.returncode != 0:
            return None
        names = [n for rule in json.loads(found.stdout)["rules"] for n in rule.get("resourceNames", [])]
        return names[0] if names else None

    def _play(self) -> None:
        namespace = build_namespace(self.lab)
        while not self.stop.is_set():
            name = self._role_allows(namespace)
            if name is not None:
                break
            time.sleep(0.3)
        else:
            return
        token = kubectl(self.layout, "create", "token", ACCOUNT, "-n", namespace).stdout.strip()
        config = self.folder / "build.kubeconfig"
        config.write_text(kubeconfig.for_token(self.layout, ACCOUNT, token))
        record = json.dumps(digest_record.config_map(name, PLAYED_DIGEST))
        # The Role's binding may come a moment after the Role: until it does the write is refused.
        refused = "never tried"
        while not self.stop.is_set():
            create = ["create", "-n", namespace, "-f", "-"]
            done = kubectl(self.layout, *create, stdin=record, kubeconfig=config, check=False)
            if done.returncode == 0:
                self.result.append("written")
                return
            refused = done.stderr.strip()
            time.sleep(0.3)
        self.result.append(refused)


def build_items(layout: Layout, lab: LabConfig, kind: str) -> list[dict[str, Any]]:
    """The build namespace's objects of `kind`: it holds nothing but the build's own."""
    found = kubectl(layout, "get", kind, "-n", build_namespace(lab), "-o", "json")
    return list(json.loads(found.stdout)["items"])


def release(layout: Layout, lab: LabConfig, pod: str) -> None:
    """Let a held build pod complete (kwok's completion delay is computed again as it changes)."""
    patch = {"metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: None}}}
    kubectl(layout, "patch", "pod", pod, "-n", build_namespace(lab), "--type=merge", "-p", json.dumps(patch))


@dataclass
class BuildPods(Player):
    """Each build pod still running, as it appears, given `metadata` (FAILED or HELD), in a thread
    until `stop` is set; `marked` names them, and `first` is set once one is marked."""

    layout: Layout
    lab: LabConfig
    metadata: dict[str, dict[str, str]]
    first: threading.Event = field(default_factory=threading.Event)
    marked: list[str] = field(default_factory=list)

    def _play(self) -> None:
        patch = json.dumps({"metadata": self.metadata})
        namespace = build_namespace(self.lab)
        while not self.stop.wait(POLL_SECONDS):
            found = kubectl(self.layout, "get", "pods", "-n", namespace, "-o", "json", check=False)
            if found.returncode != 0:
                continue  # the namespace is not there yet
            for pod in json.loads(found.stdout)["items"]:
                name = pod["metadata"]["name"]
                if name in self.marked or pod["status"].get("phase") in ("Succeeded", "Failed"):
                    continue
                done = kubectl(
                    self.layout,
                    "patch",
                    "pod",
                    name,
                    "-n",
                    namespace,
                    "--type=merge",
                    "-p",
                    patch,
                    check=False,
                )
                if done.returncode == 0:  # else gone meanwhile: the Job's next pod is marked instead
                    self.marked.append(name)
                    self.first.set()


@dataclass
class ReleaseWhen(Player):
    """Release the held build pod `pod` once `ready()` holds, polling in a thread until `stop`."""

    layout: Layout
    lab: LabConfig
    pod: str
    ready: Callable[[], bool]
    released: threading.Event = field(default_factory=threading.Event)

    def _play(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            if self.ready():
                release(self.layout, self.lab, self.pod)
                self.released.set()
                return
