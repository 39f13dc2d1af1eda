#!/usr/bin/python3
"""Removes the paths the lab's record says it created, and puts back the owner's files it kept.

The record (tasks/claim.yml) has one path a line, absent before the lab made it, optionally with a
condition after a tab:
- `shared`: a directory other tools may have written into since (a CNI directory podman uses):
  removed only when empty, once the lab's own entries in it are gone;
- `package NAME`: the state of a package the lab installed (containerd's image store): kept while
  that package is still installed, as it is when a package of the owner's has come to need it.
Deeper paths go first, so a directory is emptied of the lab's entries before it is looked at.

Kept files (tasks/files.yml) are copies of the owner's files the lab overwrote, under `kept`
with their own path: each goes back where it was, mode, owner and times included.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule


def _installed(package: str) -> bool:
    """dpkg's view: a package whose status is anything but not-installed or config-files."""
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", package], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and len(done.stdout) > 1 and done.stdout[1] not in "nc"


def _remove(path: str) -> bool:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    else:
        return False
    return True


def remove_created(lines: list[str]) -> tuple[list[str], list[str]]:
    """Remove what the record's lines name; (removed, kept with the reason)."""
    entries = []
    for line in lines:
        path, _tab, condition = line.rstrip("\n").partition("\t")
        if path:
            entries.append((path, condition))
    removed, kept = [], []
    for path, condition in sorted(set(entries), reverse=True):
        if condition == "shared":
            if os.path.isdir(path) and not os.path.islink(path) and os.listdir(path):
                kept.append(f"{path} (holds another tool's files)")
                continue
        elif condition.startswith("package "):
            package = condition.split(" ", 1)[1]
            if _installed(package):
                kept.append(f"{path} ({package} is still installed)")
                continue
        if _remove(path):
            removed.append(path)
    return removed, kept


def restore_kept(kept_root: str) -> list[str]:
    """Copy every file under kept_root back to its own path; the paths restored."""
    restored = []
    for directory, _dirs, files in os.walk(kept_root):
        for name in files:
            copy = os.path.join(directory, name)
            original = "/" + os.path.relpath(copy, kept_root)
            os.makedirs(os.path.dirname(original), mode=0o755, exist_ok=True)
            if os.path.lexists(original) and not os.path.isdir(original):
                os.unlink(original)
            subprocess.run(["cp", "-a", copy, original], check=True)
            restored.append(original)
    return sorted(restored)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "record": {"type": "path", "required": True},
            "kept": {"type": "path", "required": True},
        },
        supports_check_mode=False,
    )
    lines: list[str] = []
    if os.path.exists(module.params["record"]):
        with open(module.params["record"], encoding="utf-8") as found:
            lines = found.readlines()
    try:
        removed, kept = remove_created(lines)
        restored = restore_kept(module.params["kept"]) if os.path.isdir(module.params["kept"]) else []
    except (OSError, subprocess.CalledProcessError) as err:
        module.fail_json(msg=str(err))
    module.exit_json(changed=bool(removed or restored), removed=removed, kept=kept, restored=restored)


if __name__ == "__main__":
    main()
