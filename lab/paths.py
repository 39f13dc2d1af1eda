"""Where the lab's files are: the checkout's folders, found once from this file's place in it, and
the folder the orchestrator keeps its state in."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = ROOT / "stacks"
ANSIBLE_DIR = ROOT / "ansible"
STATE_VARIABLE = "K8SCIFAR_STATE_DIR"


def _state_dir() -> Path:
    """The orchestrator's state: the checkout's .lab/, or the folder K8SCIFAR_STATE_DIR names (the
    tests point it at a temporary folder, so that they leave nothing in the checkout).

    Made absolute here, once, against the folder the command started in, and handed on so in
    the environment: ssh resolves a relative UserKnownHostsFile against its own working folder,
    and Ansible's ssh runs in ansible-runner's, so a relative state folder would pin host keys
    in a file no later connection reads.
    """
    given = os.environ.get(STATE_VARIABLE) or str(ROOT / ".lab")
    path = Path(os.path.abspath(os.path.expanduser(given)))
    os.environ[STATE_VARIABLE] = str(path)
    return path


STATE_DIR = _state_dir()
