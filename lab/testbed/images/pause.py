"""The pause program, compiled from pause.c beside this module with the host's gcc."""

from __future__ import annotations

from pathlib import Path

from lab.testbed.commands import run
from lab.testbed.images.names import PAUSE_TAG

SOURCE = Path(__file__).with_name("pause.c")
# Static, so the image needs no C library; -s drops symbols (they would only add size).
CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", f'-DPAUSE_VERSION="{PAUSE_TAG}"')


def compile_pause(out: Path, source: Path = SOURCE) -> Path:
    """Compile `source` into `out` (scripts/apt-packages.txt installs gcc and libc6-dev)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    run(["gcc", *CFLAGS, "-o", str(out), str(source)], timeout=120)
    return out
