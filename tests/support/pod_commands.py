"""A rank's pod as the kubelet starts it: its environment filled in from the downward API and
earlier variables, and the `train` command its container runs, parsed with the trainer's parser."""

from __future__ import annotations

import re
from typing import Any

from tests.support.program import ProgramRun, env_of, pod_spec
from tests.support.rules.cluster_rules import component
from trainer.cli import _parser


def _downward(source: dict[str, Any], pod: str, ordinal: int, node: str) -> str | None:
    """What the kubelet puts in an environment variable taken from the downward API."""
    path = source["fieldRef"]["fieldPath"]
    values = {
        "metadata.name": pod,
        "spec.nodeName": node,
        "metadata.labels['apps.kubernetes.io/pod-index']": str(ordinal),
    }
    return values[path]


def _expand(value: str, earlier: dict[str, str]) -> str:
    """The kubelet's $(NAME) expansion of a variable declared earlier in the list; unknown names stay."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: earlier.get(m.group(1), m.group(0)), value)


def rank_environment(run: ProgramRun, ordinal: int, node: str) -> dict[str, str]:
    (sts,) = component(run, "training")
    pod = f"{sts.inputs['metadata']['name']}-{ordinal}"
    env: dict[str, str] = {}
    for name, value in env_of(pod_spec(sts)["containers"][0]).items():
        env[name] = _expand(value, env) if isinstance(value, str) else _downward(value, pod, ordinal, node)
    return env


def trainer_command(args: list[str]) -> list[str]:
    """The `train` command a pod runs, parsed with the trainer's parser (inside `launch` too)."""
    parsed = _parser().parse_args(args)
    if parsed.command != "launch":
        return args
    inner = parsed.trainer_command
    inner = inner[1:] if inner[:1] == ["--"] else inner
    _parser().parse_args(inner)
    return inner
