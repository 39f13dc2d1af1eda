"""Where the lab's files are: the checkout's folders, found once from this file's place in it, and
the folder the orchestrator keeps its state in."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = ROOT / "stacks"
ANSIBLE_DIR = ROOT / "ansible"
# The orchestrator's state: the checkout's .lab/, or the folder K8SCIFAR_STATE_DIR names (the
# tests point it at a temporary folder, so that they leave nothing in the checkout).
STATE_DIR = Path(os.environ.get("K8SCIFAR_STATE_DIR") or ROOT / ".lab")
