"""A `labctl try` that is running keeps its machines: `labctl try --down` and a second `labctl try`
wait for its lock rather than tear it down or call its machines leftovers."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab import testbed
from lab.cli import build_parser, try_local
from lab.cli.common.console import CliError
from lab.cli.try_local import metrics

WAIT_S = 60  # far above what taking a free lock needs


def own_lock(monkeypatch: pytest.MonkeyPatch, lock: Path) -> None:
    """The testbed lock at `lock`, held by no one in this process: the test session's own turn at
    the real lock (its holder mark in the environment) must not let the command skip waiting."""
    monkeypatch.setattr(testbed, "LOCK", lock)
    monkeypatch.delenv(testbed.LOCK_HOLDER, raising=False)


class RunningTry:
    """The testbed lock held by another thread, as a running `labctl try` (or a test session)
    holds it, until the command under test is seen waiting for it; `seen` is what had happened
    by then, `on_release` what the running try does before letting go (its teardown)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lock: Path, on_release: Callable[[], None]) -> None:
        self.waited = threading.Event()
        self.held = threading.Event()
        self.calls: list[str] = []
        self.seen: list[str] | None = None
        own_lock(monkeypatch, lock)
        real = testbed.exclusive

        @contextmanager
        def exclusive(waiting: Callable[[], None] | None = None) -> Iterator[None]:
            def told() -> None:
                self.waited.set()
                if waiting is not None:
                    waiting()

            with real(told):
                yield

        monkeypatch.setattr(testbed, "exclusive", exclusive)

        def hold() -> None:
            with lock.open("w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                self.held.set()
                self.waited.wait(WAIT_S)  # without waiting, the command never blocks: let go
                self.seen = list(self.calls)
                on_release()

        self.holder = threading.Thread(target=hold, daemon=True)
        self.holder.start()
        assert self.held.wait(WAIT_S)

    def record(self, name: str, result: object = None) -> Callable[..., object]:
        def called(*args: object) -> object:
            self.calls.append(name)
            return result

        return called


def labctl_try(*argv: str) -> int:
    """In this thread, the main one: the try's clean-up sets signal handlers."""
    args = build_parser().parse_args(["try", *argv])
    code: int = args.handler(args)
    return code


def ready_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root and every host tool, as on a machine set up for `labctl try`."""
    monkeypatch.setattr(try_local.os, "geteuid", lambda: 0)
    monkeypatch.setattr(try_local, "missing_tools", lambda: [])
    monkeypatch.setattr(metrics, "missing_tools", lambda: [])


def test_down_waits_for_a_running_try_then_removes_its_machines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    running = RunningTry(monkeypatch, tmp_path / "lock", on_release=lambda: None)
    monkeypatch.setattr(try_local, "remove", running.record("remove"))
    assert labctl_try("--down") == 0
    running.holder.join(WAIT_S)
    assert running.waited.is_set() and running.seen == [] and running.calls == ["remove"]
    out = " ".join(capsys.readouterr().out.split())  # as wide as the terminal the test has
    assert "waiting for it to finish before removing them" in out and "removes nothing" in out


def test_a_second_try_waits_for_the_first_rather_than_call_its_machines_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machines_up = threading.Event()
    machines_up.set()  # the first try's, until its teardown
    running = RunningTry(monkeypatch, tmp_path / "lock", on_release=machines_up.clear)
    ready_to_run(monkeypatch)
    monkeypatch.setattr(testbed, "leftovers", lambda lay: ["folder try"] if machines_up.is_set() else [])
    monkeypatch.setattr(try_local, "_run_all", running.record("train", 0))
    monkeypatch.setattr(try_local, "remove", running.record("remove"))
    assert labctl_try("--generated", "--out", str(tmp_path / "out")) == 0
    running.holder.join(WAIT_S)
    assert running.waited.is_set() and running.seen == [] and running.calls == ["train", "remove"]


def test_machines_a_finished_keep_run_left_are_named_with_the_way_to_remove_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_lock(monkeypatch, tmp_path / "lock")
    ready_to_run(monkeypatch)
    monkeypatch.setattr(testbed, "leftovers", lambda lay: ["folder try"])
    trained: list[object] = []
    monkeypatch.setattr(try_local, "_run_all", lambda *args: trained.append(args) or 0)
    with pytest.raises(CliError, match=r"earlier `labctl try --keep` are still up.*labctl try --down"):
        labctl_try("--generated", "--out", str(tmp_path / "out"))
    assert not trained
