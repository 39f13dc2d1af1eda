"""Read the trainer's run folders: runs, sweeps, their status, metrics, summaries and plots.

Standard library only, because `labctl` also sends this file to the NFS server's own python3
(`python3 - RUNS_DIR`) and reads the JSON it prints, so a run is read the same way on the
operator's machine and on the export.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

# trainer/contract.py's names, written out because this file travels alone; tests/test_contract.py
# holds them equal.
STATUS_FILE, SUMMARY_FILE, METRICS_FILE = RUN_FILES = ("status.json", "summary.json", "metrics.jsonl")
SKIPPED = {"checkpoints"}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_metrics(path: Path) -> tuple[dict[str, Any] | None, int]:
    """The last complete line of metrics.jsonl (a line being written may be cut) and the line count."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, 0
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return (records[-1] if records else None), len(records)


def _is_run(folder: Path) -> bool:
    return any((folder / name).is_file() for name in RUN_FILES)


def read_run(folder: Path, root: Path) -> dict[str, Any]:
    last, epochs_logged = _last_metrics(folder / METRICS_FILE)
    return {
        "name": folder.name,
        "path": str(folder.relative_to(root)),
        "status": _json(folder / STATUS_FILE),
        "summary": _json(folder / SUMMARY_FILE),
        "last_metrics": last,
        "epochs_logged": epochs_logged,
        "plots": sorted(str(p.relative_to(root)) for p in folder.glob("*.png")),
        "modified": max((p.stat().st_mtime for p in folder.iterdir()), default=folder.stat().st_mtime),
    }


def collect(root: str | Path) -> dict[str, Any]:
    """Every run and sweep directly under `root`; a sweep is a folder of numbered run folders."""
    base = Path(root)
    runs, sweeps = [], []
    folders = (
        sorted(p for p in base.iterdir() if p.is_dir() and p.name not in SKIPPED) if base.is_dir() else []
    )
    for folder in folders:
        members = sorted(
            (p for p in folder.iterdir() if p.is_dir() and re.fullmatch("[0-9]+", p.name) and _is_run(p)),
            key=lambda p: int(p.name),
        )
        if members:
            sweeps.append(
                {
                    "name": folder.name,
                    "path": str(folder.relative_to(base)),
                    "members": [read_run(m, base) for m in members],
                    "plots": sorted(str(p.relative_to(base)) for p in folder.glob("*.png")),
                }
            )
        elif _is_run(folder):
            runs.append(read_run(folder, base))
    return {"root": str(base), "exists": base.is_dir(), "runs": runs, "sweeps": sweeps}


if __name__ == "__main__":
    print(json.dumps(collect(sys.argv[1])))
