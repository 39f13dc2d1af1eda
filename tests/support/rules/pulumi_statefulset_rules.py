"""What the Pulumi engine and pulumi-kubernetes do with the training StatefulSet on a later `pulumi up`,
restated from their source: pulumi/pulumi main at 1b5949891 (August 2026), pulumi-kubernetes main at
94977969d (July 2026; the lab locks v4.34.2, whose Diff and Read are the same since v4.0).

- `ignoreChanges` (pulumi pkg/resource/deploy/step_generator.go `processIgnoreChanges`): before
  the diff, and in the inputs a replacement is created with, each ignored path of the new inputs
  is set back to its value in the stored inputs.
- Diff (pulumi-kubernetes provider/pkg/provider/provider.go `Diff`): the new inputs are compared
  with the live object the state stored (after the last Create, Update or refresh), pruned to
  the shape of the stored inputs (`pruneLiveState`), not with the cluster as it is now.
- `replaceOnChanges` (step_generator.go `applyReplaceOnChanges`): a changed path that a listed
  path contains (`PropertyPath.Contains`) turns the update into a replacement; with
  `deleteBeforeReplace` the old object goes first and the new one is created from the inputs.
- `pulumi refresh` (provider.go `Read`): the state's inputs and live object become the cluster's
  object, pruned to the shape of the stored inputs: a scaled-down set's count is stored.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class State:
    """What the stack's state holds for the StatefulSet: its inputs and the live object stored."""

    inputs: dict[str, Any]
    live: dict[str, Any]


def _paths(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of `value` by its dotted path (lists are leaves: the rules here never reach into one)."""
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from _paths(inner, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


def _get(value: Mapping[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _set(value: dict[str, Any], path: str, new: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        value = value.setdefault(key, {})
    value[last] = new


def prune(live: Mapping[str, Any], shape: Mapping[str, Any]) -> dict[str, Any]:
    """`live` cut to the keys `shape` has (provider.go `pruneLiveState`)."""
    pruned: dict[str, Any] = {}
    for key, inner in shape.items():
        if key not in live:
            continue
        if isinstance(inner, Mapping) and isinstance(live[key], Mapping):
            pruned[key] = prune(live[key], inner)
        else:
            pruned[key] = copy.deepcopy(live[key])
    return pruned


def with_ignored(inputs: Mapping[str, Any], old: Mapping[str, Any], ignore: list[str]) -> dict[str, Any]:
    """The new inputs with each ignored path set back to the stored inputs' value (`processIgnoreChanges`)."""
    kept = copy.deepcopy(dict(inputs))
    for path in ignore:
        if _get(old, path) is not None:
            _set(kept, path, copy.deepcopy(_get(old, path)))
    return kept


def changed(new: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """The dotted paths where `new` differs from `base`."""
    ours, theirs = dict(_paths(new)), dict(_paths(base))
    return sorted(p for p in ours.keys() | theirs.keys() if ours.get(p) != theirs.get(p))


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer + ".")


def refresh(state: State, cluster: Mapping[str, Any]) -> State:
    """`pulumi refresh`: the cluster's object, pruned to the stored inputs' shape, becomes the state."""
    return State(prune(cluster, state.inputs), copy.deepcopy(dict(cluster)))


@dataclass(frozen=True)
class Outcome:
    step: str  # "same", "update" or "replace"
    replicas: int  # the live StatefulSet's spec.replicas once the step is done


def next_up(
    state: State,
    cluster: Mapping[str, Any],
    inputs: Mapping[str, Any],
    ignore_changes: list[str],
    replace_on_changes: list[str],
) -> Outcome:
    """What `pulumi up` does to the StatefulSet with `inputs` as the program declares them, `state`
    as stored and `cluster` the object the cluster holds: the step and the replica count after it."""
    goal = with_ignored(inputs, state.inputs, ignore_changes)
    # provider.go Diff also drops every change an ignored path contains.
    diff = [
        path
        for path in changed(goal, prune(state.live, state.inputs))
        if not any(_contains(ignored, path) for ignored in ignore_changes)
    ]
    if not diff:
        return Outcome("same", cluster["spec"]["replicas"])
    if any(_contains(outer, path) for outer in replace_on_changes for path in diff):
        return Outcome("replace", goal["spec"]["replicas"])  # created from the inputs
    # An update applies the inputs; pulumi-kubernetes leaves an ignored field another manager
    # holds out of its server-side apply (provider/pkg/await/await.go `handleSSAIgnoreFields`).
    ignored = any(_contains(path, "spec.replicas") for path in ignore_changes)
    return Outcome("update", cluster["spec"]["replicas"] if ignored else goal["spec"]["replicas"])
