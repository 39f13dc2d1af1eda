"""The helpers of tests/support leave nothing running behind them."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.gpg import USER_ID, gnupg_home, gpg
from tests.support.processes import mentioning


def _agents(home: Path, wait: float = 0) -> dict[int, int]:
    """gpg-agents serving `home`, once none is left or `wait` seconds have passed (an agent told
    to stop exits on its own time)."""
    deadline = time.monotonic() + wait
    while (found := mentioning("gpg-agent", str(home))) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_a_gnupg_home_leaves_no_gpg_agent(tmp_path: Path) -> None:
    home = tmp_path / "gnupg"
    with gnupg_home(home):
        gpg(home, "--quick-generate-key", USER_ID, "ed25519", "sign", "1d")
        assert _agents(home), "gpg started no agent: this test would pass whatever the fixture does"
    assert _agents(home, wait=10) == {}
