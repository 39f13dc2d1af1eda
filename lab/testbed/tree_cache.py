"""Trees kept in the testbed's cache (a Debian base, the image tools' tree), each built once and
found again by the hash of what it is made from."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from lab.testbed.layout import CACHE_ROOT


def cached_tree(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The tree `name-<hash of key>` in the testbed's cache, made now by `build(folder)` if missing.

    `build` fills a folder beside it, which is renamed only once complete: an interrupted build is
    never found, and is started again from nothing."""
    tree = CACHE_ROOT / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if tree.is_dir():
        return tree
    building = tree.with_name(tree.name + ".building")
    # A leftover that cannot be removed stops here: a build into it would nest the new tree in it.
    if building.exists():
        shutil.rmtree(building)
    building.parent.mkdir(parents=True, exist_ok=True)
    build(building)
    building.rename(tree)
    return tree
