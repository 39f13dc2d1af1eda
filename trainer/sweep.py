"""Hyperparameter sweeps: expand a search space into the sets a sweep runs, one per index.

The Pulumi program imports this module to size the Indexed Job, so it uses the standard
library only (no torch, no matplotlib).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

from trainer import hyperparameters
from trainer.errors import TrainerError
from trainer.records import runfolders

PARAMETERS = ("lr", "batch_size", "epochs", "weight_decay", "momentum", "label_smoothing", "model")
STRATEGIES = ("grid", "random")
# A sweep runs as one Indexed Job with a completion per set; the API server refuses an Indexed Job
# with more than 100000 completions unless its parallelism stays at 10000 or less
# (kubernetes/kubernetes: pkg/apis/batch/validation/validation.go, completionsSoftLimit). The lab's
# parallelism is its GPU count, far below; the sets are held to the plain limit.
MAX_SETS = 100_000
# The sweep file travels to the pods in a ConfigMap, whose data the API server caps at 1 MiB
# (https://kubernetes.io/docs/concepts/configuration/configmap/; pkg/apis/core/validation:
# ValidateConfigMap against core.MaxSecretSize).
MAX_FILE_BYTES = 1024 * 1024


class SweepError(TrainerError, ValueError):
    """A search space or sweep file that cannot be expanded; the message names the fix."""


def count(space: dict[str, Any]) -> int:
    """How many sets `space` expands to, without expanding it: a huge grid is refused, not built."""
    return _count(space, _checked_parameters(space))


def _count(space: dict[str, Any], parameters: dict[str, Any]) -> int:
    strategy = space.get("strategy", "grid")
    if strategy == "grid":
        ranges = [name for name, values in parameters.items() if isinstance(values, dict)]
        if ranges:
            raise SweepError(
                f"{', '.join(ranges)}: a grid needs lists of values; ranges need strategy random"
            )
        return math.prod(len(values) for values in parameters.values())
    if strategy == "random":
        samples = space.get("samples")
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
            raise SweepError(f"random search needs 'samples', a positive integer (got {samples!r})")
        return samples
    raise SweepError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def expand(space: dict[str, Any]) -> list[dict[str, Any]]:
    """Every hyperparameter set of `space`, in a fixed order: the same space gives the same list."""
    parameters = _checked_parameters(space)
    sets = _count(space, parameters)
    if sets > MAX_SETS:
        raise SweepError(
            f"the space holds {sets} sets, more than the {MAX_SETS} one Indexed Job runs;"
            " give fewer values or fewer samples"
        )
    if space.get("strategy", "grid") == "grid":
        return _grid(parameters)
    return _random(parameters, sets, int(space.get("seed", 0)))


def _checked_parameters(space: dict[str, Any]) -> dict[str, Any]:
    parameters = space.get("parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise SweepError("the space needs 'parameters': a mapping of name to a list of values or a range")
    checked: dict[str, Any] = {}
    for name, values in parameters.items():
        if name not in PARAMETERS:
            raise SweepError(f"unknown parameter {name!r}; choose from {', '.join(PARAMETERS)}")
        if isinstance(values, list):
            if not values:
                raise SweepError(f"parameter {name!r} has no values; give at least one")
            checked[name] = [_value(name, value, f"value {i}") for i, value in enumerate(values)]
        elif isinstance(values, dict):
            _check_range(name, values)
            checked[name] = values
        else:
            raise SweepError(f"parameter {name!r} must be a list of values or a {{min, max, log}} range")
    return checked


def _value(name: str, value: Any, where: str) -> Any:
    """`value` checked by the trainer's own rule for `name`, the one its flag uses."""
    try:
        return hyperparameters.check(name, value)
    except hyperparameters.HyperparameterError as err:
        raise SweepError(f"parameter {name!r} {where}: {err}") from None


def _check_range(name: str, bounds: dict[str, Any]) -> None:
    low, high = bounds.get("min"), bounds.get("max")
    if not (isinstance(low, int | float) and isinstance(high, int | float)) or bool in (
        type(low),
        type(high),
    ):
        raise SweepError(f"range {name!r} needs numeric 'min' and 'max' (got {bounds!r})")
    if not low < high:
        raise SweepError(f"range {name!r}: min ({low}) must be below max ({high})")
    if bounds.get("log") and low <= 0:
        raise SweepError(f"range {name!r}: a log range needs min > 0 (got {low})")
    if name == "model":
        raise SweepError("parameter 'model' takes a list of model names, not a range")
    _value(name, low, "min")
    _value(name, high, "max")


