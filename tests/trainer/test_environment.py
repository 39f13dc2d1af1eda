"""The job's environment: ranks from torchrun or a StatefulSet pod, and clear errors when it is wrong."""

from __future__ import annotations

import datetime
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.network import free_port
from tests.support.trainer_runs import SMALL, run, trainer
from trainer.distributed import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    JobEnvironmentError,
    apply_socket_interfaces,
    timeout_seconds,
    topology,
)


def test_no_world_size_is_a_single_process() -> None:
    assert topology({}).world_size == 1


def test_torchrun_variables_give_the_rank() -> None:
    place = topology(
        {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    )
    assert (place.rank, place.world_size, place.local_rank, place.master_addr, place.master_port) == (
        3,
        4,
        1,
        "10.0.0.1",
        29500,
    )


def test_a_statefulset_pod_name_gives_the_rank_when_rank_is_absent() -> None:
    env = {
        "WORLD_SIZE": "2",
        "POD_NAME": "trainer-1",
        "MASTER_ADDR": "trainer-0.trainer",
        "MASTER_PORT": "29500",
    }
    assert topology(env).rank == 1
    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "a", "PET_MASTER_PORT": "1234"}
    assert topology(pet).rank == 1 and topology(pet).master_port == 1234


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
            "rank 2 is not below WORLD_SIZE=2",
        ),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "no rank is set: set RANK"),
        ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR and MASTER_PORT not set"),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "a"}, "MASTER_PORT not set"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
        (
            {"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
            "RANK=-1 must be at least 0",
        ),
        (
            {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "a", "MASTER_PORT": "99999"},
            "MASTER_PORT=99999 must be from 1 to 65535",
        ),
    ],
)
def test_bad_environments_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(JobEnvironmentError, match=message):
        topology(env)


def test_socket_interfaces_follow_the_node_unless_already_set() -> None:
    env = {"LAB_SOCKET_IFNAMES": "node-a=enp3s0,node-b=eno1", "NODE_NAME": "node-b"}
    assert apply_socket_interfaces(env) == "eno1"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eno1"
    preset = {**env, "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0"}
    apply_socket_interfaces(preset)
    assert preset["NCCL_SOCKET_IFNAME"] == "ib0"
    with pytest.raises(JobEnvironmentError, match="must read node=interface"):
        apply_socket_interfaces({"LAB_SOCKET_IFNAMES": "node-a:enp3s0", "NODE_NAME": "node-a"})


def test_the_collective_timeout_comes_from_the_flag_then_the_environment() -> None:
    assert timeout_seconds(None, {}) == 300
    assert timeout_seconds(None, {"LAB_COLLECTIVE_TIMEOUT": "7"}) == 7
    assert timeout_seconds(3, {"LAB_COLLECTIVE_TIMEOUT": "7"}) == 3


@pytest.mark.parametrize(
    ("flag", "env", "said"),
    [
        (
            None,
            {"LAB_COLLECTIVE_TIMEOUT": str(10**25)},
            "LAB_COLLECTIVE_TIMEOUT=10000000000000000000000000 must be",
        ),
        (10**20, {}, "--timeout-seconds 100000000000000000000 must be at most"),
    ],
)
def test_a_collective_timeout_beyond_what_the_clocks_hold_is_refused_at_once(
    flag: int | None, env: dict[str, str], said: str
) -> None:
    with pytest.raises(JobEnvironmentError) as caught:
        timeout_seconds(flag, env)
    assert said in str(caught.value) and str(MAX_TIMEOUT_SECONDS) in str(caught.value)
    # The largest taken is one the join's timedelta holds.
    assert datetime.timedelta(seconds=timeout_seconds(MAX_TIMEOUT_SECONDS, {}))


def _train_as(dataset: Path, runs: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """A small training run as one rank of a job the environment describes."""
    return run(trainer("train", "--data", dataset, "--runs", runs, "--run-name", "rank", *SMALL), **variables)


def test_an_unreachable_rendezvous_names_the_address_and_port(dataset: Path, tmp_path: Path) -> None:
    port = free_port()  # nobody listens here: rank 0 never started
    began = time.monotonic()
    result = _train_as(
        dataset,
        tmp_path,
        WORLD_SIZE="2",
        RANK="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LAB_COLLECTIVE_TIMEOUT="3",
    )
    assert result.returncode == 2, result.stderr
    assert f"could not rendezvous with rank 0 at 127.0.0.1:{port} (timeout 3 s" in result.stderr
    assert "firewall" in result.stderr and "SOCKET_IFNAME" in result.stderr
    # The short timeout applied, not the default: the bound holds however slowly torch imports.
    assert time.monotonic() - began < DEFAULT_TIMEOUT_SECONDS, "the rendezvous waited the default timeout"


def test_an_unresolvable_master_address_is_named(dataset: Path, tmp_path: Path) -> None:
    result = _train_as(
        dataset,
        tmp_path,
        WORLD_SIZE="2",
        RANK="1",
        MASTER_ADDR="no-such-host.invalid",
        MASTER_PORT="29500",
        LAB_COLLECTIVE_TIMEOUT="2",
    )
    assert result.returncode == 2
    assert "MASTER_ADDR 'no-such-host.invalid' (no-such-host.invalid:29500) does not resolve" in result.stderr


def test_rank_at_or_above_world_size_fails_before_any_output(dataset: Path, tmp_path: Path) -> None:
    result = _train_as(
        dataset, tmp_path, WORLD_SIZE="2", RANK="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: rank 2 is not below WORLD_SIZE=2: ranks run 0 to 1;"
        " check the replica count against WORLD_SIZE"
    )
    assert not (tmp_path / "rank").exists()
