"""Filter `k8scifar_machine_settings`: the machine settings file's text checked against its one
schema, lab/machine_settings.py, which lab.testbed writes the file with.

The roles ship in the lab's checkout and run from it (lab.bootstrap.playbook puts the checkout on
PYTHONPATH); the checkout this file lies in is put first all the same, so the schema read is the
one of these roles, never another installed copy's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_CHECKOUT = str(Path(__file__).resolve().parents[4])
if sys.path[:1] != [_CHECKOUT]:
    sys.path.insert(0, _CHECKOUT)

from lab.machine_settings import MachineSettings, read  # noqa: E402


def k8scifar_machine_settings(text: str) -> dict[str, Any]:
    """{problem, settings}: the settings the roles apply and "", or the lab's defaults and the one
    line that says what is wrong in the file. An empty text is no file: the defaults."""
    try:
        settings = read(text) if text.strip() else MachineSettings()
    except ValueError as err:
        return {"problem": str(err), "settings": MachineSettings().for_roles()}
    return {"problem": "", "settings": settings.for_roles()}


class FilterModule:
    """Ansible's entry point for the filters of this file."""

    def filters(self) -> dict:
        return {"k8scifar_machine_settings": k8scifar_machine_settings}
