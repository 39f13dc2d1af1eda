"""A text Ansible would run as a command if it ever evaluated it: each value a user wrote must reach
Ansible marked unsafe, so that no marker file ever appears."""

from __future__ import annotations

from pathlib import Path


def marker(folder: Path, name: str) -> str:
    """A lookup that touches `folder`/`name` when Ansible templates it."""
    return f"{{{{ lookup('pipe', 'touch {folder}/{name}') }}}}"
