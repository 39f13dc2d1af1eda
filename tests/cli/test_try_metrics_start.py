"""`labctl try`'s metrics when a node exporter cannot start: one line saying which and why, and
nothing left running."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.cli.common.console import CliError
from lab.cli.try_local import metrics
from lab.cli.try_local.node_exporter import NODE_EXPORTER
from lab.testbed.layout import Layout
from lab.testbed.processes import command_line

GONE = Layout("nonet", 1, "10.77.9.0/24")  # a machine whose network namespace does not exist


def test_an_exporter_that_cannot_start_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    lacking = metrics.missing_tools() + (["ip (package iproute2)"] if shutil.which("ip") is None else [])
    if lacking:
        pytest.skip(f"missing {', '.join(lacking)}: scripts/setup.sh installs them")
    assert not GONE.machines[0].netns_path.exists()
    with pytest.raises(CliError) as raised, metrics.watching(GONE, 9464, tmp_path):
        pytest.fail("the metrics started without the machine's network namespace")
    message = str(raised.value)
    assert message.startswith(f"the try's metrics could not start: {NODE_EXPORTER} of nonet-node1 exited")
    assert "nonet-1" in message and "\n" not in message, message  # `ip` names the namespace it lacks
    assert not [
        p for p in Path("/proc").glob("[0-9]*") if "10.77.9.11:9100" in " ".join(command_line(int(p.name)))
    ]