def _grid(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    names = sorted(parameters)
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*(parameters[n] for n in names))
    ]


def _random(parameters: dict[str, Any], samples: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = sorted(parameters)
    return [{name: _draw(rng, name, parameters[name]) for name in names} for _ in range(samples)]


def _draw(rng: random.Random, name: str, values: list[Any] | dict[str, Any]) -> Any:
    if isinstance(values, list):
        return rng.choice(values)
    low, high = float(values["min"]), float(values["max"])
    if values.get("log"):
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    rule = hyperparameters.HYPERPARAMETERS[name].rule
    if isinstance(rule, hyperparameters.Rule) and rule.kind is int:
        return round(value)
    # Six significant digits: readable in run names and tables, still a continuous draw.
    return float(f"{value:.6g}")


def sweep_file(space: dict[str, Any]) -> dict[str, Any]:
    """The sweep file's content: the space and its expansion, so a run never re-derives the sets."""
    return {"space": space, "sets": expand(space)}


def sweep_file_text(space: dict[str, Any]) -> str:
    """The sweep file as written to disk and into the sweep's ConfigMap."""
    return json.dumps(sweep_file(space), indent=2, sort_keys=True)


def write_sweep_file(space: dict[str, Any], out: Path) -> int:
    """Write the sweep file for `space` to `out`; returns how many sets it holds."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(sweep_file_text(space) + "\n")
    return count(space)


def read_space(path: Path) -> dict[str, Any]:
    """A search space from a JSON file, in the shape `lab.config.Sweep.space()` returns."""
    return _read_json(path, "search space")


def select(path: Path, index: int) -> dict[str, Any]:
    """Hyperparameter set number `index` of the sweep file at `path`."""
    content = _read_json(path, "sweep file")
    sets = content.get("sets")
    if not isinstance(sets, list) or not sets:
        raise SweepError(f"{path}: no 'sets' list; write it with `python -m trainer sweep generate`")
    if not 0 <= index < len(sets):
        raise SweepError(f"{path}: index {index} is out of range; the sweep has sets 0 to {len(sets) - 1}")
    chosen = sets[index]
    if not isinstance(chosen, dict):
        raise SweepError(f"{path}: set {index} is not a mapping of parameter to value")
    unknown = sorted(set(chosen) - set(PARAMETERS))
    if unknown:
        raise SweepError(f"{path}: set {index} has unknown parameters {', '.join(unknown)}")
    return {name: _value(name, value, f"in {path} set {index}") for name, value in chosen.items()}


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's keys, refused when one is written twice: json keeps the last without a word
    (RFC 8259, section 4: the names within an object SHOULD be unique)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


# What mends each file `_read_json` refuses: a sweep file is the generator's output, a search
# space the operator's input to it.
_FIXES = {
    "sweep file": "write it with `python -m trainer sweep generate`",
    "search space": 'write the search space as a JSON object, such as {"parameters": {"lr": [0.1, 0.2]}}',
}


def _read_json(path: Path, what: str) -> dict[str, Any]:
    fix = _FIXES[what]
    try:
        # Sweeps sit on the shared export: read as a run's files are, never a pipe or a device.
        raw = runfolders.read_named(str(path), MAX_FILE_BYTES)
        content = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise SweepError(f"{what} {path} does not exist") from None
    except runfolders.Unfit as err:
        raise SweepError(f"{what} {err}; {fix}") from None
    except OSError as err:
        raise SweepError(f"{what} {path} cannot be read ({err.strerror}); {fix}") from None
    except UnicodeDecodeError as err:
        raise SweepError(f"{what} {path} is not UTF-8 text (byte {err.start}); {fix}") from None
    except json.JSONDecodeError as err:
        raise SweepError(f"{what} {path} is not valid JSON: {err}; {fix}") from None
    except _DuplicateKey as err:
        raise SweepError(f"{what} {path} names {str(err)!r} twice in one object; keep one of them") from None
    except RecursionError:
        raise SweepError(
            f"{what} {path} is nested too deeply to read; a {what} is a few levels deep ({fix})"
        ) from None
    if not isinstance(content, dict):
        raise SweepError(f"{what} {path} must hold a JSON object; {fix}")
    return content
