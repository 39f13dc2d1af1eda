"""The processes on this machine, read from /proc (no procps needed): who started whom, and
which still run, for tests that check what a run leaves behind."""

from __future__ import annotations

from pathlib import Path


def _stat(pid_dir: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None once the process is gone.

    The command name in parentheses may hold spaces: the fields after its last ')' are fixed
    (proc(5)): state first, then the parent's pid.
    """
    try:
        return (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parents() -> dict[int, int]:
    """pid to parent pid of every process now running."""
    found = {}
    for pid_dir in Path("/proc").glob("[0-9]*"):
        fields = _stat(pid_dir)
        if fields is not None:
            found[int(pid_dir.name)] = int(fields[1])
    return found


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid`."""
    return sorted(child for child, parent in parents().items() if parent == pid)


def mentioning(*texts: str) -> dict[int, int]:
    """pid to parent pid of every live process (not a zombie) whose command line holds each of
    `texts`."""
    found = {}
    for pid_dir in Path("/proc").glob("[0-9]*"):
        fields = _stat(pid_dir)
        try:
            cmdline = (pid_dir / "cmdline").read_bytes()
        except OSError:
            continue
        if fields is not None and fields[0] != "Z" and all(t.encode() in cmdline for t in texts):
            found[int(pid_dir.name)] = int(fields[1])
    return found
