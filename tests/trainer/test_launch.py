"""`launch` refuses what cannot make a torchrun node, in one line, before torchrun starts."""

from __future__ import annotations

import pytest

from tests.support.trainer_runs import run, trainer


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--", "probe", "--ready", "/tmp/x"], {}, "launch runs `train`"),
        (
            ["--", "train", "--data", "d", "--runs", "r", "--run-name", "n", "--no-such-flag"],
            {},
            "unrecognized",
        ),
        (
            ["--", "train", "--data", "d", "--runs", "r", "--run-name", "n"],
            {"WORLD_SIZE": "2", "RANK": "1"},
            "MASTER_ADDR and MASTER_PORT not set",
        ),
        (
            ["--", "train", "--data", "d", "--runs", "r", "--run-name", "n"],
            {
                "WORLD_SIZE": "3",
                "RANK": "0",
                "MASTER_ADDR": "a",
                "MASTER_PORT": "1",
                "PET_NPROC_PER_NODE": "2",
            },
            "divides WORLD_SIZE=3",
        ),
        (
            ["--", "train", "--data", "d", "--runs", "r", "--run-name", "n"],
            {
                "WORLD_SIZE": "4",
                "RANK": "2",
                "MASTER_ADDR": "a",
                "MASTER_PORT": "1",
                "PET_NPROC_PER_NODE": "2",
            },
            "pod 2 is not below the job's 2 pods",
        ),
    ],
)
def test_launch_refuses_in_one_line(args: list[str], env: dict[str, str], message: str) -> None:
    result = run(trainer("launch", *args), timeout=60, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in result.stderr, result.stderr
