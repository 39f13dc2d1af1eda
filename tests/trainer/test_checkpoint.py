"""Checkpoints: atomic writes under kill -9, verification with fallback, pruning, config refusal."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.tiers import costly
from tests.support.trainer_runs import env
from trainer.records import checkpoint


def _state(step: int, config_hash: str = "abc") -> dict:
    return {
        "config_hash": config_hash,
        "hyperparameters": {"lr": 1.0},
        "step": step,
        "w": torch.full((4,), step),
    }


def test_save_points_latest_at_the_newest_and_keeps_k(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        checkpoint.save(tmp_path, step, _state(step), keep=2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-000000030.pt", "ckpt-000000040.pt"]
    assert not (tmp_path / "ckpt-000000010.pt.sha256").exists()
    assert checkpoint.latest_verified(tmp_path) == tmp_path / "ckpt-000000040.pt"
    assert checkpoint.load(tmp_path / "ckpt-000000040.pt", "abc", torch.device("cpu"))["step"] == 40


def test_a_corrupt_latest_falls_back_to_the_previous_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for step in (10, 20):
        checkpoint.save(tmp_path, step, _state(step), keep=3)
    newest = tmp_path / "ckpt-000000020.pt"
    newest.write_bytes(newest.read_bytes()[:-10])
    assert checkpoint.latest_verified(tmp_path) == tmp_path / "ckpt-000000010.pt"
    assert "ckpt-000000020.pt skipped: its contents do not match its sha256" in capsys.readouterr().err
    (tmp_path / "ckpt-000000010.pt.sha256").unlink()
    assert checkpoint.latest_verified(tmp_path) is None, "a file without its recorded sum is never trusted"


def test_a_checkpoint_of_other_hyperparameters_is_refused(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path, 10, _state(10, config_hash="other"), keep=3)
    with pytest.raises(
        checkpoint.CheckpointError, match=r"different hyperparameters \(\{\"lr\": 1.0\}\).*--run-name"
    ):
        checkpoint.load(path, "abc", torch.device("cpu"))


WRITER = """
import sys, torch
from pathlib import Path
from trainer.records import checkpoint
folder = Path(sys.argv[1])
def save(step):
    checkpoint.save(folder, step, {"config_hash": "abc", "step": step, "w": torch.rand(2_000_000)}, keep=2)
step = 1
save(step)  # one checkpoint on disk before any kill, however slowly this machine writes it
print("ready", flush=True)
while True:
    step += 1
    save(step)
"""


def _pointer_is_sound(folder: Path) -> bool:
    pointer = json.loads((folder / "latest").read_text())
    data = (folder / pointer["file"]).read_bytes()
    return hashlib.sha256(data).hexdigest() == pointer["sha256"]


@costly("a torch process writing checkpoints")
def _writer(folder: Path) -> subprocess.Popen[str]:
    """A process saving 8 MB checkpoints into `folder` back to back, until it is killed."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder)], env=env(), stdout=subprocess.PIPE, text=True
    )


def test_kill_9_during_checkpoint_writes_never_leaves_a_broken_latest(tmp_path: Path) -> None:
    """A writer saving 8 MB checkpoints back to back is killed at varied moments, several times."""
    for attempt in range(4):
        writer = _writer(tmp_path)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(0.3 + 0.17 * attempt)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        assert _pointer_is_sound(tmp_path), f"attempt {attempt}: latest names a broken file"
        found = checkpoint.latest_verified(tmp_path)
        assert found is not None
        assert checkpoint.load(found, "abc", torch.device("cpu"))["step"] >= 1


def test_the_pointer_check_catches_a_broken_latest(tmp_path: Path) -> None:
    """The check above can fail: a pointer whose file was cut short is reported as broken."""
    path = checkpoint.save(tmp_path, 1, _state(1), keep=2)
    path.write_bytes(path.read_bytes()[:100])
    assert not _pointer_is_sound(tmp_path)
