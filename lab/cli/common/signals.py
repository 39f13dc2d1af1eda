"""How a command is stopped: every signal a terminal (Ctrl-C, its closing), CI or `timeout` sends
ends it the way Ctrl-C does, through the clean-up on its way out, which no further signal cuts short.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

# Each stop signal, and how the operator is told of it.
STOP_SIGNALS = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "stopped by SIGTERM",
    signal.SIGHUP: "stopped by SIGHUP (its terminal closed)",
}


class Stopped(BaseException):
    """A stop signal arrived. Like KeyboardInterrupt, not an Exception: no handler of failures
    takes it for one, and every `finally` on the way out runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(STOP_SIGNALS[signal.Signals(signum)])
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """What a shell reports for a command a signal ended (128 + the signal's number)."""
        return 128 + self.signum


def _stop(signum: int, _frame: FrameType | None) -> None:
    # Whatever comes next (a second Ctrl-C, the SIGTERM `timeout` sends the whole group, a
    # terminal's SIGHUP after SIGINT) must not cut the clean-up short.
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise Stopped(signum)


@contextlib.contextmanager
def _handled_by(handler: Callable[[int, FrameType | None], Any] | signal.Handlers) -> Iterator[None]:
    previous = {stop: signal.signal(stop, handler) for stop in STOP_SIGNALS}
    try:
        yield
    finally:
        for stop, before in previous.items():
            signal.signal(stop, before)


def stopped_like_ctrl_c() -> contextlib.AbstractContextManager[None]:
    """Within: the first stop signal raises Stopped; later ones are ignored."""
    return _handled_by(_stop)


def uninterrupted() -> contextlib.AbstractContextManager[None]:
    """Within: no stop signal cuts the block short (a clean-up that must run to its end)."""
    return _handled_by(signal.SIG_IGN)
