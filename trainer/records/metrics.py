"""The run folder's record: a line per epoch, the live status, the final summary, the progress line."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from trainer.contract import CHECKPOINTS_DIR, CURVES_FILE, METRICS_FILE, STATUS_FILE, SUMMARY_FILE
from trainer.errors import TrainerError
from trainer.records import atomic, runfolders


class RunFolderError(TrainerError):
    """A run folder this process cannot write."""


class RunFolder:
    """What rank 0 writes under `<runs>/<run-name>[/<index>]/`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / CHECKPOINTS_DIR

    def prepare(self, fresh: bool) -> None:
        """Make the folder (emptied of an earlier start's files when `fresh`) and prove it writable."""
        try:
            if fresh:
                self._clear()
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            # mkdir succeeds on a read-only mount when the folder exists: only a write tells.
            probe = self.path / f".writable-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise RunFolderError(
                f"cannot write the run folder {self.path} ({err.strerror or err}): choose a --runs"
                " folder this user can write, or fix its permissions or mount"
            ) from None

    def _clear(self) -> None:
        """Remove what the trainer writes here, nothing else (a sweep keeps its sets in subfolders)."""
        if self.checkpoints.exists():
            shutil.rmtree(self.checkpoints)
        for name in (METRICS_FILE, STATUS_FILE, SUMMARY_FILE, CURVES_FILE):
            (self.path / name).unlink(missing_ok=True)

    def has_metrics(self) -> bool:
        """Whether an earlier start recorded an epoch here."""
        metrics = self.path / METRICS_FILE
        return metrics.is_file() and metrics.stat().st_size > 0

    def rewrite_metrics(self, history: list[dict[str, Any]]) -> None:
        """Make metrics.jsonl exactly the epochs a resumed state has seen (drops lines after it)."""
        atomic.write_bytes(
            self.path / METRICS_FILE, "".join(atomic.to_json(line) + "\n" for line in history).encode()
        )

    def append_metrics(self, line: dict[str, Any]) -> None:
        atomic.append_line(self.path / METRICS_FILE, atomic.to_json(line) + "\n")

    def write_status(self, state: str, **fields: Any) -> None:
        atomic.write_json(self.path / STATUS_FILE, {"state": state, "updated": time.time(), **fields})

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic.write_json(self.path / SUMMARY_FILE, summary)

    def status(self) -> dict[str, Any] | None:
        return _read(self.path / STATUS_FILE)

    def summary(self) -> dict[str, Any] | None:
        return _read(self.path / SUMMARY_FILE)

    def completed(self, config_hash: str) -> dict[str, Any] | None:
        """The summary of a finished run with this config hash in this folder, if there is one."""
        status, summary = self.status(), self.summary()
        if (
            status
            and summary
            and status.get("state") == "complete"
            and summary.get("config_hash") == config_hash
        ):
            return summary
        return None


def _read(path: Path) -> dict[str, Any] | None:
    """A run file's object, None where there is none yet; the run folder is on the shared export,
    so it is read as labctl reads it (trainer/records/runfolders.py). The trainer writes each whole
    (trainer/records/atomic.py), so one that is no JSON object is someone else's: TrainerError."""
    rewritten = "delete it, and the trainer writes it anew"
    try:
        raw = runfolders.read_in(str(path.parent), path.name, runfolders.MAX_JSON_BYTES)
    except runfolders.Unfit as err:
        raise TrainerError(f"{err}; {rewritten}") from None
    except OSError:
        return None
    try:
        content = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        content = None
    if not isinstance(content, dict):
        raise TrainerError(f"{path}: is not a JSON object in UTF-8; {rewritten}")
    return content


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def progress_line(line: dict[str, Any], epochs: int, eta_seconds: float) -> str:
    test = f"  test {100 * line['test_acc']:5.1f}%" if "test_acc" in line else ""
    part = f" ({line['epoch_fraction']:.2f} of it)" if "epoch_fraction" in line else ""
    return (
        f"epoch {line['epoch']:>3}/{epochs}{part}  step {line['step']:>6}  loss {line['train_loss']:.4f}"
        f"  train {100 * line['train_acc']:5.1f}%{test}"
        f"  {line['images_per_second']:8.0f} img/s  eta {duration(eta_seconds)}"
    )
