"""A sweep's leaderboard: every run folder's summary, best first, and what varied between them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer.contract import SUMMARY_FILE, TRAINED_ON
from trainer.sweep import PARAMETERS, SweepError


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Summaries of the finished runs under `sweep_dir/<index>/`, best test accuracy first."""
    rows = []
    for path in sorted(sweep_dir.glob(f"*/{SUMMARY_FILE}")):
        summary = json.loads(path.read_text())
        rows.append({"run": path.parent.name, **summary})
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
