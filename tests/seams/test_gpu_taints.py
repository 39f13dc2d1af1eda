"""Seam: the pods that ask for a GPU against the taints the device plugin is declared to tolerate.

GPU nodes are often tainted so that only GPU work lands on them. The device plugin tolerates such
a taint, so the node reports its GPUs; a GPU pod that does not tolerate it can never be placed
there (the scheduler's TaintToleration filter, restated in tests/support/rules/kube_rules.py), and the
run stays Pending beside allocatable GPUs.
"""

from __future__ import annotations

import copy

import pytest

from lab.config import load_stack
from tests.support.program import ProgramRun, name_of, pod_spec, recorded
from tests.support.program_objects import gpu_workloads
from tests.support.rules.kube_rules import tolerates
from tests.support.shipped import shipped_stacks

GPU_STACKS = [s for s in shipped_stacks() if load_stack(s).has_gpus]
# Values a GPU taint is commonly given; a toleration with operator Exists matches them all.
TAINT_VALUES = ["", "present", "true"]


def plugin_taints(run: ProgramRun) -> list[dict[str, str]]:
    """The taints the device plugin's tolerations admit, one per common value of each keyed toleration."""
    (plugin,) = [d for d in run.of_kind("DaemonSet") if name_of(d) == "nvidia-device-plugin"]
    return [
        {"key": t["key"], "value": value, "effect": t.get("effect") or "NoSchedule"}
        for t in pod_spec(plugin).get("tolerations", [])
        if t.get("key")
        for value in ([t["value"]] if t.get("operator", "Equal") == "Equal" else TAINT_VALUES)
    ]


def untolerated(run: ProgramRun) -> list[str]:
    return [
        f"{name_of(w)} does not tolerate {t['key']}={t['value']}:{t['effect']}"
        for w in gpu_workloads(run)
        for t in plugin_taints(run)
        if not tolerates(pod_spec(w).get("tolerations", []), t)
    ]


@pytest.mark.parametrize("stack", GPU_STACKS)
def test_gpu_pods_go_wherever_the_device_plugin_reports_gpus(stack: str) -> None:
    run = recorded(stack)
    assert plugin_taints(run), f"{stack}: the device plugin tolerates no GPU taint"
    assert untolerated(run) == []


def test_a_rank_without_the_toleration_is_caught() -> None:
    """The defect this seam had: only the device plugin tolerated the GPU taint."""
    run = copy.deepcopy(recorded("example-gpu"))
    (ranks,) = [w for w in gpu_workloads(run) if w.kind == "StatefulSet"]
    del pod_spec(ranks)["tolerations"]
    assert untolerated(run) == [
        f"trainer does not tolerate nvidia.com/gpu={value}:NoSchedule" for value in TAINT_VALUES
    ]
