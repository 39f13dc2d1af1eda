"""After reset.yml: nothing of the lab is left on the machines (run with --lab-after-reset).

The export's data stays unless `nfs.purgeOnDestroy`, as documented; everything else goes.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from lab.config import LabConfig, Node
from lab.machine_settings import MACHINE_SETTINGS_FILE
from lab.validation.suite import checks
from lab.validation.suite.test_host import EXPORTS_FILES

pytestmark = pytest.mark.after_reset

KUBERNETES_LEFTOVERS = [
    "/usr/local/bin/k3s",
    "/etc/rancher",
    "/var/lib/rancher",
    "/etc/systemd/system/k3s.service",
    "/etc/systemd/system/k3s-agent.service",
    "/etc/kubernetes",
    "/var/lib/kubelet",
]
KUBERNETES_UNITS = ["k3s", "k3s-agent", "kubelet"]


def test_no_kubernetes_is_left(host: Any, node: Node) -> None:
    left = [path for path in KUBERNETES_LEFTOVERS if host.file(path).exists]
    assert not left, f"{node.name} still has {left}"
    running = [unit for unit in KUBERNETES_UNITS if host.service(unit).is_running]
    assert not running, f"{node.name} still runs {running}"


def test_no_export_is_left(host: Any, node: Node, lab: LabConfig) -> None:
    exports = host.run(f"cat {EXPORTS_FILES} 2>/dev/null").stdout
    assert checks.export_clients(exports, lab.nfs.export_path) is None, f"{node.name} still exports it"


def test_no_lab_configuration_is_left_in_etc(host: Any, node: Node, lab: LabConfig) -> None:
    naming = host.run(f"grep -rlsF -e {lab.registry_endpoint} -e k8scifar /etc").stdout.split()
    named = host.run("find /etc -name '*k8scifar*'").stdout.split()
    # A machine's own settings file is its maker's statement to the lab (lab/machine_settings.py),
    # there before the lab came and after it went.
    own = {MACHINE_SETTINGS_FILE, str(PurePosixPath(MACHINE_SETTINGS_FILE).parent)}
    left = sorted(set(naming + named) - own)
    assert not left, f"{node.name} still has lab configuration in {left}"
