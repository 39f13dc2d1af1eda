"""Checkpoints on the runs volume: atomic, verified, pruned, and refused when the config differs.

Layout under `<run>/checkpoints/`: `ckpt-<step>.pt`, its `ckpt-<step>.pt.sha256`, and `latest`,
a JSON pointer {"file", "sha256"}. Each is written through a temporary file and a rename, in the
order file, sum, pointer, so a crash at any moment leaves `latest` naming a complete file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer import precision
from trainer.contract import LATEST_CHECKPOINT as POINTER
from trainer.errors import TrainerError
from trainer.records import atomic

PATTERN = re.compile(r"^ckpt-([0-9]{9})\.pt$")
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


def host_copy(state: Any) -> Any:
    """`state` with every tensor copied to host memory (pinned from a GPU), so training can go on
    changing the originals while a thread writes the copy."""
    if isinstance(state, torch.Tensor):
        if state.device.type == "cuda":
            copy = torch.empty(state.shape, dtype=state.dtype, pin_memory=True)
            return copy.copy_(state, non_blocking=True)
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: host_copy(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(host_copy(value) for value in state)
    return state


class Writer:
    """Writes checkpoints on a thread, one at a time, off the step loop's critical path.

    `submit` takes a host copy of the state (the only part the caller waits for) and returns;
    the thread serialises, hashes and writes it, then runs `then` (the metrics line, which must
    never be on disk before its checkpoint). A write's error is raised by the next `submit` or
    by `wait`.
    """

    def __init__(self, folder: Path, keep: int) -> None:
        self.folder, self.keep = folder, keep
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def submit(self, step: int, state: dict[str, Any], then: Callable[[], None] = lambda: None) -> None:
        self.wait()
        copy = host_copy(state)
        if torch.cuda.is_available():
            torch.cuda.current_stream().synchronize()  # the pinned copies have landed

        def write() -> None:
            try:
                save(self.folder, step, copy, self.keep)
                then()
            except BaseException as err:  # handed to the training thread by wait()
                self.error = err

        self.thread = threading.Thread(target=write, name=f"checkpoint-{step}", daemon=False)
        self.thread.start()

    def wait(self) -> None:
        """Until the last write is on disk; its error, if it failed."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error


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


@dataclass(frozen=True)
class Layout:
    """What a checkpoint must hold to resume a run: taken from the run's own net and optimizer."""

    template: dict[str, Any]  # the state a fresh run would save: its keys, tensor shapes and types
    parameters: tuple[torch.Tensor, ...]  # the optimizer's parameters, in its state_dict numbering
    epochs: int  # the epochs the run reaches, the last perhaps partway
    steps_per_epoch: int
    steps: int  # the run's budget of steps in all
    line_keys: tuple[str, ...]  # what every line of the metrics history holds


def check(path: Path, state: dict[str, Any], layout: Layout) -> None:
    """Refuse, in one line, a loaded checkpoint whose content does not fit the run.

    Its sha256 and config hash can match while its content does not: a file written by another
    version of the net, or edited and re-summed. Loading it would fail with a traceback half-way
    (a tensor of another shape, a missing or extra key), or skip training (an epoch past the last).
    """
    problem = _misfit(state, layout)
    if problem:
        other = _other_device(path, state, layout)
        if other:
            raise CheckpointError(other)
        raise CheckpointError(
            f"{path} matches its sha256 and this run's hyperparameters but {problem}, so it cannot"
            f" resume this run: move it out of {path.parent} to resume from an older checkpoint, or"
            " start again with --fresh"
        )


def _other_device(path: Path, state: dict[str, Any], layout: Layout) -> str | None:
    """Why a checkpoint of this very run does not fit when it was written on the other kind of
    device: a GPU keeps float16 weights, a CPU float32 (trainer.precision), and every older
    checkpoint of the run has the same, so only that kind of device can resume it."""
    model, template = state.get("model"), layout.template["model"]
    if not isinstance(model, dict):
        return None
    pairs = {
        (tensor.dtype, template[key].dtype)
        for key, tensor in model.items()
        if isinstance(tensor, torch.Tensor) and key in template and tensor.dtype != template[key].dtype
    }
    gpu = precision.for_device(torch.device("cuda"), 1).dtype
    cpu = precision.for_device(torch.device("cpu"), 1).dtype
    if pairs not in ({(gpu, cpu)}, {(cpu, gpu)}):
        return None
    ((found, _),) = pairs
    written, here = ("a GPU", "a CPU") if found == gpu else ("a CPU", "a GPU")
    return (
        f"{path} was written on {written} (its weights are {found}) and this run is on {here}:"
        f" resume it on {written}, or start this run again here with --fresh"
    )


def _misfit(state: dict[str, Any], layout: Layout) -> str | None:
    template = layout.template
    return (
        _keys("it", state, template)
        or _tensors("its model", state["model"], template["model"])
        or _optimizer(state["optimizer"], template["optimizer"], layout.parameters)
        or _lookahead(state["lookahead"], template["lookahead"])
        or _tensor("its random-number state", state["rng"], template["rng"])
        or _integer("its world size", state["world_size"], 1, None)
        or (None if isinstance(state["emergency"], bool) else "its emergency flag is not true or false")
        or _progress(state["progress"], template["progress"], layout)
    )


def _keys(what: str, found: Any, expected: dict[str, Any]) -> str | None:
    if not isinstance(found, dict):
        return f"{what} is a {type(found).__name__}, not a mapping"
    missing = [str(key) for key in expected if key not in found]
    extra = [str(key) for key in found if key not in expected]
    if missing:
        return f"{what} lacks {_names(missing)}"
    if extra:
        return f"{what} has {_names(extra)} that this trainer never writes"
    return None


