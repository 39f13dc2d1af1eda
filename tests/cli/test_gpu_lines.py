"""A GPU node of the stack that reports no allocatable GPU is one line in `labctl status` and
`labctl wait` (and in `labctl validate`, tests/validation/test_checks.py).

The commands are run in this process with the server's `kubectl get` answered from here: the SSH
and kubectl path itself, and its one-line errors, are exercised by tests/cli/test_results.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.cli import main
from lab.config import load_stack
from lab.remote import gpu_nodes, pods

HEALTHY = {"gpu-a": "1", "gpu-b": "1"}


def _nodes(gpus: dict[str, str]) -> dict[str, Any]:
    return {
        "items": [
            {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": count}}}
            for name, count in gpus.items()
        ]
    }


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """The nodes `kubectl get nodes` reports; no training pods."""
    answer = {"nodes": dict(HEALTHY)}

    def kubectl_get(cfg: Any, stack: str, stacks_dir: Any, *what: str) -> dict[str, Any]:
        return _nodes(answer["nodes"]) if what == ("nodes",) else {"items": []}

    for reader in (gpu_nodes, pods):
        monkeypatch.setattr(reader, "kubectl_get", kubectl_get)
    return answer


def test_wait_stops_with_one_line_when_a_gpu_node_offers_no_gpu(
    cluster: dict[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster["nodes"] = {"gpu-a": "0", "gpu-b": "1"}
    assert main(["wait", "--stack", "example-gpu", "--timeout", "1"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "labctl: GPU node gpu-a reports no allocatable nvidia.com/gpu (the stack gives it 1)"
    )


def test_status_names_a_gpu_node_that_offers_no_gpu(
    cluster: dict[str, dict[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster["nodes"] = {"gpu-a": "1", "gpu-b": "0"}
    # No run folder yet: status then ends with its own one line, after the GPU line.
    monkeypatch.setattr("lab.cli.status.runs_source", lambda args: _NoRuns())
    assert main(["status", "--stack", "example-gpu"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("labctl: GPU node gpu-b reports no allocatable nvidia.com/gpu")
    assert lines[1].startswith("labctl: no training run under")


def test_healthy_gpu_nodes_add_no_line(cluster: dict[str, dict[str, str]]) -> None:
    assert gpu_nodes.gpu_node_lines(load_stack("example-gpu"), "example-gpu") == []


def test_cpu_labs_ask_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_nodes, "kubectl_get", lambda *a: pytest.fail("a CPU lab asked for its nodes"))
    assert gpu_nodes.gpu_node_lines(load_stack("example-cpu"), "example-cpu") == []


class _NoRuns:
    where = "the export"

    def collect(self) -> dict[str, Any]:
        return {"runs": [], "sweeps": []}
