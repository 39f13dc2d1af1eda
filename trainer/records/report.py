"""A sweep's leaderboard: every run folder's summary, best first, and what varied between them."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from trainer.contract import SUMMARY_FILE, TRAINED_ON
from trainer.records import runfolders
from trainer.sweep import PARAMETERS, SweepError


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Summaries of the finished runs under `sweep_dir/<index>/`, best test accuracy first. The
    sweep sits on the shared export: its folders and summaries are read as labctl reads them (no
    link followed, no pipe or device opened, a size bound), and the first one left alone is named."""
    problems = runfolders.Problems()
    rows = []
    try:
        root = runfolders.Folder.open_root(str(sweep_dir))
    except OSError as err:
        raise SweepError(f"{sweep_dir} cannot be opened as a folder ({err.strerror})") from None
    try:
        for name, seen in root.entries(problems):
            if stat.S_ISLNK(seen.st_mode):
                problems.add(name, "is a symbolic link, which may lead out of the sweep folder; left alone")
            summary = _summary(root, name, problems) if stat.S_ISDIR(seen.st_mode) else None
            if summary is not None:
                rows.append({"run": runfolders.printable(name), **summary})
    finally:
        root.close()
    if problems.lines:
        raise SweepError(f"{sweep_dir}/{problems.lines[0]}; delete it or move it out of the sweep folder")
    if not rows:
        raise SweepError(f"no finished runs under {sweep_dir} (looked for */{SUMMARY_FILE})")
    return sorted(rows, key=lambda row: (-row["best_test_acc"], row["run"]))


def varied(rows: list[dict[str, Any]]) -> list[str]:
    """The sweep parameters whose values differ between runs (all of them if none differ)."""
    names = [n for n in PARAMETERS if n in rows[0]["hyperparameters"]]
    differing = [n for n in names if len({json.dumps(r["hyperparameters"][n]) for r in rows}) > 1]
    return differing or names


def trained_on(rows: list[dict[str, Any]]) -> str:
    """What the runs trained on, in words (a run from before it was recorded says so)."""
    found = sorted({str(row.get(TRAINED_ON, "data not recorded")) for row in rows})
    return f"trained on {' and '.join(found)}"


def table(rows: list[dict[str, Any]], parameters: list[str]) -> str:
    header = ["#", "run", "best acc", "final acc", "seconds", *parameters]
    body = [
        [
            str(place),
            row["run"],
            f"{100 * row['best_test_acc']:.2f}%",
            f"{100 * row['final_test_acc']:.2f}%",
            f"{row['wall_seconds']:.1f}",
            *(
                f"{row['hyperparameters'][name]:g}"
                if isinstance(row["hyperparameters"][name], float)
                else str(row["hyperparameters"][name])
                for name in parameters
            ),
        ]
        for place, row in enumerate(rows, start=1)
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in [header, *body]
    )


def _summary(root: runfolders.Folder, name: str, problems: runfolders.Problems) -> dict[str, Any] | None:
    """The summary of run folder `name`, None where it has none (the problem named, if any)."""
    folder = root.subfolder(name, problems)
    if folder is None:
        return None
    try:
        raw = folder.read(SUMMARY_FILE, runfolders.MAX_JSON_BYTES, problems)
    finally:
        folder.close()
    if raw is None:
        return None
    where = f"{name}/{SUMMARY_FILE}"
    try:
        summary = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        problems.add(where, "is not a JSON object in UTF-8")
        return None
    accuracy = summary.get("best_test_acc") if isinstance(summary, dict) else None
    if not isinstance(accuracy, int | float) or isinstance(accuracy, bool):
        problems.add(where, "holds no number as best_test_acc")
        return None
    return runfolders.printable_data(summary)  # type: ignore[no-any-return]
