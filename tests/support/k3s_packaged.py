"""What a k3s server deploys by itself, restated from k3s: the packaged manifests it stages, and the
rule that `disable` applies to them.

k3s pkg/deploy/stage.go (Stage, release-1.33 at fab4a5c3d): for every packaged manifest `name`
(a path below the manifests directory, e.g. `runtimes.yaml`, `metrics-server/resource-reader.yaml`),
the file is skipped when `skips[name]`, `skips[name without its extension]` or `skips[d]` for a
directory `d` above it holds; every other file is written and then applied by the deploy
controller (pkg/deploy/controller.go WatchFiles). pkg/cli/server/server.go fills `skips` with
every item of `--disable` (config.yaml's `disable:`), unvalidated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data" / "k3s-packaged-manifests.yaml"
CLUSTER_SCOPED = "-"


@dataclass(frozen=True)
class ObjectRef:
    """One object as the API server keys it: kind, namespace (`-` when cluster-scoped) and name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        where = "" if self.namespace == CLUSTER_SCOPED else f"{self.namespace}/"
        return f"{self.kind} {where}{self.name}"


def packaged(release: str) -> dict[str, list[ObjectRef]]:
    """The manifests `release` ships (name without `.yaml` -> the objects in it); KeyError when the
    release is not recorded in DATA."""
    recorded = yaml.safe_load(DATA.read_text())
    return {
        name: [ObjectRef(*line.split()) for line in objects] for name, objects in recorded[release].items()
    }


def staged(name: str, disable: list[str]) -> bool:
    """Whether the server writes (and so applies) the packaged manifest `name` (no extension)."""
    skips = set(disable)
    parts = name.split("/")
    above = {"/".join(parts[:i]) for i in range(1, len(parts))}
    return not ({name, f"{name}.yaml"} & skips or above & skips)


def deployed(release: str, disable: list[str]) -> dict[ObjectRef, str]:
    """Every object the server of `release` applies with `disable`, with the manifest it comes from."""
    return {
        ref: f"{name}.yaml"
        for name, refs in packaged(release).items()
        if staged(name, disable)
        for ref in refs
    }
