"""Checkpoints on the runs volume: atomic, verified, pruned, and refused when the config differs.

Layout under `<run>/checkpoints/`: `ckpt-<step>.pt`, its `ckpt-<step>.pt.sha256`, and `latest`,
a JSON pointer {"file", "sha256"}. Each is written through a temporary file and a rename, in the
order file, sum, pointer, so a crash at any moment leaves `latest` naming a complete file.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import torch

from trainer import atomic
from trainer.contract import LATEST_CHECKPOINT as POINTER
from trainer.errors import TrainerError

PATTERN = re.compile(r"^ckpt-(\d{9})\.pt$")
# How torch's weights-only unpickler names a type it refuses (torch/_weights_only_unpickler.py).
UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


class CheckpointError(TrainerError):
    """A checkpoint this run must not resume from; the message says why and what to do."""


def save(folder: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint of `step`, point `latest` at it, keep the newest `keep`."""
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    path = folder / f"ckpt-{step:09d}.pt"
    atomic.write_bytes(path, data)
    atomic.write_bytes(path.with_name(path.name + ".sha256"), digest.encode())
    atomic.write_json(folder / POINTER, {"file": path.name, "sha256": digest})
    _prune(folder, keep, path)
    return path


def _prune(folder: Path, keep: int, current: Path) -> None:
    for old in _candidates(folder)[keep:]:
        if old != current:
            old.unlink(missing_ok=True)
            old.with_name(old.name + ".sha256").unlink(missing_ok=True)


def _candidates(folder: Path) -> list[Path]:
    """Checkpoint files, newest step first."""
    found = [p for p in folder.glob("ckpt-*.pt") if PATTERN.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def written(folder: Path) -> bool:
    """Whether any checkpoint was written here, sound or not (a temporary file does not count)."""
    return bool(_candidates(folder)) or (folder / POINTER).exists()


def latest_verified(folder: Path) -> Path | None:
    """The newest checkpoint whose bytes match their recorded sum, `latest` first; warns on skips."""
    pointed = _pointed(folder)
    order = ([pointed] if pointed else []) + [p for p in _candidates(folder) if p != pointed]
    for path in order:
        problem = _problem(path)
        if problem is None:
            return path
        print(f"checkpoint {path} skipped: {problem}; trying an older one", file=sys.stderr)
    return None


def _pointed(folder: Path) -> Path | None:
    try:
        pointer = json.loads((folder / POINTER).read_text())
        return folder / pointer["file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _problem(path: Path) -> str | None:
    try:
        expected = path.with_name(path.name + ".sha256").read_text().strip()
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return None if actual == expected else "its contents do not match its sha256 (partial or corrupt)"


def load(path: Path, config_hash: str, device: torch.device) -> dict[str, Any]:
    """The state in `path`, refused unless it was written by a run with the same config hash."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # torch raises pickle, zip-reader and runtime errors alike
        # torch's own message advises weights_only=False, which would run whatever the file holds.
        found = UNSAFE_GLOBAL.search(str(err))
        raise _foreign(path, f"it holds {found.group(1)}" if found else type(err).__name__) from None
    if not isinstance(state, dict):
        raise _foreign(path, f"it holds a {type(state).__name__}")
    if state.get("config_hash") != config_hash:
        theirs = json.dumps(state.get("hyperparameters"), sort_keys=True)
        raise CheckpointError(
            f"{path} belongs to a run with different hyperparameters ({theirs}); resume with the same"
            " flags, or start a new run with another --run-name (or delete that run folder)"
        )
    return state


def _foreign(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path} matches its sha256 but is not a checkpoint this trainer wrote ({what}), so it is not"
        " loaded: move it out of the folder to resume from an older checkpoint, or start again with --fresh"
    )
