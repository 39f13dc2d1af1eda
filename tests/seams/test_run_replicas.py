"""Seam: the training StatefulSet's replica count against rank 0's scale-down, `pulumi refresh` and the
next `pulumi up` (tests/seams/pulumi_statefulset_rules.py restates what the engine and
pulumi-kubernetes do, with their sources).

The rule the lab holds: a run whose inputs changed starts with the program's world size, whatever
the state holds; a finished run whose inputs did not change stays at zero, refreshed or not; a
run still training is left alone. The program decides the count from the StatefulSet the cluster
holds (lab/cluster/training.py `declared_replicas`), so it is run the way `pulumi up` runs it,
under the engine's mocks, with the host bootstrap answering a kubeconfig whose API server, a local
HTTPS server, reports the StatefulSet as rank 0's hand-off leaves it (trainer/pod/handoff.py: a patch
of the `scale` subresource to zero, which the API server records under no field manager:
lab/cluster/training.py `handed_back`).

What a real cluster adds, held by tests/controlplane/test_pulumi_up.py: that the API server
records the hand-off as assumed here, and that the provider plans what these rules say.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from lab.cluster.program_run import ProgramRun, Registered, run_program
from lab.cluster.training import LAB_FIELD_MANAGER, NAME, RUN_ANNOTATION
from lab.config import load_stack, read_stack_values, stack_file
from tests.support.apiserver import kubeconfig, recording_server
from tests.support.program import name_of
from tests.support.rules.pulumi_statefulset_rules import Outcome, State, next_up, refresh

STACK = "example-cpu"


def _values(**trainer: Any) -> dict[str, Any]:
    values = read_stack_values(stack_file(STACK))
    return {**values, "trainer": {**values["trainer"], **trainer}}


def _statefulset(run: ProgramRun) -> Registered:
    (found,) = [r for r in run.of_kind("StatefulSet") if name_of(r) == NAME]
    return found


def _path(statefulset: Registered) -> str:
    return f"/apis/apps/v1/namespaces/{statefulset.inputs['metadata']['namespace']}/statefulsets/{NAME}"


# How the lab's server-side apply and a hand edit of the StatefulSet itself appear in its managed fields.
APPLIED = f"{LAB_FIELD_MANAGER}-0123"
BY_HAND = "kubectl-patch"


def in_cluster(inputs: dict[str, Any], replicas: int, holder: str | None) -> dict[str, Any]:
    """The StatefulSet as the API server reports it: the applied inputs with `replicas`, its
    `spec.replicas` held by `holder`, or by no manager once rank 0 handed the run back (a write of
    zero through the `scale` subresource)."""
    live = copy.deepcopy(inputs)
    live["spec"]["replicas"] = replicas
    replicas_field = {"f:replicas": {}}
    managed = [
        {
            "manager": APPLIED,
            "operation": "Apply",
            "fieldsV1": {"f:spec": replicas_field if holder == APPLIED else {}},
        }
    ]
    if holder not in (None, APPLIED):
        managed.append({"manager": holder, "operation": "Update", "fieldsV1": {"f:spec": replicas_field}})
    live["metadata"]["managedFields"] = managed
    live["status"] = {"replicas": replicas, "readyReplicas": replicas}
    return live


def second_up(
    tmp_path: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    handed_back: bool,
    refreshed: bool,
    replicas: int | None = None,
) -> tuple[Outcome, Registered]:
    """A first `up` with stack values `before` (the StatefulSet created as declared), the run then
    handed back, or at `replicas` written by hand (else as created), an optional `pulumi refresh`, and a
    second `up` with `after`, whose program reads the cluster: that `up`'s outcome and the
    StatefulSet it declared."""
    first = _statefulset(run_program(STACK, before))
    created = first.inputs
    if handed_back:
        cluster = in_cluster(created, 0, None)
    elif replicas is None:
        cluster = in_cluster(created, created["spec"]["replicas"], APPLIED)
    else:
        cluster = in_cluster(created, replicas, BY_HAND)
    state = State(copy.deepcopy(created), in_cluster(created, created["spec"]["replicas"], APPLIED))
    if refreshed:
        state = refresh(state, cluster)
    (tmp_path / "client").mkdir()
    with recording_server(tmp_path) as server:
        server.replies = {_path(first): (200, cluster)}
        second = _statefulset(run_program(STACK, after, kubeconfig=kubeconfig(server, tmp_path)))
    outcome = next_up(state, cluster, second.inputs, second.ignore_changes, second.replace_on_changes)
    return outcome, second


WORLD = load_stack(STACK).world.pods


@pytest.mark.parametrize("refreshed", [False, True], ids=["stored", "refreshed"])
def test_a_finished_run_with_unchanged_inputs_stays_at_zero(tmp_path: Path, refreshed: bool) -> None:
    outcome, _ = second_up(tmp_path, _values(), _values(), handed_back=True, refreshed=refreshed)
    assert outcome.replicas == 0
    assert outcome.step != "replace", "the finished run's set is kept, not made again"


@pytest.mark.parametrize("refreshed", [False, True], ids=["stored", "refreshed"])
def test_a_new_run_starts_with_the_world_size_after_a_finished_one(tmp_path: Path, refreshed: bool) -> None:
    outcome, declared = second_up(tmp_path, _values(), _values(seed=7), handed_back=True, refreshed=refreshed)
    assert outcome == Outcome("replace", WORLD)
    old_run = run_program(STACK, _values()).outputs["run"]
    assert declared.inputs["metadata"]["annotations"][RUN_ANNOTATION] != old_run


@pytest.mark.parametrize("refreshed", [False, True], ids=["stored", "refreshed"])
def test_a_changed_world_size_is_the_new_count(tmp_path: Path, refreshed: bool) -> None:
    """One rank, then the stack's two: the state holds one (or the finished run's zero)."""
    outcome, _ = second_up(tmp_path, _values(replicas=1), _values(), handed_back=True, refreshed=refreshed)
    assert outcome == Outcome("replace", WORLD)
    assert WORLD == 2


def test_a_run_still_training_is_left_alone(tmp_path: Path) -> None:
    outcome, _ = second_up(tmp_path, _values(), _values(), handed_back=False, refreshed=True)
    assert outcome == Outcome("same", WORLD)


def test_a_set_at_zero_that_its_rank_0_did_not_hand_back_starts(tmp_path: Path) -> None:
    """A set scaled down by hand through the StatefulSet itself (`kubectl edit` or `patch`), whose
    writer then holds `spec.replicas`: not a finished run, so the program asks for the run's pods
    again."""
    outcome, _ = second_up(tmp_path, _values(), _values(), handed_back=False, refreshed=True, replicas=0)
    assert outcome == Outcome("update", WORLD)


def test_the_program_reads_the_statefulset_the_cluster_holds(tmp_path: Path) -> None:
    (tmp_path / "client").mkdir()
    path = _path(_statefulset(run_program(STACK)))
    with recording_server(tmp_path) as server:
        run_program(STACK, kubeconfig=kubeconfig(server, tmp_path))
        asked = {r.path for r in server.requests}
    assert path in asked


def test_without_a_cluster_the_program_declares_the_world_size() -> None:
    """`labctl render` and a first `up`: no StatefulSet exists, the program declares the run's pods."""
    assert _statefulset(run_program(STACK)).inputs["spec"]["replicas"] == WORLD


def test_the_rules_catch_ignore_changes_on_the_replica_count() -> None:
    """The defect this seam had: `ignoreChanges: [spec.replicas]` with `replaceOnChanges: [spec]`.
    After a finished run and a refresh, the next run was created with the stored zero."""
    inputs = _statefulset(run_program(STACK)).inputs
    new = _statefulset(run_program(STACK, _values(seed=7))).inputs
    cluster = in_cluster(inputs, 0, None)
    state = refresh(State(inputs, in_cluster(inputs, WORLD, APPLIED)), cluster)
    assert next_up(state, cluster, new, ["spec.replicas"], ["spec"]) == Outcome("replace", 0)
