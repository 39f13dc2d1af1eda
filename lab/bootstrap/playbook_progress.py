"""What the operator sees of a playbook run, and the full log kept of it.

A run of site.yml makes some 160 task results; the operator sees a line per play and node, with
its ok and changed counts, each failure in full, a node that could not be reached with what to
check, and each note a task left (why a step is skipped) once. Plays that ran on no node say
nothing. Every task's own line goes to the run's log file, and to the operator too when asked
for (`--verbose`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from lab.bootstrap.inventory import login_problem

# The words a task result is shown with, in the order a play's line reports them, as the line
# words them: a result no_log hides does not say whether it changed anything.
COUNTED = {"ok": "ok", "changed": "changed", "no_log": "hidden (no_log)", "skipped": "skipped"}
FAILED = ("failed", "unreachable")
# How Ansible's ssh plugin starts the message of a host it could not connect to.
SSH_FAILURE = "Failed to connect to the host via ssh: "


@dataclass
class _Play:
    name: str
    role: str = ""
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # host -> status -> results
    notes: dict[str, list[str]] = field(default_factory=dict)  # note -> hosts


class Progress:
    """Takes each task result and writes the operator's view to `out` (None: nothing) and every
    task's line to `log`."""

    def __init__(self, out: TextIO | None, log: TextIO, verbose: bool, inventory: dict[str, Any]) -> None:
        self.out, self.log, self.verbose = out, log, verbose
        self.inventory = inventory
        self.play: _Play | None = None

    def _tell(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)

    def _detail(self, line: str) -> None:
        """A line of the full log, shown as it comes only when asked for."""
        print(line, file=self.log, flush=True)
        if self.verbose:
            self._tell(line)

    def play_start(self, name: str) -> None:
        self.end_play()
        self.play = _Play(name)
        self._detail(f"PLAY {name}")

    def result(self, host: str, task: str, role: str, status: str, note: str = "") -> None:
        """A task's result on `host`: ok, changed, skipped, no_log or failed (ignored)."""
        self._detail(f"  {status:<11} {host}: {task}{': ' + note if note else ''}")
        play = self._current()
        play.role = play.role or role
        play.counts.setdefault(host, Counter())[status if status in COUNTED else "ok"] += 1
        if note:
            play.notes.setdefault(note, []).append(host)

    def failed(self, host: str, task: str, message: str) -> None:
        """A task that failed on `host`: shown at once and in full, whatever the view."""
        self._detail(f"  {'failed':<11} {host}: {task}: {message}")
        self._current().counts.setdefault(host, Counter())["failed"] += 1
        if not self.verbose:
            self._tell(f"  {'failed':<11} {host}: {task}: {message}")

    def unreachable(self, host: str, task: str, message: str) -> str:
        """A host Ansible could not connect to: one line with what to check; returns that line."""
        self._detail(f"  {'unreachable':<11} {host}: {task}: {message}")
        self._current().counts.setdefault(host, Counter())["unreachable"] += 1
        line = self.login_problem(host, message)
        if not self.verbose:
            self._tell(f"  {'unreachable':<11} {line}")
        return line

    def login_problem(self, host: str, message: str) -> str:
        """doctor's line for a node that cannot be logged in to, from the inventory's values."""
        found = {**self.inventory.get("all", {}).get("vars", {})}
        found |= self.inventory.get("all", {}).get("hosts", {}).get(host) or {}
        said = message.split(SSH_FAILURE, 1)[-1] if message.strip() else "no reason"
        return login_problem(
            host,
            str(found.get("ansible_user", "the user")),
            str(found.get("ansible_host", host)),
            found.get("ansible_port", 22),
            str(found.get("ansible_ssh_private_key_file", "the key")),
            said,
        )

    def recap(self, host: str, counts: dict[str, int]) -> None:
        self._detail(f"RECAP {host}: " + " ".join(f"{word}={number}" for word, number in counts.items()))

    def end_play(self) -> None:
        """The finished play's line per host that came through it, and its notes, once each."""
        play, self.play = self.play, None
        if play is None or self.verbose:
            return
        label = f"{play.name} ({play.role})" if play.role else play.name
        for host, counts in sorted(play.counts.items()):
            if any(counts[word] for word in FAILED):
                continue  # its failure was told in full
            status = "changed" if counts["changed"] else "skipped" if set(+counts) == {"skipped"} else "ok"
            figures = ", ".join(f"{counts[word]} {said}" for word, said in COUNTED.items() if counts[word])
            self._tell(f"  {status:<11} {host}: {label}: {figures}")
        for note, hosts in play.notes.items():
            self._tell(f"  {'':<11} {', '.join(sorted(set(hosts)))}: {note}")

    def _current(self) -> _Play:
        if self.play is None:  # a result before any play started: its own, unnamed
            self.play = _Play("")
        return self.play
