"""The stack files the repository ships: the tests' inputs. A stack file an operator added to
stacks/ (`labctl init` writes there) is theirs: the tests neither load nor lint it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab.config import STACKS_DIR

ROOT = Path(__file__).resolve().parents[2]


def tracked(*patterns: str, checkout: Path = ROOT) -> list[Path]:
    """Files git tracks in `checkout` that match `patterns` (git pathspecs)."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--", *patterns], cwd=checkout, capture_output=True, text=True, check=True
    )
    return [checkout / name for name in done.stdout.split("\0") if name]


def shipped_stacks(checkout: Path = ROOT) -> list[str]:
    """Names of the stacks in `checkout`'s stacks/ that git tracks, sorted."""
    files = tracked(f"{STACKS_DIR.relative_to(ROOT)}/Pulumi.*.yaml", checkout=checkout)
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in files)