def _names(keys: list[str]) -> str:
    shown = ", ".join(repr(key) for key in keys[:3])
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"the key{'s' if len(keys) > 1 else ''} {shown}{more}"


def _tensor(what: str, found: Any, expected: torch.Tensor) -> str | None:
    if not isinstance(found, torch.Tensor):
        return f"{what} is a {type(found).__name__}, not a tensor"
    if found.shape != expected.shape or found.dtype != expected.dtype:
        return (
            f"{what} is {found.dtype} of shape {list(found.shape)}, where this run's is"
            f" {expected.dtype} of shape {list(expected.shape)}"
        )
    return None


def _tensors(what: str, found: Any, expected: dict[str, torch.Tensor]) -> str | None:
    problem = _keys(what, found, expected)
    if problem:
        return problem
    for key, tensor in expected.items():
        problem = _tensor(f"{what}'s {key!r}", found[key], tensor)
        if problem:
            return problem
    return None


def _optimizer(found: Any, expected: dict[str, Any], parameters: tuple[torch.Tensor, ...]) -> str | None:
    """SGD's state_dict: the same parameter groups, and per-parameter buffers of their shapes."""
    problem = _keys("its optimizer", found, expected)
    if problem:
        return problem
    groups, wanted = found["param_groups"], expected["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(wanted):
        return f"its optimizer does not have this run's {len(wanted)} parameter groups"
    for index, (group, want) in enumerate(zip(groups, wanted, strict=True)):
        where = f"its optimizer's parameter group {index}"
        problem = _keys(where, group, want)
        if problem:
            return problem
        for key, value in want.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and not _finite_number(group[key]):
                return f"{where} has {key} {group[key]!r}, not a finite number"
            if not number and group[key] != value:
                return f"{where} has {key} {group[key]!r}, where this run's is {value!r}"
    buffers = found["state"]
    if not isinstance(buffers, dict):
        return "its optimizer's state is not a mapping"
    for index, entry in buffers.items():
        if not isinstance(index, int) or not 0 <= index < len(parameters) or not isinstance(entry, dict):
            return f"its optimizer holds state for {index!r}, which is none of this run's parameters"
        for name, buffer in entry.items():
            if buffer is not None:
                problem = _tensor(f"its optimizer's {name} of parameter {index}", buffer, parameters[index])
                if problem:
                    return problem
    return None


def _lookahead(found: Any, expected: list[torch.Tensor] | None) -> str | None:
    if expected is None or found is None:
        return None if found is expected else "its lookahead weights do not match this run's recipe"
    if not isinstance(found, list) or len(found) != len(expected):
        return f"its lookahead weights are not this run's {len(expected)} tensors"
    for index, (tensor, want) in enumerate(zip(found, expected, strict=True)):
        problem = _tensor(f"its lookahead weight {index}", tensor, want)
        if problem:
            return problem
    return None


def _progress(found: Any, expected: dict[str, Any], layout: Layout) -> str | None:
    """Where the run stood: an epoch within the run, a step that agrees with it, its history."""
    problem = _keys("its progress", found, expected)
    if problem:
        return problem
    epochs, per_epoch = layout.epochs, layout.steps_per_epoch
    epoch = found["epoch"]
    problem = _integer("its epoch", epoch, 0, epochs)
    if problem:
        return problem
    # Steps before its epoch, and in it: the last epoch's end where the budget ends partway.
    before = min(epoch * per_epoch, layout.steps)
    last_in_epoch = 0 if epoch == epochs else min(per_epoch, layout.steps - before) - 1
    problem = _integer("its step within the epoch", found["step_in_epoch"], 0, last_in_epoch)
    if problem:
        return problem
    step = before + found["step_in_epoch"]
    if type(found["step"]) is not int or found["step"] != step:
        return f"its step {found['step']!r} is not {step}, where its epoch and step within it put it"
    sums = found["sums"]
    if not isinstance(sums, list) or len(sums) != 3 or not all(map(_finite_number, sums)):
        return "its running sums are not three finite numbers"
    history = found["history"]
    if not isinstance(history, list) or len(history) != epoch:
        return f"its metrics history does not hold its {epoch} finished epoch(s)"
    for number, line in enumerate(history, start=1):
        if (
            not isinstance(line, dict)
            or any(not _finite_number(line.get(key)) for key in layout.line_keys)
            or line["epoch"] != number
        ):
            return f"line {number} of its metrics history is not epoch {number}'s metrics"
    target = found["epochs_to_target"]
    return (
        _integer("its restart count", found["restarts"], 0, None)
        or _seconds("its training seconds", found["train_seconds"])
        or _seconds("its whitening seconds", found["whiten_seconds"])
        or (
            None
            if found["seconds_to_target"] is None
            else _seconds("its seconds to target", found["seconds_to_target"])
        )
        or (None if target is None else _integer("its epochs to target", target, 1, epoch))
    )


def _integer(what: str, value: Any, low: int, high: int | None) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{what} {value!r} is not an integer"
    if value < low or (high is not None and value > high):
        span = f"{low} to {high}" if high is not None else f"{low} or more"
        return f"{what} {value} is outside {span}"
    return None


def _seconds(what: str, value: Any) -> str | None:
    return None if _finite_number(value) and value >= 0 else f"{what} {value!r} is not a duration"


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
