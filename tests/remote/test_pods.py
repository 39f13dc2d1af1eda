"""The training pods in the server kubectl's `get pods -o json`: the DDP StatefulSet's in rank
order, each with the global ranks its workers hold, then the sweep Job's; the namespace's other
pods left out."""

from __future__ import annotations

from lab.remote.pods import ranks


def _pod(
    name: str, component: str, node: str, index: str | None = None, restarts: int = 0
) -> dict[str, object]:
    labels = {"app.kubernetes.io/component": component}
    if index is not None:
        labels["apps.kubernetes.io/pod-index"] = index
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"restartCount": restarts}, {"restartCount": 1}],
        },
    }


def test_ranks_are_the_training_pods_in_rank_order() -> None:
    pods = {
        "items": [
            _pod("trainer-10", "training", "b", "10"),
            _pod("registry-5d9c", "registry", "a"),
            _pod("dataset-x7k2p", "dataset", "a"),
            _pod("trainer-2", "training", "a", "2", restarts=3),
            _pod("trainer-0", "training", "a"),  # before 1.28: no index label, the name's ordinal
        ]
    }
    found = ranks(pods)
    assert [(r.rank, r.pod, r.node, r.restarts) for r in found] == [
        ("0", "trainer-0", "a", 1),
        ("2", "trainer-2", "a", 4),
        ("10", "trainer-10", "b", 1),
    ]


def test_a_pod_of_several_workers_shows_the_global_ranks_it_holds() -> None:
    """Three nodes of two GPUs: a pod each, two workers each (ranks 0-1, 2-3, 4-5); a sweep pod
    beside them is a run of its own."""
    pods = {
        "items": [
            _pod("trainer-2", "training", "c", "2"),
            _pod("trainer-0", "training", "a", "0"),
            _pod("trainer-1", "training", "b", "1"),
            _pod("sweep-1-x", "sweep", "a", "1"),
        ]
    }
    found = ranks(pods, ranks_per_pod=2)
    assert [(r.rank, r.pod, r.node) for r in found] == [
        ("0-1", "trainer-0", "a"),
        ("2-3", "trainer-1", "b"),
        ("4-5", "trainer-2", "c"),
        ("1", "sweep-1-x", "a"),
    ]
